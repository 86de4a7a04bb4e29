"""ModelRunner.load_model: marks the loaded model's modules as target or draft (is_draft_worker). A draft loaded in
this process means an EAGLE worker hands it the target's aux states: values are taken there from now on
(values/boundary.py), when both worker hooks are wrapped."""

import weakref

from ..context.roles import DRAFT, TARGET, register_model
from ..patcher import PATCHER, Integration, PatchTarget
from ..state import STATE
from ..values import boundary
from .target_forward import forget_static_facts


def load_model_wrapper(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    if STATE.active:
        try:
            role = DRAFT if getattr(instance, "is_draft_worker", False) else TARGET
            register_model(instance.model, role)
            _runners[instance.model] = weakref.ref(instance)
            if role == DRAFT:
                boundary.LIVE[0] = worker_hooks_wrapped()
            forget_static_facts()  # cached per-module facts carry the role
        except Exception as exc:
            STATE.report_error("model_runner.load_model", exc)
    return result


_runners = weakref.WeakKeyDictionary()  # loaded model -> its ModelRunner


def graphs_captured(model) -> tuple:
    """The graph runners (class names) the ModelRunner that loaded `model` already holds: graphs captured."""
    ref = _runners.get(model)
    runner = ref() if ref is not None else None
    found = (getattr(runner, name, None) for name in ("decode_cuda_graph_runner", "prefill_cuda_graph_runner",
                                                      "cuda_graph_runner"))
    return tuple(type(r).__name__ for r in found if r is not None and type(r).__name__ != "EagerRunner")


def worker_hooks_wrapped() -> bool:
    from .eagle_worker import DECODE_HOOK, PREFILL_HOOK, WORKER_MODULE

    return all(f"{WORKER_MODULE}.{hook}" in PATCHER.applied() for hook in (PREFILL_HOOK, DECODE_HOOK))


INTEGRATION = Integration("model_runner", (
    PatchTarget("sglang.srt.model_executor.model_runner", "ModelRunner.load_model", load_model_wrapper,
                observes="the process role (target or draft) on events"),
))
