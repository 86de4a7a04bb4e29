"""The replayed draft's weights: a draft checkpoint's tensors (SGLang's legacy names accepted) checked against the
shapes its config implies and assembled, float32 on the chosen device, with the embedding and lm_head SGLang would
give it (the target's or its own), into a `DraftWeights`. A missing or misshapen tensor is a ReplayInputError naming
the file and the tensor; where SGLang quietly keeps a default (a norm's ones, the target's lm_head) a note says so."""

from dataclasses import dataclass

import torch

from .spec import DraftSpec, ReplayInputError

LEGACY = (("midlayer", "layers.0"), ("aux_norm_low", "fc_norm.0"), ("aux_norm_mid", "fc_norm.1"),
          ("aux_norm_high", "fc_norm.2"))


def canonical_name(name: str) -> str:
    """Checkpoint name -> the name this module uses (SGLang's legacy renames, without the 'model.' prefix)."""
    for old, new in LEGACY:
        if old in name:
            name = name.replace(old, new)
    return name[len("model."):] if name.startswith("model.") else name


@dataclass
class Layer:
    qkv: torch.Tensor  # [(heads + 2 kv_heads) * head_dim, in]; layer 0: in = 2 H, the embedding half first
    o: torch.Tensor
    o_bias: torch.Tensor | None
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
    fc_bias: torch.Tensor | None
    input_norm: torch.Tensor | None
    fc_norm: list[torch.Tensor] | None
    layers: list[Layer]
    norm: torch.Tensor
    lm_head: torch.Tensor  # [draft vocab, H]
    d2t: torch.Tensor | None  # [draft vocab] int64: target id = draft id + d2t[draft id]
    embedding: torch.Tensor  # [vocab, H], kept in its stored dtype (rows are looked up once)
    embedding_source: str  # "target" | "own"
    lm_head_source: str  # "draft" | "target" | "embedding"
    notes: list[str]


def _shape_error(file: str, name: str, got, want) -> ReplayInputError:
    return ReplayInputError(f"draft checkpoint {file}: tensor {name} has shape {list(got)}, the config implies "
                            f"{list(want)}")


@dataclass
class _Tensors:
    """A checkpoint's tensors by canonical name, taken checked and as float32 on the device."""

    named: dict[str, torch.Tensor]
    checkpoint: str
    device: object
    notes: list[str]

    def take(self, name, shape=None, norm=False) -> torch.Tensor:
        tensor = self.named.get(name)
        if tensor is None:
            if norm:  # SGLang's RMSNorm starts at ones and keeps them when the checkpoint has no weight
                self.notes.append(f"draft checkpoint has no {name}: ones, as SGLang keeps its RMSNorm's initial "
                                  f"weight")
                return torch.ones(shape, dtype=torch.float32, device=self.device)
            raise ReplayInputError(f"draft checkpoint {self.checkpoint}: missing tensor {name} (or model.{name})")
        want = shape if isinstance(shape, tuple) else (shape,)
        if shape is not None and tuple(tensor.shape) != tuple(want):
            raise _shape_error(self.checkpoint, name, tensor.shape, want)
        return tensor.to(device=self.device, dtype=torch.float32)


def build_weights(spec: DraftSpec, tensors: dict[str, torch.Tensor], checkpoint: str,
                  target_embedding: torch.Tensor | None, target_head: torch.Tensor | None,
                  embedding: str | None, device) -> DraftWeights:
    """Assemble float32 weights on `device` from the draft checkpoint's tensors (and the target's two).

    embedding: None (what SGLang does), "target" or "own". Raises ReplayInputError naming the file and tensor."""
    t = _Tensors({canonical_name(name): tensor for name, tensor in tensors.items()}, checkpoint, device, [])
    h = spec.hidden_size
    fc = _fc(spec, t)
    fc_bias = t.take("fc.bias", (h,)) if spec.fc_bias else None
    input_norm = t.take("input_norm.weight", spec.fc_in, norm=True) if spec.norm_before_fc else None
    fc_norm = [t.take(f"fc_norm.{k}.weight", spec.target_hidden_size, norm=True) for k in range(spec.num_aux)] \
        if spec.fc_norm else None
    layers = [_layer(spec, t, index) for index in range(spec.num_layers)]
    norm = t.take("norm.weight", h, norm=True)
    source = embedding or spec.sglang_embedding
    emb = _embedding(spec, t, source, target_embedding)
    head = _lm_head(spec, t, emb, target_head)
    d2t = _d2t(spec, t, head)
    return DraftWeights(spec, fc, fc_bias, input_norm, fc_norm, layers, norm, head, d2t, emb, source,
                        spec.lm_head_source, t.notes)


def _fc(spec: DraftSpec, t: _Tensors) -> torch.Tensor:
    fc = t.named.get("fc.weight")
    if fc is None:
        raise ReplayInputError(f"draft checkpoint {t.checkpoint}: missing tensor fc.weight (the EAGLE-3 input "
                               f"projection)")
    if tuple(fc.shape) != (spec.hidden_size, spec.fc_in):
        raise ReplayInputError(
            f"draft checkpoint {t.checkpoint}: fc.weight has shape {list(fc.shape)}, but the config "
            f"({spec.file}) makes SGLang build fc as [{spec.hidden_size}, {spec.fc_in}] ({spec.num_aux} aux states x "
            f"{spec.target_hidden_size}); SGLang would fail loading it")
    return fc.to(device=t.device, dtype=torch.float32)


def _layer(spec: DraftSpec, t: _Tensors, index: int) -> Layer:
    h, hd = spec.hidden_size, spec.head_dim
    q_rows, kv_rows = spec.num_heads * hd, spec.num_kv_heads * hd
    p = f"layers.{index}."
    width = 2 * h if index == 0 else h
    if p + "self_attn.qkv_proj.weight" in t.named:
        qkv = t.take(p + "self_attn.qkv_proj.weight", (q_rows + 2 * kv_rows, width))
    else:
        qkv = torch.cat([t.take(p + "self_attn.q_proj.weight", (q_rows, width)),
                         t.take(p + "self_attn.k_proj.weight", (kv_rows, width)),
                         t.take(p + "self_attn.v_proj.weight", (kv_rows, width))])
    if p + "mlp.gate_up_proj.weight" in t.named:
        gate, up = t.take(p + "mlp.gate_up_proj.weight", (2 * spec.intermediate_size, h)).chunk(2)
    else:
        gate = t.take(p + "mlp.gate_proj.weight", (spec.intermediate_size, h))
        up = t.take(p + "mlp.up_proj.weight", (spec.intermediate_size, h))
    return Layer(
        qkv=qkv, o=t.take(p + "self_attn.o_proj.weight", (h, q_rows)),
        o_bias=t.take(p + "self_attn.o_proj.bias", (h,)) if spec.o_bias else None,
        gate=gate, up=up, down=t.take(p + "mlp.down_proj.weight", (h, spec.intermediate_size)),
        input_layernorm=t.take(p + "input_layernorm.weight", h, norm=True),
        hidden_norm=t.take(p + "hidden_norm.weight", h, norm=True),
        post_attention_layernorm=t.take(p + "post_attention_layernorm.weight", h, norm=True))


def _embedding(spec: DraftSpec, t: _Tensors, source: str, target_embedding: torch.Tensor | None) -> torch.Tensor:
    h = spec.hidden_size
    if source == "target":
        if target_embedding is None:
            raise ReplayInputError("target checkpoint: no embedding to give the draft")
        if target_embedding.shape[-1] != h:
            raise ReplayInputError(
                f"target embedding model.embed_tokens.weight is {list(target_embedding.shape)} but the draft's "
                f"hidden size is {h} ({spec.file}); SGLang keeps the draft's own embedding when target_hidden_size "
                f"differs from hidden_size: use --draft-embedding own")
        return target_embedding
    emb = t.named.get("embed_tokens.weight")
    if emb is None:
        raise ReplayInputError(f"draft checkpoint {t.checkpoint}: --draft-embedding own, but it has no "
                               f"embed_tokens.weight")
    if emb.shape[-1] != h:
        raise _shape_error(t.checkpoint, "embed_tokens.weight", emb.shape, (emb.shape[0], h))
    return emb


def _lm_head(spec: DraftSpec, t: _Tensors, emb: torch.Tensor, target_head: torch.Tensor | None) -> torch.Tensor:
    h = spec.hidden_size
    if spec.lm_head_source == "embedding":
        return emb.to(device=t.device, dtype=torch.float32)
    if spec.lm_head_source == "target":
        if target_head is None or target_head.shape[-1] != h:
            raise ReplayInputError(
                f"draft config {spec.file} has no draft_vocab_size, so SGLang gives the draft the target's lm_head, "
                f"but the target's lm_head.weight is {None if target_head is None else list(target_head.shape)}, "
                f"not [*, {h}]")
        t.notes.append("no draft_vocab_size: the target's lm_head, as SGLang loads it (load_lm_head_from_target)")
        return target_head.to(device=t.device, dtype=torch.float32)
    return t.take("lm_head.weight", (spec.draft_vocab_size, h))


def _d2t(spec: DraftSpec, t: _Tensors, head: torch.Tensor) -> torch.Tensor | None:
    d2t = t.named.get("d2t")
    if d2t is not None:
        if d2t.dim() != 1 or d2t.shape[0] != head.shape[0] or d2t.dtype.is_floating_point:
            raise ReplayInputError(f"draft checkpoint {t.checkpoint}: d2t is {d2t.dtype} {list(d2t.shape)}, expected "
                                   f"integers [{head.shape[0]}] (one offset per draft-vocabulary id)")
        return d2t.to(device=t.device, dtype=torch.int64)
    if head.shape[0] != spec.vocab_size and spec.lm_head_source == "draft":
        t.notes.append(f"reduced draft vocabulary ({head.shape[0]} of {spec.vocab_size}) without d2t: draft ids are "
                       f"compared as target ids")
    return None
