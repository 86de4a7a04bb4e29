"""Per-step acceptance from values SGLang already holds on the CPU (no device synchronisation added).

Where a release computes accepted draft tokens per request (bonus excluded), and under which field name,
comes from the version table (versions.AcceptanceHook); this module wraps every known home and reads the
field the table names for the installed release. A release has only some of these; the rest are never
patched (their modules or methods do not exist there).
- v1 worker (0.5.8 to 0.5.12.post1): EAGLEWorker.verify returns (.., EagleVerifyOutput, ..); SGLang truncates
  the count when a request finishes inside the accepted run.
- spec-v2 overlap resolver on the scheduler (0.5.8 with SGLANG_ENABLE_SPEC_V2, 0.5.11, 0.5.12).
- 0.5.13+: SchedulerBatchResultProcessor._resolve_spec_v2_tokens.
On every spec-v2 path the probe counts only requests that are neither retracted nor finished: the overlap
scheduler runs one more verify step for a request that just finished and discards its tokens (0.5.13+ leaves
it out of its own counts; 0.5.8's server-wide "accept len" still includes it, its per-request meta_info not),
and a step whose requests had all finished is not a verify step.
"""

import sys

from .. import versions
from ..observations import VerifyStep
from ..state import STATE
from .base import Integration, PatchTarget

V1_VERIFY = ("sglang.srt.speculative.eagle_worker", "EAGLEWorker.verify")
_V1_TARGET = ".".join(V1_VERIFY)
OVERLAP_MIXIN = "sglang.srt.managers.scheduler_output_processor_mixin"
BATCH_RESULT_PROCESSOR = "sglang.srt.managers.scheduler_components.batch_result_processor"
_V2_TARGET = f"{BATCH_RESULT_PROCESSOR}.SchedulerBatchResultProcessor._resolve_spec_v2_tokens"

_fields = {}  # target -> field name from the version table (resolved once)


def _field(target: str, default: str) -> str:
    field = _fields.get(target)
    if field is None:
        hook = versions.acceptance_hook(target)
        field = _fields[target] = hook.field if hook is not None else default
    return field


_positions = None  # a server's speculative steps never change: read once


def _draft_positions(instance, result=None) -> int:
    """Draft positions along the chain: the server's speculative steps."""
    global _positions
    if _positions is not None:
        return _positions
    for owner in (instance, getattr(instance, "server_args", None)):
        steps = getattr(owner, "speculative_num_steps", None)
        if isinstance(steps, int):
            _positions = steps
            return steps
    context = sys.modules.get("sglang.srt.runtime_context")
    try:
        _positions = int(context.get_spec().speculative_num_steps)
        return _positions
    except Exception:
        # A chain proposes num_draft_tokens - 1 tokens; the last is the bonus.
        return int(result.speculative_num_draft_tokens) - int(getattr(result, "num_non_draft_tokens_per_req", 1))


def _record(accepted, positions, source):
    STATE.recorder.verify_step(VerifyStep(tuple(accepted), positions, source))


def eagle_worker_verify_wrapper(wrapped, instance, args, kwargs):
    output = wrapped(*args, **kwargs)
    if STATE.active:
        try:
            field = _field(_V1_TARGET, "accept_length_per_req_cpu")
            _record(getattr(output[1], field), _draft_positions(instance), _V1_TARGET)
        except Exception as exc:
            STATE.report_error("acceptance.eagle_worker_verify", exc)
    return output


def _live(counts, reqs):
    """Counts of the requests still running: with the overlap scheduler a request that finished (or was
    retracted) in the previous step rides one more verify step whose tokens SGLang discards."""
    return [n for n, req in zip(counts, reqs) if not (req.is_retracted or req.finished())]


def _overlap_wrapper(qualname):
    target = f"{OVERLAP_MIXIN}.{qualname}"

    def wrapper(wrapped, instance, args, kwargs):
        output = wrapped(*args, **kwargs)
        if STATE.active:
            try:
                result = args[0] if args else kwargs["result"]
                batch = args[1] if len(args) > 1 else kwargs["batch"]
                live = _live(getattr(result, _field(target, "accept_length_per_req_cpu")), batch.reqs)
                if live:
                    _record(live, _draft_positions(instance, result), target)
            except Exception as exc:
                STATE.report_error(f"acceptance.{qualname.rsplit('.', 1)[-1]}", exc)
        return output

    return wrapper


def resolve_spec_v2_tokens_wrapper(wrapped, instance, args, kwargs):
    output = wrapped(*args, **kwargs)
    if STATE.active:
        try:
            result = args[0] if args else kwargs["result"]
            batch = args[1] if len(args) > 1 else kwargs["batch"]
            field = _field(_V2_TARGET, "num_correct_drafts_per_req_cpu")
            live = _live(getattr(result, field), batch.reqs)
            if live:
                _record(live, _draft_positions(instance, result), _V2_TARGET)
        except Exception as exc:
            STATE.report_error("acceptance.resolve_spec_v2_tokens", exc)
    return output


_OVERLAP_0_5_8 = "SchedulerOutputProcessorMixin._resolve_spec_overlap_token_ids"
_OVERLAP_0_5_12 = "SchedulerOutputProcessorMixin._resolve_spec_overlap_tokens"
_OFF_V1 = "per-step acceptance (events and spec metrics) on the v1 EAGLE worker"
_OFF_V2 = "per-step acceptance (events and spec metrics) on the spec-v2 overlap worker"

INTEGRATION = Integration("acceptance", (
    PatchTarget(*V1_VERIFY, eagle_worker_verify_wrapper, observes=_OFF_V1),
    PatchTarget(OVERLAP_MIXIN, _OVERLAP_0_5_8, _overlap_wrapper(_OVERLAP_0_5_8), observes=_OFF_V2),
    PatchTarget(OVERLAP_MIXIN, _OVERLAP_0_5_12, _overlap_wrapper(_OVERLAP_0_5_12), observes=_OFF_V2),
    PatchTarget(BATCH_RESULT_PROCESSOR, "SchedulerBatchResultProcessor._resolve_spec_v2_tokens",
                resolve_spec_v2_tokens_wrapper, observes=_OFF_V2),
))
