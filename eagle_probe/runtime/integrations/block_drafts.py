"""Block-diffusion drafts (DFlash, DSpark; SGLang 0.5.14+): the target's capture set-up for them, the worker's
load-time facts, and what each hand-off feeds the draft's projection.

- Target: every served class defining `set_dflash_layers_to_capture` or `set_dspark_layers_to_capture` (found like
  the EAGLE-3 setters, integrations/targets.py) reports its outermost call: the ids, the positions the setter stored
  (a delegate that adds 1 before handing on is seen as a whole), and the ids' source, read once from the draft's
  config.json (the launch's --speculative-draft-model-path): given, or SGLang's silent default.
- Worker: DFlashWorkerV2.__init__ (block size, mask token, the draft's fc), its step (the batch the hand-off belongs
  to), and `_append_target_hidden_to_draft_kv_by_loc(target_hidden=..., ...)`, where the target's concatenated
  states go into the draft's `project_target_hidden` after a prefill and after every verify, replayed graph or
  eager. The hand-off gives fingerprints and dumps as the EAGLE worker boundary does (values/boundary.py).
An exception inside a wrapper is counted as an internal error; SGLang's method runs as if unwrapped.
"""

import inspect
import json
import os

from ... import versions
from ...analysis.dflash_layers import read_block_draft_config
from ...dump_format import EXTEND_MODE, VERIFY_MODE
from ...observations import BlockCaptureConfigured, BlockDraftFed, BlockDraftLoaded
from ..context import sglang_context
from ..context.callers import caller_chain
from ..patcher import PATCHER, Integration, PatchTarget
from ..state import STATE
from ..values import boundary
from ..values.boundary import Handoff

BLOCK_SETTERS = ("set_dflash_layers_to_capture", "set_dspark_layers_to_capture")
FEED_PARAMS = ("target_hidden", "cache_loc", "positions")
_depth = [0]  # nesting of the setters: only the outermost call reports (a delegate hands on changed ids)
_batch = [None]  # the batch of the worker's step now running (the hand-off's tokens and requests)
_STATIC = "_eagle_probe_block"  # the worker's own attribute: its _WorkerStatic


def takes_keywords(function, names):
    """None when `function` takes every one of `names` as a parameter, else what it lacks."""
    try:
        params = inspect.signature(function).parameters
    except (TypeError, ValueError) as exc:
        return f"its signature cannot be read ({exc})"
    missing = [name for name in names if name not in params]
    return f"takes no {', '.join(missing)}" if missing else None


# ------------------------------------------------------------------------------------------------ the target


def _inner_positions(instance, setter):
    """The positions the setter stored: DeepSeek-V4's DSpark keeps `dspark_layers_to_capture`, the rest
    `layers_to_capture`, on the model whose loop captures."""
    attrs = ("dspark_layers_to_capture", "layers_to_capture") if "dspark" in setter else ("layers_to_capture",)
    for module in instance.modules():
        for attr in attrs:
            value = getattr(module, attr, None)
            if isinstance(value, (list, tuple)) and value:
                return module, tuple(int(i) for i in value)
    return None, ()


def _num_layers(instance, inner):
    for owner in (instance, inner):
        config = getattr(owner, "config", None)
        for cfg in (config, getattr(config, "text_config", None)):
            n = getattr(cfg, "num_hidden_layers", None)
            if isinstance(n, int):
                return n
    return len(getattr(inner, "layers", ()))


def _draft_config():
    """(BlockDraftConfig, the config.json path) of the launch's draft, or (None, why not)."""
    args = sglang_context.server_args()
    spec = sglang_context.spec()
    path = getattr(spec, "speculative_draft_model_path", None) or getattr(args, "speculative_draft_model_path", None)
    if not isinstance(path, str) or not os.path.isdir(path):
        return None, f"no local draft directory known ({path!r})"
    config_path = os.path.join(path, "config.json")
    try:
        with open(config_path) as f:
            return read_block_draft_config(json.load(f)), config_path
    except (OSError, ValueError) as exc:
        return None, f"{config_path}: {exc}"


def _observe_setter(instance, setter, layer_ids):
    inner, positions = _inner_positions(instance, setter)
    config, where = _draft_config()
    chain = caller_chain()
    STATE.recorder.block_capture_configured(BlockCaptureConfigured(
        model_class=type(instance).__name__, setter=setter,
        requested_ids=None if layer_ids is None else tuple(int(i) for i in layer_ids),
        layers_to_capture=positions, num_layers=_num_layers(instance, inner),
        is_last_pp_stage=bool(getattr(getattr(instance, "pp_group", None), "is_last_rank", True)),
        draft_config=config, draft_config_path=where, caller=chain[0] if chain else "?"))


def _setter_wrapper(setter):
    def wrapper(wrapped, instance, args, kwargs):
        _depth[0] += 1
        try:
            result = wrapped(*args, **kwargs)
        finally:
            _depth[0] -= 1
        if STATE.active and _depth[0] == 0:
            try:
                _observe_setter(instance, setter, args[0] if args else kwargs.get("layer_ids"))
            except Exception as exc:
                STATE.report_error(f"target.{setter}", exc)
        return result
    return wrapper


SETTER_WRAPPERS = {setter: _setter_wrapper(setter) for setter in BLOCK_SETTERS}


def discover_class(cls, owner_of) -> None:
    """Wrap the block setters a served class uses, where they are defined (called by targets.discover_class)."""
    for setter in BLOCK_SETTERS:
        owner = owner_of(cls, setter)
        if owner is not None:
            PATCHER.wrap_found(owner, setter, SETTER_WRAPPERS[setter])


# ------------------------------------------------------------------------------------------------ the worker


def _int_or_none(value):
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _fc_widths(draft):
    fc = getattr(draft, "fc", None)
    fc_in = getattr(fc, "in_features", None) or getattr(fc, "input_size", None)
    fc_out = getattr(fc, "out_features", None) or getattr(fc, "output_size", None)
    return _int_or_none(fc_in), _int_or_none(fc_out)


def loaded_facts(worker) -> BlockDraftLoaded:
    draft = getattr(worker, "draft_model", None)
    config = getattr(draft, "config", None)
    parsed = getattr(draft, "draft_config", None)
    fc_in, fc_out = _fc_widths(draft)
    ids = getattr(parsed, "target_layer_ids", None)
    return BlockDraftLoaded(
        worker_class=type(worker).__name__, model_class=type(draft).__name__,
        block_size=_int_or_none(getattr(worker, "block_size", None)),
        config_block_size=_int_or_none(getattr(parsed, "block_size", None)),
        mask_token_id=_int_or_none(getattr(worker, "_mask_token_id", None)),
        num_draft_layers=_int_or_none(getattr(config, "num_hidden_layers", None)),
        num_context_features=_int_or_none(getattr(draft, "num_context_features", None)),
        hidden_size=_int_or_none(getattr(config, "hidden_size", None)), fc_in=fc_in, fc_out=fc_out,
        target_layer_ids=None if ids is None else tuple(int(i) for i in ids))


def init_wrapper(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    if STATE.active:
        try:
            # values are taken at the hand-off from now on (its wrapper sees every target forward, graphs included)
            boundary.LIVE[0] = f"{WORKER}.{versions.BLOCK_WORKER_FEED_HOOK}" in PATCHER.applied()
            STATE.recorder.block_draft_loaded(loaded_facts(instance))
        except Exception as exc:
            STATE.report_error("block_worker.init", exc)
    return result


def step_wrapper(wrapped, instance, args, kwargs):
    """Holds the step's batch for the hand-off inside it (one store, one restore)."""
    outer, _batch[0] = _batch[0], (args[0] if args else kwargs.get("batch"))
    try:
        return wrapped(*args, **kwargs)
    finally:
        _batch[0] = outer


class _WorkerStatic:
    """Per worker, read once: the target's capturing inner model, the draft's view of its input, the fc width."""

    __slots__ = ("inner", "model_class", "num_layers", "draft_view", "fc_in", "forwards", "signatures")

    def __init__(self, worker):
        model = getattr(getattr(worker, "model_runner", None), "model", None)
        self.inner = next((m for m in model.modules() if isinstance(getattr(m, "layers_to_capture", None), list)),
                          None) if model is not None else None
        self.model_class = type(self.inner).__name__ if self.inner is not None else None
        n = getattr(getattr(self.inner, "config", None), "num_hidden_layers", None)
        self.num_layers = int(n) if n is not None else None
        draft = getattr(worker, "draft_model", None)
        self.fc_in = _fc_widths(draft)[0]
        k, hidden = getattr(draft, "num_context_features", None), getattr(getattr(draft, "config", None),
                                                                        "hidden_size", None)
        self.draft_view = (int(k), int(hidden)) if k and hidden else None
        self.forwards = 0
        self.signatures = set()

    def __deepcopy__(self, memo):
        return None

    def __reduce__(self):
        return type(None), ()


def _static(worker):
    static = worker.__dict__.get(_STATIC)
    if static is None:
        static = worker.__dict__[_STATIC] = _WorkerStatic(worker)
    return static


def _report_shape(worker, static, mode, hidden, rows):
    """Once per (mode, width, dtype): the worker, its fc width and therefore the rest of the signature are fixed."""
    key = (mode, hidden.shape[-1], hidden.dtype)
    if key in static.signatures:
        return
    static.signatures.add(key)
    STATE.recorder.block_draft_fed(BlockDraftFed(type(worker).__name__, mode, int(hidden.shape[-1]), static.fc_in,
                                                 rows, str(hidden.dtype).replace("torch.", "")))


def _handoff(static, mode, hidden, rows, positions):
    batch = _batch[0]
    input_ids = getattr(batch, "input_ids", None)
    if input_ids is None or getattr(input_ids, "shape", (0,))[0] < rows:
        input_ids = None
    extend = mode == EXTEND_MODE and batch is not None
    return Handoff(mode, hidden, input_ids, positions, rows, getattr(batch, "reqs", None) or (),
                   list(batch.extend_lens) if extend else None, list(batch.prefix_lens) if extend else None,
                   tuple(static.inner.layers_to_capture), static.num_layers, static.model_class, None)


def _observe_feed(worker, kwargs):
    hidden = kwargs.get("target_hidden")
    cache_loc = kwargs.get("cache_loc")
    if hidden is None or cache_loc is None or hidden.dim() != 2 or not hidden.shape[0]:
        return
    static = _static(worker)
    mode = VERIFY_MODE if kwargs.get("commit_lens") is not None else EXTEND_MODE
    rows = min(int(hidden.shape[0]), int(cache_loc.numel()))  # SGLang trims trailing padding rows the same way
    _report_shape(worker, static, mode, hidden, rows)
    if static.inner is None:
        return
    static.forwards += 1
    recorder = STATE.recorder
    if not boundary.wanted(recorder):  # no per-request work unless a sample is due or dumps are on
        return
    sampler = recorder.fingerprints
    planner = recorder.dumps.worker_planner if recorder.dumps is not None else None
    handoff = _handoff(static, mode, hidden, rows, kwargs.get("positions"))
    if sampler is not None:
        boundary.sample(sampler, recorder, handoff, static.forwards, static.draft_view)
    if planner is not None and handoff.input_ids is not None and (mode == EXTEND_MODE or handoff.reqs):
        boundary.submit_dump(recorder, planner, handoff, static.forwards)


def feed_wrapper(wrapped, instance, args, kwargs):
    if STATE.active and boundary.LIVE[0]:
        try:
            _observe_feed(instance, kwargs)
        except Exception as exc:
            STATE.report_error("block_worker.feed", exc)
    return wrapped(*args, **kwargs)


def reset():
    _depth[0] = 0
    _batch[0] = None


WORKER = versions.BLOCK_WORKER_MODULE
INTEGRATION = Integration("block_drafts", (
    PatchTarget(WORKER, versions.BLOCK_WORKER_INIT_HOOK, init_wrapper,
                observes="the block draft's load-time facts (block size, mask token, fc width)"),
    PatchTarget(WORKER, versions.BLOCK_WORKER_STEP_HOOK, step_wrapper,
                observes="the tokens and requests of a block draft's hand-off (its dumps)"),
    PatchTarget(WORKER, versions.BLOCK_WORKER_FEED_HOOK, feed_wrapper,
                accepts=lambda f: takes_keywords(f, FEED_PARAMS),
                observes="the widths, fingerprints and dumps of what the block draft's projection is fed"),
), reset=reset)
