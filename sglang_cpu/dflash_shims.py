"""Test-only shims that let SGLang 0.5.23 serve a DFlash (block-diffusion) draft on the CPU.

Applied with the EAGLE-3 ones (``sglang_cpu.spec_shims.apply``, so in every SGLang process through
``sglang_cpu/site/sitecustomize.py`` when ``SGLANG_CPU_SPEC=1``); launched with the same CPU args as an EAGLE-3
server plus ``--speculative-algorithm DFLASH --speculative-num-draft-tokens BLOCK`` (``sglang_cpu.dflash_models``).
Each shim only changes what SGLang refuses or fails at on the CPU, so EAGLE-3 servers run as before:

1. ``arg_groups.speculative_hook._handle_dflash`` refuses DFLASH unless the device is CUDA / NPU / XPU or an
   out-of-tree platform says it supports it: for that call only, the CPU platform is seen through
   ``CpuDflashPlatform``, which answers as an out-of-tree platform supporting DFLASH with the draft backends of
   ``DRAFT_ATTENTION_BACKEND_CHOICES`` (default ``torch_native``).
2. ``DRAFT_ATTENTION_BACKEND_CHOICES`` gets ``torch_native`` (through SGLang's own
   ``add_draft_attention_backend_choices``): both the argument resolution and the DFlash worker
   (``draft_worker_common.resolve_draft_worker_attention_backend``) otherwise replace it with flashinfer. Only the
   DFlash family reads the list (EAGLE-3 drafts take the server's backend).
3. ``Tensor.record_stream`` on a CPU tensor is a no-op: the DFlash worker marks ``seq_lens`` for the device's
   current stream, and CPU tensors have no streams (torch raises); CPU work is synchronous, nothing to order.
4. ``ModelRunner._extend_forward_kwargs`` casts ``input_embeds`` (the DFlash block's embeddings, from the target's
   embedding) to bfloat16, as SGLang's GPU models run; a ``--dtype float32`` CPU server's draft weights are float32
   and the matmul refuses the mix. Embeddings of another dtype keep it.
(``cache_locs.assign_extend_cache_locs_func``, None off GPU and called for the verify window's slots, is already
filled in by ``spec_shims`` item 5.)
"""

from __future__ import annotations

import sys

import wrapt

TORCH_NATIVE = "torch_native"

_applied = False


# --------------------------------------------------------------------------- 1. the platform gate


class CpuDflashPlatform:
    """The CPU platform as ``_handle_dflash`` sees it: an out-of-tree platform that supports DFLASH with the draft
    attention backends in ``choices`` (SGLang's ``DRAFT_ATTENTION_BACKEND_CHOICES``), ``torch_native`` by default;
    everything else is the real platform's."""

    def __init__(self, real, choices):
        self._real = real
        self._choices = choices

    def is_out_of_tree(self) -> bool:
        return True

    def supports_speculative_algorithm(self, algorithm: str) -> bool:
        return algorithm == "DFLASH"

    def supports_speculative_draft_attention_backend(self, algorithm: str, backend: str) -> bool:
        return algorithm == "DFLASH" and backend in self._choices

    def get_default_speculative_draft_attention_backend(self, algorithm: str) -> str:
        return TORCH_NATIVE

    def __getattr__(self, name):
        return getattr(self._real, name)


def is_cpu_platform(platform) -> bool:
    return getattr(platform, "device_type", None) == "cpu" and not platform.is_out_of_tree()


def _handle_dflash(wrapped, instance, args, kwargs):
    # SGLang refuses DFLASH on an in-tree CPU platform (its check names CUDA / NPU / XPU only).
    module = sys.modules[wrapped.__module__]  # arg_groups.speculative_hook
    real = module.current_platform
    if not is_cpu_platform(real):
        return wrapped(*args, **kwargs)
    module.current_platform = CpuDflashPlatform(real, module.DRAFT_ATTENTION_BACKEND_CHOICES)
    try:
        return wrapped(*args, **kwargs)
    finally:
        module.current_platform = real


def _patch_speculative_hook(module):
    if not getattr(module, "_sglang_cpu_dflash_patched", False):
        wrapt.wrap_function_wrapper(module, "_handle_dflash", _handle_dflash)
        module._sglang_cpu_dflash_patched = True


# --------------------------------------------------------------------------- 2. the draft attention backend


def add_torch_native(choices: list, add=None) -> None:
    """``torch_native`` into SGLang's list of draft attention backends, once (``add``: its own extender)."""
    if TORCH_NATIVE not in choices:
        (add or choices.extend)([TORCH_NATIVE])


def _patch_choices(module):
    # The DFlash draft worker falls back to flashinfer for a backend outside this list.
    add = getattr(module, "add_draft_attention_backend_choices", None)
    add_torch_native(module.DRAFT_ATTENTION_BACKEND_CHOICES, add)


# --------------------------------------------------------------------------- 3. record_stream


def _record_stream(wrapped, instance, args, kwargs):
    # CPU tensors have no streams (torch raises "unknown parameter type"); CPU work is synchronous.
    if instance is not None and instance.device.type == "cpu":
        return None
    return wrapped(*args, **kwargs)


def _patch_record_stream(_module):
    import torch

    if not getattr(torch.Tensor, "_sglang_cpu_dflash_patched", False):
        wrapt.wrap_function_wrapper(torch.Tensor, "record_stream", _record_stream)
        torch.Tensor._sglang_cpu_dflash_patched = True


# --------------------------------------------------------------------------- 4. input_embeds dtype


def embeds_in_own_dtype(kwargs: dict, original, replaced: bool = False) -> dict:
    """The forward kwargs with ``input_embeds`` in ``original``'s dtype again: ``original`` itself, or (when SGLang
    scattered ``replace_embeds`` into its cast copy, ``replaced``) that copy cast back."""
    embeds = kwargs.get("input_embeds")
    if original is None or embeds is None or embeds.dtype == original.dtype:
        return kwargs
    kwargs["input_embeds"] = embeds.to(original.dtype) if replaced else original
    return kwargs


def _extend_forward_kwargs(wrapped, instance, args, kwargs):
    # SGLang casts input_embeds to bfloat16 (its GPU dtype); a float32 CPU server's draft weights are float32.
    forward_batch = kwargs.get("forward_batch", args[0] if args else None)
    out = wrapped(*args, **kwargs)
    original = getattr(forward_batch, "input_embeds", None)
    if original is None or original.device.type != "cpu":
        return out
    return embeds_in_own_dtype(out, original, replaced=getattr(forward_batch, "replace_embeds", None) is not None)


def _patch_model_runner(module):
    cls = module.ModelRunner
    if not getattr(cls, "_sglang_cpu_dflash_patched", False):
        wrapt.wrap_function_wrapper(cls, "_extend_forward_kwargs", _extend_forward_kwargs)
        cls._sglang_cpu_dflash_patched = True


def apply() -> None:
    """Install the post-import hooks (idempotent). Call before SGLang is imported."""
    global _applied
    if _applied:
        return
    _applied = True
    wrapt.register_post_import_hook(_patch_speculative_hook, "sglang.srt.arg_groups.speculative_hook")
    wrapt.register_post_import_hook(_patch_choices, "sglang.srt.arg_groups.choices")
    wrapt.register_post_import_hook(_patch_record_stream, "sglang.srt.speculative.dflash_worker_v2")
    wrapt.register_post_import_hook(_patch_model_runner, "sglang.srt.model_executor.model_runner")
