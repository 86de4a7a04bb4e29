"""Extra CPU stand-ins for SGLang 0.5.8 (test and example support only; applied by shims.apply()).

0.5.8 imports from sgl_kernel at module level without a guard in two places: layers/moe/moe_runner/deep_gemm.py
(`silu_and_mul`, and `copy_to_gpu_no_ce` from sgl_kernel.elementwise) and mem_cache/memory_pool_host.py
(thirteen `transfer_*` names from sgl_kernel.kvcacheio). None of them is called on the CPU path; a
stand-in module that defines the names, each raising if it ever is called, is enough.
A speculative server also needs torch.cuda.synchronize() to return on a machine without CUDA (the
draft's set_embed calls it) and, with SGLANG_ENABLE_SPEC_V2=1, Tensor.record_stream to accept CPU tensors.
With SGLANG_CPU_KERNEL_WARMUP=1 a server also runs 0.5.8's CUDA-branch kernel warm-up (ModelRunner._dummy_run,
whose default-layers capture call is what makes CUDA graphs capture other layers than eager mode).
"""

import os
import sys
import types

import wrapt

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


def make_stream_calls_no_ops_without_cuda():
    # 0.5.8's LlamaForCausalLM.set_embed (the EAGLE draft sharing the target's embedding) calls
    # torch.cuda.synchronize() unconditionally; with no CUDA device there is nothing to wait for.
    import torch

    from sglang_cpu.shims import no_cuda_synchronize_without_cuda

    if torch.cuda.is_available():
        return
    no_cuda_synchronize_without_cuda()
    # The spec-v2 worker (SGLANG_ENABLE_SPEC_V2) calls tensor.record_stream(current stream) unguarded;
    # a CPU tensor has no caching allocator to tell, and torch rejects torch.cpu.Stream there.
    record_stream = torch.Tensor.record_stream

    def record_stream_unless_cpu(self, stream):
        if self.device.type == "cpu":
            return None
        return record_stream(self, stream)

    torch.Tensor.record_stream = record_stream_unless_cpu


# Environment that makes a CPU server run 0.5.8's CUDA-branch kernel warm-up (see run_kernel_warmup_on_cpu).
KERNEL_WARMUP_FLAG = "SGLANG_CPU_KERNEL_WARMUP"
KERNEL_WARMUP_ENV = {KERNEL_WARMUP_FLAG: "1"}


def _warm_up_before_device_graphs(wrapped, instance, args, kwargs):
    # On CUDA, 0.5.8's ModelRunner.initialize runs kernel_warmup() (FlashInfer autotune: one
    # ModelRunner._dummy_run over the whole request pool) right before init_device_graphs(), and only
    # afterwards sets the configured capture ids. Its CPU branch skips the warm-up; this runs SGLang's
    # own _dummy_run at that same point, so the setter call with no ids comes from SGLang's code.
    import torch

    if instance.device == "cpu" and not instance.is_draft_worker:
        with torch.inference_mode():
            instance._dummy_run(batch_size=instance.req_to_token_pool.size)
    return wrapped(*args, **kwargs)


def _graph_fill_value(module):
    # _dummy_run pads with the backend's CUDA-graph fill value; torch_native has no graph support and
    # none, so give it the 1 that SGLang's graph-capable backends use.
    cls = module.TorchNativeAttnBackend
    if "get_cuda_graph_seq_len_fill_value" not in cls.__dict__:
        cls.get_cuda_graph_seq_len_fill_value = lambda self: 1


def run_kernel_warmup_on_cpu():
    wrapt.register_post_import_hook(
        lambda module: wrapt.wrap_function_wrapper(module.ModelRunner, "init_device_graphs",
                                                   _warm_up_before_device_graphs),
        "sglang.srt.model_executor.model_runner")
    wrapt.register_post_import_hook(_graph_fill_value, "sglang.srt.layers.attention.torch_native_backend")


def apply():
    install_sgl_kernel_stand_in()
    make_stream_calls_no_ops_without_cuda()
    if os.environ.get(KERNEL_WARMUP_FLAG, "") == "1":
        run_kernel_warmup_on_cpu()
