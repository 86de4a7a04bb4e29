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

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .attention import Groups, attend, attention_groups
from .rope import apply_rope, rope_tables
from .spec import ReplayInputError
from .weights import DraftWeights, build_weights

HEAD_ROWS = 4096  # rows per lm_head matmul


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


@dataclass
class Prepared:
    """What does not depend on the wiring, computed once for a set of rows."""

    rows: int
    embed_qkv: torch.Tensor  # layer 0's q/k/v contribution of the normalised embeddings [rows, q + 2 kv]
    cos: torch.Tensor
    sin: torch.Tensor
    groups: Groups  # per batch of requests: (gather index into rows + 1 pad row, key mask)


class TorchDraft:
    """The draft's first step over many rows at once; `prepare` once, then `predict` per wiring."""

    def __init__(self, weights: DraftWeights, device):
        self.w = weights
        self.spec = weights.spec
        self.device = torch.device(device)

    def prepare(self, next_tokens: torch.Tensor, positions: torch.Tensor,
                segments: Sequence[tuple[int, int]]) -> Prepared:
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
                        attention_groups(segments, s.num_heads, self.device))

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

    def _layer(self, index: int, hidden: torch.Tensor, residual: torch.Tensor | None, prepared: Prepared):
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
        attended = attend(q, k, v.reshape(n, s.num_kv_heads, hd), prepared.groups,
                          s.num_heads // s.num_kv_heads).reshape(n, q_rows)
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
              label_draft_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
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


def load_torch_draft(directory: str, target_embedding: torch.Tensor | None, target_head: torch.Tensor | None,
                     embedding: str | None = None, device="cpu") -> TorchDraft:
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
