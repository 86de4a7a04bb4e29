"""Several nodes' logs together (`summarize DIR1 DIR2 ...`): whether the inputs belong to one launch, which node each
holds, and what to say about a node whose clock is skewed or whose directory holds no events.

The launch is what the probe's started events name (runtime/context/launch.py): the arguments every node of one
launch gives alike, and a short id of them. Inputs of different launches are refused (the caller says so and stops)
unless asked to read them together. Clocks: the nodes of one launch start their schedulers together (they meet at
the rendezvous), so their first started events lie within seconds; a node whose first started event lies further
from the others' than CLOCK_SKEW_TOLERANCE_S has its clock named as skewed, and so has a process whose timestamps go
back in its own file by more than BACKWARDS_TOLERANCE_S. Nothing in the report orders events of different nodes by
time; the times shown are each node's own.
"""

from collections import defaultdict
from datetime import datetime

from ... import events as names

CLOCK_SKEW_TOLERANCE_S = 30.0
BACKWARDS_TOLERANCE_S = 1.0


def _time(text) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def describe_input(path: str, events: list, stats: dict) -> dict:
    """What one input (a node's directory or file) holds."""
    started = [e for e in events if e.get("event") == names.STARTED]
    launches = {}
    for e in started:
        launch = e.get("launch")
        if isinstance(launch, dict) and isinstance(launch.get("id"), str):
            launches.setdefault(launch["id"], launch.get("args") or {})
    node_ranks = sorted({e["node_rank"] for e in events if isinstance(e.get("node_rank"), int)})
    hosts = sorted({e["host"] for e in events if isinstance(e.get("host"), str) and e["host"]})
    times = [t for t in (_time(e.get("timestamp")) for e in started) if t is not None]
    return {"path": path, "events": len(events), "files": stats.get("files", 0), "lines": stats.get("lines", 0),
            "launches": launches, "node_ranks": node_ranks, "hosts": hosts,
            "first_started": min(times) if times else None, "backwards": _backwards(events)}


def _backwards(events) -> dict | None:
    """The largest step back in time within one process's lines (in file order), if over the tolerance."""
    last, worst = {}, None
    for e in events:
        t = _time(e.get("timestamp"))
        pid = e.get("pid")
        if t is None:
            continue
        if pid in last and last[pid] - t > BACKWARDS_TOLERANCE_S and (worst is None or last[pid] - t > worst["s"]):
            worst = {"pid": pid, "s": round(last[pid] - t, 3)}
        last[pid] = max(t, last.get(pid, t))
    return worst


def _name(entry: dict) -> str:
    nodes = ", ".join(str(n) for n in entry["node_ranks"]) or "unknown"
    host = f", host {', '.join(entry['hosts'])}" if entry["hosts"] else ""
    return f"{entry['path']} (node_rank {nodes}{host})"


def launch_mismatch(inputs: list[dict]) -> str | None:
    """A message when the inputs hold more than one launch, naming each input's and the arguments that differ."""
    ids = {i for entry in inputs for i in entry["launches"]}
    if len(ids) < 2:
        return None
    args = {}
    for entry in inputs:
        for launch_id, shared in entry["launches"].items():
            args[launch_id] = shared
    differ = sorted({k for a in args.values() for k in a if len({str(b.get(k)) for b in args.values()}) > 1})
    lines = ["the inputs are not from one launch:"]
    for entry in inputs:
        held = ", ".join(sorted(entry["launches"])) or "none recorded"
        lines.append(f"  {_name(entry)}: launch {held}")
    for key in differ:
        lines.append(f"  {key}: " + " / ".join(f"{args[i].get(key)!r} (launch {i})" for i in sorted(args)))
    lines.append("summarise each launch on its own, or pass --any-launch to read them together")
    return "\n".join(lines)


def notices(inputs: list[dict]) -> list[str]:
    """Messages about single nodes: no events, no launch recorded, a skewed clock, nodes the launch has but the
    inputs lack. The rest is summarised all the same."""
    out = []
    for entry in inputs:
        if not entry["events"]:
            out.append(f"{entry['path']}: no probe events ({entry['files']} file(s), {entry['lines']} line(s) read); "
                       f"the other inputs are summarised without it")
        elif not entry["launches"] and len(inputs) > 1:
            out.append(f"{_name(entry)}: no started event names its launch (a probe before node names, or logs "
                       f"cut before start-up); not checked against the others")
        if entry["backwards"]:
            b = entry["backwards"]
            out.append(f"{_name(entry)}: timestamps go back {b['s']:g} s within pid {b['pid']} (the clock was set "
                       f"back); its times are shown as logged")
    started = [(e, e["first_started"]) for e in inputs if e["first_started"] is not None]
    if len(started) > 1:
        times = sorted(t for _, t in started)
        middle = times[(len(times) - 1) // 2]  # the lower median: with two nodes, the earlier one
        for entry, t in started:
            if abs(t - middle) > CLOCK_SKEW_TOLERANCE_S:
                direction = "ahead of" if t > middle else "behind"
                out.append(f"{_name(entry)}: its clock looks {abs(t - middle):.0f} s {direction} the other nodes' "
                           f"(the nodes of one launch start within seconds; tolerance {CLOCK_SKEW_TOLERANCE_S:g} s); "
                           f"its times are shown as logged and never ordered against the other nodes'")
    nnodes = {a.get("nnodes") for e in inputs for a in e["launches"].values() if isinstance(a.get("nnodes"), int)}
    seen = {n for e in inputs for n in e["node_ranks"]}
    if len(nnodes) == 1 and seen:
        count = next(iter(nnodes))
        missing = sorted(set(range(count)) - seen)
        if missing:
            out.append(f"the launch has {count} nodes; no input holds node_rank {', '.join(map(str, missing))}")
    return out


def nodes_section(ranks: list, inputs: list[dict]) -> dict:
    """Ranks by node and what is compared across nodes: release, rules, capture layers, draft, acceptance."""
    by_node = defaultdict(list)
    for rank in ranks:
        by_node[rank.get("node_rank")].append(rank)
    rows = []
    for node in sorted(by_node, key=lambda n: (n is None, n if n is not None else 0)):
        members = by_node[node]
        drafts = sum((r["acceptance"] or {}).get("drafts") or 0 for r in members)
        accepted = sum((r["acceptance"] or {}).get("accepted_tokens") or 0 for r in members)
        rows.append({"node_rank": node, "hosts": sorted({r.get("host") for r in members if r.get("host")}),
                     "inputs": sorted({i["path"] for i in inputs if node in i["node_ranks"]}),
                     "tp_ranks": sorted({r["tp_rank"] for r in members if r["tp_rank"] is not None}),
                     "pids": sorted({r["pid"] for r in members if r["pid"] is not None}),
                     "drafts": drafts, "mean_accept_length": 1.0 + accepted / drafts if drafts else None,
                     "findings": sorted({f["code"] for r in members for f in r["findings"]}),
                     "compared": _compared(members)})
    return {"nodes": rows, "differences": _differences(rows) if len(rows) > 1 else [],
            "inputs": [{k: v for k, v in i.items() if k != "backwards"} for i in inputs]}


def _compared(members) -> dict:
    def one(values):
        values = sorted({str(v) for v in values if v is not None})
        return values[0] if len(values) == 1 else (" | ".join(values) if values else None)

    return {
        "sglang_version": one(r.get("sglang_version") for r in members),
        "rules": one(r.get("rules") for r in members),
        "capture layers": one(c.get("layers_to_capture") for r in members for c in r["capture"][-1:]),
        "draft layer ids": one(d.get("eagle_layer_ids") for r in members for d in r["draft"]
                               if d.get("event") == names.DRAFT_LOADED),
    }


def _differences(rows) -> list[str]:
    out = []
    for key in rows[0]["compared"]:
        values = {row["node_rank"]: row["compared"][key] for row in rows}
        if len({str(v) for v in values.values()}) > 1:
            out.append(f"{key} differ across nodes: " + "; ".join(f"node_rank {n}: {v}" for n, v in values.items()))
    lengths = {row["node_rank"]: row["mean_accept_length"] for row in rows if row["mean_accept_length"] is not None}
    if len(lengths) > 1 and max(lengths.values()) - min(lengths.values()) > 0.05:
        out.append("mean accept length differs across nodes: "
                   + "; ".join(f"node_rank {n}: {v:.2f}" for n, v in lengths.items()))
    return out


def render_nodes_text(section: dict, notes: list[str]) -> list[str]:
    out = []
    if len(section["nodes"]) > 1 or notes:
        out.append(f"== nodes: {len(section['nodes'])}")
        for row in section["nodes"]:
            length = "n/a" if row["mean_accept_length"] is None else f"{row['mean_accept_length']:.2f}"
            where = ", ".join(row["inputs"]) or "input unknown"
            out.append(f"  node_rank {row['node_rank']} host {', '.join(row['hosts']) or '?'} ({where}): "
                       f"tp_rank {row['tp_ranks']}, pids {row['pids']}; "
                       f"mean accept length {length} over {row['drafts']} drafts; findings: "
                       f"{', '.join(row['findings']) or 'none'}")
        if len(section["nodes"]) > 1:
            out += [f"  DIFFERS: {d}" for d in section["differences"]] or [
                "  compared across nodes (release, rules, capture layers, draft layer ids, acceptance): the same"]
        out += [f"! {note}" for note in notes]
    return out
