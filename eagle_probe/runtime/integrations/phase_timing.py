"""The phases of each speculative decode step, timed (runtime/timing/): the EAGLE worker's step
(`EAGLEWorkerV2.forward_batch_generation` on a decode batch) and inside it the draft (`EagleDraftWorker.draft`, all
its steps), the target's verify (`EAGLEWorkerV2.verify`) and the draft extend (`_draft_extend_for_decode`, through
eagle_worker.py's wrapper); and, from runner_paths.py, the target's decode, verify and short prefill forwards
(`ModelRunner.forward`), the points of its cost fit; and SGLang's own DeviceTimer, whose intervals a CUDA worker
reads instead of its own events where SGLang runs it (SGLANG_ENABLE_METRICS_DEVICE_TIMER=1).

On a server without speculation, the scheduler's decode steps on the target worker
(`TpModelWorker.forward_batch_generation`) are timed the same way, as plain steps.

Each wrapper makes clock marks only (a host time, or a CUDA event recorded on the current stream); nothing reads the
device here. The step's depth is read after it ran (adaptive depth switches the worker's state inside it). A prefill
through the worker breaks the run of back-to-back steps whose period is measured. Rows of the version table without
the v2 worker (worker_boundary) leave these unwrapped (rows_only).
"""

from ... import versions
from ..patcher import Integration, PatchTarget
from ..state import STATE
from ..timing.device_timer import log_for
from ..timing.steps import PHASE_MARKS

WORKER_MODULE = versions.WORKER_MODULE
DEVICE_TIMER_WRAP = f"{versions.DEVICE_TIMER_MODULE}.{versions.DEVICE_TIMER_HOOK}"
TIMED_MODES = ("DECODE", "TARGET_VERIFY", "EXTEND")  # the target forwards of the cost fit
MAX_EXTEND_TOKENS = 512  # longer prefills are left out of the fit: their attention grows with the prompt


def _costs():
    recorder = STATE.recorder
    if not STATE.active or recorder is None:
        return None
    costs = recorder.costs
    return costs if costs.enabled else None


def _is_decode(batch) -> bool:
    mode = batch.forward_mode
    return not (mode.is_extend() or getattr(batch, "is_extend_in_batch", False) or mode.is_idle())


def _begin(costs, worker, args, kwargs):
    timer = costs.timer_for(worker)
    batch = args[0] if args else kwargs.get("batch")
    if timer is None or batch is None:
        return None, None
    if not _is_decode(batch):
        timer.interrupt()
        return None, None
    return timer, timer.begin(len(batch.reqs))


def _served_depth(worker) -> int:
    depth = getattr(worker, "speculative_num_steps", None)
    return depth if isinstance(depth, int) else -1


def _timed_step(costs, begin, depth_of, wrapped, instance, args, kwargs, where: str):
    """Run one decode step between the timer's begin and end (untimed where `begin` gives no step)."""
    timer = step = None
    try:
        timer, step = begin(costs, instance, args, kwargs)
    except Exception as exc:
        STATE.report_error(where, exc)
    try:
        return wrapped(*args, **kwargs)
    finally:
        if step is not None:
            try:
                timer.end(step, depth_of(instance))
            except Exception as exc:
                STATE.report_error(where, exc)


def step_wrapper(wrapped, instance, args, kwargs):
    """The EAGLE worker's decode step; its depth is read after it ran (adaptive depth switches it inside)."""
    costs = _costs()
    if costs is None:
        return wrapped(*args, **kwargs)
    return _timed_step(costs, _begin, _served_depth, wrapped, instance, args, kwargs, "phase_timing.step")


def _plain_begin(costs, worker, args, kwargs):
    """A plain decode step's mark, on a server without speculation only: the scheduler hands the target worker its
    batch (a ScheduleBatch, or a ModelWorkerBatch in older releases) with no speculative algorithm; a speculative
    server's target forwards come from its EAGLE worker, and its draft worker is a draft."""
    batch = args[0] if args else kwargs.get("batch", kwargs.get("model_worker_batch"))
    if batch is None or getattr(worker, "is_draft_worker", False):
        return None, None
    algorithm = getattr(batch, "spec_algorithm", None)
    if algorithm is not None and not algorithm.is_none():
        return None, None
    timer = costs.plain_timer_for(worker)
    if timer is None:
        return None, None
    if not batch.forward_mode.is_decode():
        timer.interrupt()
        return None, None
    reqs = getattr(batch, "reqs", None)
    return timer, timer.begin(len(reqs) if reqs is not None else int(batch.seq_lens.shape[0]))


def plain_step_wrapper(wrapped, instance, args, kwargs):
    """The scheduler's decode step on a server without speculation: its time and the period between steps, the
    measured plain step that `eagle-probe advise` compares a speculative server's steps with (depth 0, no phases)."""
    costs = _costs()
    if costs is None:
        return wrapped(*args, **kwargs)
    return _timed_step(costs, _plain_begin, _plain_depth, wrapped, instance, args, kwargs, "phase_timing.plain_step")


def _plain_depth(worker) -> int:
    return 0


def timed_phase(phase: str, wrapped, args, kwargs):
    """Run one phase of the current decode step between two marks (untimed outside a step, or with timing off)."""
    costs = _costs()
    timer = costs.timer if costs is not None else None
    if timer is None or timer.current is None:
        return wrapped(*args, **kwargs)
    first, last = PHASE_MARKS[phase]
    try:
        timer.phase(first)
    except Exception as exc:
        STATE.report_error(f"phase_timing.{phase}", exc)
    try:
        return wrapped(*args, **kwargs)
    finally:
        try:
            timer.phase(last)
        except Exception as exc:
            STATE.report_error(f"phase_timing.{phase}", exc)


def draft_wrapper(wrapped, instance, args, kwargs):
    return timed_phase("draft", wrapped, args, kwargs)


def verify_wrapper(wrapped, instance, args, kwargs):
    return timed_phase("verify", wrapped, args, kwargs)


def forward_begin(runner, forward_batch):
    """Called by runner_paths before a ModelRunner.forward: a mark for a target decode, verify or short prefill
    forward (the points of the cost fit), else None."""
    costs = _costs()
    timer = costs.timer if costs is not None else None
    if timer is None or getattr(runner, "is_draft_worker", False):
        return None
    mode = forward_batch.forward_mode.name
    input_ids = forward_batch.input_ids
    if mode not in TIMED_MODES or input_ids is None:
        return None
    tokens = int(input_ids.shape[0])
    if mode == "EXTEND" and tokens > MAX_EXTEND_TOKENS:
        return None
    return timer.forward_begin(mode, tokens, int(forward_batch.batch_size))


def forward_end(mark) -> None:
    costs = _costs()
    if costs is not None and costs.timer is not None:
        costs.timer.forward_end(mark)


def device_timer_wrapper(wrapped, instance, args, kwargs):
    """SGLang's DeviceTimer.wrap (one forward's interval): numbered as it starts, so that the step timer can read
    SGLang's own device times between its marks (timing/device_timer.py). Wrapped from the process start: the first
    call is the timer's first interval."""
    if _costs() is not None:
        try:
            log = log_for(instance)
            if log is not None:
                log.start()
        except Exception as exc:
            STATE.report_error("phase_timing.device_timer", exc)
    return wrapped(*args, **kwargs)


INTEGRATION = Integration("phase_timing", (
    PatchTarget(WORKER_MODULE, versions.WORKER_STEP_HOOK, step_wrapper, rows_only=True,
                observes="the cost of each speculative decode step, its period and the speed-up estimate"),
    PatchTarget(WORKER_MODULE, versions.WORKER_DRAFT_HOOK, draft_wrapper, rows_only=True,
                observes="the draft phase's time"),
    PatchTarget(WORKER_MODULE, versions.WORKER_VERIFY_HOOK, verify_wrapper, rows_only=True,
                observes="the verify phase's time"),
    PatchTarget(versions.PLAIN_WORKER_MODULE, versions.PLAIN_STEP_HOOK, plain_step_wrapper,
                observes="on a server without speculation: each decode step's time and period (the plain step)"),
    PatchTarget(versions.DEVICE_TIMER_MODULE, versions.DEVICE_TIMER_HOOK, device_timer_wrapper,
                observes="SGLang's own device time of each forward, where its device timer runs"),
))
# The draft extend (WORKER_DECODE_HOOK) is timed by the worker boundary's wrapper (eagle_worker.decode_wrapper), which
# holds that target: one wrapper per method.
