"""Does speculation pay, read from the logs: the last eagle_probe.spec.costs event of each process (its counts are
cumulative since the process started), one process per attention-TP group, merged and estimated by
analysis.speculation_cost. The one source of `eagle-probe advise` and of summarize's "does speculation pay?" section.

TP ranks of one group time the same decode steps, so only attention-TP rank 0 (tp_rank where the attention-TP rank is
not logged) is counted: summing every rank would overstate the sample, not the speed. Attention-DP groups serve
different requests, so their rank 0s are all counted.
"""

from collections.abc import Iterable, Mapping

from .. import events as names
from ..analysis import speculation_cost

# Where a counted process ran, as the JSON lists it.
PROCESS_FIELDS = ("host", "pid", "run", "node_rank", "tp_rank", "attn_tp_rank", "dp_rank", "attn_dp_rank", "pp_rank",
                  "timestamp")
# Every bucket carries these keys (null where the bucket was not estimated), whatever the estimate left out.
BUCKET_FIELDS = ("batch_size", "bucket", "steps", "served_depth", "estimated", "why", "estimated_speedup",
                 "uncertainty", "break_even_accept_length", "tokens_per_step", "recommended_num_steps",
                 "recommended_extrapolated", "phase_seconds", "plain_step_seconds", "plain_source", "classes")
NO_COSTS = ("no eagle_probe.spec.costs events: is EAGLE_PROBE_PHASE_TIMING on (it is by default; `eagle-probe run "
            "--phase-timing on`), and did speculative decode steps run before the logs were read?")


def _process(event: Mapping) -> tuple:
    """One process: a restarted server's pid that came again is another run (summarize.logread numbers it)."""
    return event.get("host"), event.get("pid"), event.get("run")


def last_costs(events: Iterable[Mapping], since: str | None = None) -> list[Mapping]:
    """Each process's latest costs event (by timestamp, else the later line): it holds all the earlier ones' counts.
    With `since` (an ISO time), the counts after it: less the process's last costs event written at or before it
    (a process with no event after it is left out)."""
    last: dict[tuple, Mapping] = {}
    base: dict[tuple, Mapping] = {}
    for event in events:
        if event.get("event") != names.SPEC_COSTS:
            continue
        stamp = str(event.get("timestamp") or "")
        into = base if since is not None and stamp <= since else last
        before = into.get(_process(event))
        if before is None or stamp >= str(before.get("timestamp") or ""):
            into[_process(event)] = event
    return [speculation_cost.since(event, base.get(key)) for key, event in last.items()]


def attention_tp_rank(event: Mapping):
    rank = event.get("attn_tp_rank")
    return event.get("tp_rank") if rank is None else rank


def _rank_key(event: Mapping) -> tuple:
    values = (event.get(k) for k in ("node_rank", "attn_dp_rank", "dp_rank", "pid"))
    return tuple((v is None, str(v).zfill(12) if isinstance(v, int) else str(v)) for v in values)


def _counted_rows(costs: dict) -> tuple[dict, int]:
    """The merged costs without depth rows of no counted step (only the periods after steps the timer dropped: the
    estimate divides by a row's steps), and how many rows that left out."""
    steps, left_out = {}, 0
    for label, depths in costs["steps"].items():
        kept = {depth: row for depth, row in depths.items() if row and int(row[0]) >= 1}  # as DepthRow reads it
        left_out += len(depths) - len(kept)
        if kept:
            steps[label] = kept
    return {**costs, "steps": steps}, left_out


def _other_layout(event: Mapping) -> list[int]:
    """The lengths of the event's target-forward rows that are not this version's (FIT_FIELDS)."""
    width = len(speculation_cost.FIT_FIELDS)
    return sorted({len(row) for row in (event.get("forwards") or {}).values() if len(row) != width})


def _readable_forwards(events: list[Mapping]) -> tuple[list[Mapping], list]:
    """The events with the target forwards of another probe version's layout left out (their numbers are other sums:
    read as this version's they would give a wrong cost), and the pids left without them."""
    out, pids = [], []
    for event in events:
        if _other_layout(event):
            pids.append(event.get("pid"))
            event = {**event, "forwards": {}}
        out.append(event)
    return out, pids


def _layout_note(event: Mapping) -> str:
    fields = speculation_cost.FIT_FIELDS
    return (f"pid {event.get('pid')}: its target forwards hold {'/'.join(map(str, _other_layout(event)))} numbers "
            f"each where this eagle-probe reads {len(fields)} ({', '.join(fields)}): written by another version of "
            f"the probe, left out (no plain step is estimated from them)")


def finding_dict(finding) -> dict:
    """A finding as the probe's eagle_probe.finding event holds it."""
    return {"code": finding.code, "severity": finding.severity, "message": finding.message,
            "evidence": finding.evidence_dict()}


def _bucket(bucket: Mapping) -> dict:
    return {**dict.fromkeys(BUCKET_FIELDS), **bucket}


def advice(events: Iterable[Mapping], since: str | None = None) -> dict:
    """The merged estimate, its findings and the adaptive config it gives, JSON-ready (docs/commands/advise.md);
    with `since`, of the steps after that time only (last_costs)."""
    costs = last_costs(events, since)
    counted = sorted((e for e in costs if attention_tp_rank(e) in (0, None)), key=_rank_key)
    plain = [e for e in counted if e.get("server") == "plain"]
    out = {"source": None, "topk": None, "since": since, "runs": len(counted), "plain_runs": len(plain),
           "tp_ranks_left_out": len(costs) - len(counted),
           "processes": [{k: e.get(k) for k in PROCESS_FIELDS} for e in counted], "fit": None, "buckets": [],
           "findings": [], "adaptive_config": {}, "launch_args": [], "notes": [], "forwards_of_another_version": []}
    if not counted:
        return out
    readable, out["forwards_of_another_version"] = _readable_forwards(counted)
    out["notes"] = [_layout_note(e) for e in counted if _other_layout(e)]
    merged, uncounted = _counted_rows(speculation_cost.merge(readable))
    try:
        report = speculation_cost.estimate(merged)
        found = speculation_cost.findings(report)
    except (ArithmeticError, LookupError, TypeError, ValueError) as exc:  # counts no timer writes: said, not raised
        out["error"] = f"the costs events hold counts the estimate cannot use ({type(exc).__name__}: {exc})"
        return out
    config = speculation_cost.adaptive_config(report)
    out.update(source=report["source"], topk=report["topk"], fit=report.get("fit"),
               buckets=[_bucket(b) for b in report["buckets"]], findings=[finding_dict(f) for f in found],
               adaptive_config=config, launch_args=speculation_cost.launch_args(config, "FILE") if config else [])
    out["notes"] += routing_notes(report["buckets"], config) + adaptive_mode_notes(counted, config)
    out["notes"] += plain_notes(merged.get("plain_steps") or {}, report["buckets"]) if plain else []
    if uncounted:
        out["notes"].append(f"{uncounted} (batch size, depth) row(s) held periods but no counted step (the timer "
                            f"dropped those steps) and were left out")
    return out


def _depth(config: Mapping, key: int) -> int:
    return config[str(key)]["candidate_steps"][0]


def plain_notes(plain_steps: Mapping, buckets: list) -> list[str]:
    """Where a server without speculation was timed but a bucket's plain step still had to be estimated."""
    notes = []
    for bucket in buckets:
        source = bucket.get("plain_source") or ""
        if bucket.get("estimated") and not source.startswith("measured"):
            steps = int((plain_steps.get(bucket["bucket"]) or [0])[0])
            notes.append(f"batch size {bucket['bucket']}: the server without speculation ran {steps} timed decode "
                         f"steps at these batch sizes (fewer than {speculation_cost.MIN_STEPS}): its plain step is "
                         f"estimated instead ({source})")
    return notes


def routing_notes(buckets: list, config: Mapping) -> list[str]:
    """What the written config does where nothing was estimated: SGLang serves a batch size by the largest key at or
    below it, and one below every key by the lowest (AdaptiveSpeculativeParams._find_closest_bs)."""
    keys = sorted(int(k) for k in config)
    if not keys:
        return []
    notes = []
    if keys[0] > 1:
        notes.append(f"batch sizes 1-{keys[0] - 1} have no estimate, but SGLang serves them by the lowest key "
                     f"\"{keys[0]}\": at {_depth(config, keys[0])} draft steps")
    for bucket in buckets:
        if not bucket.get("estimated") and str(bucket["batch_size"][0]) in config:
            notes.append(f"batch size {bucket['bucket']} ({bucket['why']}): kept at the depth it was served, "
                         f"{_depth(config, bucket['batch_size'][0])} draft steps")
    return notes


def adaptive_mode_notes(counted: list[Mapping], config: Mapping) -> list[str]:
    """Where SGLang would not serve the config (adaptive_unsupported_reason in SGLang 0.5.23): topk other than 1, or
    attention DP (the adaptive depth is not synchronised across DP ranks); it falls back to the static depth."""
    if not config:
        return []
    notes = []
    topks = sorted({e.get("topk") for e in counted if e.get("topk") not in (None, 1)}, key=str)
    if topks:
        notes.append(f"served with topk {'/'.join(map(str, topks))}: SGLang's adaptive mode serves topk 1 only and "
                     f"falls back to the static depth otherwise")
    if any(isinstance(e.get("attn_dp_size"), int) and e["attn_dp_size"] > 1 for e in counted):
        notes.append("served with attention DP: SGLang's adaptive mode is disabled under it (its depth is not "
                     "synchronised across DP ranks)")
    return notes


def why_nothing_estimated(result: Mapping) -> str | None:
    """Why no bucket was estimated (no config can be written), or None when one was."""
    if any(b["estimated"] for b in result["buckets"]):
        return None
    if result.get("error"):
        return result["error"]
    if not result["runs"]:
        if result.get("since"):
            return f"no costs line was written after --since {result['since']}"
        if result["tp_ranks_left_out"]:
            return (f"costs events only from {result['tp_ranks_left_out']} process(es) of attention-TP rank > 0: "
                    f"pass the logs of the node that holds rank 0 of each attention-TP group")
        return NO_COSTS
    if not result["buckets"]:
        if result.get("plain_runs") == result["runs"]:
            return (f"the costs events are all from servers without speculation ({result['runs']} process(es)): "
                    f"their decode steps are the plain reference; pass a speculative server's logs with them")
        return "the costs events hold no timed decode step"
    whys = "; ".join(f"batch size {b['bucket']}: {b['why']}" for b in result["buckets"])
    other = result["forwards_of_another_version"]
    if other:
        whys += (f" (the target forwards of pid {', '.join(map(str, other))} were written by another version of the "
                 f"probe and left out)")
    return f"no batch-size bucket could be estimated: {whys}"
