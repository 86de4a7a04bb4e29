"""The report's "acceptance by slice" part: per rank, the last eagle_probe.acceptance_slices event (its counts are
cumulative), each slice's per-position acceptance, the per-request accept-length histogram, and the slices worse
than the rest beyond chance (analysis.slices, recomputed here from the counts), as acceptance_slice_low findings
where the running probe did not already log one."""


from ... import events as names
from ...analysis import findings as F
from ...analysis import slices as S
from ...analysis.traffic import HTTP_SERVER
from .fields import rank_fields, rank_key


def _logged_low(events) -> set:
    """(rank, dimension, bucket) of the acceptance_slice_low findings the running probe logged."""
    out = set()
    for e in events:
        evidence = e.get("evidence")
        if e.get("event") == names.FINDING and e.get("code") == F.ACCEPTANCE_SLICE_LOW and isinstance(evidence, dict):
            out.add((rank_key(e), evidence.get("dimension"), evidence.get("bucket")))
    return out


def _slice_rows(slices: dict) -> dict:
    rows = {}
    for dimension, buckets in slices.items():
        rows[dimension] = {}
        for bucket, counts in buckets.items():
            n = counts["request_steps"]
            drafted = counts.get("drafted") or [n] * len(counts["accepted"])  # a log of a fixed depth: every step
            rates = [round(a / d, 4) if d > 0 else None for a, d in zip(counts["accepted"], drafted)]
            rows[dimension][bucket] = {"request_steps": n, "accepted": counts["accepted"], "drafted": drafted,
                                       "per_position_rate": rates,
                                       "mean_accept_length": round(1 + sum(counts["accepted"]) / n, 4) if n > 0
                                       else None}
    return rows


def slices_section(events: list) -> dict:
    """{"ranks": [{tp_rank, pp_rank, dp_rank, pid, positions, slices, request_accept_length, requests, low}],
    "servers": [{pid, host, node_rank, positions, slices, requests, low}] (SGLang's HTTP server processes: the
    finished requests by traffic class), "test", "findings"}: findings are event-like dicts for the report's lists."""
    last, servers = {}, {}
    for event in events:
        if event.get("event") == names.ACCEPTANCE_SLICES and isinstance(event.get("slices"), dict):
            (servers if event.get("role") == HTTP_SERVER else last)[rank_key(event)] = event
    logged = _logged_low(events)
    section = {"ranks": [], "servers": [], "test": S.TEST_NAME, "findings": []}
    for key in sorted(servers, key=lambda k: tuple(str(x) for x in k)):
        event = servers[key]
        positions, low = _positions_and_low(event)
        section["servers"].append({"pid": key[3], "run": key[4],
                                   "host": event.get("host"), "node_rank": event.get("node_rank"),
                                   "positions": positions, "slices": _slice_rows(event["slices"]),
                                   "requests": event.get("requests_classified") or 0, "low": low})
        _add_findings(section, key, event, low, positions, logged, HTTP_SERVER)
    for key in sorted(last, key=lambda k: tuple(str(x) for x in k)):
        event = last[key]
        positions, low = _positions_and_low(event)
        section["ranks"].append({
            **rank_fields(key), "positions": positions,
            "slices": _slice_rows(event["slices"]), "request_accept_length": event.get("request_accept_length") or {},
            "requests": event.get("requests") or 0, "low": low})
        _add_findings(section, key, event, low, positions, logged, "target")
    _add_dp_ranks(section, last)
    return section


def _positions_and_low(event: dict):
    """The draft positions the counts hold (the event's `positions` names the same; a log may hold anything), and the
    slices below the rest, recomputed from the counts."""
    positions = max((len(c["accepted"]) for b in event["slices"].values() for c in b.values()), default=0)
    return positions, S.worst_per_slice(S.low_slices(event["slices"], positions))


def _add_findings(section: dict, key, event: dict, low: list, positions: int, logged: set, role: str):
    """acceptance_slice_low for each low slice the running probe did not log already."""
    for item in low:
        if (key, item["dimension"], item["bucket"]) in logged:
            continue
        finding = S.slice_low_finding(item, positions)
        section["findings"].append({
            "code": finding.code, "severity": finding.severity, "message": finding.message,
            "evidence": finding.evidence_dict(), "role": role, **rank_fields(key),
            "timestamp": event.get("timestamp"), "event": names.FINDING})


def _dp_place(event: dict):
    """The data-parallel rank of a process: the controller's dp_rank, else its attention-DP rank."""
    if event.get("dp_rank") is not None:
        return event["dp_rank"]
    if isinstance(event.get("attn_dp_size"), int) and event["attn_dp_size"] > 1:
        return event.get("attn_dp_rank")
    return None


def dp_rank_slices(last: dict) -> tuple:
    """({"dp_rank": {rank: {request_steps, accepted}}}, {rank: the process key counted}, positions): each DP rank's
    verify totals from one of its processes (the lowest tp_rank: a DP rank's TP ranks verify the same steps)."""
    chosen = {}
    for key, event in last.items():
        place = _dp_place(event)
        if place is None or not isinstance(event["slices"].get("step"), dict):
            continue
        if place not in chosen or str(key[0]) < str(chosen[place][0][0]):
            chosen[place] = (key, event)
    buckets, positions = {}, 0
    for place, (_key, event) in chosen.items():
        counts = [c for c in event["slices"]["step"].values() if S._sane(c)]
        width = max((len(c["accepted"]) for c in counts), default=0)
        positions = max(positions, width)
        buckets[str(place)] = {"request_steps": sum(c["request_steps"] for c in counts),
                               "accepted": [sum(S._at(c["accepted"], k) for c in counts) for k in range(width)]}
    return {S.DP_RANK: buckets}, {str(p): kv[0] for p, kv in chosen.items()}, positions


def _add_dp_ranks(section: dict, last: dict):
    """acceptance_slice_low with dimension dp_rank: a DP rank below the other DP ranks beyond chance (the same test
    as the slices, across ranks instead of within one)."""
    slices, keys, positions = dp_rank_slices(last)
    if len(slices[S.DP_RANK]) < 2:
        return
    section["dp_ranks"] = {"slices": _slice_rows(slices)[S.DP_RANK], "positions": positions,
                           "low": S.worst_per_slice(S.low_slices(slices, positions))}
    for item in section["dp_ranks"]["low"]:
        key = keys[item["bucket"]]
        finding = S.slice_low_finding(item, positions)
        section["findings"].append({
            "code": finding.code, "severity": finding.severity, "message": finding.message,
            "evidence": finding.evidence_dict(), "role": "target", **rank_fields(key),
            "timestamp": last[key].get("timestamp"), "event": names.FINDING})


def _slice_lines(row: dict, with_lengths: bool = False) -> list[str]:
    out = []
    for dimension, buckets in row["slices"].items():
        cells = []
        for bucket, counts in buckets.items():
            rates = "/".join("n/a" if r is None else f"{r:.2f}" for r in counts["per_position_rate"])
            cells.append(f"{bucket}: {rates} (n={counts['request_steps']})")
        out.append(f"    {dimension}: " + "; ".join(cells))
    if with_lengths and row["requests"]:
        out.append(f"    accept length per request ({row['requests']} finished): "
                   + ", ".join(f"{b}: {n}" for b, n in row["request_accept_length"].items()))
    for item in row["low"]:
        out.append(f"    LOW {item['dimension']}={item['bucket']} at position {item['position']}: "
                   f"{item['rate']:.3f} over {item['request_steps']} request-steps vs {item['rest_rate']:.3f} "
                   f"over {item['rest_request_steps']} in the rest of {item['dimension']} "
                   f"(p={item['p_value']:.2g}, {item['tests']} tests; final counts)")
    return out


def render_slices_text(section: dict) -> list[str]:
    if not section["ranks"] and not section.get("servers"):
        return []
    out = ["", "Acceptance by slice (per draft position: accepted / request-steps):"]
    for server in section.get("servers") or ():
        out.append(f"  finished requests by traffic class, SGLang's HTTP server (pid {server['pid']}, host "
                   f"{server['host']}), {server['positions']} draft positions:")
        out += _slice_lines(server)
    for rank in section["ranks"]:
        where = f"tp_rank {rank['tp_rank']}" if rank["tp_rank"] is not None else f"pid {rank['pid']}"
        out.append(f"  {where}, {rank['positions']} draft positions:")
        out += _slice_lines(rank, with_lengths=True)
    dp = section.get("dp_ranks")
    if dp:
        def rates(row):
            return "/".join("n/a" if r is None else f"{r:.2f}" for r in row["per_position_rate"])

        cells = [f"{b}: {rates(row)} (n={row['request_steps']})" for b, row in dp["slices"].items()]
        out.append("  by data-parallel rank: " + "; ".join(cells))
        for item in dp["low"]:
            out.append(f"    LOW dp_rank={item['bucket']} at position {item['position']}: {item['rate']:.3f} over "
                       f"{item['request_steps']} request-steps vs {item['rest_rate']:.3f} over "
                       f"{item['rest_request_steps']} on the other DP ranks (p={item['p_value']:.2g})")
    out.append(f"  test: {section['test']}")
    return out
