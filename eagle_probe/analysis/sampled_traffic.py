"""Greedy and sampled traffic apart (the `sampling` slice: greedy, temp<=0.5, temp<=1, temp>1), so that a finding on
acceptance says which traffic it judged, and a shortfall that sampled traffic alone explains is named as such, never
blamed on the layers.

Why sampled traffic accepts less, whatever the wiring: at temperature > 0 SGLang verifies by the target's
probabilities (tree_speculative_sampling_target_only: a draft token t is accepted with probability p_target(t) under
the request's temperature, top-k and top-p, and the bonus token is sampled from the residual), where greedy verify
accepts t whenever it is the target's argmax. A draft that matches the argmax 80 % of the time is accepted at about
the argmax's mean probability, lower the flatter the target's distribution."""


from .slices import GREEDY, UNKNOWN


def split(sampling: dict[str, dict] | None) -> dict[str, dict]:
    """{"greedy": counts, "sampled": counts} from a `sampling` slice ({bucket: {"request_steps", "accepted",
    "drafted"}}); counts: request_steps, accepted_drafts, first_position_rate, mean_accept_length. Unknown buckets are
    left out; a side with no request-steps is left out."""
    out: dict[str, dict] = {}
    for bucket, counts in (sampling or {}).items():
        if bucket == UNKNOWN or not isinstance(counts, dict):
            continue
        side = out.setdefault("greedy" if bucket == GREEDY else "sampled",
                              {"request_steps": 0, "accepted_drafts": 0, "first_accepted": 0, "first_drafted": 0})
        steps = counts.get("request_steps") or 0
        accepted = counts.get("accepted") or []
        drafted = counts.get("drafted")
        side["request_steps"] += steps
        side["accepted_drafts"] += sum(accepted)  # accepted[k]: request-steps that accepted position k
        side["first_accepted"] += accepted[0] if accepted else 0
        side["first_drafted"] += (drafted[0] if drafted else 0) if drafted is not None else steps
    for name in list(out):
        c = out[name]
        if not c["request_steps"]:
            del out[name]
            continue
        c["first_position_rate"] = c["first_accepted"] / c["first_drafted"] if c["first_drafted"] else None
        c["mean_accept_length"] = 1 + c["accepted_drafts"] / c["request_steps"]
    return out


def judged(traffic: dict[str, dict]) -> str:
    """Which traffic a judgement over all request-steps judged: greedy, sampled, or mixed (with the greedy share)."""
    greedy = (traffic.get("greedy") or {}).get("request_steps", 0)
    sampled = (traffic.get("sampled") or {}).get("request_steps", 0)
    if not greedy and not sampled:
        return "unknown traffic"
    if not sampled:
        return "greedy traffic"
    if not greedy:
        return "sampled traffic (temperature > 0)"
    return f"mixed traffic ({greedy / (greedy + sampled):.0%} of request-steps greedy)"


def survival(sampling: dict[str, dict] | None) -> dict[str, dict]:
    """{"greedy": {"accepted": [...], "drafted": [...]}, "sampled": ...}: request-steps that accepted and that drafted
    each draft position, from a `sampling` slice (unknown buckets left out)."""
    out: dict[str, dict] = {}
    for bucket, counts in (sampling or {}).items():
        if bucket == UNKNOWN or not isinstance(counts, dict) or not counts.get("drafted"):
            continue
        side = out.setdefault("greedy" if bucket == GREEDY else "sampled", {"accepted": [], "drafted": []})
        for name in ("accepted", "drafted"):
            have = side[name]
            for i, value in enumerate(counts.get(name) or []):
                if i < len(have):
                    have[i] += int(value)
                else:
                    have.append(int(value))
    return out
