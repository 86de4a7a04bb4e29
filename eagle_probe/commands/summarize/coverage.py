"""The report's vocabulary coverage: per rank, the share of the sampled verified tokens inside the draft's vocabulary
(the running total of its last eagle_probe.draft.vocab_coverage event), the accept length it caps, and
draft_vocab_coverage_low where the coverage is low or binds the acceptance served (analysis.vocab_coverage; the
promise is the training accuracies' when known)."""


from ... import events as names
from ...analysis import findings as F
from ...analysis.acceptance import expected_mean_length
from ...analysis.training_gap import TOLERANCE
from ...analysis.vocab_coverage import Served, coverage_finding, describe_map, length_cap
from .fields import rank_fields, rank_key


def coverage_section(events: list, ranks: list[dict], accuracy=None) -> dict:
    """{"coverage", "in_vocab", "verified_tokens", "ranks": [...], "findings": [...]}; coverage None without events.
    Each rank entry of `ranks` gains "draft_vocab_coverage" (its row, or None). accuracy: the training accuracy (one
    number or per position) that decides whether acceptance is below the promise, or None."""
    last = {}
    for event in events:
        if event.get("event") == names.VOCAB_COVERAGE and isinstance(event.get("verified_tokens"), int) \
                and isinstance(event.get("in_vocab"), int) and event["verified_tokens"] > 0:
            last[rank_key(event)] = event
    rows, findings = [], []
    for rank in ranks:
        event = last.get(rank_key(rank))
        rank["draft_vocab_coverage"] = None
        if event is None:
            continue
        acc = rank.get("acceptance") or {}
        positions = len(acc.get("per_position_rate") or []) or None
        in_vocab, total = event["in_vocab"], event["verified_tokens"]
        coverage = in_vocab / total
        served = acc.get("mean_accept_length")
        row = {**rank_fields(rank_key(rank)),
               "in_vocab": in_vocab, "verified_tokens": total, "coverage": coverage, "map": event.get("map"),
               "hot_vocab_size": event.get("hot_vocab_size"), "draft_vocab_size": event.get("draft_vocab_size"),
               "target_vocab_size": event.get("target_vocab_size"),
               "mean_accept_length_cap": length_cap(coverage, positions), "served_mean_accept_length": served}
        rank["draft_vocab_coverage"] = row
        rows.append(row)
        if any(f["code"] == F.DRAFT_VOCAB_COVERAGE_LOW for f in rank["findings"]):
            continue  # the running probe said so already
        below = False
        if accuracy is not None and served is not None and positions:
            below = served < TOLERANCE * expected_mean_length(accuracy, positions)
        where = f"tp_rank {rank['tp_rank']}" if rank["tp_rank"] is not None else f"pid {rank['pid']}"
        finding = coverage_finding(in_vocab, total, event.get("map") or "", event.get("hot_vocab_size"),
                                   event.get("draft_vocab_size"), where, Served(served, positions, below))
        if finding is not None:
            findings.append({"code": finding.code, "severity": finding.severity, "message": finding.message,
                             "evidence": finding.evidence_dict(), "role": "draft", **rank_fields(rank_key(rank)),
                             "timestamp": event.get("timestamp"), "event": names.FINDING})
    in_vocab = sum(r["in_vocab"] for r in rows)
    total = sum(r["verified_tokens"] for r in rows)
    return {"coverage": in_vocab / total if total else None, "in_vocab": in_vocab, "verified_tokens": total,
            "ranks": rows, "findings": findings}


def render_coverage_line(row: dict | None) -> list[str]:
    if not row:
        return []
    cap = row["mean_accept_length_cap"]
    return [f"  draft vocabulary coverage: {row['coverage']:.3f} ({row['in_vocab']} of {row['verified_tokens']} "
            f"sampled verified tokens inside {describe_map(row['map'], row['hot_vocab_size'], row['draft_vocab_size'])}"
            f"); " + ("no cap on the accept length" if cap is None else f"caps the mean accept length at {cap:.2f}")]
