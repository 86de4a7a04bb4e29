"""A tiny Kimi-K2.5 MLA EAGLE-3 draft (SGLang's ``Eagle3DeepseekV2ForCausalLM``, kimi_k25_eagle3.py, 0.5.12+), built
in-process on the CPU from a config and a checkpoint with the names the ``kimi-k2.5-eagle3-mla`` checkpoints use.

Test support (never part of the probe). The checkpoint names and shapes follow the draft's layout (one MLA decoder
layer whose fused QKV-down projection takes [embedding, hidden] of width 2H; fc over the aux states; its own
lm_head over ``draft_vocab_size``), written out here from the config, not read off SGLang's parameters:
``layers.0.self_attn.{q_a_proj, kv_a_proj_with_mqa, q_a_layernorm, q_b_proj, kv_a_layernorm, kv_b_proj, o_proj}``,
``layers.0.mlp.{gate_proj, up_proj, down_proj}``, ``layers.0.{input_layernorm, hidden_norm,
post_attention_layernorm}``, ``fc``, ``norm``, ``embed_tokens``, ``lm_head`` (all ``.weight``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch

KIMI_DRAFT = "Eagle3DeepseekV2ForCausalLM"


def kimi_draft_config(*, eagle_ids: Sequence[int] | None = None, top_level_ids: Sequence[int] | None = None,
                      draft_vocab_size: int | None = 64, vocab_size: int = 256, hidden_size: int = 64, **overrides):
    """A transformers DeepseekV3Config for a one-layer Kimi MLA draft: ids in ``eagle_config`` and/or at the top
    level, as a checkpoint's config.json may carry them."""
    from sglang_cpu.tiny_models import deepseek_v3_config

    extra = {"architectures": [KIMI_DRAFT], "draft_vocab_size": draft_vocab_size, "target_hidden_size": hidden_size}
    if eagle_ids is not None:
        extra["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": list(eagle_ids), "use_aux_hidden_state": True}
    if top_level_ids is not None:
        extra["eagle_aux_hidden_state_layer_ids"] = list(top_level_ids)
    extra.update(overrides)
    return deepseek_v3_config(num_hidden_layers=1, first_k_dense_replace=1, vocab_size=vocab_size,
                              hidden_size=hidden_size, **extra)


def kimi_draft_state(config, num_aux: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random weights under the checkpoint's names, for ``num_aux`` aux states of width target_hidden_size."""
    gen = torch.Generator().manual_seed(seed)
    h, heads = config.hidden_size, config.num_attention_heads
    rope, nope, v = config.qk_rope_head_dim, config.qk_nope_head_dim, config.v_head_dim
    q_lora, kv_lora, inter = config.q_lora_rank, config.kv_lora_rank, config.intermediate_size
    vocab = config.draft_vocab_size or config.vocab_size

    def rnd(*shape):
        return torch.randn(*shape, generator=gen) * 0.02

    attn = "layers.0.self_attn."
    return {
        attn + "q_a_proj.weight": rnd(q_lora, 2 * h),
        attn + "kv_a_proj_with_mqa.weight": rnd(kv_lora + rope, 2 * h),
        attn + "q_a_layernorm.weight": torch.ones(q_lora),
        attn + "q_b_proj.weight": rnd(heads * (nope + rope), q_lora),
        attn + "kv_a_layernorm.weight": torch.ones(kv_lora),
        attn + "kv_b_proj.weight": rnd(heads * (nope + v), kv_lora),
        attn + "o_proj.weight": rnd(h, heads * v),
        "layers.0.mlp.gate_proj.weight": rnd(inter, h),
        "layers.0.mlp.up_proj.weight": rnd(inter, h),
        "layers.0.mlp.down_proj.weight": rnd(h, inter),
        "layers.0.input_layernorm.weight": torch.ones(h),
        "layers.0.hidden_norm.weight": torch.ones(h),
        "layers.0.post_attention_layernorm.weight": torch.ones(h),
        "fc.weight": rnd(h, num_aux * (config.target_hidden_size or h)),
        "norm.weight": torch.ones(h),
        "embed_tokens.weight": rnd(config.vocab_size, h),
        "lm_head.weight": rnd(vocab, h),
    }


def build_kimi_draft(config, state: dict[str, torch.Tensor]):
    """SGLang's real Eagle3DeepseekV2ForCausalLM for ``config``, its weights passed through its own load_weights
    (as the model loader does: (name, tensor) pairs)."""
    from sglang_cpu.runtime import init_runtime

    init_runtime()
    from sglang.srt.models.kimi_k25_eagle3 import Eagle3DeepseekV2ForCausalLM

    model = Eagle3DeepseekV2ForCausalLM(config, quant_config=None).eval()
    model.load_weights(list(state.items()))
    return model


def write_kimi_draft_checkpoint(path, config, state: dict[str, torch.Tensor]) -> str:
    """config.json + model.safetensors of a Kimi MLA draft, as ``--speculative-draft-model-path`` takes it."""
    from safetensors.torch import save_file

    os.makedirs(path, exist_ok=True)
    config.save_pretrained(path)
    save_file({k: v.contiguous().to(torch.float32) for k, v in state.items()}, os.path.join(path, "model.safetensors"))
    return str(path)


def build_kimi_case(root, name: str, *, eagle_ids=None, top_level_ids=None, target_layers: int = 8) -> dict:
    """A served pair under ``root/name``: a tiny random all-dense DeepSeek-V3 target (``target_layers`` MLA layers,
    hidden 64, vocab 256) and a Kimi MLA draft over the whole vocabulary whose ids sit in ``eagle_config`` and/or at
    the top level of its config.json. The draft ships the target's embedding (trained with it frozen), so SGLang's
    swap changes nothing. Returns dict(target, draft, args, target_config, draft_config) like draft_models.build_case.
    """
    from sglang_cpu.draft_models import spec_server_args, spec_target_config, write_target_checkpoint
    from sglang_cpu.tiny_models import random_deepseek_v3

    base = os.path.join(str(root), name)
    tcfg = spec_target_config(num_hidden_layers=target_layers, first_k_dense_replace=target_layers)
    target = write_target_checkpoint(os.path.join(base, "target"), tcfg, seed=0)
    config = kimi_draft_config(eagle_ids=eagle_ids, top_level_ids=top_level_ids,
                               draft_vocab_size=int(tcfg.vocab_size), vocab_size=int(tcfg.vocab_size))
    ids = eagle_ids if eagle_ids is not None else top_level_ids
    state = kimi_draft_state(config, len(ids) if ids is not None else 3)
    state["embed_tokens.weight"] = random_deepseek_v3(tcfg, 0).model.embed_tokens.weight.detach().clone()
    draft = write_kimi_draft_checkpoint(os.path.join(base, "draft"), config, state)
    return dict(target=target, draft=draft, args=spec_server_args(draft), target_config=tcfg, draft_config=config)
