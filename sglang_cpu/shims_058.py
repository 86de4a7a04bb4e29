"""Extra CPU stand-ins for SGLang 0.5.8 (test and example support only; applied by shims.apply()).

0.5.8 imports from sgl_kernel at module level without a guard in two places (see
shared/notes/sglang-on-cpu.md, "sglang 0.5.8 on the CPU"): layers/moe/moe_runner/deep_gemm.py
(`silu_and_mul`, and `copy_to_gpu_no_ce` from sgl_kernel.elementwise) and mem_cache/memory_pool_host.py
(thirteen `transfer_*` names from sgl_kernel.kvcacheio). None of them is called on the CPU path; a
stand-in module that defines the names, each raising if it ever is called, is enough.
"""

import sys
import types

KVCACHEIO_NAMES = (
    "transfer_kv_all_layer", "transfer_kv_all_layer_direct_lf_pf", "transfer_kv_all_layer_lf_pf",
    "transfer_kv_all_layer_lf_ph", "transfer_kv_all_layer_mla", "transfer_kv_all_layer_mla_lf_pf",
    "transfer_kv_direct", "transfer_kv_per_layer", "transfer_kv_per_layer_direct_pf_lf",
    "transfer_kv_per_layer_mla", "transfer_kv_per_layer_mla_pf_lf", "transfer_kv_per_layer_pf_lf",
    "transfer_kv_per_layer_ph_lf",
)


def _unavailable(name):
    def stand_in(*args, **kwargs):
        raise RuntimeError(f"CPU stand-in: sgl_kernel.{name} is not available")

    stand_in.__name__ = name
    return stand_in


def install_sgl_kernel_stand_in():
    try:
        import sgl_kernel  # noqa: F401  (a real build wins)
        return
    except ImportError:
        pass
    root = types.ModuleType("sgl_kernel")
    root.__path__ = []
    root.__version__ = "0.0.0+cpu-stand-in"
    root.silu_and_mul = _unavailable("silu_and_mul")
    kvcacheio = types.ModuleType("sgl_kernel.kvcacheio")
    for name in KVCACHEIO_NAMES:
        setattr(kvcacheio, name, _unavailable(f"kvcacheio.{name}"))
    elementwise = types.ModuleType("sgl_kernel.elementwise")
    elementwise.copy_to_gpu_no_ce = _unavailable("elementwise.copy_to_gpu_no_ce")
    root.kvcacheio, root.elementwise = kvcacheio, elementwise
    for module in (root, kvcacheio, elementwise):
        sys.modules.setdefault(module.__name__, module)


def apply():
    install_sgl_kernel_stand_in()
