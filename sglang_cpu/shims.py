"""Stand-ins that let SGLang run on the CPU (0.5.23; 0.5.8 also gets shims_058). Tests and the example only."""

import sys
import types

import wrapt

_applied = False


def _install_vllm_rotary_stand_in():
    # The rotary module imports vllm._custom_ops.rotary_embedding at module level on a
    # non-CUDA, non-CPU-engine machine; the native path runs and never calls it.
    try:
        import vllm._custom_ops  # noqa: F401
        return
    except ImportError:
        pass
    vllm = types.ModuleType("vllm")
    vllm.__path__ = []
    custom_ops = types.ModuleType("vllm._custom_ops")

    def rotary_embedding(*args, **kwargs):
        raise RuntimeError("CPU stand-in: vllm rotary_embedding is not available")

    custom_ops.rotary_embedding = rotary_embedding
    vllm._custom_ops = custom_ops
    sys.modules.setdefault("vllm", vllm)
    sys.modules.setdefault("vllm._custom_ops", custom_ops)
    # SGLang 0.5.7's activation and layernorm modules re-import their classes from vllm at their end on such
    # a machine; hand back SGLang's own classes (defined above that import), so the import changes nothing.
    for name in ("vllm.model_executor", "vllm.model_executor.layers"):
        package = types.ModuleType(name)
        package.__path__ = []
        sys.modules.setdefault(name, package)
    for leaf in ("activation", "layernorm"):
        sys.modules.setdefault(f"vllm.model_executor.layers.{leaf}", _sglang_own_classes(leaf))


def _sglang_own_classes(leaf):
    module = types.ModuleType(f"vllm.model_executor.layers.{leaf}")
    home = f"sglang.srt.layers.{leaf}"

    def sglang_own(name):
        if name[:1].isupper() and home in sys.modules and hasattr(sys.modules[home], name):
            return getattr(sys.modules[home], name)
        raise AttributeError(name)

    module.__getattr__ = sglang_own
    return module


def _route_torch_native_to_absorbed_mla(module):
    # torch_native has no DeepSeek handler; the Triton fallback picks MHA for fresh prefills,
    # which torch_native cannot run against the compressed MLA cache.
    if hasattr(module, "AttentionBackendRegistry") and hasattr(module, "_dispatch_mla_subtype"):
        module.AttentionBackendRegistry.register("torch_native", module._dispatch_mla_subtype)


def _skip_kv_copy_warmup(module):
    # The draft's MHA pool warms up a Triton copy kernel that needs a GPU driver.
    pool = getattr(module, "MHATokenToKVPool", None)
    if pool is not None and hasattr(pool, "_init_kv_copy_and_warmup"):
        pool._init_kv_copy_and_warmup = lambda self, *a, **k: None


def no_cuda_synchronize_without_cuda(_module=None):
    # Kimi's MLA draft (kimi_k25_eagle3 set_embed / set_embed_and_head, 0.5.23) and 0.5.8's Llama set_embed call
    # torch.cuda.synchronize() unconditionally; with no CUDA device there is nothing to wait for.
    import torch

    if not torch.cuda.is_available():
        torch.cuda.synchronize = lambda device=None: None


def installed_sglang() -> str:
    try:
        from importlib.metadata import version

        return version("sglang")
    except Exception:
        return ""


def apply():
    global _applied
    if _applied:
        return
    _applied = True
    _install_vllm_rotary_stand_in()
    if installed_sglang().startswith(("0.5.7", "0.5.8")):  # 0.5.7: the outside-range test's release
        from sglang_cpu import shims_058

        shims_058.apply()
    # The DeepSeek attention registry's home: deepseek_common from 0.5.8, deepseek_v2 itself in 0.5.7.
    for home in ("sglang.srt.models.deepseek_common.attention_backend_handler", "sglang.srt.models.deepseek_v2"):
        wrapt.register_post_import_hook(_route_torch_native_to_absorbed_mla, home)
    wrapt.register_post_import_hook(_skip_kv_copy_warmup, "sglang.srt.mem_cache.memory_pool")
    wrapt.register_post_import_hook(no_cuda_synchronize_without_cuda, "sglang.srt.models.kimi_k25_eagle3")
