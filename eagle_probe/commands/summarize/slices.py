"""The report's "acceptance by slice" part: per rank, the last eagle_probe.acceptance_slices event (its counts are
cumulative), each slice's per-position acceptance, the per-request accept-length histogram, and the slices worse
than the rest beyond chance (analysis.slices, recomputed here from the counts), as acceptance_slice_low findings
where the running probe did not already log one."""

from typing import List

from ... import events as names
from ...analysis import findings as F
from ...analysis import slices as S


def _rank_key(event: dict):
    return (event.get("tp_rank"), event.get("pp_rank"), event.get("dp_rank"), event.get("pid"))


def _logged_low(events) -> set:
    """(rank, dimension, bucket) of the acceptance_slice_low findings the running probe logged."""
    out = set()
    for e in events:
        evidence = e.get("evidence")
        if e.get("event") == names.FINDING and e.get("code") == F.ACCEPTANCE_SLICE_LOW and isinstance(evidence, dict):
            out.add((_rank_key(e), evidence.get("dimension"), evidence.get("bucket")))
    return out


def _slice_rows(slices: dict) -> dict:
    rows = {}
    for dimension, buckets in slices.items():
        rows[dimension] = {}
        for bucket, counts in buckets.items():
            n = counts["request_steps"]
            rates = [round(a / n, 4) if n > 0 else None for a in counts["accepted"]]
            rows[dimension][bucket] = {"request_steps": n, "accepted": counts["accepted"], "per_position_rate": rates,
                                       "mean_accept_length": round(1 + sum(counts["accepted"]) / n, 4) if n > 0
                                       else None}
    return rows


def slices_section(events: list) -> dict:
    """{"ranks": [{tp_rank, pp_rank, dp_rank, pid, positions, slices, request_accept_length, requests, low}],
    "test", "findings"}: findings are event-like dicts for the report's finding lists."""
    last = {}
    for event in events:
        if event.get("event") == names.ACCEPTANCE_SLICES and isinstance(event.get("slices"), dict):
            last[_rank_key(event)] = event
    logged = _logged_low(events)
    section = {"ranks": [], "test": S.TEST_NAME, "findings": []}
    for key in sorted(last, key=lambda k: tuple(str(x) for x in k)):
        event = last[key]
        # the draft positions the counts hold (the event's `positions` names the same; a log may hold anything)
        positions = max((len(c["accepted"]) for b in event["slices"].values() for c in b.values()), default=0)
        low = S.worst_per_slice(S.low_slices(event["slices"], positions))
        section["ranks"].append({
            "tp_rank": key[0], "pp_rank": key[1], "dp_rank": key[2], "pid": key[3], "positions": positions,
            "slices": _slice_rows(event["slices"]), "request_accept_length": event.get("request_accept_length") or {},
            "requests": event.get("requests") or 0, "low": low})
        for item in low:
            if (key, item["dimension"], item["bucket"]) in logged:
                continue
            finding = S.slice_low_finding(item, positions)
            section["findings"].append({
                "code": finding.code, "severity": finding.severity, "message": finding.message,
                "evidence": finding.evidence_dict(), "role": "target", "tp_rank": key[0], "pp_rank": key[1],
                "dp_rank": key[2], "pid": key[3], "timestamp": event.get("timestamp"), "event": names.FINDING})
    return section


def render_slices_text(section: dict) -> List[str]:
    if not section["ranks"]:
        return []
    out = ["", "Acceptance by slice (per draft position: accepted / request-steps):"]
    for rank in section["ranks"]:
        where = f"tp_rank {rank['tp_rank']}" if rank["tp_rank"] is not None else f"pid {rank['pid']}"
        out.append(f"  {where}, {rank['positions']} draft positions:")
        for dimension, buckets in rank["slices"].items():
            cells = []
            for bucket, row in buckets.items():
                rates = "/".join("n/a" if r is None else f"{r:.2f}" for r in row["per_position_rate"])
                cells.append(f"{bucket}: {rates} (n={row['request_steps']})")
            out.append(f"    {dimension}: " + "; ".join(cells))
        if rank["requests"]:
            out.append(f"    accept length per request ({rank['requests']} finished): "
                       + ", ".join(f"{b}: {n}" for b, n in rank["request_accept_length"].items()))
        for item in rank["low"]:
            out.append(f"    LOW {item['dimension']}={item['bucket']} at position {item['position']}: "
                       f"{item['rate']:.3f} over {item['request_steps']} request-steps vs {item['rest_rate']:.3f} "
                       f"over {item['rest_request_steps']} in the rest of {item['dimension']} "
                       f"(p={item['p_value']:.2g}, {item['tests']} tests; final counts)")
    out.append(f"  test: {section['test']}")
    return out
