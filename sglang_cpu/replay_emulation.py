"""Test-only (never part of the probe): what a CUDA-graph replay looks like to Python, on the CPU.

On a GPU, SGLang's prefill graph runner sets ``self.layer_model.forward = replay_layer_forward`` on the instance for
a replay, and full-graph replays (decode, TARGET_VERIFY, the draft) run no Python of the model at all: a wrapper on a
model class's ``forward`` never runs. ``SGLANG_CPU_REPLAY_EMULATION=1`` (applied from ``sglang_cpu/site/
sitecustomize.py``) gives every model runner's inner model (``runner.model.model``, target and draft) an instance
``forward`` after load: the class's own function with every class-level wrapper peeled off (the probe's and any other).
What the model computes is unchanged; only the Python around it is gone, as under replay.

The served-model faults (``sglang_cpu.verify_faults``' shifted verify rows, ``sglang_cpu.tp_shims``' scaled aux slot
on one rank) are class-level wrappers too, so they would be peeled off with the rest: the target's instance forward
applies the ones registered in the process itself (a fault is then part of what the "graph" computes).
"""

from __future__ import annotations

import functools
import os
import types

import wrapt

from sglang_cpu.forward_wrap import served_faults

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
    """The instance forward: the class's own function, inside the served-model faults (innermost first, as their
    class wrappers were stacked). An instance attribute is not bound: each layer takes the module itself."""
    call = types.MethodType(unwrapped_forward(type(module)), module)
    if type(module).__name__ == "DeepseekV2Model":
        for fault in served_faults():
            call = functools.partial(_through, fault, call, module)
    return call


def _through(fault, inner, instance, *args, **kwargs):
    return fault(inner, instance, args, kwargs)


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
