"""Test-only fault in the served model (never part of the probe): the aux states of target verify forwards shifted
by one row while prefill stays exact, a decode-path bug of the kind that took acceptance from 2.88 to 2.52.

``SGLANG_CPU_SHIFT_VERIFY_AUX=FLAGFILE``: ``apply()`` (from ``sglang_cpu/site/sitecustomize.py``, before the probe
installs, so the probe's wrapper sits outside and sees the shifted values) wraps ``DeepseekV2Model.forward``; while
FLAGFILE exists, a TARGET_VERIFY forward returns its packed aux states [T, K*H] rolled down by one row (row i holds
row i-1's states, row 0 the last row's). EXTEND and DECODE forwards are untouched. The flag file lets one server
run serve a clean phase and a faulty phase.
"""

from __future__ import annotations

import os

from sglang_cpu.forward_wrap import wrap_deepseek_forward

ENV = "SGLANG_CPU_SHIFT_VERIFY_AUX"


def shift_rows(aux):
    """A new tensor equal to ``aux`` rolled down by one row."""
    import torch

    return torch.roll(aux, shifts=1, dims=0)


def _wrapper(flag: str):
    def forward(wrapped, instance, args, kwargs):
        result = wrapped(*args, **kwargs)
        batch = args[2] if len(args) > 2 else kwargs.get("forward_batch")
        if not (isinstance(result, tuple) and len(result) == 2) or batch is None:
            return result
        if not batch.forward_mode.is_target_verify() or not os.path.exists(flag):
            return result
        hidden, aux = result
        if aux is None or getattr(aux, "dim", lambda: 0)() != 2:
            return result
        return hidden, shift_rows(aux)

    return forward


def apply(flag: str | None = None) -> None:
    """Install the hook when ``flag`` (default: $SGLANG_CPU_SHIFT_VERIFY_AUX) is set (idempotent)."""
    flag = os.environ.get(ENV, "") if flag is None else flag
    if flag:
        wrap_deepseek_forward("_sglang_cpu_verify_shifted", _wrapper(flag))
