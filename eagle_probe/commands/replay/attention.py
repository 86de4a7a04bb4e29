"""The replayed draft's attention: causal within each request, over many requests at once. Requests (runs of
consecutive rows) are padded into batches whose score tensors stay under a size bound, longest first, so that one
scaled-dot-product call serves a batch; the gather indices and key masks are computed once per set of rows."""

from collections.abc import Sequence

import torch
import torch.nn.functional as F

ATTENTION_ELEMENTS = 1 << 26  # padded attention scores per batched SDPA call (bounds memory)
Groups = list[tuple[torch.Tensor, torch.Tensor]]  # (gather index [B, L] into rows + 1 pad row, key mask [B, L])


def attention_groups(segments: Sequence[tuple[int, int]], heads: int, device) -> Groups:
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


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, groups: Groups, kv_repeat: int) -> torch.Tensor:
    """q [N, heads, hd], k and v [N, kv_heads, hd] -> [N, heads, hd]; each kv head serves kv_repeat query heads."""
    out = torch.empty_like(q)
    pad = lambda t: torch.cat([t, t.new_zeros((1,) + t.shape[1:])])  # noqa: E731
    qp, kp, vp = pad(q), pad(k), pad(v)
    for index, mask in groups:
        length = index.shape[1]
        qb = qp[index].transpose(1, 2)  # [B, heads, L, hd]
        kb, vb = kp[index].transpose(1, 2), vp[index].transpose(1, 2)
        if kv_repeat > 1:
            kb, vb = kb.repeat_interleave(kv_repeat, dim=1), vb.repeat_interleave(kv_repeat, dim=1)
        causal = torch.ones(length, length, dtype=torch.bool, device=q.device).tril()
        allowed = (causal[None] & mask[:, None, :])[:, None]
        ob = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=allowed).transpose(1, 2)
        out[index[mask]] = ob[mask]
    return out
