"""Forward counts and the path each forward ran, from Python that runs on every path: `ModelRunner.forward` (one call
per target or draft forward batch, replayed or eager) and the graph runners' `execute` entry points, which
`ModelRunner._forward_raw` calls instead of the model when a captured graph can run the batch. A forward is
`graph_replay` when a graph runner's execute ran inside it, `graph_capture` when SGLang's capture flag was up, else
`eager`. The inner-forward counts (eagle_probe_target_forwards_total) see eager and capture forwards only.

Counted in a plain dict on the hot path (parts/forwards.py `runner_forwards`), sent to
eagle_probe_model_forwards_total at a flush. The first forward after start-up also triggers the start-up statement
(integrations/statement.py): graph set-up is over by then.
"""

from ... import versions
from ..context import graph_capture
from ..patcher import Integration, PatchTarget
from ..state import STATE
from . import phase_timing

MODEL_RUNNER = "sglang.srt.model_executor.model_runner"
# (module, qualname, kind): the graph runners' entry points, from the version table (rows without them: skipped)
GRAPH_ENTRIES = versions.GRAPH_ENTRIES
EAGER, REPLAY, CAPTURE = "eager", "graph_replay", "graph_capture"

_entered = [None]  # the graph kind whose execute ran inside the current ModelRunner.forward (the forward's thread)
_statement = [False]  # the start-up statement was made in this process


def reset():
    _entered[0] = None
    _statement[0] = False


def _graph_wrapper(kind):
    def wrapper(wrapped, instance, args, kwargs):
        _entered[0] = kind
        return wrapped(*args, **kwargs)

    return wrapper


def _count(instance, args, kwargs, graph):
    batch = args[0] if args else kwargs.get("forward_batch")
    role = "draft" if getattr(instance, "is_draft_worker", False) else "target"
    path = REPLAY if graph is not None else CAPTURE if graph_capture.is_capturing() else EAGER
    STATE.recorder.counts.runner_forward((role, batch.forward_mode.name, path, graph or "none"))
    if not _statement[0] and path != CAPTURE:
        _statement[0] = True
        from .statement import make_statement

        make_statement(instance)


def model_runner_forward_wrapper(wrapped, instance, args, kwargs):
    if not STATE.active:
        return wrapped(*args, **kwargs)
    outer = _entered[0]  # a forward inside a forward (none in 0.5.23): keep the outer one's mark
    _entered[0] = None
    timed = None
    try:
        timed = phase_timing.forward_begin(instance, args[0] if args else kwargs.get("forward_batch"))
    except Exception as exc:
        STATE.report_error("phase_timing.forward", exc)
    try:
        return wrapped(*args, **kwargs)
    finally:
        graph = _entered[0]
        _entered[0] = outer
        if timed is not None:
            try:
                phase_timing.forward_end(timed)
            except Exception as exc:
                STATE.report_error("phase_timing.forward", exc)
        try:
            _count(instance, args, kwargs, graph)
        except Exception as exc:
            STATE.report_error("model_runner.forward", exc)


INTEGRATION = Integration("runner_paths", (
    PatchTarget(MODEL_RUNNER, "ModelRunner.forward", model_runner_forward_wrapper,
                observes="forward counts and the path mix (eager, graph replay, graph capture)"),
    *(PatchTarget(module, qualname, _graph_wrapper(kind), observes=f"which forwards replay the {kind}", rows_only=True)
      for module, qualname, kind in GRAPH_ENTRIES),
), reset=reset)
