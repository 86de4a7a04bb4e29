"""Tiny random-weight targets of the non-DeepSeek EAGLE-3 families, run through SGLang's real classes in-process
(test-only; see sglang_cpu/runtime.py for the runtime and TinyBatchRunner).

`build_target(name)` returns SGLang's real model class for a family with the weights of transformers' model of the
same architecture (random, seeded) passed through SGLang's own `load_weights`; the transformers model is kept as
`model.hf_model` for comparisons (`hf_hidden_states`)."""

from __future__ import annotations

import importlib

import torch
import transformers

from sglang_cpu.runtime import init_runtime

_COMMON = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
               max_position_embeddings=256, tie_word_embeddings=False, torch_dtype="float32")
_MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)

# family -> (transformers config class, transformers model class, SGLang module, SGLang class, config fields)
FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", "llama", "LlamaForCausalLM",
              dict(head_dim=16, rms_norm_eps=1e-6)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", "qwen3", "Qwen3ForCausalLM",
              dict(head_dim=16, rms_norm_eps=1e-6)),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", "qwen3_moe", "Qwen3MoeForCausalLM",
                  dict(head_dim=16, rms_norm_eps=1e-6, decoder_sparse_step=1, norm_topk_prob=True, **_MOE)),
    "glm4_moe": ("Glm4MoeConfig", "Glm4MoeForCausalLM", "glm4_moe", "Glm4MoeForCausalLM",
                 dict(head_dim=16, rms_norm_eps=1e-6, n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2,
                      moe_intermediate_size=32, first_k_dense_replace=1, n_group=1, topk_group=1,
                      partial_rotary_factor=0.5, norm_topk_prob=True, routed_scaling_factor=1.0)),
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM", "gpt_oss", "GptOssForCausalLM",
                dict(head_dim=16, rms_norm_eps=1e-6, num_local_experts=4, num_experts_per_tok=2, sliding_window=8)),
}


def family_config(name: str, num_hidden_layers: int, **overrides):
    config_cls, _, _, sgl_cls, fields = FAMILIES[name]
    config = getattr(transformers, config_cls)(**dict(_COMMON, num_hidden_layers=num_hidden_layers,
                                                      **fields, **overrides))
    config.architectures = [sgl_cls]
    return config


def build_target(name: str, num_hidden_layers: int = 32, seed: int = 0, cls=None, **overrides):
    """SGLang's real target class of family `name` (or `cls`, e.g. an external package's subclass of it) with
    transformers' random weights (`model.hf_model`)."""
    init_runtime()
    config = family_config(name, num_hidden_layers, **overrides)
    _, hf_cls, module, sgl_cls, _ = FAMILIES[name]
    torch.manual_seed(seed)
    hf_model = getattr(transformers, hf_cls)(config).eval().float()
    cls = cls or getattr(importlib.import_module(f"sglang.srt.models.{module}"), sgl_cls)
    model = cls(config, quant_config=None).eval()
    model.load_weights(checkpoint_items(hf_model.state_dict(), config))
    object.__setattr__(model, "hf_model", hf_model)  # kept out of SGLang's submodules and state_dict
    return model


def checkpoint_items(state_dict, config):
    """transformers 5's in-memory MoE expert tensors (`experts.gate_up_proj` [E, 2I, H], `experts.down_proj`
    [E, H, I]) as the on-disk per-expert names SGLang's loaders expect (`experts.{e}.gate_proj.weight`, ...)."""
    inter = getattr(config, "moe_intermediate_size", None)
    for name, tensor in state_dict.items():
        tensor = tensor.detach().clone()
        prefix, _, last = name.rpartition(".")
        if prefix.endswith(".experts") and last in ("gate_up_proj", "down_proj"):
            for e in range(tensor.shape[0]):
                if last == "gate_up_proj":
                    w = tensor[e] if tensor.shape[1] == 2 * inter else tensor[e].t()
                    yield f"{prefix}.{e}.gate_proj.weight", w[:inter].contiguous()
                    yield f"{prefix}.{e}.up_proj.weight", w[inter:].contiguous()
                else:
                    w = tensor[e] if tensor.shape[2] == inter else tensor[e].t()
                    yield f"{prefix}.{e}.down_proj.weight", w.contiguous()
        else:
            yield name, tensor


def hf_hidden_states(model, tokens):
    """transformers' `output_hidden_states` for one request: a tuple of [T, H] (index i = residual stream entering
    layer i; the last one has the final norm applied)."""
    with torch.no_grad():
        out = model.hf_model(torch.tensor([list(tokens)]), output_hidden_states=True)
    return tuple(h[0] for h in out.hidden_states)


def clear_capture(model) -> None:
    model.capture_aux_hidden_states = False
    model.model.layers_to_capture = []


def write_family_checkpoint(path, name: str, num_hidden_layers: int, seed: int = 0, zero_lm_head: bool = False,
                            **overrides):
    """config.json + model.safetensors of a tiny random target of family `name` for `sglang.launch_server
    --skip-tokenizer-init` (save_pretrained writes the on-disk names). zero_lm_head: the target always picks token
    0 (with a zero-head draft every draft token is accepted). Returns (path, config)."""
    import os

    config = family_config(name, num_hidden_layers, **overrides)
    torch.manual_seed(seed)
    hf_model = getattr(transformers, FAMILIES[name][1])(config).eval().float()
    if zero_lm_head:
        with torch.no_grad():
            hf_model.lm_head.weight.zero_()
    os.makedirs(path, exist_ok=True)
    hf_model.config.architectures = [FAMILIES[name][3]]
    hf_model.save_pretrained(path, safe_serialization=True, max_shard_size="10GB")
    return str(path), config


def checkpoint_hidden_states(path, tokens):
    """transformers' hidden_states for one request, from a checkpoint written by write_family_checkpoint."""
    with torch.no_grad():
        model = transformers.AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()
        out = model(torch.tensor([list(tokens)]), output_hidden_states=True)
    return tuple(h[0] for h in out.hidden_states)
