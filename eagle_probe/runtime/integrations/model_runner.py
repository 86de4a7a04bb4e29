"""ModelRunner.load_model: marks the loaded model's modules as target or draft (is_draft_worker)."""

from ..context.roles import DRAFT, TARGET, register_model
from ..state import STATE
from ..patcher import Integration, PatchTarget
from .target_forward import forget_static_facts


def load_model_wrapper(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    if STATE.active:
        try:
            role = DRAFT if getattr(instance, "is_draft_worker", False) else TARGET
            register_model(instance.model, role)
            forget_static_facts()  # cached per-module facts carry the role
        except Exception as exc:
            STATE.report_error("model_runner.load_model", exc)
    return result


INTEGRATION = Integration("model_runner", (
    PatchTarget("sglang.srt.model_executor.model_runner", "ModelRunner.load_model", load_model_wrapper,
                observes="the process role (target or draft) on events"),
))
