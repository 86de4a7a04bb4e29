"""Tiny random-weight DFlash (block-diffusion) drafts for SGLang 0.5.23's ``--speculative-algorithm DFLASH``.

Test-only support (never part of the probe). A checkpoint here is what ``sglang/srt/models/dflash.py``'s
``DFlashDraftModel`` loads: config.json (a Qwen3-style text config, ``architectures = ["DFlashDraftModel"]``, the
DFlash fields in ``dflash_config``, read by ``dflash_utils.parse_dflash_draft_config``) and model.safetensors with
``layers.{i}.self_attn.{q,k,v,o}_proj`` / ``q_norm`` / ``k_norm``, ``layers.{i}.mlp.{gate,up,down}_proj``, the two
layer norms, ``norm``, ``fc`` (the concatenated target features -> hidden) and ``hidden_norm``. The draft has no
embedding or lm_head of its own: SGLang's DFlash worker runs it on the target's.

``mask_token_id`` is written because the CPU servers run ``--skip-tokenizer-init``: without it the worker looks the
mask token up in the tokenizer (``DFlashWorkerV2._resolve_mask_token_id``) and refuses to start. The seed vocabulary
(sglang_cpu.seed) has no data token below 2, so the default 0 (its BOS) never collides with a real token.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence

import torch

DEFAULT_MASK_TOKEN_ID = 0


def _get(config, key, default=None):
    return config.get(key, default) if isinstance(config, Mapping) else getattr(config, key, default)


def dflash_draft_config(target_config, *, num_layers: int = 2, block_size: int = 4,
                        target_layer_ids: Sequence[int] | None = None, mask_token_id: int = DEFAULT_MASK_TOKEN_ID,
                        num_attention_heads: int = 4, intermediate_size: int = 128, **overrides) -> dict:
    """config.json contents of a ``num_layers``-layer DFlash draft of ``target_config`` (a config object or dict).

    ``target_layer_ids`` (HF "output of layer k" ids, which SGLang captures at k + 1) go to
    ``dflash_config.target_layer_ids``; None leaves the key out, so SGLang picks its own
    (``dflash_utils.build_target_layer_ids``). ``dflash_config.num_target_layers`` is the target's layer count: the
    draft's own constructor sizes ``fc`` from it when no ids are given."""
    hidden = int(_get(target_config, "hidden_size"))
    dflash = {"mask_token_id": int(mask_token_id), "num_target_layers": int(_get(target_config, "num_hidden_layers"))}
    if target_layer_ids is not None:
        dflash["target_layer_ids"] = [int(i) for i in target_layer_ids]
    cfg = dict(
        architectures=["DFlashDraftModel"],
        model_type="qwen3",
        vocab_size=int(_get(target_config, "vocab_size")),
        hidden_size=hidden,
        intermediate_size=int(intermediate_size),
        num_hidden_layers=int(num_layers),
        num_attention_heads=int(num_attention_heads),
        num_key_value_heads=int(num_attention_heads),
        head_dim=hidden // int(num_attention_heads),
        hidden_act="silu",
        max_position_embeddings=int(_get(target_config, "max_position_embeddings", 512)),
        rms_norm_eps=float(_get(target_config, "rms_norm_eps", 1e-6)),
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=1,
        torch_dtype="float32",
        block_size=int(block_size),
        dflash_config=dflash,
    )
    cfg.update(overrides)
    return cfg


def num_context_features(config: dict) -> int:
    """How many target feature tensors ``fc`` concatenates: len(target_layer_ids), else one per draft layer (the
    length of SGLang's default selection)."""
    ids = (config.get("dflash_config") or {}).get("target_layer_ids")
    return len(ids) if ids else int(config["num_hidden_layers"])


def random_dflash_draft_state(config: dict, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random weights with the on-disk names ``DFlashDraftModel.load_weights`` consumes (norm weights 1)."""
    g = torch.Generator().manual_seed(seed)
    h, inter = int(config["hidden_size"]), int(config["intermediate_size"])
    heads, kv_heads, hd = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]

    def rnd(*shape, std=0.02):
        return torch.randn(*shape, generator=g) * std

    sd = {"fc.weight": rnd(h, num_context_features(config) * h), "hidden_norm.weight": torch.ones(h),
          "norm.weight": torch.ones(h)}
    for i in range(int(config["num_hidden_layers"])):
        p = f"layers.{i}."
        sd.update({
            p + "input_layernorm.weight": torch.ones(h),
            p + "post_attention_layernorm.weight": torch.ones(h),
            p + "self_attn.q_proj.weight": rnd(heads * hd, h),
            p + "self_attn.k_proj.weight": rnd(kv_heads * hd, h),
            p + "self_attn.v_proj.weight": rnd(kv_heads * hd, h),
            p + "self_attn.o_proj.weight": rnd(h, heads * hd),
            p + "self_attn.q_norm.weight": torch.ones(hd),
            p + "self_attn.k_norm.weight": torch.ones(hd),
            p + "mlp.gate_proj.weight": rnd(inter, h),
            p + "mlp.up_proj.weight": rnd(inter, h),
            p + "mlp.down_proj.weight": rnd(h, inter),
        })
    return sd


def write_random_dflash_draft(dest, target_path, *, seed: int = 0, **config_kw) -> str:
    """config.json + model.safetensors of a random DFlash draft for the target checkpoint at ``target_path``;
    ``config_kw`` go to ``dflash_draft_config`` (num_layers, block_size, target_layer_ids, mask_token_id, ...)."""
    from safetensors.torch import save_file

    with open(os.path.join(target_path, "config.json")) as f:
        config = dflash_draft_config(json.load(f), **config_kw)
    os.makedirs(dest, exist_ok=True)
    with open(os.path.join(dest, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    state = random_dflash_draft_state(config, seed)
    save_file({k: v.contiguous().to(torch.float32) for k, v in state.items()}, os.path.join(dest, "model.safetensors"))
    return str(dest)


def dflash_server_args(draft_path, block_size: int = 4) -> list[str]:
    """Extra launch_server args (on top of SGLangServer's CPU base args) for a DFlash draft: the block size is the
    verify width (``--speculative-num-draft-tokens``; SGLang forces num_steps and topk to 1 for DFLASH)."""
    return [
        "--speculative-algorithm", "DFLASH",
        "--speculative-draft-model-path", str(draft_path),
        "--speculative-num-draft-tokens", str(int(block_size)),
        "--decode-log-interval", "1",
    ]
