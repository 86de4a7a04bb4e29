"""Verify against prefill: are the aux states a target verify forward fed the draft, at its committed rows, the ones a
prefill of the same tokens gives? (`eagle-probe consistency`.) Pure rules over per-row, per-slot differences.

The measure is SGLang's dump comparator's (from DeepGEMM): rel_diff = 1 - 2 Σxy / (Σx² + Σy²) over one row of one
slot (H values), in float64. It is 0 for equal rows, about (relative error)² / 2 for rounding noise, and 1 for
unrelated rows of equal norm; a row shifted by one is near 1 - cos(neighbouring tokens' states).

Tolerances, from measurement (docs/commands/consistency.md, `benchmarks/verify_tolerance.py`): on a correctly wired tiny
CPU server (float32, random weights, SGLang 0.5.23 torch_native, 145 committed verify rows x 3 slots) the largest
rel_diff between a verify row and the prefill of the same tokens was 8.8e-14 (MEASURED_FP32: different attention
shapes and reduction orders, nothing else); the same rows shifted by one gave 1.2 to 1.3. Rounding noise in rel_diff
scales with the square of the dtype's unit roundoff, so that figure times (2^-8 / 2^-24)^2 = 2^32 is the expected
noise in bfloat16 (3.8e-4; float16: 2^26). Each tolerance is MARGIN times the expected noise, at least FLOOR_FP32
(float32 on other kernels than the CPU's) and at most CAP, so that a row shifted onto a neighbour whose states have
a cosine up to 0.99 is still named.
"""

from dataclasses import dataclass

from .findings import VERIFY_PREFILL_MISMATCH, Finding

MEASURED_FP32 = 8.8e-14  # largest rel_diff, verify row against prefill, clean float32 server (see the docstring)
MARGIN = 10.0
FLOOR_FP32 = 1e-9
CAP = 1e-2
_ROUNDOFF_SQUARED_RATIO = {"float32": 1.0, "bfloat16": 2.0 ** 32, "float16": 2.0 ** 26}


def tolerance(dtype: str) -> float:
    """The largest rel_diff that is still noise for states served in `dtype` (an unknown dtype: bfloat16's)."""
    ratio = _ROUNDOFF_SQUARED_RATIO.get(dtype, _ROUNDOFF_SQUARED_RATIO["bfloat16"])
    return min(max(MEASURED_FP32 * ratio * MARGIN, FLOOR_FP32), CAP)


def rel_diff(sxy: float, sxx: float, syy: float) -> float:
    """1 - 2 Σxy / (Σx² + Σy²); 0 for two zero rows."""
    total = sxx + syy
    return 0.0 if total == 0 else 1.0 - 2.0 * sxy / total


@dataclass(frozen=True)
class RowDiff:
    """One compared row of one slot: where it was served and how far the prefill's row is."""

    slot: int
    hf_index: int  # the slot's HuggingFace hidden_states index
    mode: str  # the served forward's mode (TARGET_VERIFY)
    position: int
    step: int  # the target forward's number in its process (the dump's "step")
    tp_rank: int
    rel_diff: float
    max_abs: float


def mismatches(rows: list[RowDiff], dtype: str) -> list[RowDiff]:
    limit = tolerance(dtype)
    return [row for row in rows if not row.rel_diff <= limit]  # NaN is a mismatch


def findings(rows: list[RowDiff], dtype: str, shown: int = 8) -> list[Finding]:
    """One error per slot whose rows differ from prefill beyond the tolerance."""
    limit = tolerance(dtype)
    by_slot: dict[int, list[RowDiff]] = {}
    for row in mismatches(rows, dtype):
        by_slot.setdefault(row.slot, []).append(row)
    out = []
    for slot, bad in sorted(by_slot.items()):
        compared = sum(1 for row in rows if row.slot == slot)
        finite = [row for row in bad if row.rel_diff == row.rel_diff]
        worst = max(finite, key=lambda row: row.rel_diff) if finite else bad[0]
        nan = f" ({len(bad) - len(finite)} rows not finite)" if len(finite) < len(bad) else ""
        modes = sorted({row.mode for row in bad})
        listed = ", ".join(f"(position {r.position}, step {r.step})" for r in bad[:shown])
        more = f" and {len(bad) - shown} more" if len(bad) > shown else ""
        message = (f"aux slot {slot} (hidden_states[{bad[0].hf_index}]) of {'/'.join(modes)} forwards differs from a "
                   f"prefill of the same tokens at {len(bad)} of {compared} committed rows: {listed}{more}{nan}; "
                   f"largest rel_diff {worst.rel_diff:.3g} (tolerance {limit:.3g} for {dtype}), largest |difference| "
                   f"{worst.max_abs:.3g}. The draft is fed other states on the decode path than in prefill (its "
                   f"training data): look for an off-by-one or stale buffer in the verify path's aux capture")
        evidence = (("slot", slot), ("hf_index", bad[0].hf_index), ("modes", modes),
                    ("rows", [{"position": r.position, "step": r.step, "tp_rank": r.tp_rank,
                               "rel_diff": r.rel_diff, "max_abs": r.max_abs} for r in bad]),
                    ("compared", compared), ("largest_rel_diff", worst.rel_diff), ("tolerance", limit),
                    ("dtype", dtype))
        out.append(Finding(VERIFY_PREFILL_MISMATCH, "error", message, evidence))
    return out
