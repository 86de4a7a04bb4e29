"""Test-only (never part of the probe): the one way the served-model faults wrap SGLang's ``DeepseekV2Model.forward``.

``sglang_cpu.verify_faults`` (verify aux rows shifted) and ``sglang_cpu.tp_shims`` (one rank's aux slot scaled) each
install a wrapt wrapper from ``sglang_cpu/site/sitecustomize.py``, before SGLang imports the model module and before
the probe installs, so the probe's own wrapper sits outside theirs and sees the faulty values.
"""

from __future__ import annotations

import wrapt

DEEPSEEK_MODULE = "sglang.srt.models.deepseek_v2"

_registered = {}  # marker -> wrapper, in the order registered in this process (the first is innermost)


def _patch(module, marker: str, wrapper) -> None:
    cls = module.DeepseekV2Model
    if not getattr(cls, marker, False):  # the class attribute: wrapped once even if the hook runs again
        wrapt.wrap_function_wrapper(cls, "forward", wrapper)
        setattr(cls, marker, True)


def wrap_deepseek_forward(marker: str, wrapper) -> None:
    """Wrap ``DeepseekV2Model.forward`` with the wrapt wrapper ``wrapper`` once the model module is imported (at once
    if it already is). Idempotent per ``marker``: a second call with the same marker does nothing."""
    if marker in _registered:
        return
    _registered[marker] = wrapper
    wrapt.register_post_import_hook(lambda module: _patch(module, marker, wrapper), DEEPSEEK_MODULE)


def served_faults():
    """The fault wrappers registered in this process, innermost first: the replay emulation peels every class wrapper
    off and puts these back, since they stand for what the served model computes."""
    return list(_registered.values())
