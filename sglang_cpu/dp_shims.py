"""Test-only support for DP attention on the CPU (``--enable-dp-attention --dp-size 2 --tp-size 2``, SGLang 0.5.23).

Never part of the probe. Applied in every SGLang process by ``sglang_cpu/site/sitecustomize.py`` when
``SGLANG_CPU_DP_ATTENTION=1`` (``dp_env()``; combine with the TP settings of ``sglang_cpu.tp_shims``). SGLang's CPU
branches are keyed on ``_is_cpu`` module flags that are True only with ``SGLANG_USE_CPU_ENGINE=1``, which needs a CPU
build of sgl_kernel that PyPI does not serve; a plain CPU server takes the CUDA branches, and DP attention reaches
four of them that cannot run here. Each change below routes one of them to code SGLang already has:

- ``forward_batch_info._is_cpu = True``: DP attention pads every batch to the DP group's size
  (``ForwardBatch.prepare_mlp_sync_batch``); with the flag False the padding asks the attention backend for its
  CUDA-graph fill value (``NotImplementedError`` from ``get_cuda_graph_seq_len_fill_value``) and pins host memory
  ("Found no NVIDIA driver"). With it True both take their CPU branches (no pinning, the CPU-graph fill value).
- ``TorchNativeAttnBackend.get_cpu_graph_seq_len_fill_value`` returning 1: the CPU fill value the padding then asks
  for; torch_native has none (the CPU engine's backend returns 1: a padded request of length 1 is harmless).
- ``parallel_state._is_cpu = True``: DP attention gathers every rank's tokens with
  ``GroupCoordinator.all_gather_into_tensor``, whose non-CPU branch calls the custom op
  ``sglang::reg_all_gather_into_tensor``, which has no CPU kernel; the CPU branch uses torch.distributed (gloo).
  The flag also selects the CPU branch of ``reduce_scatter_tensor`` and skips ``torch.cuda.empty_cache`` at
  shutdown, both correct on a CPU.
- ``dp_attention.memcpy_func = dp_attention.memcpy_cpu``: the gather's scatter-back copies rows with a Triton kernel
  (no driver, outside the interpreter that the speculative shims switch on) unless the flag was True at import;
  ``memcpy_cpu`` is SGLang's own row copy.

Tokens equal those of the plain server (tests/e2e/test_dp_attention_server.py).
"""

from __future__ import annotations

import os

import wrapt

ENV_FLAG = "SGLANG_CPU_DP_ATTENTION"
CPU_GRAPH_SEQ_LEN_FILL_VALUE = 1

_applied = False


def enabled() -> bool:
    return os.environ.get(ENV_FLAG, "") == "1"


def dp_env() -> dict:
    return {ENV_FLAG: "1"}


def _forward_batch_info(module):
    module._is_cpu = True


def _torch_native(module):
    cls = module.TorchNativeAttnBackend
    if "get_cpu_graph_seq_len_fill_value" not in vars(cls):
        cls.get_cpu_graph_seq_len_fill_value = lambda self: CPU_GRAPH_SEQ_LEN_FILL_VALUE


def _parallel_state(module):
    module._is_cpu = True


def _dp_attention(module):
    module.memcpy_func = module.memcpy_cpu


HOOKS = (
    ("sglang.srt.model_executor.forward_batch_info", _forward_batch_info),
    ("sglang.srt.layers.attention.torch_native_backend", _torch_native),
    ("sglang.srt.distributed.parallel_state", _parallel_state),
    ("sglang.srt.layers.dp_attention", _dp_attention),
)


def apply() -> None:
    """Install the post-import hooks (idempotent; at once for modules already imported)."""
    global _applied
    if _applied:
        return
    _applied = True
    for module, hook in HOOKS:
        wrapt.register_post_import_hook(hook, module)
