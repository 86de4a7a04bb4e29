"""Served acceptance against what the draft's training accuracies promise, per draft position.

Promise (analysis.acceptance): with conditional training accuracies a_1..a_n, draft position k is accepted with
probability r_k = a_1 * ... * a_k, and the mean accept length is 1 + sum_k r_k (bonus token included).

When is served acceptance "below" the promise? Both must hold:
- practically: served mean accept length under TOLERANCE (0.9) of the promised one. Training accuracies are
  measured on the training distribution (and SpecForge's on teacher-forced inputs), so live traffic reaching a few
  per cent less is normal; a tenth less is not. Under SEVERE (0.6, EAGLE_PROBE_COLLAPSE_RATIO's default: the same
  line as acceptance_collapse) the finding is an error, else a warning.
- beyond chance: the shortfall is at least Z (3) standard errors, the standard error being that of a mean of
  `drafts` request-steps under the promised distribution (P(X >= k) = r_k, so E[X] = sum r_k and
  E[X^2] = sum (2k - 1) r_k), one-sided false alarm rate about 0.1 %;
- enough evidence: at least MIN_DRAFTS (64, EAGLE_PROBE_COLLAPSE_MIN_DRAFTS' default) request-steps, where the
  normal approximation holds. A handful of steps never fires it.
Per position the same two tests apply to the rate r_k (binomial standard error); the first position that falls
short says where the chain breaks (position 0: the draft's first guess, i.e. its input or its vocabulary; later
positions only: the draft's own recurrence, e.g. the decode path).
"""

import math
from collections.abc import Sequence

from .acceptance import conditional_accuracies, describe_accuracy, expected_per_position_rate
from .findings import ACCEPTANCE_BELOW_TRAINING, ERROR, WARNING, Finding

TOLERANCE = 0.9
SEVERE = 0.6
Z = 3.0
MIN_DRAFTS = 64


def _shown_z(z: float) -> float:
    """Standard errors short, capped at 999 (a promise of certainty broken gives an infinite z; JSON has no inf)."""
    return round(min(z, 999.0), 2)


def _z(promised: float, served: float, sd: float, n: int) -> float:
    if served >= promised:
        return 0.0
    se = sd / math.sqrt(n) if n else math.inf
    return math.inf if se == 0 else (promised - served) / se


def compare(accuracy, drafts: int, per_position_rate: Sequence[float | None],
            mean_accept_length: float | None, depth_mix: dict[int, int] | None = None,
            drafted: Sequence[int] | None = None) -> dict | None:
    """Served against promised for one rank's acceptance (None without drafts or positions). depth_mix: {depth:
    request-steps} where depth changed from step to step (adaptive depth): the promise is each depth's, weighted by
    its share; drafted: request-steps that drafted each position (each position's own sample size)."""
    positions = len(per_position_rate)
    if not drafts or drafts < 0 or not positions or mean_accept_length is None:
        return None
    promised = expected_per_position_rate(accuracy, positions)
    conditional = conditional_accuracies(accuracy, positions)
    mix = {d: n for d, n in (depth_mix or {positions: drafts}).items() if n > 0} or {positions: drafts}
    total = sum(mix.values())
    # accepted drafts X at depth d: E[X] = sum of r_k over k < d, E[X^2] = sum of (2k + 1) r_k over k < d
    mean_x = sum(n * sum(promised[:d]) for d, n in mix.items()) / total
    square = sum(n * sum((2 * k + 1) * r for k, r in enumerate(promised[:d])) for d, n in mix.items()) / total
    expected = 1.0 + mean_x
    var = max(square - mean_x ** 2, 0.0)
    z_length = _z(expected, mean_accept_length, math.sqrt(var), drafts)
    ratio = mean_accept_length / expected
    rows = []
    for k, (r, a) in enumerate(zip(promised, conditional)):
        served = per_position_rate[k]
        previous = 1.0 if k == 0 else per_position_rate[k - 1]
        served_conditional = (served / previous) if served is not None and previous else None
        n = drafted[k] if drafted and k < len(drafted) else drafts
        z = None if served is None or not n else _z(r, served, math.sqrt(r * (1 - r)), n)
        below = served is not None and z is not None and served < TOLERANCE * r and z >= Z and n >= MIN_DRAFTS
        rows.append({"position": k, "promised_rate": round(r, 6), "served_rate": None if served is None else
                     round(served, 6), "promised_conditional": round(a, 6),
                     "served_conditional": None if served_conditional is None else round(served_conditional, 6),
                     "z": None if z is None else _shown_z(z), "below": below})
    below = ratio < TOLERANCE and z_length >= Z and drafts >= MIN_DRAFTS
    return {"promised_mean_accept_length": round(expected, 6),
            "served_mean_accept_length": round(mean_accept_length, 6),
            "served_over_promised": round(ratio, 6), "z": _shown_z(z_length),
            "drafts": drafts, "positions": positions, "below": below,
            "severity": (ERROR if ratio < SEVERE else WARNING) if below else None,
            "first_short_position": next((row["position"] for row in rows if row["below"]), None),
            "per_position": rows, "tolerance": TOLERANCE, "z_threshold": Z,
            "min_drafts": MIN_DRAFTS}


def where_it_breaks(comparison: dict) -> str:
    k = comparison["first_short_position"]
    if k is None:
        return "no single position falls short beyond chance: the shortfall is spread over the chain"
    if k == 0:
        return ("it falls short from position 0, the draft's first guess, which depends only on what the target "
                "feeds it (aux states, the vocabulary map, the embedding)")
    return (f"positions before {k} hold, position {k} falls short: the draft's first guess is fine and its own "
            f"recurrence is not (the decode or verify path, the draft's KV cache, its positions)")


def below_training_finding(comparison: dict, accuracy, accuracy_source: str, checks: list[dict],
                           next_steps: list[str], where: str) -> Finding:
    """acceptance_below_training: served below the promise and no finding explains it. checks: [{"check", "status":
    clean | problem | not checked | n/a, "detail"}]; next_steps: commands to run, in order."""
    per = "; ".join(f"{row['position']}: {_pct(row['served_rate'])} of {_pct(row['promised_rate'])}"
                    for row in comparison["per_position"])
    clean = [c for c in checks if c["status"] == "clean"]
    unchecked = [c for c in checks if c["status"] == "not checked"]
    clean_text = "; ".join(f"{c['check']} ({c['detail']})" for c in clean) or "none"
    clean_text += "".join(f"; {c['check']} not applicable ({c['detail']})" for c in checks if c["status"] == "n/a")
    unchecked_text = "; ".join(f"{c['check']} ({c['detail']})" for c in unchecked) or "none"
    accuracy_list = [float(v) for v in accuracy]
    message = (
        f"{where}: served mean accept length {comparison['served_mean_accept_length']:.2f} tokens per step (bonus "
        f"included) over {comparison['drafts']} drafts is {comparison['served_over_promised']:.0%} of the "
        f"{comparison['promised_mean_accept_length']:.2f} that {describe_accuracy(accuracy)} promise "
        f"({accuracy_source}); {comparison['z']} standard errors short (tolerance {TOLERANCE:.0%}, {Z:g} standard "
        f"errors). Accepted per draft position, served of promised: {per}; {where_it_breaks(comparison)}. No finding "
        f"explains it. Checks clean: {clean_text}. Not checked: {unchecked_text}. Next: "
        + " Then: ".join(next_steps))
    evidence = dict(promised=comparison["promised_mean_accept_length"], served=comparison["served_mean_accept_length"],
                    served_over_promised=comparison["served_over_promised"], z=comparison["z"],
                    drafts=comparison["drafts"], draft_accuracy=accuracy_list, accuracy_source=accuracy_source,
                    per_position=comparison["per_position"], first_short_position=comparison["first_short_position"],
                    checks=checks, next_steps=next_steps)
    return Finding(ACCEPTANCE_BELOW_TRAINING, comparison["severity"], message, tuple(sorted(evidence.items())))


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"
