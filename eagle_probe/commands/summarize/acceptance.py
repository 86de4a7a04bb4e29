"""One rank's acceptance from its eagle_probe.acceptance events (one per summary interval), as counts summed over the
windows: per draft position over the request-steps that drafted it, and per draft depth (adaptive depth changes it
from step to step; a tree's depth is its draft steps), with the share of verify steps spent at each depth. Logs of
earlier releases carry rates only (no per-position counts): their rates are weighted by each window's drafts."""

from collections import Counter


def _count(event, key) -> int:
    value = event.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _sum_lists(events, key) -> list[int] | None:
    lists = [e.get(key) for e in events]
    if not lists or any(not isinstance(values, list) for values in lists):
        return None
    out = [0] * max(len(values) for values in lists)
    for values in lists:
        for k, n in enumerate(values):
            out[k] += n if isinstance(n, int) else 0
    return out


def _weighted_rates(events, positions) -> list[float | None]:
    """Per-position rates of logs without counts, weighted by each window's drafts."""
    out = []
    for k in range(positions):
        num = den = 0.0
        for e in events:
            rates = e.get("per_position_rate") or []
            weight = e.get("drafts") or e.get("steps") or 0
            if k < len(rates) and rates[k] is not None:
                num += rates[k] * weight
                den += weight
        out.append(num / den if den else None)
    return out


def _per_depth(events, steps: int) -> dict:
    merged = {}
    for e in events:
        for depth, counts in (e.get("per_depth") or {}).items():
            if isinstance(counts, dict):
                entry = merged.setdefault(str(depth), Counter())
                for key in ("verify_steps", "request_steps", "accepted_tokens"):
                    entry[key] += _count(counts, key)
    out = {}
    for depth in sorted(merged, key=lambda d: int(d) if d.lstrip("-").isdigit() else 0):
        c = merged[depth]
        out[depth] = {"verify_steps": c["verify_steps"], "request_steps": c["request_steps"],
                      "accepted_tokens": c["accepted_tokens"],
                      "step_share": c["verify_steps"] / steps if steps else None,
                      "mean_accept_length": 1 + c["accepted_tokens"] / c["request_steps"] if c["request_steps"]
                      else None}
    return out


def _ints(values) -> bool:
    return isinstance(values, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in values)


def _running_total(event) -> dict | None:
    """The event's running total (counts since its process started) where it counts drafts, else None; only its
    fields of the expected types (the line's type checks do not reach inside it)."""
    total = event.get("total")
    if not isinstance(total, dict) or _count(total, "drafts") <= 0:
        return None
    out = {k: _count(total, k) for k in ("steps", "drafts", "draft_tokens", "accepted_tokens")}
    for key in ("per_position_accepted", "per_position_drafted"):
        if _ints(total.get(key)):
            out[key] = total[key]
    rates = total.get("per_position_rate")
    if isinstance(rates, list) and all(r is None or (isinstance(r, (int, float)) and not isinstance(r, bool))
                                       for r in rates):
        out["per_position_rate"] = rates
    histogram = total.get("accept_length_histogram")
    if isinstance(histogram, dict) and _ints(list(histogram.values())):
        out["accept_length_histogram"] = histogram
    if isinstance(total.get("per_depth"), dict):
        out["per_depth"] = total["per_depth"]
    return out


def counted_events(events) -> tuple[list, bool]:
    """What the totals are read from: the windows, or the last event's running total where the windows hold fewer
    drafts than it (the earlier windows are not in the logs read: a rotated log dropped its oldest files)."""
    total = _running_total(events[-1])
    summed = sum(e.get("drafts") or e.get("steps") or 0 for e in events)
    if total is not None and _count(total, "drafts") > summed:
        return [total], True
    return events, False


def acceptance_section(events):
    """Windows of one rank: totals summed over windows (or the last running total, counted_events)."""
    if not events:
        return None
    windows = events
    events, from_total = counted_events(windows)
    drafts = sum(e.get("drafts") or e.get("steps") or 0 for e in events)
    accepted = sum(e.get("accepted_tokens") or 0 for e in events)
    drafted = sum(e.get("draft_tokens") or e.get("drafted_tokens") or 0 for e in events)
    steps = sum(e.get("steps") or 0 for e in events)
    accepted_at, drafted_at = _sum_lists(events, "per_position_accepted"), _sum_lists(events, "per_position_drafted")
    if accepted_at is not None and drafted_at is not None:
        per_pos = [a / d if d else None for a, d in zip(accepted_at, drafted_at)]
    else:
        per_pos = _weighted_rates(events, max((len(e.get("per_position_rate") or []) for e in events), default=0))
    conditional = [per_pos[k] if k == 0 else
                   (per_pos[k] / per_pos[k - 1] if per_pos[k] is not None and per_pos[k - 1] else None)
                   for k in range(len(per_pos))]
    histogram = Counter()
    for e in events:
        for length, count in (e.get("accept_length_histogram") or {}).items():
            histogram[str(length)] += int(count)
    return {
        "windows": len(windows), "from_running_total": from_total,
        "steps": steps, "drafts": drafts, "draft_tokens": drafted, "accepted_tokens": accepted,
        "accept_rate": accepted / drafted if drafted else None,
        "mean_accept_length": 1.0 + accepted / drafts if drafts else None, "per_position_rate": per_pos,
        "per_position_drafted": drafted_at, "conditional_rate": conditional, "per_depth": _per_depth(events, steps),
        "accept_length_histogram": dict(sorted(histogram.items(),
                                               key=lambda kv: int(kv[0]) if kv[0].lstrip("-").isdigit() else 0)),
        "expected_mean_accept_length": windows[-1].get("expected_mean_accept_length"),
        "read_at": sorted({e["read_at"] for e in windows if e.get("read_at")}),
        "over_time": [{"timestamp": e.get("timestamp"), "mean_accept_length": e.get("mean_accept_length"),
                       "accept_rate": (e["accepted_tokens"] / e["draft_tokens"])
                       if e.get("draft_tokens") and e.get("accepted_tokens") is not None else None,
                       "drafts": e.get("drafts")} for e in windows],
        "last": windows[-1],
    }


def _fmt(value, digits=3):
    return "n/a" if value is None else f"{value:.{digits}f}"


def render_acceptance_text(acc) -> list[str]:
    if not acc:
        return []
    out = [f"  acceptance over {acc['windows']} window(s), {acc['drafts']} drafts: mean accept length "
           f"{_fmt(acc['mean_accept_length'], 2)} (bonus included"
           + (f"; expected {_fmt(acc['expected_mean_accept_length'], 2)}" if acc["expected_mean_accept_length"]
              else "")
           + f"), accept rate {_fmt(acc['accept_rate'])} (accepted over proposed drafts)"]
    if acc.get("from_running_total"):
        out.append("    totals from the last window's running total: the earlier windows are not in the logs read "
                   "(a rotated log's oldest files removed)")
    out.append("    per draft position: "
               + ", ".join(_fmt(r) for r in acc["per_position_rate"])
               + "; conditional: " + ", ".join(_fmt(r) for r in acc["conditional_rate"]))
    depths = acc.get("per_depth") or {}
    if depths:
        out.append("    draft depth in use (share of verify steps, mean accept length): " + ", ".join(
            f"{depth}: {_fmt(d['step_share'] and 100 * d['step_share'], 1)}% "
            f"({_fmt(d['mean_accept_length'], 2)})" for depth, d in depths.items()))
    histogram = acc["accept_length_histogram"]
    out.append("    accepted drafts per step: " + ", ".join(f"{k}: {v}" for k, v in histogram.items()))
    if acc["read_at"]:
        out.append("    read at: " + ", ".join(acc["read_at"]))
    return out
