"""The values part of the report: a fingerprint table per rank and slot, and the ranks that disagree.

Ranks are compared step by step (the same sampled forward: `step` and `tokens` equal) within one pipeline stage
and attention-DP rank: plain tensor parallelism replicates the hidden states after each all-reduce, so those ranks
must agree; ranks of other dp ranks, or with other token counts at the same step (token scattering), hold other
tokens and are not compared.
"""

from collections import defaultdict

from ...analysis.findings import tp_rank_divergence_finding
from ...analysis.fingerprints import rank_disagreement
from ...events import AUX_FINGERPRINT
from ..output import finding_line

PLAIN_TP = ("plain tensor parallelism: these ranks replicate the hidden states after each all-reduce, so they "
            "must hold the same aux states for the same tokens.")


def fingerprint_events(events) -> list[dict]:
    """The fingerprint events complete enough to tabulate (a line may lack fields: it passed the type checks)."""
    needed = ("role", "slot", "rms", "absmax")
    return [e for e in events if e.get("event") == AUX_FINGERPRINT and all(e.get(k) is not None for k in needed)]


def fingerprint_table(prints) -> list[dict]:
    """One row per (tp_rank, role, slot): samples logged, rms (last, min, max), largest absmax, non-finite total."""
    rows: dict[tuple, dict] = {}
    for e in prints:
        key = (e.get("tp_rank"), e.get("role"), e.get("slot"))
        row = rows.get(key)
        if row is None:
            row = rows[key] = {"tp_rank": key[0], "role": key[1], "slot": key[2], "label": e.get("label"),
                               "samples": 0, "rms_min": e["rms"], "rms_max": e["rms"], "absmax": e["absmax"],
                               "nonfinite": 0, "series": []}
        row["samples"] += 1
        row["rms_last"] = e["rms"]
        row["rms_min"], row["rms_max"] = min(row["rms_min"], e["rms"]), max(row["rms_max"], e["rms"])
        row["absmax"] = max(row["absmax"], e["absmax"])
        row["nonfinite"] += int(e.get("nonfinite") or 0)
        row["series"].append((e.get("step"), e["rms"]))
    return [rows[k] for k in sorted(rows, key=lambda k: tuple("" if v is None else str(v) for v in k))]


def rank_nodes(events) -> dict:
    """{tp_rank: "node_rank N (host H)"} when the events come from more than one node, else {}."""
    where = {}
    for e in events:
        if e.get("tp_rank") is not None and e.get("node_rank") is not None:
            where.setdefault(e["tp_rank"], (e["node_rank"], e.get("host")))
    if len({node for node, _ in where.values()}) < 2:
        return {}
    return {rank: f"node_rank {node}" + (f" (host {host})" if host else "") for rank, (node, host) in where.items()}


def divergence(prints) -> dict:
    """{"compared": steps x slots compared, "not_compared": [reasons], "findings": [Finding]} across tp ranks."""
    groups = defaultdict(dict)  # (pp, dp, role, step, slot) -> {tp_rank: event}
    for e in prints:
        if e.get("tp_rank") is None or e.get("step") is None:
            continue
        key = (e.get("pp_rank"), e.get("dp_rank"), e.get("role"), e["step"], e["slot"])
        groups[key].setdefault(e["tp_rank"], e)
    compared, skipped, findings, reported = 0, set(), [], set()
    nodes = rank_nodes(prints)
    dp_ranks = {e.get("dp_rank") for e in prints if e.get("dp_rank") is not None}
    if len(dp_ranks) > 1:
        skipped.add("ranks of different dp_rank (attention data parallelism) hold different tokens: compared only "
                    "within one dp_rank")
    for (_pp, _dp, role, step, slot), by_rank in sorted(groups.items(), key=lambda kv: str(kv[0])):
        if len(by_rank) < 2:
            continue
        if len({e.get("tokens") for e in by_rank.values()}) > 1:
            skipped.add("ranks with different token counts at the same step (token scattering) are not compared")
            continue
        compared += 1
        disagreement = rank_disagreement({r: (e["rms"], e.get("signature") or []) for r, e in by_rank.items()})
        if disagreement is None or (role, slot) in reported:
            continue
        reported.add((role, slot))
        label = next(iter(by_rank.values())).get("label") or f"slot {slot}"
        findings.append(tp_rank_divergence_finding(role, slot, label, step, disagreement, PLAIN_TP, nodes))
    return {"compared": compared, "not_compared": sorted(skipped), "findings": findings}


def values_section(events) -> dict:
    prints = fingerprint_events(events)
    result = divergence(prints)
    return {"fingerprints": fingerprint_table(prints), "compared": result["compared"],
            "not_compared": result["not_compared"],
            "findings": [{"code": f.code, "severity": f.severity, "role": f.evidence_dict().get("role"),
                          "message": f.message, "evidence": f.evidence_dict()} for f in result["findings"]]}


def render_values_text(section: dict) -> list[str]:
    if not section["fingerprints"]:
        return []
    lines = ["", "Hidden-state values (sampled fingerprints):",
             f"  {'tp':>3} {'role':<7}{'slot':>5}  {'label':<22}{'samples':>8}{'rms last':>12}{'rms min':>12}"
             f"{'rms max':>12}{'absmax':>12}{'non-finite':>11}"]
    for r in section["fingerprints"]:
        lines.append(f"  {str(r['tp_rank']):>3} {str(r['role']):<7}{str(r['slot']):>5}  {str(r['label'])[:21]:<22}"
                     f"{r['samples']:>8}{r['rms_last']:>12.5g}{r['rms_min']:>12.5g}{r['rms_max']:>12.5g}"
                     f"{r['absmax']:>12.5g}{r['nonfinite']:>11}")
    lines.append(f"  ranks compared at {section['compared']} (step, slot) pairs"
                 + ("; " + "; ".join(section["not_compared"]) if section["not_compared"] else ""))
    for f in section["findings"]:
        lines.append("  " + finding_line(f))
    if section["compared"] and not section["findings"]:
        lines.append("  all compared ranks agree within the tolerance")
    return lines
