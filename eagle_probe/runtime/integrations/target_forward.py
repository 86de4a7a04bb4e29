"""Target side, per forward: the wrapper of every target family's inner model forward (DeepseekV2Model,
LlamaModel, Qwen3Model, ...; which classes is found by integrations/targets.py). Per forward: path, TBO split,
aux states returned. The TBO split follows the family's row (families.py) of the inner class."""

import time
import weakref

from ... import families
from ...analysis.layers import LayerSplit, split_layers
from ..context import graph_capture
from ..context.roles import role_of
from ..parts.forwards import forward_count_key
from ..state import STATE
from ..values import boundary
from ..values.dump_plan import plan_forward, submit_forward
from ..values.sampler import sample_target_forward, sampled_members
from .target_observation import observation, result_key
from .target_observation import reset as reset_observation

_wall = time.time  # the sampler's clock (wall-clock buckets, equal across TP ranks)

class _ModelStatic:
    """Per-module facts that do not change between forwards, read once (config reads are slow), and the last
    signature seen per mode: a forward that matches it is only counted. Kept in the module's own __dict__ (one
    attribute read per forward); a copy or pickle of the module carries None instead, so it reads its own."""

    __slots__ = ("model_class", "role", "num_layers", "start_layer", "end_layer", "first_k_dense_replace",
                 "splits", "last", "forwards", "capturing", "flags", "tensor")

    def __init__(self, instance):
        self.model_class = type(instance).__name__
        self.role = role_of(instance)
        config = getattr(instance, "config", None)
        layers = getattr(instance, "layers", None)
        n = getattr(config, "num_hidden_layers", None)
        self.num_layers = int(n if n is not None else len(layers) if layers is not None else 0)
        self.start_layer = int(getattr(instance, "start_layer", 0))
        self.end_layer = int(getattr(instance, "end_layer", self.num_layers))
        self.first_k_dense_replace = getattr(instance, "first_k_dense_replace", None)
        row = INNER_ROWS.get(type(instance))
        self.splits = {tbo: _split(row, self.start_layer, self.end_layer, self.first_k_dense_replace, tbo)
                       for tbo in (False, True)}
        # forward mode -> (layers object, can_run_tbo, capturing, aux shapes, its count cell, lost slots, due cell or
        # None, count key) of the last forward observed
        self.last = {}
        self.forwards = 0  # this model's forwards so far: the `step` of a fingerprint
        self.capturing = graph_capture.reader()
        self.flags = graph_capture.flag_dicts()  # SGLang's capture flags read directly where that is proven
        import torch  # imported by SGLang long before its first forward

        self.tensor = torch.Tensor

    def __deepcopy__(self, memo):
        return None

    def __reduce__(self):
        return type(None), ()


INNER_ROWS = {}  # inner model class -> its family row (filled by integrations/targets.py)


def _split(row, start, end, first_k_dense_replace, can_run_tbo):
    """The normal/TBO layer split of a forward, by the family's TBO behaviour (no row: DeepSeek's split)."""
    if row is not None and row.tbo == families.TBO_NONE:
        return split_layers(start, end, None, can_run_tbo)
    if row is not None and row.tbo == families.TBO_ALL:
        if can_run_tbo and end > start:
            return LayerSplit((start, start), (start, end))
        return LayerSplit((start, end), None)
    return split_layers(start, end, first_k_dense_replace, can_run_tbo)


_STATIC = "_eagle_probe_static"  # the module's own attribute holding its _ModelStatic
_owners = weakref.WeakSet()  # the modules holding one, so that forgetting reaches them


def forget_static_facts():
    """Called when roles change (a ModelRunner loaded a model) and at uninstall."""
    for module in list(_owners):
        module.__dict__.pop(_STATIC, None)
    _owners.clear()


def _new_static(instance):
    static = instance.__dict__[_STATIC] = _ModelStatic(instance)  # not Module.__setattr__: a plain attribute
    _owners.add(instance)
    return static


# The hot path is written out in the functions below: after a forward the CPU caches are cold, and there every
# Python call and every object touched costs microseconds (benchmarks/overhead.py, "in situ"). Hence plain reads
# where the contract proves them equal to SGLang's own accessors: `tbo_split_seq_index is not None` is the body of
# ForwardBatch.can_run_tbo, and the capture flags are what get_is_capture_mode returns (graph_capture.flag_dicts).
def _forward_facts(instance, args, kwargs):
    """(static, forward batch, input ids, layers, can_run_tbo, capturing): none of it changes during the forward."""
    static = instance.__dict__.get("_eagle_probe_static")  # its own dict: never a __getattr__ that delegates
    if static is None:
        static = _new_static(instance)
    forward_batch = args[2] if len(args) > 2 else kwargs["forward_batch"]
    flags = static.flags
    return (static, forward_batch, args[0] if args else kwargs.get("input_ids"), tuple(instance.layers_to_capture),
            forward_batch.tbo_split_seq_index is not None,
            flags[0]["is_capture_mode"] or flags[1]["_in_breakable_cuda_graph"] if flags is not None
            else static.capturing())


# The aux width is read on a signature's first forward and on every SHAPE_EVERY-th forward after: the packed width
# follows from the layers and the model (both checked on every forward), and reading it from the tensor is a third of
# the hot path's cost in situ. A width that changes under an unchanged signature is seen within SHAPE_EVERY forwards.
SHAPE_EVERY = 64
_SHAPE_MASK = SHAPE_EVERY - 1
_UNSEEN = object()  # the layers' object where the module keeps none in its own dict: never the same, always checked


def _aux_shapes(result, tensor):
    """The packed aux width alone (a list, as Llama, Qwen, ... return: its length and last width); the hidden width and
    dtype are the model's and do not change. Other results: their whole shape facts (result_key)."""
    aux = result[1] if type(result) is tuple and len(result) == 2 else None
    if type(aux) is tensor:
        return aux.shape[-1]  # cheaper than size(-1), which parses its arguments
    if isinstance(aux, list) and aux:
        return len(aux), aux[-1].shape[-1]
    return result_key(result)


def _after_forward(instance, args, kwargs, result, error):
    """Everything the wrapper learns of a forward, read after it returned: each object is touched once, when the
    forward has left the caches cold. Periodic events are not ticked here: ModelRunner.forward's hook and the verify
    step tick them on every path (runtime/parts/forwards.py, integrations/acceptance.py)."""
    own = instance.__dict__
    static = own.get("_eagle_probe_static")
    if static is None:
        static = _new_static(instance)
    forward_batch = args[2] if len(args) > 2 else kwargs["forward_batch"]
    mode = forward_batch.forward_mode
    flags = static.flags
    capturing = (flags[0]["is_capture_mode"] or flags[1]["_in_breakable_cuda_graph"] if flags is not None
                 else static.capturing())
    can_run_tbo = forward_batch.tbo_split_seq_index is not None
    static.forwards += 1
    last = static.last.get(mode) if error is None else None  # none under log_every_forward: every forward observed
    # Seen just before (the same layers object, which SGLang replaces and never edits in place; the same TBO split
    # and capture state; the same aux width when it is read): counted in its cell; sampled when its mode is and its
    # role's bucket has begun.
    if (last is not None and last[0] is own.get("layers_to_capture") and last[1] is can_run_tbo
            and last[2] == capturing
            and (static.forwards & _SHAPE_MASK or last[3] == _aux_shapes(result, static.tensor))):
        last[4][0] += 1
        due = last[6]
        if due is not None and _wall() >= due[0]:
            _sample(static, mode, forward_batch, result, tuple(instance.layers_to_capture))
        if last[5]:
            STATE.recorder.counts.count_lost(last[7], last[5])
        return
    layers = tuple(instance.layers_to_capture)
    recorder = STATE.recorder
    sampler = recorder.fingerprints
    sampled = (sampler is not None and not capturing and mode in sampled_members(type(mode))
               and boundary.inner_values_on())  # else the worker boundary samples (values/boundary.py)
    if error is None and sampled and _wall() >= sampler.due_cell(static.role)[0]:
        _sample(static, mode, forward_batch, result, layers)
    input_ids = args[0] if args else kwargs.get("input_ids")
    obs = observation(static, mode.name, layers, can_run_tbo, capturing, input_ids, result, error)
    recorder.target_forward(obs)
    if error is None and not recorder.log_every_forward:
        key = forward_count_key(obs)
        layers_object = own.get("layers_to_capture")
        static.last[mode] = (_UNSEEN if layers_object is None else layers_object, can_run_tbo, capturing,
                             _aux_shapes(result, static.tensor), recorder.counts.cell(key), len(obs.lost),
                             sampler.due_cell(static.role) if sampled else None, key)


def _sample(static, mode, forward_batch, result, layers):
    try:
        sample_target_forward(STATE.recorder.fingerprints, STATE.recorder, static, mode, forward_batch, result, layers)
    except Exception as exc:
        STATE.report_error("target.fingerprint", exc)


def model_forward_wrapper(wrapped, instance, args, kwargs):
    if not STATE.active:
        return wrapped(*args, **kwargs)
    dump = None
    if STATE.recorder.dump_planner is not None and STATE.recorder.dumps.inner_dumps():
        try:
            dump_facts = _forward_facts(instance, args, kwargs)
            static, forward_batch, _, _, can_run_tbo, capturing = dump_facts
            dump = plan_forward(instance, static, forward_batch, can_run_tbo, capturing, STATE.recorder)
        except Exception as exc:
            STATE.report_error("dumps.plan", exc)
    try:
        result = wrapped(*args, **kwargs)
    except Exception as error:
        if dump is not None:
            dump.remove_taps()
        try:
            _after_forward(instance, args, kwargs, None, error)
        except Exception as exc:
            STATE.report_error("target.forward.after", exc)
        raise
    if dump is not None:
        try:
            dump.remove_taps()
            if dump.write:
                static, forward_batch, input_ids, layers, _, _ = dump_facts
                positions = args[1] if len(args) > 1 else kwargs.get("positions")
                submit_forward(dump, static, forward_batch, input_ids, positions, layers, result, STATE.recorder)
        except Exception as exc:
            STATE.report_error("dumps.submit", exc)
    if (boundary.LIVE[0] and STATE.recorder.dump_planner is not None and type(result) is tuple and len(result) == 2
            and not graph_capture.is_capturing()):
        boundary.LAST_FORWARD[0] = result  # its final hidden state goes into the worker's dump of this forward
    try:
        _after_forward(instance, args, kwargs, result, None)
    except Exception as exc:
        STATE.report_error("target.forward.after", exc)
    return result


def reset():
    forget_static_facts()
    reset_observation()
