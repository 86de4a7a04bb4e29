"""ModelRunner.load_model: marks the loaded model's modules as target or draft (is_draft_worker). A draft loaded in
this process means an EAGLE worker hands it the target's aux states: values are taken there from now on
(values/boundary.py), when both worker hooks are wrapped."""

from ..context.roles import DRAFT, TARGET, register_model
from ..state import STATE
from ..patcher import PATCHER, Integration, PatchTarget
from ..values import boundary
from .target_forward import forget_static_facts


def load_model_wrapper(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    if STATE.active:
        try:
            role = DRAFT if getattr(instance, "is_draft_worker", False) else TARGET
            register_model(instance.model, role)
            if role == DRAFT:
                boundary.LIVE[0] = worker_hooks_wrapped()
            forget_static_facts()  # cached per-module facts carry the role
        except Exception as exc:
            STATE.report_error("model_runner.load_model", exc)
    return result


def worker_hooks_wrapped() -> bool:
    from .eagle_worker import DECODE_HOOK, PREFILL_HOOK, WORKER_MODULE

    return all(f"{WORKER_MODULE}.{hook}" in PATCHER.applied() for hook in (PREFILL_HOOK, DECODE_HOOK))


INTEGRATION = Integration("model_runner", (
    PatchTarget("sglang.srt.model_executor.model_runner", "ModelRunner.load_model", load_model_wrapper,
                observes="the process role (target or draft) on events"),
))
