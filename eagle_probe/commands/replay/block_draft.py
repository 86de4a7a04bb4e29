"""A DFlash (block-diffusion) draft as SGLang 0.5.23 serves it, in plain torch (sglang/srt/models/dflash.py,
sglang/srt/speculative/dflash_worker_v2.py), for `replay` to run on the probe's prefill dumps.

The forward, per request with n committed tokens and the verified bonus token b:
- context: each committed token j becomes ``c_j = hidden_norm(fc(concat(target hidden states of j at the wiring's
  HF indices)))``; every draft layer attends to its K/V: ``k_norm(k_proj(c_j))`` per head, roped at position j, and
  ``v_proj(c_j)`` (no input layernorm: SGLang's kv_proj_only writes them to the draft KV cache);
- block: ``[b, mask x (block_size - 1)]`` (embeddings from the TARGET's embed_tokens; mask =
  ``dflash_config.mask_token_id``) at positions n..n+block-1 through Qwen3-style pre-norm layers (q/k RMSNorm per
  head, rope) whose attention is not causal: every block token sees all n context entries and the whole block;
- final ``norm``, the TARGET's lm_head, argmax at block positions 1..block-1: the drafted tokens n+1..n+block-1.

What this forward does not implement (SGLang's variants: Gemma norms, attention sinks, sliding or causal draft
layers, grouped convolutions, candidate selectors, Domino projectors, a draft embedding of its own, logit scaling)
is refused by ``parse_block_draft_config`` with the key that asks for it. Weights are read in float32.
"""

import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ...analysis import dflash_layers
from .checkpoints import load_all, model_dir, read_json
from .spec import ReplayInputError, RopeSpec, _get, _rope, attention_shape

# Config keys (top level or dflash_config) that switch on a variant this forward does not implement, with the
# value that means "off".
_UNSUPPORTED = {
    "use_gemma_norm": False, "attention_sink_bias": False, "conv_kernel_size": 0, "conv_group_size": 0,
    "selector_rank": 0, "selector_top_k": 0, "output_multiplier": 1.0, "final_logit_softcapping": None,
    "shift_label": False,
}


def _is_off(value, off) -> bool:
    return value is None or value == off or (not value and off in (None, 0, False))


@dataclass(frozen=True)
class BlockDraftSpec:
    """The draft's architecture as SGLang reads it from config.json."""

    file: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    block_size: int
    mask_token_id: int
    config: dflash_layers.BlockDraftConfig  # where its target_layer_ids come from (None: SGLang's default)
    rope: RopeSpec
    attention_bias: bool = False


def _unsupported(data: dict, file: str) -> None:
    sections = {"": data, "dflash_config.": data.get("dflash_config") or {}}
    for prefix, section in sections.items():
        for key, off in _UNSUPPORTED.items():
            value = section.get(key, off)
            if not _is_off(value, off):
                raise ReplayInputError(
                    f"draft config {file}: '{prefix}{key}' is {value!r}: replay's DFlash forward implements the plain "
                    f"Qwen3-style draft only (no {key}); it cannot judge this draft")
    if any(str(t) != "full_attention" for t in data.get("layer_types") or ()):
        raise ReplayInputError(f"draft config {file}: layer_types {data['layer_types']}: replay's DFlash forward "
                               f"implements full (non-causal) attention layers only")
    if data.get("is_causal"):
        raise ReplayInputError(f"draft config {file}: is_causal is true: replay's DFlash forward implements SGLang's "
                               f"default non-causal block attention only")
    projector = (data.get("dflash_config") or {}).get("projector_type")
    if projector not in (None, "", "linear", "default"):
        raise ReplayInputError(f"draft config {file}: dflash_config.projector_type {projector!r} is not implemented "
                               f"by replay")
    if "dspark_config" in data or "dspark_target_layer_ids" in data:
        raise ReplayInputError(f"draft config {file}: a DSpark draft (dspark_config / dspark_target_layer_ids): "
                               f"replay implements the DFlash draft only")


def parse_block_draft_config(data: dict, file: str) -> BlockDraftSpec:
    if not isinstance(data, dict):
        raise ReplayInputError(f"draft config {file}: not a JSON object")
    _unsupported(data, file)
    text = data.get("text_config") if isinstance(data.get("text_config"), dict) else data
    hidden, heads, kv_heads, head_dim = attention_shape(text, file)
    act = text.get("hidden_act", "silu")
    if act != "silu":
        raise ReplayInputError(f"draft config {file}: hidden_act {act!r}: SGLang's DFlash MLP supports silu only")
    read = dflash_layers.read_block_draft_config(data)
    if read.block_size is None:
        raise ReplayInputError(f"draft config {file}: no block_size (dflash_config.block_size or top-level)")
    if read.block_size < 2:
        raise ReplayInputError(f"draft config {file}: block_size {read.block_size}: a block drafts block_size - 1 "
                               f"tokens, so it must be at least 2")
    if read.mask_token_id is None:
        raise ReplayInputError(f"draft config {file}: no dflash_config.mask_token_id (the block's mask token)")
    return BlockDraftSpec(
        file=file, hidden_size=hidden, num_layers=_get(text, "num_hidden_layers", file, int, required=True),
        num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
        intermediate_size=_get(text, "intermediate_size", file, int, required=True),
        rms_norm_eps=_get(text, "rms_norm_eps", file, float, 1e-6), block_size=read.block_size,
        mask_token_id=read.mask_token_id, config=read, rope=_rope(text, file, head_dim),
        attention_bias=bool(text.get("attention_bias", False)))


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _rope_rows(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rope: RopeSpec) -> torch.Tensor:
    """x [..., rows, heads, head_dim]; cos, sin [rows, rotary_dim / 2]."""
    shape = x.shape
    flat = x.reshape(-1, shape[-2], shape[-1])
    reps = flat.shape[0] // cos.shape[0]
    from .rope import apply_rope

    return apply_rope(flat, cos.repeat(reps, 1), sin.repeat(reps, 1), rope.rotary_dim, rope.neox).view(shape)


class BlockDraft:
    """The checked float32 weights and the forward."""

    def __init__(self, spec: BlockDraftSpec, tensors: dict, embed: torch.Tensor, lm_head: torch.Tensor, device):
        self.spec, self.device = spec, torch.device(device)
        self.w = {k: v.to(device=self.device, dtype=torch.float32) for k, v in tensors.items()}
        self.embed = embed.to(device=self.device, dtype=torch.float32)
        self.lm_head = lm_head.to(device=self.device, dtype=torch.float32)
        self.num_context = int(self.w["fc.weight"].shape[1]) // spec.hidden_size

    # -- pieces --------------------------------------------------------------------------------------------

    def _norm(self, x, name):
        return rms_norm(x, self.w[name], self.spec.rms_norm_eps)

    def _heads_norm(self, x, heads, name):
        x = x.view(*x.shape[:-1], heads, self.spec.head_dim)
        return self._norm(x, name)

    def _linear(self, x, name):
        return F.linear(x, self.w[name + ".weight"], self.w.get(name + ".bias"))

    def context(self, features: torch.Tensor) -> torch.Tensor:
        """hidden_norm(fc(features)): features [..., num_context * hidden] -> [..., hidden]."""
        return self._norm(F.linear(features, self.w["fc.weight"]), "hidden_norm.weight")

    def block_ids(self, bonus: torch.Tensor) -> torch.Tensor:
        """[A] bonus tokens -> [A, block] ids [b, mask, ...]."""
        ids = torch.full((bonus.shape[0], self.spec.block_size), self.spec.mask_token_id, dtype=torch.long,
                         device=bonus.device)
        ids[:, 0] = bonus
        return ids

    def forward(self, ctx: torch.Tensor, ctx_positions: torch.Tensor, block_ids: torch.Tensor,
                block_positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """ctx [W, C, hidden] (context entries, W wirings stacked), ctx_positions [C]; block_ids, block_positions
        [Q]; mask [Q, C + Q] (True: attend). Returns the final normed hidden states [W, Q, hidden]."""
        s = self.spec
        from .rope import rope_tables

        ctx_cos, ctx_sin = rope_tables(s.rope, ctx_positions, self.device)
        q_cos, q_sin = rope_tables(s.rope, block_positions, self.device)
        wirings = ctx.shape[0]
        x = self.embed[block_ids].unsqueeze(0).expand(wirings, -1, -1)
        group = s.num_heads // s.num_kv_heads
        for i in range(s.num_layers):
            p = f"layers.{i}."
            a = p + "self_attn."
            ck = _rope_rows(self._heads_norm(self._linear(ctx, a + "k_proj"), s.num_kv_heads, a + "k_norm.weight"),
                            ctx_cos, ctx_sin, s.rope)
            cv = self._linear(ctx, a + "v_proj").view(wirings, -1, s.num_kv_heads, s.head_dim)
            h = self._norm(x, p + "input_layernorm.weight")
            q = _rope_rows(self._heads_norm(self._linear(h, a + "q_proj"), s.num_heads, a + "q_norm.weight"),
                           q_cos, q_sin, s.rope)
            k = _rope_rows(self._heads_norm(self._linear(h, a + "k_proj"), s.num_kv_heads, a + "k_norm.weight"),
                           q_cos, q_sin, s.rope)
            v = self._linear(h, a + "v_proj").view(wirings, -1, s.num_kv_heads, s.head_dim)
            keys = torch.cat([ck, k], 1).transpose(1, 2)  # [W, kv_heads, C + Q, hd]
            values = torch.cat([cv, v], 1).transpose(1, 2)
            if group > 1:
                keys, values = keys.repeat_interleave(group, 1), values.repeat_interleave(group, 1)
            attn = F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=mask)
            x = x + self._linear(attn.transpose(1, 2).reshape(wirings, x.shape[1], -1), a + "o_proj")
            h = self._norm(x, p + "post_attention_layernorm.weight")
            m = p + "mlp."
            x = x + self._linear(F.silu(self._linear(h, m + "gate_proj")) * self._linear(h, m + "up_proj"),
                                 m + "down_proj")
        return self._norm(x, "norm.weight")

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden @ self.lm_head.T


def _canonical(tensors: dict, spec: BlockDraftSpec, file: str) -> dict:
    """The checkpoint's tensors under the separate q/k/v and gate/up names (fused qkv_proj / gate_up_proj split;
    a leading 'model.' dropped), checked for presence and shape."""
    out = {}
    for name, t in tensors.items():
        name = name[len("model."):] if name.startswith("model.") else name
        if name.endswith("self_attn.qkv_proj.weight") or name.endswith("self_attn.qkv_proj.bias"):
            stem, kind = name.rsplit(".", 1)
            stem = stem[: -len("qkv_proj")]
            q, kv = spec.num_heads * spec.head_dim, spec.num_kv_heads * spec.head_dim
            if t.shape[0] != q + 2 * kv:
                raise ReplayInputError(f"draft checkpoint {file}: {name} has {t.shape[0]} rows, expected {q + 2 * kv}")
            for part, piece in zip(("q_proj", "k_proj", "v_proj"), t.split([q, kv, kv])):
                out[f"{stem}{part}.{kind}"] = piece
        elif name.endswith("mlp.gate_up_proj.weight"):
            stem = name[: -len("gate_up_proj.weight")]
            gate, up = t.chunk(2)
            out[stem + "gate_proj.weight"], out[stem + "up_proj.weight"] = gate, up
        else:
            out[name] = t
    h, hd, inter = spec.hidden_size, spec.head_dim, spec.intermediate_size
    expected = {"hidden_norm.weight": (h,), "norm.weight": (h,)}
    for i in range(spec.num_layers):
        p = f"layers.{i}."
        expected.update({
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (spec.num_heads * hd, h),
            p + "self_attn.k_proj.weight": (spec.num_kv_heads * hd, h),
            p + "self_attn.v_proj.weight": (spec.num_kv_heads * hd, h),
            p + "self_attn.o_proj.weight": (h, spec.num_heads * hd),
            p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,),
            p + "mlp.gate_proj.weight": (inter, h), p + "mlp.up_proj.weight": (inter, h),
            p + "mlp.down_proj.weight": (h, inter)})
    for name, shape in expected.items():
        if name not in out:
            raise ReplayInputError(f"draft checkpoint {file}: no tensor {name} (a DFlash draft of {spec.num_layers} "
                                   f"layer(s) has it)")
        if tuple(out[name].shape) != shape:
            raise ReplayInputError(f"draft checkpoint {file}: {name} is {list(out[name].shape)}, but the config "
                                   f"({spec.file}) makes it {list(shape)}")
    fc = out.get("fc.weight")
    if fc is None:
        raise ReplayInputError(f"draft checkpoint {file}: no tensor fc.weight (the context projection)")
    if fc.dim() != 2 or fc.shape[0] != h or fc.shape[1] % h:
        raise ReplayInputError(f"draft checkpoint {file}: fc.weight is {list(fc.shape)}, expected [{h}, K x {h}] "
                               f"(K context features of the target's width)")
    return out


def read_block_draft_spec(directory: str) -> BlockDraftSpec:
    """The draft directory's config.json, checked (before anything heavier is read)."""
    model_dir(directory, "draft")
    config_path = os.path.join(directory, "config.json")
    return parse_block_draft_config(read_json(config_path, "draft config"), config_path)


def load_block_draft(directory: str, embed: torch.Tensor, lm_head: torch.Tensor, device) -> BlockDraft:
    spec = read_block_draft_spec(directory)
    config_path = spec.file
    tensors = _canonical(load_all(directory, "draft checkpoint"), spec, directory)
    if embed.shape[-1] != spec.hidden_size or lm_head.shape[-1] != spec.hidden_size:
        raise ReplayInputError(f"the target's embed_tokens / lm_head are {embed.shape[-1]} wide, but the draft "
                               f"({config_path}) has hidden_size {spec.hidden_size}: a DFlash draft reads both from "
                               f"its own target")
    if spec.mask_token_id >= embed.shape[0]:
        raise ReplayInputError(f"draft config {config_path}: mask_token_id {spec.mask_token_id} is outside the "
                               f"target's embedding ({embed.shape[0]} rows)")
    draft = BlockDraft(spec, tensors, embed, lm_head, device)
    ids = spec.config.target_layer_ids
    if ids is not None and len(ids) != draft.num_context:
        raise ReplayInputError(f"draft {directory}: {spec.config.source} names {len(ids)} layers {list(ids)}, but its "
                               f"fc.weight takes {draft.num_context} context features: SGLang refuses this draft")
    return draft
