"""Vocabulary coverage: the share of the target's verified tokens that the draft can propose at all.

An EAGLE-3 draft proposes only target ids in its hot vocabulary: draft id i is target id i + d2t[i] (SGLang's
`hot_token_id`); with no d2t, draft id i is used as target id i, so the hot vocabulary is 0..draft_vocab_size-1; a
draft over the target's whole vocabulary (draft_vocab_size equal to the target's, or none: the target's lm_head) has
every id. Every token a verify step commits (accepted drafts and the bonus token) is what the target produced, i.e.
what the draft had to propose; the accepted drafts are hot by construction. So over any verify steps with
`in_vocab` hot tokens of `total`:

    accepted drafts <= in_vocab  ->  (L - 1) / L <= coverage  ->  L <= 1 / (1 - coverage)

where L is the mean accept length (bonus included). The cap holds whatever the draft's quality; a perfect draft
reaches it only where the target's tokens are hot.

When coverage is the cause (draft_vocab_coverage_low), either:
- the coverage is low: its upper confidence bound (Z standard errors) is under LOW (0.9) over at least MIN_TOKENS
  sampled tokens; SpecForge's default 32k hot vocabulary covers about 95 % of chat traffic of Llama-3's 128k;
- or it binds: served acceptance is below the promise (or unknown promise: not judged) and the served share of
  tokens that were accepted drafts, (L - 1) / L, reaches NEAR (0.9) of the coverage: the draft accepts nearly every
  hot token, so the vocabulary, not the draft, limits acceptance.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .findings import DRAFT_VOCAB_COVERAGE_LOW, Finding, _finding

LOW = 0.9
NEAR = 0.9
Z = 3.0
MIN_TOKENS = 200

MAP_FULL = "full"  # the draft predicts over the target's whole vocabulary
MAP_D2T = "d2t"  # the checkpoint's d2t: draft id i -> target id i + d2t[i]
MAP_NONE = "none"  # no d2t and a smaller draft vocabulary: draft id i used as target id i


def hot_ids(draft_vocab_size: int | None, target_vocab_size: int | None,
            d2t: Sequence[int] | None) -> tuple[str, tuple[int, ...] | None]:
    """(map kind, the target ids the draft can propose); ids None for MAP_FULL. Ids outside [0, target vocabulary)
    are dropped (a bad map: draft_vocab_map_invalid says so); duplicates count once."""
    if d2t is not None:
        limit = target_vocab_size if target_vocab_size is not None else math.inf
        ids = {i + int(offset) for i, offset in enumerate(d2t)}
        return MAP_D2T, tuple(sorted(t for t in ids if 0 <= t < limit))
    if draft_vocab_size is None or target_vocab_size is None or draft_vocab_size >= target_vocab_size:
        return MAP_FULL, None
    return MAP_NONE, tuple(range(draft_vocab_size))


def in_vocab_table(target_vocab_size: int, ids: Sequence[int]) -> bytearray:
    """One byte per target id: 1 where the draft can propose it (summing table[t] over tokens counts the hot ones)."""
    table = bytearray(target_vocab_size)
    for t in ids:
        table[t] = 1
    return table


def describe_map(kind: str, hot_size: int | None, draft_vocab_size: int | None) -> str:
    if kind == MAP_FULL:
        return "the target's whole vocabulary"
    if kind == MAP_NONE:
        return f"no d2t: draft ids used as target ids 0..{draft_vocab_size - 1}" if draft_vocab_size else "no d2t"
    return f"{hot_size} target ids through d2t" if kind == MAP_D2T else "the draft's vocabulary"


def length_cap(coverage: float, positions: int | None = None) -> float | None:
    """The largest mean accept length (bonus included) this coverage allows: 1 / (1 - coverage), and no more than
    positions + 1 (None: unbounded, full coverage with no known chain length)."""
    cap = math.inf if coverage >= 1 else 1.0 / (1.0 - coverage)
    if positions:
        cap = min(cap, positions + 1.0)
    return None if math.isinf(cap) else cap


def upper_bound(in_vocab: int, total: int) -> float:
    coverage = in_vocab / total
    return coverage + Z * math.sqrt(max(coverage * (1 - coverage), 0.25 / total) / total)


def served_share(mean_accept_length: float) -> float:
    """The share of committed tokens that were accepted drafts: (L - 1) / L."""
    return (mean_accept_length - 1.0) / mean_accept_length if mean_accept_length > 0 else 0.0


@dataclass(frozen=True)
class Served:
    """The acceptance served beside the coverage: mean accept length (bonus included), the deepest draft position,
    and whether it is below what the draft's accuracy promises."""

    mean_accept_length: float | None = None
    positions: int | None = None
    below_promise: bool = False


def coverage_finding(in_vocab: int, total: int, map_kind: str, hot_size: int | None,
                     draft_vocab_size: int | None, where: str, served_by: Served = Served()) -> Finding | None:
    """draft_vocab_coverage_low, or None (too few tokens, or the coverage neither low nor binding)."""
    mean_accept_length, positions, below_promise = (served_by.mean_accept_length, served_by.positions,
                                                    served_by.below_promise)
    if total < MIN_TOKENS or total <= 0 or map_kind == MAP_FULL:
        return None
    coverage = in_vocab / total
    low = upper_bound(in_vocab, total) < LOW
    binding = (below_promise and mean_accept_length is not None
               and served_share(mean_accept_length) >= NEAR * coverage)
    if not (low or binding):
        return None
    cap = length_cap(coverage, positions)
    cap_text = "no cap" if cap is None else f"at most {cap:.2f}"
    served = ""
    if mean_accept_length is not None:
        served = (f"; served {mean_accept_length:.2f}, i.e. {served_share(mean_accept_length):.1%} of the tokens "
                  f"were accepted drafts" + (" (at the cap: the vocabulary, not the draft, limits acceptance)"
                                              if binding else ""))
    fix = ("ship the d2t map the training wrote (draft_vocab_map_missing)" if map_kind == MAP_NONE else
           "rebuild the hot vocabulary (SpecForge's vocabulary mapping) from data like the served traffic, or train "
           "the draft with a larger draft_vocab_size or over the target's full vocabulary")
    return _finding(
        DRAFT_VOCAB_COVERAGE_LOW,
        f"{where}: {in_vocab} of {total} sampled verified tokens ({coverage:.1%}) lie inside the draft's vocabulary "
        f"({describe_map(map_kind, hot_size, draft_vocab_size)}); the draft can never propose the other "
        f"{1 - coverage:.1%}, which caps the mean accept length at {cap_text} tokens per step (bonus included)"
        f"{served}. Fix: {fix}.",
        in_vocab=in_vocab, verified_tokens=total, coverage=round(coverage, 6), map=map_kind, hot_vocab_size=hot_size,
        draft_vocab_size=draft_vocab_size, mean_accept_length_cap=None if cap is None else round(cap, 4),
        served_mean_accept_length=None if mean_accept_length is None else round(mean_accept_length, 4),
        low=low, binding=binding)
