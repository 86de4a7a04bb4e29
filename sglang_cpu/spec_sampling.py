"""A pure-torch stand-in for SGLang's ``tree_speculative_sampling_target_only`` (test-only, CPU).

SGLang 0.5.23 verifies a sampled (temperature > 0) EAGLE draft tree with a CUDA kernel
(``sglang.kernels.ops.speculative.sampling``, source ``jit/include/sgl_kernel/speculative/sampling.cuh``);
off CUDA the module attribute ``sglang.srt.speculative.eagle_utils.tree_speculative_sampling_target_only`` is
None and the scheduler fails on the first sampled request. ``tree_speculative_sampling_target_only`` below takes
the same keyword arguments as ``eagle_utils.eagle_sample``'s call and implements the kernel's documented rule,
written here from that contract (one Python loop per request; trees have at most a few dozen nodes):

Per request b (``n`` = draft tokens per request, ``S`` = ``accept_index.shape[1]`` = spec steps + 1):

- The root (node 0, the bonus token of the previous step) is always kept: ``accept_index[b, 0] =
  retrive_index[b, 0]``. ``row`` (the target distribution in use) starts at node 0, the coin at
  ``uniform_samples[b, 0]``, the running mass ``acc`` at 0.
- For each depth 1..S-1: walk the children of the last accepted node in sibling order
  (``retrive_next_token`` then ``retrive_next_sibling``). For child c with token t and ``p = target_probs[b,
  row, t]``: ``acc += p``; accept c iff ``p > 0`` and (``coin < acc / threshold_acc`` or ``p >=
  threshold_single``). The coin is the same for all siblings and ``acc`` accumulates over them, so with the
  default thresholds (1, 1) child k is accepted with probability ``q(t_k)``: the coin samples a token from the
  target distribution and the draft is right iff it is one of the siblings. On acceptance: ``predicts[last] =
  t`` (``last`` = the parent's global index), one more accepted draft, ``accept_index[b, k] =
  retrive_index[b, c]``, ``row = c``, ``coin = uniform_samples[b, c]``, ``acc = 0``, next depth. On
  rejection: ``draft_probs[b, row, t] = p`` (the kernel marks the rejected token in the mutable
  ``draft_probs``, zeros on entry) and the next sibling is tried. No child accepted: the walk ends.
- ``accept_token_num[b]`` = number of accepted drafts (bonus excluded).
- Bonus token: from ``r = relu(target_probs[b, row] - draft_probs[b, row])`` (the draft term is dropped when
  every depth was accepted), ``u = uniform_samples_for_final_sampling[b] * sum(r)``; the sampled id is the first
  with ``cumsum(r) > u``; if none (u rounded to the total), the last id with ``r > 0``, else ``vocab - 1``.
  ``predicts[last] = sampled``.

``deterministic`` has no effect here (the walk is sequential). Entries of ``predicts`` / ``accept_index`` that
the walk does not write keep what the caller put there (SGLang: zeros / -1).
"""

from __future__ import annotations

import torch


def tree_speculative_sampling_target_only(
    predicts: torch.Tensor,  # mutable, (bs * n,) int32
    accept_index: torch.Tensor,  # mutable, (bs, S) int32
    accept_token_num: torch.Tensor,  # mutable, (bs,) int32
    candidates: torch.Tensor,  # (bs, n) int64
    retrive_index: torch.Tensor,  # (bs, n) int64, global node ids
    retrive_next_token: torch.Tensor,  # (bs, n) int64, first child (-1: none)
    retrive_next_sibling: torch.Tensor,  # (bs, n) int64, next sibling (-1: none)
    uniform_samples: torch.Tensor,  # (bs, n) float32 coins in [0, 1)
    uniform_samples_for_final_sampling: torch.Tensor,  # (bs,) float32
    target_probs: torch.Tensor,  # (bs, n, vocab) float32
    draft_probs: torch.Tensor,  # mutable, (bs, n, vocab) float32 (zeros from SGLang's target-only call)
    threshold_single: float = 1.0,
    threshold_acc: float = 1.0,
    deterministic: bool = True,
) -> None:
    """Verify a draft tree against the target's probabilities only; writes predicts, accept_index and
    accept_token_num in place (see the module doc for the rule)."""
    del deterministic
    if not (0.0 <= threshold_single <= 1.0 and 0.0 <= threshold_acc <= 1.0):
        raise ValueError("thresholds must be in [0, 1]")
    threshold_acc = max(float(threshold_acc), 1e-9)
    bs, n = candidates.shape
    num_spec = accept_index.shape[1]
    if bs == 0:
        return
    cand = candidates.tolist()
    r_index = retrive_index.tolist()
    r_next = retrive_next_token.tolist()
    r_sibling = retrive_next_sibling.tolist()
    coins = uniform_samples.tolist()
    final_coins = uniform_samples_for_final_sampling.reshape(-1).tolist()
    # The same float32 arithmetic as the kernel for the running mass and the comparisons.
    f32 = torch.float32
    for b in range(bs):
        row = 0
        coin = torch.tensor(coins[b][0], dtype=f32)
        acc = torch.zeros((), dtype=f32)
        last = r_index[b][0]
        accept_index[b, 0] = last
        accepted = 0
        cur = 0
        for _ in range(1, num_spec):
            cur = r_next[b][cur]
            while cur != -1:
                token = cand[b][cur]
                p = target_probs[b, row, token].to(f32)
                acc = acc + p
                if p > 0 and (coin < acc / threshold_acc or p >= threshold_single):
                    acc = torch.zeros((), dtype=f32)
                    row = cur
                    coin = torch.tensor(coins[b][cur], dtype=f32)
                    predicts[last] = token
                    accepted += 1
                    accept_index[b, accepted] = r_index[b][cur]
                    last = r_index[b][cur]
                    break
                draft_probs[b, row, token] = target_probs[b, row, token]
                cur = r_sibling[b][cur]
            if cur == -1:
                break
        accept_token_num[b] = accepted
        q = target_probs[b, row].to(f32)
        residual = q if accepted == num_spec - 1 else (q - draft_probs[b, row].to(f32)).clamp(min=0)
        predicts[last] = sample_from_residual(residual, final_coins[b])


def sample_from_residual(residual: torch.Tensor, coin: float) -> int:
    """The kernel's final draw: the first id whose running sum of ``residual`` exceeds ``coin * sum(residual)``;
    the last id with positive mass when rounding leaves none; ``len - 1`` for an all-zero residual."""
    residual = residual.to(torch.float32)
    u = torch.tensor(coin, dtype=torch.float32) * residual.sum()
    above = torch.nonzero(torch.cumsum(residual, 0) > u)
    if above.numel():
        return int(above[0, 0])
    positive = torch.nonzero(residual > 0)
    return int(positive[-1, 0]) if positive.numel() else int(residual.numel() - 1)


def accept_length_distribution(target_probs, candidates, retrive_next_token, retrive_next_sibling, num_spec):
    """Exact probabilities of 0..num_spec-1 accepted drafts for one request's tree under the rule with default
    thresholds (1, 1) and independent uniform coins: a child token t of the current node is accepted with
    probability q(t) summed over siblings in order (the first sibling whose running mass covers the coin).
    target_probs: (n, vocab); candidates, retrive_next_token, retrive_next_sibling: (n,). Returns a list of
    num_spec floats. The coin lands in [running mass before c, running mass after c) for child c (clipped to
    [0, 1)), as in the kernel."""
    out = [0.0] * num_spec
    cand = [int(x) for x in candidates]
    nxt = [int(x) for x in retrive_next_token]
    sib = [int(x) for x in retrive_next_sibling]

    def walk(node, depth, mass):
        if depth == num_spec - 1:
            out[depth] += mass
            return
        child = nxt[node]
        left, running = mass, 0.0
        while child != -1:
            p = float(target_probs[node, cand[child]])
            share = min(running + p, 1.0) - min(running, 1.0)
            running += p
            if p > 0 and share > 0:
                walk(child, depth + 1, mass * share)
                left -= mass * share
            child = sib[child]
        out[depth] += max(left, 0.0)

    walk(0, 0, 1.0)
    return out


# Test-only: with this variable naming a file, every call made through `recording` appends one JSON line per
# request: the tree (candidates, first-child and next-sibling links), the target probability each child has under
# its parent's row (child_probs[parent][child]), S, and what the call decided (accepted drafts).
DUMP_ENV = "SGLANG_CPU_SPEC_SAMPLING_DUMP"


def recording(fn, path):
    """``fn`` wrapped to append each call's inputs and decisions to ``path`` (JSON lines)."""
    import json

    def wrapper(**kwargs):
        fn(**kwargs)
        cand, nxt, sib = kwargs["candidates"], kwargs["retrive_next_token"], kwargs["retrive_next_sibling"]
        probs = kwargs["target_probs"]
        bs, n = cand.shape
        with open(path, "a", encoding="utf-8") as handle:
            for b in range(bs):
                child_probs = probs[b][:, cand[b]].tolist()  # [parent row][child] -> q_parent(token of child)
                handle.write(json.dumps({
                    "candidates": cand[b].tolist(), "next_token": nxt[b].tolist(), "next_sibling": sib[b].tolist(),
                    "child_probs": child_probs, "num_spec": int(kwargs["accept_index"].shape[1]),
                    "accepted": int(kwargs["accept_token_num"][b]),
                    "thresholds": [kwargs.get("threshold_single", 1.0), kwargs.get("threshold_acc", 1.0)],
                }) + "\n")

    return wrapper


def accept_length_distribution_from_record(record):
    """accept_length_distribution for one dumped request row (see `recording`)."""
    n = len(record["candidates"])
    # child_probs[parent][child] plays target_probs[parent, candidates[child]]: index by child position.
    table = torch.tensor(record["child_probs"])
    return accept_length_distribution(table, list(range(n)), record["next_token"], record["next_sibling"],
                                      record["num_spec"])


# -- the renormalisations a sampled verify applies when its batch asks for top-k or top-p (test-only, CPU) ---------
# SGLang 0.5.23's eagle_sample calls `top_k_renorm_prob` / `top_p_renorm_prob` (flashinfer's top_k_renorm_probs and
# top_p_renorm_probs on CUDA; None here) whenever a request of the batch sets them, and a greedy request does (its
# temperature 0 is served as top_k 1): a batch of greedy and sampled requests needs both. Their contract: keep the
# probabilities at or above the k-th largest (top-k), or the largest ones whose mass before them is under p
# (top-p), zero the rest, renormalise each row to 1.

def top_k_renorm_prob(probs: torch.Tensor, top_ks: torch.Tensor) -> torch.Tensor:
    ranked = probs.sort(dim=-1, descending=True).values
    k = top_ks.to(torch.long).clamp(1, probs.shape[-1]).view(-1, 1)
    pivot = ranked.gather(-1, k - 1)
    kept = torch.where(probs >= pivot, probs, torch.zeros_like(probs))
    return kept / kept.sum(dim=-1, keepdim=True)


def top_p_renorm_prob(probs: torch.Tensor, top_ps: torch.Tensor) -> torch.Tensor:
    ranked, order = probs.sort(dim=-1, descending=True)
    before = ranked.cumsum(dim=-1) - ranked  # the mass of the larger ones
    keep_ranked = before < top_ps.to(probs.dtype).view(-1, 1)
    keep_ranked[..., 0] = True
    keep = torch.zeros_like(keep_ranked).scatter(-1, order, keep_ranked)
    kept = torch.where(keep, probs, torch.zeros_like(probs))
    return kept / kept.sum(dim=-1, keepdim=True)
