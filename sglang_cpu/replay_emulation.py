"""Test-only (never part of the probe): what a CUDA-graph replay looks like to Python, on the CPU.

On a GPU, SGLang's prefill graph runner sets ``self.layer_model.forward = replay_layer_forward`` on the instance for
a replay, and full-graph replays (decode, TARGET_VERIFY, the draft) run no Python of the model at all: a wrapper on a
model class's ``forward`` never runs. ``SGLANG_CPU_REPLAY_EMULATION=1`` (applied from ``sglang_cpu/site/
sitecustomize.py``) gives every model runner's inner model (``runner.model.model``, target and draft) an instance
``forward`` after load: the class's own function with every class-level wrapper peeled off (the probe's and any other).
What the model computes is unchanged; only the Python around it is gone, as under replay.

A served-model fault of ``sglang_cpu.verify_faults`` is a class-level wrapper too, so it would be peeled off with the
rest: with ``SGLANG_CPU_SHIFT_VERIFY_AUX`` set, the instance forward applies that fault itself (the fault is then
part of what the "graph" computes).
"""

from __future__ import annotations

import os
import types

import wrapt

ENV = "SGLANG_CPU_REPLAY_EMULATION"
MODEL_RUNNER = "sglang.srt.model_executor.model_runner"
MARK = "_sglang_cpu_replay_emulated"  # on an inner model given an instance forward


def enabled() -> bool:
    return os.environ.get(ENV, "") == "1"


def unwrapped_forward(cls):
    """The class's forward function below every wrapper (wrapt's FunctionWrapper keeps it in __wrapped__)."""
    function = cls.forward
    while hasattr(function, "__wrapped__"):
        function = function.__wrapped__
    return getattr(function, "__func__", function)


def _replay_forward(module):
    function = unwrapped_forward(type(module))
    flag = os.environ.get("SGLANG_CPU_SHIFT_VERIFY_AUX", "")
    if not flag:
        return types.MethodType(function, module)
    from sglang_cpu.verify_faults import _wrapper

    fault = _wrapper(flag)

    def forward(self, *args, **kwargs):
        return fault(lambda *a, **k: function(self, *a, **k), self, args, kwargs)

    return types.MethodType(forward, module)


def emulate(runner) -> None:
    """Give the runner's inner model an instance forward below every class wrapper (idempotent)."""
    inner = getattr(getattr(runner, "model", None), "model", None)
    if inner is None or inner.__dict__.get(MARK):
        return
    inner.__dict__["forward"] = _replay_forward(inner)
    inner.__dict__[MARK] = True


def _load_model(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    emulate(instance)
    return result


def apply() -> None:
    if enabled():
        wrapt.register_post_import_hook(
            lambda module: wrapt.wrap_function_wrapper(module, "ModelRunner.load_model", _load_model), MODEL_RUNNER)
