"""Test-only support for ``--tp-size 2`` servers on the CPU (SGLang 0.5.23), and a test-only aux perturbation.

Never part of the probe. Applied in every SGLang process (the spawned schedulers too) by
``sglang_cpu/site/sitecustomize.py``:

- ``SGLANG_CPU_TP=1``: ``apply()`` wraps ``sglang.srt.distributed.parallel_state.init_model_parallel_group`` so
  every group is built with ``use_pynccl=False`` and ``use_custom_allreduce=False``. Otherwise
  ``GroupCoordinator`` creates a ``PyNcclCommunicator`` for each group of world size > 1 ("Expected a cuda
  device, but got: cpu"); without it every all-reduce goes through torch.distributed's gloo group.
  (The other TP setting, ``SGLANG_CPU_OMP_THREADS_BIND``, is an environment variable: ``tp_env()`` /
  ``SGLangServer`` set both for a server started with ``--tp-size N``.)
- ``SGLANG_CPU_PERTURB_AUX="RANK:SLOT:SCALE"`` (e.g. ``"1:1:1.5"``): ``apply_perturbation()`` wraps
  ``DeepseekV2Model.forward`` so that on tp rank RANK only, column block SLOT (width H) of the packed aux hidden
  states it returns is multiplied by SCALE. It exists so that a test can prove the probe names the rank whose
  aux states differ. sitecustomize registers it before the probe installs, so the probe's wrapper sits outside
  this one and sees the perturbed values. Off unless the variable is set. With ``SGLANG_CPU_PERTURB_AUX_FLAG=PATH``
  it perturbs only while PATH exists, so one server serves a control phase and then the fault.
"""

from __future__ import annotations

import inspect
import os

import wrapt

from sglang_cpu.forward_wrap import wrap_deepseek_forward

ENV_FLAG = "SGLANG_CPU_TP"
PERTURB_ENV = "SGLANG_CPU_PERTURB_AUX"
PERTURB_FLAG_ENV = "SGLANG_CPU_PERTURB_AUX_FLAG"  # a file path: perturb only while it exists (control, then fault)
THREADS_BIND_ENV = "SGLANG_CPU_OMP_THREADS_BIND"

_applied = False


def enabled() -> bool:
    return os.environ.get(ENV_FLAG, "") == "1"


def tp_env(tp_size: int) -> dict:
    """Environment a ``--tp-size tp_size`` CPU server needs: the shim flag and one core per rank ("0|1")."""
    return {ENV_FLAG: "1", THREADS_BIND_ENV: "|".join(str(rank) for rank in range(int(tp_size)))}


# --------------------------------------------------------------------------- pynccl off


def _gloo_only_group(wrapped, instance, args, kwargs):
    bound = inspect.signature(wrapped).bind(*args, **kwargs)
    bound.arguments["use_pynccl"] = False
    bound.arguments["use_custom_allreduce"] = False
    return wrapped(*bound.args, **bound.kwargs)


def _patch_parallel_state(module):
    # Callers in parallel_state look the function up as a module global at call time.
    if not getattr(module.init_model_parallel_group, "_sglang_cpu_tp_patched", False):
        wrapt.wrap_function_wrapper(module, "init_model_parallel_group", _gloo_only_group)
        module.init_model_parallel_group._sglang_cpu_tp_patched = True


def apply() -> None:
    """Install the post-import hook (idempotent). Call before SGLang is imported."""
    global _applied
    if _applied:
        return
    _applied = True
    wrapt.register_post_import_hook(_patch_parallel_state, "sglang.srt.distributed.parallel_state")


# --------------------------------------------------------------------------- aux perturbation (test-only)


def parse_perturbation(spec: str):
    """"RANK:SLOT:SCALE" -> (rank, slot, scale)."""
    rank, slot, scale = spec.split(":")
    return int(rank), int(slot), float(scale)


def _current_tp_rank() -> int:
    from sglang.srt.runtime_context import get_parallel

    return int(get_parallel().tp_rank)


def perturb_aux(aux, slot: int, scale: float, hidden_size: int):
    """A new tensor equal to ``aux`` [T, K*H] with column block ``slot`` (width H) multiplied by ``scale``."""
    out = aux.clone()
    block = slice(slot * hidden_size, (slot + 1) * hidden_size)
    out[:, block] = out[:, block] * scale
    return out


def flag_file_active(path: str):
    """active() for perturbation_wrapper: True while the file exists."""
    return lambda: os.path.exists(path)


def perturbation_wrapper(rank: int, slot: int, scale: float, current_rank=_current_tp_rank, active=None):
    """wrapt wrapper for ``DeepseekV2Model.forward``: scales aux slot ``slot`` on tp rank ``rank`` only (and only while
    ``active()`` is True, when given)."""

    def forward(wrapped, instance, args, kwargs):
        result = wrapped(*args, **kwargs)
        # With capture on, 0.5.23 returns (hidden [T, H], packed aux [T, K*H]); anything else passes through.
        if not (isinstance(result, tuple) and len(result) == 2) or current_rank() != rank:
            return result
        if active is not None and not active():
            return result
        hidden, aux = result
        if aux is None or getattr(aux, "dim", lambda: 0)() != 2:
            return result
        return hidden, perturb_aux(aux, slot, scale, int(hidden.shape[-1]))

    return forward


def apply_perturbation(spec: str | None = None) -> None:
    """Install the aux perturbation hook when ``spec`` (default: $SGLANG_CPU_PERTURB_AUX) is set (idempotent)."""
    spec = os.environ.get(PERTURB_ENV, "") if spec is None else spec
    flag = os.environ.get(PERTURB_FLAG_ENV, "")
    if spec:
        wrap_deepseek_forward("_sglang_cpu_aux_perturbed", perturbation_wrapper(
            *parse_perturbation(spec), active=flag_file_active(flag) if flag else None))
