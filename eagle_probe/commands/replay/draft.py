"""A plain-torch EAGLE-3 draft, first draft step only, computed the way SGLang 0.5.23's LlamaForCausalLMEagle3 computes
it (written here from the facts of sglang/srt/models/llama_eagle3.py and llama.py, not from their code):

    x   = aux states of position t, [K * H_target]
    x   = RMSNorm(x) * input_norm                      (norm_before_fc)
    x   = concat_k RMSNorm(x_k) * fc_norm_k            (fc_norm)
    h   = fc(x)                                        (only when x's width differs from the embedding width)
    e   = embedding of the token at t + 1
    a   = attention(concat(RMSNorm(e) * input_layernorm, RMSNorm(h) * hidden_norm)), causal within the request,
          rope at the dumped positions; q/k/v take 2 * H_draft inputs (the embedding half first), o_proj
    r   = h + a;  m = MLP(RMSNorm(r) * post_attention_layernorm);  r = r + m
    (further decoder layers: RMSNorm(r) * hidden_norm into a plain H_draft attention, then the same MLP step)
    out = RMSNorm(r) * norm;  logits = out @ lm_head.T over the draft vocabulary;  target id = id + d2t[id]

Input convention, checked in SGLang's EAGLEWorkerV2._draft_extend_for_prefill: after the target's prefill, the
draft's input_ids are each request's input_ids shifted left by one (the last slot gets the token the target just
sampled), while spec_info.hidden_states keeps the target's aux states row for row. So the draft at row t sees
(aux state of token t, embedding of token t + 1) and its logits there propose token t + 2: the token the target's
logits at row t + 1 choose. Replay pairs them the same way.
"""

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from .spec import DraftSpec, ReplayInputError, RopeSpec

LEGACY = (("midlayer", "layers.0"), ("aux_norm_low", "fc_norm.0"), ("aux_norm_mid", "fc_norm.1"),
          ("aux_norm_high", "fc_norm.2"))
ATTENTION_ELEMENTS = 1 << 26  # padded attention scores per batched SDPA call (bounds memory)
HEAD_ROWS = 4096  # rows per lm_head matmul


def canonical_name(name: str) -> str:
    """Checkpoint name -> the name this module uses (SGLang's legacy renames, without the 'model.' prefix)."""
    for old, new in LEGACY:
        if old in name:
            name = name.replace(old, new)
    return name[len("model."):] if name.startswith("model.") else name


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


# -- rope -----------------------------------------------------------------------------------------------------------

def _inv_freq(rope: RopeSpec) -> Tuple[torch.Tensor, float]:
    """(inverse frequencies [rotary_dim / 2], magnitude scale) for the rope kinds SGLang's get_rope builds."""
    dim = rope.rotary_dim
    # float32 throughout, as SGLang computes its cos/sin cache (the angles of late positions are sensitive)
    powers = rope.theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    base_freq = 1.0 / powers
    if rope.kind == "default":
        return base_freq, 1.0
    factor = float(rope.param("factor", 1.0))
    if rope.kind == "linear":  # positions divided by the factor (rope_tables)
        return base_freq, 1.0
    if rope.kind == "llama3":
        low, high = float(rope.param("low_freq_factor", 1.0)), float(rope.param("high_freq_factor", 4.0))
        original = float(rope.param("original_max_position_embeddings", rope.max_position))
        wavelength = 2 * math.pi / base_freq
        smooth = (original / wavelength - low) / (high - low) if low != high else torch.zeros_like(base_freq)
        blended = (1 - smooth) * base_freq / factor + smooth * base_freq
        scaled = torch.where(wavelength > original / low, base_freq / factor, blended)
        return torch.where(wavelength < original / high, base_freq, scaled), 1.0
    # yarn: interpolate the low frequencies, keep the high ones, ramp in between; scale the magnitude
    original = float(rope.param("original_max_position_embeddings", rope.max_position))
    beta_fast, beta_slow = float(rope.param("beta_fast", 32)), float(rope.param("beta_slow", 1))
    extrapolation = float(rope.param("extrapolation_factor", 1.0))

    def correction_dim(rotations):
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(rope.theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if rope.param("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    keep = (1 - ramp) * extrapolation
    inv = 1.0 / (factor * powers) * (1 - keep) + base_freq * keep

    def mscale(scale, m=1.0):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    m, m_all = rope.param("mscale", None), rope.param("mscale_all_dim", None)
    magnitude = mscale(factor, float(m)) / mscale(factor, float(m_all)) if m is not None and m_all is not None \
        else mscale(factor)
    return inv, magnitude * float(rope.param("attn_factor", 1.0))


def rope_tables(rope: RopeSpec, positions: torch.Tensor, device) -> Tuple[torch.Tensor, torch.Tensor]:
    inv, magnitude = _inv_freq(rope)
    t = positions.to(torch.float32).cpu()
    if rope.kind == "linear":
        t = t / float(rope.param("factor", 1.0))
    angles = t[:, None] * inv[None, :]
    cos, sin = angles.cos() * magnitude, angles.sin() * magnitude
    return cos.to(device), sin.to(device)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotary_dim: int, neox: bool) -> torch.Tensor:
    """x [N, heads, head_dim]; cos, sin [N, rotary_dim / 2]; the first rotary_dim channels rotate."""
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    cos, sin = cos[:, None, :], sin[:, None, :]
    if neox:
        x1, x2 = rot.chunk(2, dim=-1)
    else:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
    o1, o2 = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    rotated = torch.cat((o1, o2), dim=-1) if neox else torch.stack((o1, o2), dim=-1).flatten(-2)
    return torch.cat((rotated, rest), dim=-1) if rest.shape[-1] else rotated


# -- weights --------------------------------------------------------------------------------------------------------

@dataclass
class Layer:
    qkv: torch.Tensor  # [(heads + 2 kv_heads) * head_dim, in]; layer 0: in = 2 H, the embedding half first
    o: torch.Tensor
    o_bias: Optional[torch.Tensor]
    gate: torch.Tensor
    up: torch.Tensor
    down: torch.Tensor
    input_layernorm: torch.Tensor
    hidden_norm: torch.Tensor
    post_attention_layernorm: torch.Tensor


@dataclass
class DraftWeights:
    spec: DraftSpec
    fc: torch.Tensor
    fc_bias: Optional[torch.Tensor]
    input_norm: Optional[torch.Tensor]
    fc_norm: Optional[List[torch.Tensor]]
    layers: List[Layer]
    norm: torch.Tensor
    lm_head: torch.Tensor  # [draft vocab, H]
    d2t: Optional[torch.Tensor]  # [draft vocab] int64: target id = draft id + d2t[draft id]
    embedding: torch.Tensor  # [vocab, H], kept in its stored dtype (rows are looked up once)
    embedding_source: str  # "target" | "own"
    lm_head_source: str  # "draft" | "target" | "embedding"
    notes: List[str]


def _shape_error(file: str, name: str, got, want) -> ReplayInputError:
    return ReplayInputError(f"draft checkpoint {file}: tensor {name} has shape {list(got)}, the config implies "
                            f"{list(want)}")


def build_weights(spec: DraftSpec, tensors: Dict[str, torch.Tensor], checkpoint: str,
                  target_embedding: Optional[torch.Tensor], target_head: Optional[torch.Tensor],
                  embedding: Optional[str], device) -> DraftWeights:
    """Assemble float32 weights on `device` from the draft checkpoint's tensors (and the target's two).

    embedding: None (what SGLang does), "target" or "own". Raises ReplayInputError naming the file and tensor."""
    named = {}
    for name, tensor in tensors.items():
        named[canonical_name(name)] = tensor
    notes: List[str] = []
    h, hd = spec.hidden_size, spec.head_dim
    q_rows, kv_rows = spec.num_heads * hd, spec.num_kv_heads * hd

    def take(name, shape=None, norm=False):
        tensor = named.get(name)
        if tensor is None:
            if norm:  # SGLang's RMSNorm starts at ones and keeps them when the checkpoint has no weight
                notes.append(f"draft checkpoint has no {name}: ones, as SGLang keeps its RMSNorm's initial weight")
                return torch.ones(shape, dtype=torch.float32, device=device)
            raise ReplayInputError(f"draft checkpoint {checkpoint}: missing tensor {name} (or model.{name})")
        if shape is not None and tuple(tensor.shape) != tuple(shape if isinstance(shape, tuple) else (shape,)):
            raise _shape_error(checkpoint, name, tensor.shape, shape if isinstance(shape, tuple) else (shape,))
        return tensor.to(device=device, dtype=torch.float32)

    fc = named.get("fc.weight")
    if fc is None:
        raise ReplayInputError(f"draft checkpoint {checkpoint}: missing tensor fc.weight (the EAGLE-3 input "
                               f"projection)")
    if tuple(fc.shape) != (h, spec.fc_in):
        raise ReplayInputError(
            f"draft checkpoint {checkpoint}: fc.weight has shape {list(fc.shape)}, but the config "
            f"({spec.file}) makes SGLang build fc as [{h}, {spec.fc_in}] ({spec.num_aux} aux states x "
            f"{spec.target_hidden_size}); SGLang would fail loading it")
    fc = fc.to(device=device, dtype=torch.float32)
    fc_bias = take("fc.bias", (h,)) if spec.fc_bias else None
    input_norm = take("input_norm.weight", spec.fc_in, norm=True) if spec.norm_before_fc else None
    fc_norm = [take(f"fc_norm.{k}.weight", spec.target_hidden_size, norm=True) for k in range(spec.num_aux)] \
        if spec.fc_norm else None
    layers = []
    for index in range(spec.num_layers):
        p = f"layers.{index}."
        width = 2 * h if index == 0 else h
        if p + "self_attn.qkv_proj.weight" in named:
            qkv = take(p + "self_attn.qkv_proj.weight", (q_rows + 2 * kv_rows, width))
        else:
            qkv = torch.cat([take(p + "self_attn.q_proj.weight", (q_rows, width)),
                             take(p + "self_attn.k_proj.weight", (kv_rows, width)),
                             take(p + "self_attn.v_proj.weight", (kv_rows, width))])
        if p + "mlp.gate_up_proj.weight" in named:
            gate, up = take(p + "mlp.gate_up_proj.weight", (2 * spec.intermediate_size, h)).chunk(2)
        else:
            gate = take(p + "mlp.gate_proj.weight", (spec.intermediate_size, h))
            up = take(p + "mlp.up_proj.weight", (spec.intermediate_size, h))
        layers.append(Layer(
            qkv=qkv, o=take(p + "self_attn.o_proj.weight", (h, q_rows)),
            o_bias=take(p + "self_attn.o_proj.bias", (h,)) if spec.o_bias else None,
            gate=gate, up=up, down=take(p + "mlp.down_proj.weight", (h, spec.intermediate_size)),
            input_layernorm=take(p + "input_layernorm.weight", h, norm=True),
            hidden_norm=take(p + "hidden_norm.weight", h, norm=True),
            post_attention_layernorm=take(p + "post_attention_layernorm.weight", h, norm=True)))
    norm = take("norm.weight", h, norm=True)

    source = embedding or spec.sglang_embedding
    if source == "target":
        if target_embedding is None:
            raise ReplayInputError("target checkpoint: no embedding to give the draft")
        if target_embedding.shape[-1] != h:
            raise ReplayInputError(
                f"target embedding model.embed_tokens.weight is {list(target_embedding.shape)} but the draft's "
                f"hidden size is {h} ({spec.file}); SGLang keeps the draft's own embedding when target_hidden_size "
                f"differs from hidden_size: use --draft-embedding own")
        emb = target_embedding
    else:
        emb = named.get("embed_tokens.weight")
        if emb is None:
            raise ReplayInputError(f"draft checkpoint {checkpoint}: --draft-embedding own, but it has no "
                                   f"embed_tokens.weight")
        if emb.shape[-1] != h:
            raise _shape_error(checkpoint, "embed_tokens.weight", emb.shape, (emb.shape[0], h))
    head_source = spec.lm_head_source
    if head_source == "embedding":
        head = emb.to(device=device, dtype=torch.float32)
    elif head_source == "target":
        if target_head is None or target_head.shape[-1] != h:
            raise ReplayInputError(
                f"draft config {spec.file} has no draft_vocab_size, so SGLang gives the draft the target's lm_head, "
                f"but the target's lm_head.weight is {None if target_head is None else list(target_head.shape)}, "
                f"not [*, {h}]")
        head = target_head.to(device=device, dtype=torch.float32)
        notes.append("no draft_vocab_size: the target's lm_head, as SGLang loads it (load_lm_head_from_target)")
    else:
        head = take("lm_head.weight", (spec.draft_vocab_size, h))
    d2t = named.get("d2t")
    if d2t is not None:
        if d2t.dim() != 1 or d2t.shape[0] != head.shape[0] or d2t.dtype.is_floating_point:
            raise ReplayInputError(f"draft checkpoint {checkpoint}: d2t is {d2t.dtype} {list(d2t.shape)}, expected "
                                   f"integers [{head.shape[0]}] (one offset per draft-vocabulary id)")
        d2t = d2t.to(device=device, dtype=torch.int64)
    elif head.shape[0] != spec.vocab_size and head_source == "draft":
        notes.append(f"reduced draft vocabulary ({head.shape[0]} of {spec.vocab_size}) without d2t: draft ids are "
                     f"compared as target ids")
    return DraftWeights(spec, fc, fc_bias, input_norm, fc_norm, layers, norm, head, d2t, emb, source, head_source,
                        notes)


# -- the forward ----------------------------------------------------------------------------------------------------

@dataclass
class Prepared:
    """What does not depend on the wiring, computed once for a set of rows."""

    rows: int
    embed_qkv: torch.Tensor  # layer 0's q/k/v contribution of the normalised embeddings [rows, q + 2 kv]
    cos: torch.Tensor
    sin: torch.Tensor
    groups: List[Tuple[torch.Tensor, torch.Tensor]]  # (gather index [B, L] into rows + 1 pad row, key mask [B, L])


def _attention_groups(segments: Sequence[Tuple[int, int]], heads: int, device):
    """Requests padded into batches whose score tensors stay under ATTENTION_ELEMENTS."""
    order = sorted(segments, key=lambda s: -s[1])
    groups, current = [], []
    for start, length in order:
        if length <= 0:
            continue
        longest = current[0][1] if current else length
        if current and (len(current) + 1) * heads * longest * longest > ATTENTION_ELEMENTS:
            groups.append(current)
            current = []
        current.append((start, length))
    if current:
        groups.append(current)
    total = sum(length for _, length in segments)
    out = []
    for group in groups:
        longest = group[0][1]
        index = torch.full((len(group), longest), total, dtype=torch.long)
        for b, (start, length) in enumerate(group):
            index[b, :length] = torch.arange(start, start + length)
        out.append((index.to(device), (index < total).to(device)))
    return out


class TorchDraft:
    """The draft's first step over many rows at once; `prepare` once, then `predict` per wiring."""

    def __init__(self, weights: DraftWeights, device):
        self.w = weights
        self.spec = weights.spec
        self.device = torch.device(device)

    def prepare(self, next_tokens: torch.Tensor, positions: torch.Tensor,
                segments: Sequence[Tuple[int, int]]) -> Prepared:
        """next_tokens: the token at t + 1 for each row t; positions: t's position in its request; segments:
        (first row, rows) per request, rows consecutive."""
        s, w = self.spec, self.w
        tokens = next_tokens.to(torch.long).cpu()
        if tokens.numel() and int(tokens.max()) >= w.embedding.shape[0]:
            raise ReplayInputError(f"a dumped token id {int(tokens.max())} is outside the draft's embedding "
                                   f"({w.embedding.shape[0]} rows, {w.embedding_source}'s)")
        embeds = w.embedding[tokens].to(device=self.device, dtype=torch.float32)
        layer = w.layers[0]
        normed = rms_norm(embeds, layer.input_layernorm, s.rms_norm_eps)
        embed_qkv = normed @ layer.qkv[:, :s.hidden_size].T
        cos, sin = rope_tables(s.rope, positions, self.device)
        return Prepared(int(tokens.numel()), embed_qkv, cos, sin,
                        _attention_groups(segments, s.num_heads, self.device))

    def tile(self, prepared: Prepared, copies: int) -> Prepared:
        """The same rows `copies` times over (rows of copy c at c * rows): several wirings in one pass."""
        if copies == 1:
            return prepared
        n = prepared.rows
        groups = []
        for c in range(copies):
            for index, mask in prepared.groups:
                groups.append((torch.where(mask, index + c * n, copies * n), mask))
        return Prepared(n * copies, prepared.embed_qkv.repeat(copies, 1), prepared.cos.repeat(copies, 1),
                        prepared.sin.repeat(copies, 1), groups)

    # ---- pieces

    def project(self, aux: torch.Tensor) -> torch.Tensor:
        """fc over the aux states (with the norms the config turns on); skipped where SGLang skips it."""
        s, w = self.spec, self.w
        x = aux.to(device=self.device, dtype=torch.float32)
        if x.shape[-1] == s.hidden_size:  # SGLang's gate: equal widths bypass fc
            return x
        if w.input_norm is not None:
            x = rms_norm(x, w.input_norm, s.rms_norm_eps)
        if w.fc_norm is not None:
            x = torch.cat([rms_norm(c, n, s.rms_norm_eps) for c, n in zip(x.chunk(s.num_aux, dim=-1), w.fc_norm)],
                          dim=-1)
        x = x @ w.fc.T
        return x + w.fc_bias if w.fc_bias is not None else x

    def _attend(self, q, k, v, prepared: Prepared) -> torch.Tensor:
        s = self.spec
        out = torch.empty_like(q)
        pad = lambda t: torch.cat([t, t.new_zeros((1,) + t.shape[1:])])  # noqa: E731
        qp, kp, vp = pad(q), pad(k), pad(v)
        repeat = s.num_heads // s.num_kv_heads
        for index, mask in prepared.groups:
            length = index.shape[1]
            qb = qp[index].transpose(1, 2)  # [B, heads, L, hd]
            kb, vb = kp[index].transpose(1, 2), vp[index].transpose(1, 2)
            if repeat > 1:
                kb, vb = kb.repeat_interleave(repeat, dim=1), vb.repeat_interleave(repeat, dim=1)
            causal = torch.ones(length, length, dtype=torch.bool, device=q.device).tril()
            allowed = (causal[None] & mask[:, None, :])[:, None]
            ob = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=allowed).transpose(1, 2)
            out[index[mask]] = ob[mask]
        return out

    def _layer(self, index: int, hidden: torch.Tensor, residual: Optional[torch.Tensor], prepared: Prepared):
        s, layer = self.spec, self.w.layers[index]
        hd, q_rows, kv_rows = s.head_dim, s.num_heads * s.head_dim, s.num_kv_heads * s.head_dim
        if index == 0:
            residual = hidden
            normed = rms_norm(hidden, layer.hidden_norm, s.rms_norm_eps)
            qkv = prepared.embed_qkv + normed @ layer.qkv[:, s.hidden_size:].T
        else:
            residual = hidden + residual
            normed = rms_norm(residual, layer.hidden_norm, s.rms_norm_eps)
            qkv = normed @ layer.qkv.T
        q, k, v = qkv.split([q_rows, kv_rows, kv_rows], dim=-1)
        n = q.shape[0]
        q = apply_rope(q.reshape(n, s.num_heads, hd), prepared.cos, prepared.sin, s.rope.rotary_dim, s.rope.neox)
        k = apply_rope(k.reshape(n, s.num_kv_heads, hd), prepared.cos, prepared.sin, s.rope.rotary_dim, s.rope.neox)
        attended = self._attend(q, k, v.reshape(n, s.num_kv_heads, hd), prepared).reshape(n, q_rows)
        attended = attended @ layer.o.T
        if layer.o_bias is not None:
            attended = attended + layer.o_bias
        residual = attended + residual
        x = rms_norm(residual, layer.post_attention_layernorm, s.rms_norm_eps)
        x = (F.silu(x @ layer.gate.T) * (x @ layer.up.T)) @ layer.down.T
        return x, residual

    def final_hidden(self, aux: torch.Tensor, prepared: Prepared) -> torch.Tensor:
        """The normalised hidden state the draft's lm_head reads, per row [rows, H]."""
        hidden = self.project(aux)
        residual = None
        for index in range(len(self.w.layers)):
            hidden, residual = self._layer(index, hidden, residual, prepared)
        return rms_norm(hidden + residual, self.w.norm, self.spec.rms_norm_eps)

    def logits(self, aux: torch.Tensor, prepared: Prepared) -> torch.Tensor:
        return self.final_hidden(aux, prepared) @ self.w.lm_head.T

    def predict(self, aux: torch.Tensor, prepared: Prepared) -> torch.Tensor:
        """Greedy proposals as target token ids [rows]."""
        out = self.final_hidden(aux, prepared)
        ids = torch.cat([(chunk @ self.w.lm_head.T).argmax(-1) for chunk in out.split(HEAD_ROWS)])
        return self.target_ids(ids)

    def target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids + self.w.d2t[draft_ids] if self.w.d2t is not None else draft_ids

    def draft_ids(self, target_ids: torch.Tensor) -> torch.Tensor:
        """The draft vocabulary's id for each target id, -1 where the draft's vocabulary lacks it."""
        vocab = self.w.lm_head.shape[0]
        if self.w.d2t is None:
            return torch.where(target_ids < vocab, target_ids, -1)
        mapped = self.target_ids(torch.arange(vocab, device=self.w.d2t.device))
        size = max(int(mapped.max()), int(target_ids.max()) if target_ids.numel() else 0) + 1
        inverse = torch.full((size,), -1, dtype=torch.long, device=mapped.device)
        inverse[mapped] = torch.arange(vocab, device=mapped.device)
        return inverse[target_ids.to(mapped.device)].to(target_ids.device)

    def judge(self, aux: torch.Tensor, prepared: Prepared, labels: torch.Tensor,
              label_draft_ids: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Per row: whether the greedy proposal equals the label (a target id), and the log-probability the draft
        gives the label (-inf where its vocabulary lacks it; `label_draft_ids` from draft_ids(labels), tiled like
        the rows)."""
        out = self.final_hidden(aux, prepared)
        hits, log_probs = [], []
        for rows, label, label_id in zip(out.split(HEAD_ROWS), labels.split(HEAD_ROWS),
                                         label_draft_ids.split(HEAD_ROWS)):
            logits = rows @ self.w.lm_head.T
            hits.append(self.target_ids(logits.argmax(-1)) == label)
            picked = logits.gather(-1, label_id.clamp_min(0)[:, None])[:, 0] - torch.logsumexp(logits, -1)
            log_probs.append(torch.where(label_id >= 0, picked, -float("inf")))
        return torch.cat(hits), torch.cat(log_probs)


def greedy_tokens(final_hidden: torch.Tensor, lm_head: torch.Tensor, device, vocab_rows: int = 16384) -> torch.Tensor:
    """argmax(final_hidden @ lm_head.T) per row, over vocabulary chunks (the head stays in its stored dtype and is
    cast a chunk at a time); the first maximum wins, as torch.argmax."""
    x = final_hidden.to(device=device, dtype=torch.float32)
    best = torch.full((x.shape[0],), -float("inf"), device=device)
    arg = torch.zeros(x.shape[0], dtype=torch.long, device=device)
    for start in range(0, lm_head.shape[0], vocab_rows):
        chunk = lm_head[start:start + vocab_rows].to(device=device, dtype=torch.float32)
        values, index = (x @ chunk.T).max(-1)
        better = values > best
        best = torch.where(better, values, best)
        arg = torch.where(better, index + start, arg)
    return arg


def load_torch_draft(directory: str, target_embedding: Optional[torch.Tensor], target_head: Optional[torch.Tensor],
                     embedding: Optional[str] = None, device="cpu") -> TorchDraft:
    """The draft checkpoint directory (config.json + safetensors) as a TorchDraft; the target's embedding and lm_head
    are used where SGLang uses them (or as `embedding` says: None, "target", "own")."""
    import os

    from .checkpoints import load_all, model_dir, read_json
    from .spec import parse_draft_config

    model_dir(directory, "draft")
    config_file = os.path.join(directory, "config.json")
    spec = parse_draft_config(read_json(config_file, "draft config"), config_file)
    tensors = load_all(directory, "draft checkpoint")
    return TorchDraft(build_weights(spec, tensors, directory, target_embedding, target_head, embedding, device), device)
