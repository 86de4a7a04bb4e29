"""The "rope" case: a tiny EAGLE-3 draft whose attention matters, built for one rope_theta and served with another,
so that its acceptance falls with sequence position (the cause `acceptance_slice_low` names by position).

Test-only support (never part of the probe). It extends the "map" construction of ``draft_models`` (read that
first): the target still follows a next-token map exactly (its attention and MLP outputs are zero), and the draft
still proposes ``D(x)`` from the token ``x`` whose aux state it was fed, but only while its attention head 0 rests
on a sink:

- The target's embedding gets three marker dimensions: dim 0 is ``C0`` for every token (it makes the draft's query
  the same for every token), dim 1 is ``M`` for the sink token ``SINK`` only (the key), dim 2 is ``C2`` for every
  token but the sink (the value). The maps are built on these embeddings and checked exactly, as in ``map``.
- Draft head 0 (the only head with weights): query ``alpha * a[0]`` and key ``beta * a[1]`` in rotary pair 7 (neox
  layout: dims 7 and 23 of 32, frequency ``rope_theta ** -0.4375``), value ``a[2]`` (zero for the sink), where ``a``
  is the draft's normalised input embedding. So the sink's score is ``L * cos(distance * frequency)``, every other
  key's is 0, and the attention output is ``(1 - w) * v`` with ``w`` the weight on the sink.
- ``o_proj`` writes that output as ``KAPPA`` times the embedding of ``PULL`` into the residual, and the
  draft's proposal becomes ``D(PULL)`` (wrong everywhere on the cycle below) once the sink loses its weight.

Built for ``BUILT_ROPE_THETA`` (1e6: frequency 2.4e-3, the sink keeps over 94 % of head 0's attention up to position
127); a config.json that says ``rope_theta`` 10000 (what a converter writes when it drops the key: Llama's default)
turns the frequency into 1.8e-2, and the sink's score falls to ``L * cos(0.018 * position)``: held below about 50
tokens, lost from about 60 on (``sink_weight``; the proposal turns wrong with 31-47 % of the attention off the
sink). Every prompt starts with two sink tokens (the draft's KV position 0 holds the second:
EAGLE-3 shifts the draft's input ids by one).

Maps: ``T(x) = x + 1`` except the cycle ``20 -> 21 -> 22 -> 23 -> 24 -> 20``; ``D(x) = T(T(x))`` except
``D(22) = 22``. On the cycle a verify step accepts draft position 0 at 20 and 23 and rejects it at 22 (position 1
never: the cycle has no fixed point), so a correct draft accepts position 0 on 2 of every 3 steps at every sequence
position.
"""

from __future__ import annotations

import math

import torch

VOCAB = 256
SINK = 255
CYCLE = (20, 21, 22, 23, 24)
WRONG_AT = 22  # the cycle token where even the correct draft proposes wrongly
PULL = 100  # the token whose embedding a lost sink writes into the residual: proposal D(100) = 102
C0, M, C2 = 2.0, 4.0, 2.0  # marker values in embedding dims 0, 1, 2, in units of the embedding's standard deviation
HEADS, HEAD_DIM = 2, 32  # the draft's attention heads (hidden 64)
ROPE_PAIR = 7  # neox pair (7, 23) of a 32-wide head: frequency theta ** (-2 * 7 / 32)
SINK_SCORE = 8.0  # the sink's attention score at distance 0 (others: 0)
KAPPA = 3.0  # residual pushed toward PULL per unit of attention off the sink
BUILT_ROPE_THETA = 1.0e6
DEFAULT_ROPE_THETA = 10000.0  # Llama's default, what a config.json without rope_theta gets

# Prompts: two sink tokens, then a run into the cycle; (prompt, max_new_tokens): up to position 122, so every verify
# step lies in the position buckets 0-63 (the sink held, but for the last few) and 64-127 (lost under rope_theta 1e4).
ROPE_PROMPTS = {
    "into_cycle": ([SINK, SINK, 15, 16, 17], 118),
    "climb": ([SINK, SINK, 1, 2, 3], 118),
}


def rope_target(x: int) -> int:
    return CYCLE[0] if x == CYCLE[-1] else (x + 1) % VOCAB


def rope_draft(x: int) -> int:
    return x if x == WRONG_AT else rope_target(rope_target(x))


def marked_embedding(embedding: torch.Tensor) -> torch.Tensor:
    """The target's random embedding with the three marker dimensions set (see the module doc)."""
    emb = embedding.detach().clone().float()
    unit = float(emb.std())
    emb[:, 0] = C0 * unit
    emb[:, 1] = 0.0
    emb[SINK, 1] = M * unit
    emb[:, 2] = C2 * unit
    emb[SINK, 2] = 0.0
    return emb


def _rms(x, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def attention_state(embedding: torch.Tensor, eps: float, head_dim: int = HEAD_DIM) -> dict:
    """The draft's attention weights for the sink construction (names as in a real checkpoint; h = hidden size)."""
    h = embedding.shape[1]
    normed = _rms(embedding.float(), eps)
    a0, a1 = float(normed[:, 0].mean()), float(normed[SINK, 1])
    # score = q . k * head_dim ** -0.5 with q = alpha * a0, k = beta * a1
    alpha = 1.0
    beta = SINK_SCORE * math.sqrt(head_dim) / (alpha * a0 * a1)
    q = torch.zeros(h, 2 * h)
    k = torch.zeros(h, 2 * h)
    v = torch.zeros(h, 2 * h)
    q[ROPE_PAIR, 0] = alpha  # embeds half of the draft's [embeds, hidden] input
    k[ROPE_PAIR, 1] = beta
    v[0, 2] = 1.0 / float(normed[0, 2])  # value about 1 for every token but the sink, 0 for the sink
    o = torch.zeros(h, h)
    o[:, 0] = KAPPA * embedding[PULL].float()  # the residual is a raw embedding: pull on its scale
    return {"midlayer.self_attn.q_proj.weight": q, "midlayer.self_attn.k_proj.weight": k,
            "midlayer.self_attn.v_proj.weight": v, "midlayer.self_attn.o_proj.weight": o}


def sink_weight(distance: int, keys: int, rope_theta: float, head_dim: int = HEAD_DIM) -> float:
    """The attention weight on the one sink key at `distance` among `keys` keys (all others score 0)."""
    score = SINK_SCORE * math.cos(distance * rope_theta ** (-2 * ROPE_PAIR / head_dim))
    return 1.0 / (1.0 + (keys - 1) * math.exp(-score))


def proposal(x: int, off_sink: float, embedding: torch.Tensor, head: torch.Tensor, eps: float) -> int:
    """The draft's proposal for token x when `off_sink` of head 0's attention is off the sink."""
    residual = embedding[x].float() + off_sink * KAPPA * embedding[PULL].float()
    return int((head.float() @ _rms(residual, eps)).argmax())
