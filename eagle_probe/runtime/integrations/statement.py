"""The start-up statement (eagle_probe.observability): what this process's probe sees, where each observation comes
from and whether it is live under this process's settings. Made once, at the first ModelRunner.forward that is not a
graph capture (graph set-up is over by then), from SGLang's own objects: the model runners (which graph runner each
phase has, whether an inner model's forward was replaced on the instance) and the server args the runner holds
(however they were given: command line, YAML --config, Engine(...)). It costs nothing per forward.
"""

from ... import versions
from ...events import OBSERVABILITY
from ..patcher import PATCHER
from ..state import STATE
from ..values import boundary


def _graph_name(runner):
    return None if runner is None or type(runner).__name__ == "EagerRunner" else type(runner).__name__


def _inner(runner):
    model = getattr(runner, "model", None)
    for module in model.modules() if model is not None else ():
        if isinstance(getattr(module, "layers_to_capture", None), (list, tuple)):
            return module
    return getattr(model, "model", None)


class _Resolved:
    """Server args as SGLang resolved them (0.5.23 resolves some at start-up, e.g. the overlap scheduler off for
    speculative decoding on the CPU: ServerArgs.resolved_dict); older releases hold the final values as fields."""

    def __init__(self, args):
        self._args = args
        try:
            self._values = args.resolved_dict() if hasattr(args, "resolved_dict") else {}
        except Exception:  # a release whose resolution reads something not there: the fields
            self._values = {}

    def get(self, name, default=None):
        if name in self._values:
            return self._values[name]
        return getattr(self._args, name, default)


def settings(runner) -> dict:
    """The settings that decide what runs as Python, read from SGLang's objects."""
    args = _Resolved(getattr(runner, "server_args", None))
    attn_dp = args.get("attn_dp_size")
    inner = _inner(runner)
    return {
        "decode_graph": _graph_name(getattr(runner, "decode_cuda_graph_runner", None)),
        "prefill_graph": _graph_name(getattr(runner, "prefill_cuda_graph_runner", None)),
        "torch_compile": bool(args.get("enable_torch_compile", False)
                              or args.get("enable_piecewise_cuda_graph", False)),  # the latter: before 0.5.23
        "overlap_schedule": not bool(args.get("disable_overlap_schedule", True)),
        "dp_attention": bool(attn_dp > 1) if isinstance(attn_dp, int) else bool(args.get("enable_dp_attention", False)),
        "inner_forward_replaced": inner is not None and "forward" in vars(inner),
        "inner_forward_wrapped": STATE.inner_forward,
        "worker_boundary": boundary.LIVE[0],
        "timing": _timing(runner),
    }


def _timing(runner) -> str | None:
    """The clock the step timer uses in this process (timing/clocks.py), None when phase timing is off or the
    worker's step is not wrapped."""
    from ..timing.clocks import CUDA_EVENTS, SGLANG_DEVICE_TIMER, WALL_CLOCK
    from ..timing.device_timer import takes_reporter
    from .phase_timing import DEVICE_TIMER_WRAP

    applied = PATCHER.applied()
    if STATE.recorder.config.phase_timing != "on" or f"{versions.WORKER_MODULE}.{versions.WORKER_STEP_HOOK}" \
            not in applied:
        return None
    if not str(getattr(runner, "device", "")).startswith("cuda"):
        return WALL_CLOCK
    # SGLang's forward timer, where it runs and takes another reporter (the worker reads it, costs._forward_timer)
    sglang_timer = takes_reporter(getattr(runner, "device_timer", None))
    return SGLANG_DEVICE_TIMER if sglang_timer and DEVICE_TIMER_WRAP in applied else CUDA_EVENTS


def observations(s: dict) -> list:
    """[{what, source, live, why}] for the observations the user reads."""
    inner_ok = s["inner_forward_wrapped"] and not s["inner_forward_replaced"] and not s["torch_compile"]
    prefill_inner = inner_ok and s["prefill_graph"] is None
    verify_inner = inner_ok and s["decode_graph"] is None

    def why_inner(graph):
        if not s["inner_forward_wrapped"]:
            return "inner forward wrappers off (EAGLE_PROBE_INNER_FORWARD)"
        if s["torch_compile"]:
            return "torch.compile runs the inner forward"
        if s["inner_forward_replaced"]:
            return "the inner model's forward is replaced on the instance (graph replay): class wrappers never run"
        return f"{graph} replays: a replay runs no Python of the model" if graph else ""

    values_live = s["worker_boundary"] or (prefill_inner and verify_inner)
    inner_why = why_inner(s["prefill_graph"] or s["decode_graph"])
    return [
        {"what": "values: fingerprints, non-finite counts, identical slots, TP-rank divergence, dumps",
         "source": "EAGLE worker boundary (EagleDraftWorker hand-off)" if s["worker_boundary"]
         else "inner model forward", "live": values_live,
         "why": "" if values_live else inner_why or "no EAGLE worker in this process and no eager forwards"},
        {"what": "all-layer dumps, TBO split, forwards at capture", "source": "inner model forward",
         "live": prefill_inner or verify_inner,
         "why": "" if prefill_inner and verify_inner else
         f"prefill: {why_inner(s['prefill_graph']) or 'live'}; "
         f"verify/decode: {why_inner(s['decode_graph']) or 'live'}"},
        {"what": "forward counts and path mix", "source": "ModelRunner.forward and the graph runners' execute",
         "live": "sglang.srt.model_executor.model_runner.ModelRunner.forward" in PATCHER.applied(), "why": ""},
        {"what": "acceptance per draft position", "source": "the scheduler's verify resolution", "live": True,
         "why": ""},
        {"what": "the cost of each speculative step, the speed-up estimate", "source": s["timing"] or "none",
         "live": s["timing"] is not None, "why": "" if s["timing"] else
         "EAGLE_PROBE_PHASE_TIMING is off, or no EAGLE worker step is wrapped in this process"},
    ]


def make_statement(runner) -> None:
    s = settings(runner)
    STATE.recorder.ensure_ranks()
    found = observations(s)
    dark = [o["what"] for o in found if not o["live"]]
    STATE.recorder.out.emit(
        "info", OBSERVABILITY, settings=s, observations=found,
        message="the probe sees everything it reports" if not dark else
        "not seen in this process: " + "; ".join(f"{o['what']} ({o['why']})" for o in found if not o["live"]))
