"""Per-step acceptance from values SGLang already holds on the CPU (no device synchronisation added).

All three read accepted draft tokens per request with the bonus token excluded, after SGLang computed them:
- 0.5.23: SchedulerBatchResultProcessor._resolve_spec_v2_tokens(result, batch) -> num_correct_drafts_per_req_cpu,
  counting the requests SGLang counts (neither retracted nor finished);
- 0.5.8, default v1 worker: EAGLEWorker.verify(batch, spec_info) -> (.., EagleVerifyOutput, ..);
  accept_length_per_req_cpu (SGLang truncates it when a request finishes inside the accepted run);
- 0.5.8 with SGLANG_ENABLE_SPEC_V2: Scheduler._resolve_spec_overlap_token_ids(result, batch) ->
  result.accept_length_per_req_cpu.
A release has only some of these modules and methods; the others are never patched.
"""

import sys

from ..observations import VerifyStep
from ..state import STATE
from .base import Integration, PatchTarget

BATCH_RESULT_PROCESSOR = "sglang.srt.managers.scheduler_components.batch_result_processor"

_num_steps = None


def _draft_positions(result) -> int:
    """Draft positions along the chain: the speculative steps of this server."""
    global _num_steps
    if _num_steps is None:
        context = sys.modules.get("sglang.srt.runtime_context")
        try:
            _num_steps = int(context.get_spec().speculative_num_steps)
        except Exception:
            # A chain proposes num_draft_tokens - 1 tokens (the rest is the bonus).
            return int(result.speculative_num_draft_tokens) - int(getattr(result, "num_non_draft_tokens_per_req", 1))
    return _num_steps


def resolve_spec_v2_tokens_wrapper(wrapped, instance, args, kwargs):
    output = wrapped(*args, **kwargs)
    if STATE.active:
        try:
            result = args[0] if args else kwargs["result"]
            batch = args[1] if len(args) > 1 else kwargs["batch"]
            per_request = result.num_correct_drafts_per_req_cpu
            live = tuple(int(n) for n, req in zip(per_request, batch.reqs)
                         if not (req.is_retracted or req.finished()))
            STATE.recorder.verify_step(VerifyStep(live, _draft_positions(result)))
        except Exception as exc:
            STATE.report_error("acceptance.resolve_spec_v2_tokens", exc)
    return output


def eagle_worker_verify_wrapper(wrapped, instance, args, kwargs):
    output = wrapped(*args, **kwargs)
    if STATE.active:
        try:
            verify_output = output[1]
            accepted = tuple(int(n) for n in verify_output.accept_length_per_req_cpu)
            STATE.recorder.verify_step(VerifyStep(accepted, int(instance.speculative_num_steps)))
        except Exception as exc:
            STATE.report_error("acceptance.eagle_worker_verify", exc)
    return output


def resolve_spec_overlap_wrapper(wrapped, instance, args, kwargs):
    output = wrapped(*args, **kwargs)
    if STATE.active:
        try:
            result = args[0] if args else kwargs["result"]
            accepted = tuple(int(n) for n in result.accept_length_per_req_cpu)
            STATE.recorder.verify_step(VerifyStep(accepted, int(instance.server_args.speculative_num_steps)))
        except Exception as exc:
            STATE.report_error("acceptance.resolve_spec_overlap_token_ids", exc)
    return output


INTEGRATION = Integration("acceptance", (
    PatchTarget("sglang.srt.speculative.eagle_worker", "EAGLEWorker.verify", eagle_worker_verify_wrapper),
    PatchTarget("sglang.srt.managers.scheduler_output_processor_mixin",
                "SchedulerOutputProcessorMixin._resolve_spec_overlap_token_ids", resolve_spec_overlap_wrapper),
    PatchTarget(BATCH_RESULT_PROCESSOR, "SchedulerBatchResultProcessor._resolve_spec_v2_tokens",
                resolve_spec_v2_tokens_wrapper),
))
