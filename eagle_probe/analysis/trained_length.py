"""Acceptance past the draft's trained length (acceptance_past_trained_length): the position slices
(analysis.slices, dimension "position": the sequence position of a chain's first draft token, log2 buckets) split at
the draft's trained sequence length L (eagle_probe.draft_dir says where L came from).

Within: buckets that end before L; beyond: buckets that start at L or later; a bucket that straddles L is left out
(its positions are on both sides; said in the result). Per draft position, the two sides' acceptance is compared with
analysis.slices' test (one-sided two-proportion z-test, at least MIN_REQUEST_STEPS request-steps on each side,
Bonferroni over the positions tested, a gap of at least MIN_GAP with beyond at most MAX_RATIO of within): a drop that
passes it is named with both rates and L; acceptance that holds up past L is not (speculators PR #684 measured an
EAGLE-3 draft fall from 2.30 at 2k tokens of context to 1.08 at 20k; SpecForge #289).
"""


from .findings import ACCEPTANCE_PAST_TRAINED_LENGTH, CODES, Finding
from .slices import ALPHA, MAX_RATIO, MIN_GAP, MIN_REQUEST_STEPS, UNKNOWN, _p_lower

TEST_NAME = (f"per draft position, one-sided two-proportion z-test of the request-steps beyond the trained length "
             f"against those within it; at least {MIN_REQUEST_STEPS} on each side; Bonferroni: p < {ALPHA} / positions "
             f"tested; a gap of at least {MIN_GAP} with beyond at most {MAX_RATIO:.0%} of within")


def bucket_range(label: str) -> tuple[int, int | None] | None:
    """'64-127' -> (64, 127); '65536+' -> (65536, None); unknown or unreadable -> None."""
    if label == UNKNOWN:
        return None
    try:
        if label.endswith("+"):
            return int(label[:-1]), None
        low, high = label.split("-")
        return int(low), int(high)
    except ValueError:
        return None


def _side(buckets: dict[str, dict], names: list[str], positions: int) -> dict:
    n = sum(buckets[b]["request_steps"] for b in names)
    accepted = [sum(_at(buckets[b].get("accepted"), k) for b in names) for k in range(positions)]
    return {"buckets": names, "request_steps": n, "accepted": accepted,
            "per_position_rate": [round(a / n, 4) if n else None for a in accepted],
            "mean_accept_length": round(1 + sum(accepted) / n, 4) if n else None}


def _at(values, k):
    return values[k] if values and k < len(values) and isinstance(values[k], int) else 0


def compare(position_slices: dict[str, dict], length: int, positions: int) -> dict | None:
    """Within against beyond `length` (None: no request-step on one side). `low` names the most significant position
    that passes the test, else None."""
    within, beyond, straddling = [], [], []
    for label, counts in position_slices.items():
        span = bucket_range(label)
        if span is None or not isinstance(counts.get("request_steps"), int) or counts["request_steps"] <= 0:
            continue
        low, high = span
        if high is not None and high < length:
            within.append(label)
        elif low >= length:
            beyond.append(label)
        else:
            straddling.append(label)
    if not within or not beyond:
        return None
    a, b = _side(position_slices, within, positions), _side(position_slices, beyond, positions)
    tested, hits = 0, []
    for k in range(positions):
        n1, s1, n2, s2 = b["request_steps"], b["accepted"][k], a["request_steps"], a["accepted"][k]
        if n1 < MIN_REQUEST_STEPS or n2 < MIN_REQUEST_STEPS:
            continue
        tested += 1
        r1, r2 = s1 / n1, s2 / n2
        if r2 - r1 >= MIN_GAP and r1 <= MAX_RATIO * r2:
            hits.append((_p_lower(s1, n1, s2, n2), k, r1, r2))
    hits = [h for h in hits if h[0] < ALPHA / max(tested, 1)]
    best = min(hits) if hits else None
    return {"trained_length": length, "within": a, "beyond": b, "straddling": straddling, "tests": tested,
            "test": TEST_NAME, "low": None if best is None else {
                "position": best[1], "beyond_rate": round(best[2], 4), "within_rate": round(best[3], 4),
                "p_value": best[0]}}


def past_length_finding(result: dict, source: str, where: str) -> Finding:
    low, a, b = result["low"], result["within"], result["beyond"]
    message = (
        f"{where}: acceptance falls past the draft's trained length {result['trained_length']} ({source}): at draft "
        f"position {low['position']} (0-based) {low['beyond_rate']:.1%} over {b['request_steps']} request-steps at "
        f"sequence positions {', '.join(b['buckets'])} (beyond), against {low['within_rate']:.1%} over "
        f"{a['request_steps']} within it ({', '.join(a['buckets'])}); mean accept length {b['mean_accept_length']} "
        f"beyond against {a['mean_accept_length']} within (p = {low['p_value']:.2g}, {result['tests']} tests; "
        f"{result['test']})"
        + (f"; left out, straddling the length: {', '.join(result['straddling'])}" if result["straddling"] else "")
        + ". The draft serves contexts longer than it was trained on: train it on longer sequences (SpecForge "
          "--max-length), cap the context it drafts for, or check its RoPE scaling against the target's.")
    evidence = {"trained_length": result["trained_length"], "trained_length_source": source,
                "position": low["position"], "beyond_rate": low["beyond_rate"], "within_rate": low["within_rate"],
                "beyond_request_steps": b["request_steps"], "within_request_steps": a["request_steps"],
                "beyond_buckets": b["buckets"], "within_buckets": a["buckets"],
                "beyond_mean_accept_length": b["mean_accept_length"],
                "within_mean_accept_length": a["mean_accept_length"], "straddling": result["straddling"],
                "p_value": float(f"{low['p_value']:.3g}"), "tests": result["tests"], "test": result["test"]}
    return Finding(ACCEPTANCE_PAST_TRAINED_LENGTH, CODES[ACCEPTANCE_PAST_TRAINED_LENGTH][0], message,
                   tuple(sorted(evidence.items())))
