"""Tiny random-weight DeepSeek-V3 models for CPU tests (SGLang on the CPU: sglang_cpu/shims.py).

The configs are small enough to build in well under a second and keep the real MLA
shape (q/kv LoRA ranks, split nope/rope head dims), so SGLang's DeepSeek path runs
unchanged. Weights always go through SGLang's real weight loader: checkpoint files carry
DeepSeek-V3's on-disk names (one tensor per expert, for `sglang.launch_server`), and the
in-process harness (`sglang_cpu.runtime`) passes transformers 5's `state_dict()` (fused
expert tensors), which SGLang 0.5.23 also accepts; both give identical logits.
"""

from __future__ import annotations

import json
import os

import torch
import transformers
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM


def _yarn_rope(max_position_embeddings: int) -> dict:
    # SGLang with device="cpu" rejects rope types other than yarn. transformers 5 reads one
    # rope_parameters dict; 4.x (SGLang 0.5.8's pin) reads rope_scaling plus rope_theta.
    yarn = {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": max_position_embeddings // 4,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    }
    if int(transformers.__version__.split(".")[0]) >= 5:
        return {"rope_parameters": dict(yarn, rope_theta=10000.0)}
    return {"rope_theta": 10000.0, "rope_scaling": yarn}


def deepseek_v3_config(
    num_hidden_layers: int = 6,
    first_k_dense_replace: int = 6,
    n_routed_experts: int = 4,
    hidden_size: int = 64,
    vocab_size: int = 256,
    num_attention_heads: int = 4,
    intermediate_size: int = 128,
    moe_intermediate_size: int = 32,
    num_experts_per_tok: int = 2,
    max_position_embeddings: int = 512,
    **overrides,
) -> DeepseekV3Config:
    """A tiny MLA DeepSeek-V3 config in float32.

    `first_k_dense_replace >= num_hidden_layers` makes every layer dense; a smaller
    value makes layers `first_k_dense_replace..` MoE (as DeepSeek-V3 / Kimi-K2 do).
    """
    kwargs = dict(
        architectures=["DeepseekV3ForCausalLM"],
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        moe_intermediate_size=moe_intermediate_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_attention_heads,
        # MLA: compressed q and kv, separate rope / nope head parts.
        q_lora_rank=32,
        kv_lora_rank=32,
        qk_rope_head_dim=16,
        qk_nope_head_dim=16,
        v_head_dim=16,
        n_shared_experts=1,
        n_routed_experts=n_routed_experts,
        num_experts_per_tok=min(num_experts_per_tok, n_routed_experts),
        # Grouped top-k routing with one group = plain top-k; valid for any expert count.
        n_group=1,
        topk_group=1,
        first_k_dense_replace=first_k_dense_replace,
        # Keys of DeepSeek-V3's own config.json that SGLang reads and transformers'
        # class does not define (transformers always routes this way).
        moe_layer_freq=1,
        topk_method="noaux_tc",
        scoring_func="sigmoid",
        max_position_embeddings=max_position_embeddings,
        **_yarn_rope(max_position_embeddings),
        num_nextn_predict_layers=0,
        tie_word_embeddings=False,
        pad_token_id=None,
        bos_token_id=0,
        eos_token_id=1,
        dtype="float32",
    )
    kwargs.update(overrides)
    return DeepseekV3Config(**kwargs)


def random_deepseek_v3(config: DeepseekV3Config, seed: int = 0) -> DeepseekV3ForCausalLM:
    """transformers' reference model with deterministic random weights, in eval mode."""
    torch.manual_seed(seed)
    model = DeepseekV3ForCausalLM(config).to(torch.float32).eval()
    # transformers initialises the router's score-correction bias to zeros; give it
    # small values so the loaded bias actually matters to the routing.
    with torch.no_grad():
        for name, buf in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buf.copy_(torch.randn_like(buf) * 0.01)
    return model


def write_deepseek_v3_checkpoint(path, config: DeepseekV3Config, seed: int = 0) -> str:
    """Write config.json + model.safetensors for `sglang.launch_server --model-path path
    --skip-tokenizer-init` (no tokenizer files are needed with that flag).

    save_pretrained writes the on-disk DeepSeek-V3 names (one tensor per expert,
    `mlp.experts.{i}.gate_proj.weight`), not the fused in-memory names of
    transformers 5's `state_dict()`, so the server loads it like a real checkpoint.
    """
    os.makedirs(path, exist_ok=True)
    model = random_deepseek_v3(config, seed)
    model.config.architectures = ["DeepseekV3ForCausalLM"]
    model.save_pretrained(path, safe_serialization=True, max_shard_size="10GB")
    # save_pretrained also writes generation_config.json; harmless, and SGLang reads it
    # for default sampling params when present.
    with open(os.path.join(path, "config.json")) as f:
        assert json.load(f)["architectures"] == ["DeepseekV3ForCausalLM"]
    return str(path)
