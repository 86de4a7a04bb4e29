"""Comparing fingerprints of aux hidden states (pure arithmetic on plain floats; shared by the running probe,
`summarize` and the parity commands).

Tolerances, from measurement (`benchmarks/tp_tolerance.py`): two tensor-parallel ranks that reduce the same bf16
partial sums in different orders (8 partials, 256 x 7168, with massive-activation channels) hold values of which
half differ in the last bit, and their fingerprints differ by 1e-4 to 2e-4 in rms (relative spread) and 4e-7 to
2e-6 in 1 - cosine of the signatures. The tolerances below leave a margin of 50x and 1000x over that, and stay far
under what a real fault gives (a rank holding its partial sum only: spread 1.55 and 1 - cosine 1e-2; a slot
scaled by 1.5: spread 0.4).
"""

import math
from collections.abc import Sequence

# The reference file's format is vocabulary (config.py validates it); kept importable from here.
from ..reference_format import REFERENCE_FORMAT, parse_reference  # noqa: F401

RMS_SPREAD_TOLERANCE = 1e-2  # (max - min) / mean of one slot's rms across ranks, same step
SIGNATURE_COSINE_TOLERANCE = 0.999  # lowest cosine of one slot's signatures across ranks, same step
# A live slot against the training data's reference fingerprint of the same slot (other tokens than served: the
# per-channel structure of a layer, not the numbers, is what is compared).
REFERENCE_COSINE_TOLERANCE = 0.9
REFERENCE_RMS_RATIO = 2.0  # live rms over the reference's, or its inverse, beyond this is a mismatch
# Logging "on change": a slot's fingerprint is logged again when it moved this far from the last one logged.
CHANGE_RMS_RELATIVE = 0.2
CHANGE_SIGNATURE_COSINE = 0.9


def cosine(u: Sequence[float], v: Sequence[float]) -> float | None:
    dot = sum(a * b for a, b in zip(u, v))
    norm = math.sqrt(sum(a * a for a in u)) * math.sqrt(sum(b * b for b in v))
    return dot / norm if norm > 0 and math.isfinite(norm) else None


def rel_diff(dot: float, sum_sq_x: float, sum_sq_y: float) -> float | None:
    """1 - 2 sum(xy) / (sum(x^2) + sum(y^2)) (DeepGEMM's measure, used by SGLang's dump comparator): 0 for equal
    tensors, 1 for orthogonal ones, 2 for opposite ones."""
    total = sum_sq_x + sum_sq_y
    return 1.0 - 2.0 * dot / total if total > 0 else None


def spread(values: Sequence[float]) -> float | None:
    """(max - min) / mean, the relative spread of one statistic across ranks."""
    if not values:
        return None
    mean = sum(values) / len(values)
    if not all(math.isfinite(v) for v in values):
        return math.inf
    return (max(values) - min(values)) / abs(mean) if mean else (0.0 if max(values) == min(values) else math.inf)


def moved(previous: tuple[float, Sequence[float]], current: tuple[float, Sequence[float]]) -> bool:
    """Whether (rms, signature) moved beyond the change tolerance since the previous one."""
    (rms_a, sig_a), (rms_b, sig_b) = previous, current
    if not (math.isfinite(rms_a) and math.isfinite(rms_b)):
        return math.isfinite(rms_a) != math.isfinite(rms_b)
    if abs(rms_b - rms_a) > CHANGE_RMS_RELATIVE * max(abs(rms_a), 1e-30):
        return True
    similarity = cosine(sig_a, sig_b)
    return similarity is not None and similarity < CHANGE_SIGNATURE_COSINE


def identical(a: tuple[float, float, float, Sequence[float]], b: tuple[float, float, float, Sequence[float]]) -> bool:
    """(rms, mean, absmax, signature) of two slots equal to the bit: the same values (e.g. a repeated index)."""
    return all(math.isfinite(x) for x in a[:3]) and tuple(a[:3]) == tuple(b[:3]) and tuple(a[3]) == tuple(b[3])


def rank_disagreement(by_rank: dict[int, tuple[float, Sequence[float]]]) -> dict | None:
    """For one slot at one step, {rank: (rms, signature)}: the disagreement when it exceeds the tolerances
    (rms spread, lowest signature cosine to the lowest rank, the ranks farthest apart), else None."""
    if len(by_rank) < 2:
        return None
    ranks = sorted(by_rank)
    rms = [by_rank[r][0] for r in ranks]
    rms_spread = spread(rms)
    reference = by_rank[ranks[0]][1]
    cosines = {r: cosine(reference, by_rank[r][1]) for r in ranks[1:]}
    lowest = min((c for c in cosines.values() if c is not None), default=None)
    if (rms_spread is None or rms_spread <= RMS_SPREAD_TOLERANCE) and (lowest is None or
                                                                      lowest >= SIGNATURE_COSINE_TOLERANCE):
        return None
    high, low = ranks[rms.index(max(rms))], ranks[rms.index(min(rms))]
    return {"rms_spread": rms_spread, "lowest_signature_cosine": lowest, "rms": dict(zip(ranks, rms)),
            "ranks": sorted({high, low} | {r for r, c in cosines.items() if c is not None
                                           and c < SIGNATURE_COSINE_TOLERANCE} | {ranks[0]})}


def reference_mismatch(slot: int, rms: float, signature: Sequence[float], reference: list) -> dict | None:
    """A live slot against the reference: None when it matches the same training slot, else how far it is and
    which training slot it resembles (None if none)."""
    if slot >= len(reference):
        return None
    own = reference[slot]
    similarity = cosine(signature, own["signature"])
    ratio = rms / own["rms"] if own["rms"] else math.inf
    if similarity is not None and similarity >= REFERENCE_COSINE_TOLERANCE and \
            1 / REFERENCE_RMS_RATIO <= ratio <= REFERENCE_RMS_RATIO:
        return None
    scores = [(cosine(signature, r["signature"]) or -1.0, r.get("slot", i)) for i, r in enumerate(reference)]
    best_cosine, best_slot = max(scores)
    return {"cosine": similarity, "rms_ratio": ratio,
            "resembles": best_slot if best_cosine >= REFERENCE_COSINE_TOLERANCE else None,
            "resembles_cosine": best_cosine}
