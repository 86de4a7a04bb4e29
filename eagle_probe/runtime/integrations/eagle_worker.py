"""The EAGLE worker boundary (spec v2, EagleDraftWorker): where the packed aux states the target returned are handed
to the draft, after every target forward, replayed CUDA graph or eager. Prefill hands them to
`_draft_extend_for_prefill(batch, target_hidden_states, ...)`, verify to `_draft_extend_for_decode(batch,
batch_result, ...)` as `batch_result.logits_output.hidden_states`. The wrappers read them before the draft runs
(`batch.input_ids` still holds the target's tokens then) and hand them to values/boundary.py.

A release whose methods take other leading parameters is skipped with one event and a metric (`accepts`); an
exception inside a wrapper is counted as an internal error and the worker's method runs as if unwrapped.
"""

import inspect

from ... import versions
from ..patcher import Integration, PatchTarget
from ..state import STATE
from ..values import boundary
from ..values.boundary import Handoff
from . import phase_timing
from .llama_eagle3 import draft_static

WORKER_MODULE = versions.WORKER_MODULE
PREFILL_HOOK, DECODE_HOOK = versions.WORKER_PREFILL_HOOK, versions.WORKER_DECODE_HOOK
# Leading parameters (after self) the wrappers read by position: what the contract check proves per release.
PREFILL_PARAMS = ("batch", "target_hidden_states")
DECODE_PARAMS = ("batch", "batch_result")
_STATIC = "_eagle_probe_worker"  # the worker's own attribute holding its _WorkerStatic


def leading_params(function, names):
    """None when `function` takes `names` first after self, else what it takes instead."""
    try:
        params = list(inspect.signature(function).parameters)[1:1 + len(names)]
    except (TypeError, ValueError) as exc:
        return f"its signature cannot be read ({exc})"
    if tuple(params) != tuple(names):
        return f"takes ({', '.join(params)}) where the probe reads ({', '.join(names)})"
    return None


class _WorkerStatic:
    """Per worker: the target's and the draft's inner model facts read once, and the count of target forwards handed
    over."""

    __slots__ = ("inner", "model_class", "num_layers", "draft_view", "forwards")

    def __init__(self, worker):
        self.inner = _target_inner(worker)
        self.model_class = type(self.inner).__name__ if self.inner is not None else None
        config = getattr(self.inner, "config", None)
        n = getattr(config, "num_hidden_layers", None)
        self.num_layers = int(n) if n is not None else None
        self.draft_view = _draft_view(worker)
        self.forwards = 0

    def __deepcopy__(self, memo):
        return None

    def __reduce__(self):
        return type(None), ()


def _target_inner(worker):
    """The target's inner model (the module that holds `layers_to_capture`)."""
    model = getattr(getattr(getattr(worker, "target_worker", None), "model_runner", None), "model", None)
    if model is None:
        return None
    for module in model.modules():
        if isinstance(getattr(module, "layers_to_capture", None), (list, tuple)):
            return module
    return None


def _draft_view(worker):
    """(num_aux, embed width) of the draft's inner model (what splits its input for fc), or None: the facts the
    draft's own wrapper reads (llama_eagle3._DraftStatic)."""
    draft = getattr(getattr(getattr(worker, "draft_runner", None), "model", None), "model", None)
    if draft is None:
        return None
    static = draft_static(draft)
    return static.num_aux, static.embed_width


def _static(worker):
    static = worker.__dict__.get(_STATIC)
    if static is None:
        static = worker.__dict__[_STATIC] = _WorkerStatic(worker)
    return static


def _arg(args, kwargs, index, name):
    return args[index] if len(args) > index else kwargs.get(name)


def _host_positions(starts, lens):
    """Positions on the host: per request start .. start + len - 1 (from CPU lists)."""
    import torch

    return torch.cat([torch.arange(s, s + n, dtype=torch.int64) for s, n in zip(starts, lens)]) if lens else \
        torch.empty((0,), dtype=torch.int64)


def _prefill_handoff(worker, args, kwargs):
    batch = _arg(args, kwargs, 0, "batch")
    aux = _arg(args, kwargs, 1, "target_hidden_states")
    if batch is None or aux is None or batch.forward_mode.is_idle():
        return None, None
    static = _static(worker)
    if static.inner is None:
        return None, None
    static.forwards += 1
    if not boundary.wanted(STATE.recorder):
        return None, None
    lens, prefix = list(batch.extend_lens), list(batch.prefix_lens)
    rows = min(sum(lens), aux.shape[0])
    handoff = Handoff("EXTEND", aux, batch.input_ids, lambda: _host_positions(prefix, lens), rows, batch.reqs, lens,
                      prefix, tuple(static.inner.layers_to_capture), static.num_layers, static.model_class, None)
    return static, handoff


def _decode_handoff(worker, args, kwargs):
    batch = _arg(args, kwargs, 0, "batch")
    result = _arg(args, kwargs, 1, "batch_result")
    logits_output = getattr(result, "logits_output", None)
    aux = getattr(logits_output, "hidden_states", None)
    if batch is None or aux is None or batch.forward_mode.is_idle() or not batch.reqs:
        return None, None
    static = _static(worker)
    if static.inner is None:
        return None, None
    static.forwards += 1
    if not boundary.wanted(STATE.recorder):
        return None, None
    rows = aux.shape[0]
    handoff = Handoff("TARGET_VERIFY", aux, batch.input_ids, lambda: _verify_positions(batch, rows), rows,
                      batch.reqs, None, None, tuple(static.inner.layers_to_capture), static.num_layers,
                      static.model_class, getattr(logits_output, "next_token_logits", None))
    return static, handoff


def _verify_positions(batch, rows):
    """The verify rows' positions: the verify input's own (a device tensor), else from the committed lengths."""
    spec = batch.spec_info
    positions = getattr(spec, "positions", None)
    if positions is not None and positions.shape[0] == rows:
        return positions
    host = getattr(spec, "seq_lens_cpu", None)
    host = batch.seq_lens_cpu if host is None else host
    seq_lens = host.tolist()  # a host tensor SGLang keeps beside the device one
    return _host_positions(seq_lens, [rows // len(seq_lens)] * len(seq_lens))


def _observe(static, handoff):
    recorder = STATE.recorder
    sampler = recorder.fingerprints
    if sampler is not None:
        try:
            boundary.sample(sampler, recorder, handoff, static.forwards, static.draft_view)
        except Exception as exc:
            STATE.report_error("worker.fingerprint", exc)
    planner = recorder.dumps.worker_planner if recorder.dumps is not None else None
    if planner is not None:
        try:
            boundary.submit_dump(recorder, planner, handoff, static.forwards)
        except Exception as exc:
            STATE.report_error("worker.dump", exc)


# The readers are looked up by name at each call (not bound into a closure), like every wrapper of the probe.
def prefill_wrapper(wrapped, instance, args, kwargs):
    if STATE.active and boundary.LIVE[0]:
        try:
            static, handoff = _prefill_handoff(instance, args, kwargs)
            if handoff is not None:
                _observe(static, handoff)
        except Exception as exc:
            STATE.report_error("worker.prefill", exc)
    return wrapped(*args, **kwargs)


def decode_wrapper(wrapped, instance, args, kwargs):
    if STATE.active and boundary.LIVE[0]:
        try:
            static, handoff = _decode_handoff(instance, args, kwargs)
            if handoff is not None:
                _observe(static, handoff)
        except Exception as exc:
            STATE.report_error("worker.decode", exc)
    return phase_timing.timed_phase("extend", wrapped, args, kwargs)  # the draft extend: a phase of the step


INTEGRATION = Integration("eagle_worker", (
    PatchTarget(WORKER_MODULE, PREFILL_HOOK, prefill_wrapper,
                accepts=lambda f: leading_params(f, PREFILL_PARAMS), rows_only=True,
                observes="fingerprints and dumps of the aux states prefill hands the draft, under CUDA graphs"),
    PatchTarget(WORKER_MODULE, DECODE_HOOK, decode_wrapper,
                accepts=lambda f: leading_params(f, DECODE_PARAMS), rows_only=True,
                observes="fingerprints and dumps of the aux states verify hands the draft, under CUDA graphs"),
), reset=boundary.reset)
