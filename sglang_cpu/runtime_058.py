"""SGLang 0.5.8 variant of sglang_cpu.runtime (in-process tiny models on the CPU).

Differences from 0.5.23: no runtime_context or forward_context modules;
ServerArgs go through set_global_server_args_for_scheduler with
prefill/decode attention backends filled from get_attention_backends() as ModelRunner does;
initialize_dp_attention and initialize_moe_config(server_args) as ModelRunner / Scheduler call them; the
attention backend and both pools are ForwardBatch fields; transformers 4.57's DeepseekV3Config takes
rope_scaling + rope_theta (tiny_models spells it per installed transformers); EagleVerifyInput spells its arguments
retrive_*.
"""

from __future__ import annotations

from types import SimpleNamespace

from sglang_cpu import runtime as _base
from sglang_cpu.ports import process_port
from sglang_cpu.runtime import torch

_initialized = False


def init_runtime(torch_compile: bool = False, **server_args_overrides) -> None:
    global _initialized
    if _initialized:
        return
    if not torch_compile:
        torch._dynamo.config.disable = True
    from sglang.srt.distributed.parallel_state import (
        init_distributed_environment,
        initialize_model_parallel,
        model_parallel_is_initialized,
    )
    from sglang.srt.layers.dp_attention import initialize_dp_attention
    from sglang.srt.layers.moe import initialize_moe_config
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    args = dict(model_path="dummy", tp_size=1, device="cpu", attention_backend="torch_native", dtype="float32",
                disable_cuda_graph=True, skip_tokenizer_init=True)
    args.update(server_args_overrides)
    server_args = ServerArgs(**args)
    prefill, decode = server_args.get_attention_backends()
    server_args.prefill_attention_backend, server_args.decode_attention_backend = prefill, decode
    set_global_server_args_for_scheduler(server_args)
    if not torch.distributed.is_initialized():
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                     distributed_init_method=f"tcp://127.0.0.1:{process_port()}")
    if not model_parallel_is_initialized():
        initialize_model_parallel(backend="gloo")
    initialize_dp_attention(server_args=server_args,
                            model_config=SimpleNamespace(hidden_size=64, dtype=torch.float32))
    initialize_moe_config(server_args)
    _initialized = True


def build_deepseek(config, seed: int = 0):
    init_runtime()
    from sglang.srt.models.deepseek_v2 import DeepseekV3ForCausalLM

    torch.manual_seed(seed)
    from transformers import DeepseekV3ForCausalLM as HF

    hf_model = HF(config).eval()
    model = DeepseekV3ForCausalLM(config, quant_config=None).eval()
    model.load_weights((name, t.detach().clone()) for name, t in hf_model.state_dict().items())
    object.__setattr__(model, "hf_model", hf_model)
    return model


class TinyBatchRunner(_base.TinyBatchRunner):
    """0.5.23's runner with 0.5.8's plumbing: backend and pools on the ForwardBatch, no forward_context."""

    def _forward_batch(self, *args, **kwargs):
        batch = super()._forward_batch(*args, **kwargs)
        batch.attn_backend = self.attn_backend
        batch.req_to_token_pool = self.req_to_token_pool
        batch.token_to_kv_pool = self.token_to_kv_pool
        return batch

    def _verify_input(self, **fields):
        # 0.5.8 spells the tree arguments retrive_*
        return super()._verify_input(**{k.replace("retrieve_", "retrive_"): v for k, v in fields.items()})

    def _run(self, batch):
        self.last_forward_batch = batch
        self.attn_backend.init_forward_metadata(batch)
        with torch.no_grad():
            return self.model.forward(batch.input_ids, batch.positions, batch)
