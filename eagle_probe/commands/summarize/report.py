"""A readable report of what the probe saw, per process (rank), from its JSON logs.

build_report(events) returns one JSON-ready dict; text_report.render_text and html_report.render_html draw it
(render_text and input_lines are importable from here too, where summarize's callers import them).
The fields read here, with their types, are listed in fields.py (logread skips lines that break them).
"""

import json
from collections import Counter, defaultdict

from ... import events as names
from ...analysis.traffic import HTTP_SERVER
from .acceptance import acceptance_section
from .causes import causes_section
from .coverage import coverage_section
from .fields import rank_fields, rank_key
from .nodes import nodes_section
from .nodes import notices as node_notices
from .slices import slices_section
from .speculation import speculation_findings, speculation_section
from .text_report import input_lines as input_lines
from .text_report import render_text as render_text
from .training import find_accuracy, training_section
from .values import values_section

NOTICE_EVENTS = (names.CONFIG_ERROR, names.UNSUPPORTED_VERSION, names.INTEGRATION_SKIPPED,
                 names.CUSTOM_LABEL_NOT_SLICED)


def _sort_key(key):
    """Ranks in order, unknown ones last; a pid's runs in the order they ran (the first has no run number)."""
    *rank, run = key
    return tuple((x is None, str(x).zfill(12) if isinstance(x, int) else str(x)) for x in rank) + (run or 1,)


def _group_findings(events):
    groups = {}
    for event in events:
        code = event.get("code", "unknown")
        group = groups.setdefault(code, {"code": code, "severity": event.get("severity"), "count": 0,
                                         "first_time": event.get("timestamp"), "last_time": event.get("timestamp"),
                                         "roles": [], "first_message": event.get("message"), "ranks": []})
        group["count"] += 1
        ts = event.get("timestamp")
        if ts is not None:
            if group["first_time"] is None or ts < group["first_time"]:
                group["first_time"], group["first_message"] = ts, event.get("message")
            if group["last_time"] is None or ts >= group["last_time"]:
                group["last_time"] = ts
        group["last_message"] = event.get("message")
        if event.get("role") not in group["roles"]:
            group["roles"].append(event.get("role"))
        rank = event.get("tp_rank")
        if rank not in group["ranks"]:
            group["ranks"].append(rank)
    order = {"error": 0, "warning": 1}
    return sorted(groups.values(), key=lambda g: (order.get(g["severity"], 2), g["code"]))


def _distinct_forwards(forwards):
    """One row per forward signature (tokens and the token dimension of the shape ignored), with a count."""
    out = {}
    for f in forwards:
        shape = f.get("aux_shape")
        key = json.dumps([f.get(k) for k in ("model_class", "role", "mode", "path", "can_run_tbo", "layers_to_capture",
                                             "tbo_layers", "lost", "aux_returned", "aux_expected", "aux_format",
                                             "slot_widths", "dtype", "error")] + [shape[1:] if shape else shape],
                         default=str)
        if key not in out:
            out[key] = dict(f, seen=0, tokens_seen=[])
        out[key]["seen"] += 1
        if f.get("tokens") is not None and f["tokens"] not in out[key]["tokens_seen"]:
            out[key]["tokens_seen"].append(f["tokens"])
    return list(out.values())


# Where each event goes in a rank's entry: the latest one, or all of them in order.
_LATEST = {names.STARTED: "started", names.SUMMARY: "summary", names.OBSERVABILITY: "statement"}
_LISTED = {names.CAPTURE_CONFIGURED: "capture", names.TARGET_FORWARD: "forwards", names.DRAFT_LOADED: "draft",
           names.DRAFT_FORWARD: "draft", names.FINDING: "findings", names.INTERNAL_ERROR: "errors",
           names.ACCEPTANCE: "acceptance", names.BLOCK_CAPTURE: "draft", names.BLOCK_DRAFT_LOADED: "draft",
           names.BLOCK_DRAFT_FED: "draft"}


def build_report(events: list, input_stats=None, draft_accuracy=None, draft_max_length=None, inputs=None) -> dict:
    """input_stats: LogReader.stats(), the lines read and skipped (shown as the report's input section);
    draft_accuracy: summarize's --draft-accuracy (one number or per-position numbers; else read from the logs);
    draft_max_length: summarize's --draft-max-length (else the trained length the draft.loaded event states);
    inputs: nodes.describe_input of each path given (several nodes' directories), for the nodes section."""
    raw, notices = _events_by_rank(events)
    ranks = [_rank_section(key, raw[key]) for key in sorted(raw, key=_sort_key)]
    values = values_section(events)
    # Vocabulary coverage: low, or binding the acceptance served, becomes a finding of its rank (a cause below).
    coverage = coverage_section(events, ranks, find_accuracy(events, draft_accuracy)[0])
    _add_rank_findings(ranks, raw, coverage["findings"])
    found = [e for e in events if e.get("event") == names.FINDING] + values["findings"] + coverage["findings"]
    report = {"ranks": ranks, "notices": notices, "findings": _group_findings(found), "values": values,
              "draft_vocab_coverage": {k: v for k, v in coverage.items() if k != "findings"},
              "events": len(events), "input": input_stats}
    # Each section below reads the findings before it: served acceptance against training (a shortfall no finding
    # explains becomes a finding of the rank it was seen on), then acceptance by slice (after training: a low slice
    # is not taken as what explains acceptance below training), then the causes users hit (acceptance_low,
    # acceptance_past_trained_length, acceptance_bimodal), from all the above.
    report["training"] = training_section(events, report, draft_accuracy)
    found = _add_derived_findings(report, raw, found, report["training"]["findings"])
    report["acceptance_slices"] = slices_section(events)
    found = _add_derived_findings(report, raw, found, report["acceptance_slices"]["findings"])
    causes = causes_section(events, report, draft_max_length)
    report["causes"] = {k: v for k, v in causes.items() if k != "findings"}
    found = _add_derived_findings(report, raw, found, causes["findings"])
    report["speculation"] = speculation_section(events)  # not a cause of acceptance: read after the causes
    _add_derived_findings(report, raw, found, speculation_findings(report["speculation"]))
    inputs = inputs or []
    report["nodes"] = nodes_section(ranks, inputs)
    report["node_notices"] = node_notices(inputs)
    return report


def _events_by_rank(events: list) -> tuple[dict, list]:
    """Each rank's events by kind (_LATEST, _LISTED), keyed by _rank_key; and the notices, which are no rank's."""
    raw = defaultdict(lambda: {"started": None, "capture": [], "forwards": [], "draft": [], "findings": [],
                               "summary": None, "errors": [], "acceptance": [], "statement": None})
    notices = []
    # SGLang's HTTP server processes: their slices are a section of their own (slices.py), not a rank
    servers = {(e.get("host"), e.get("pid")) for e in events if e.get("role") == HTTP_SERVER}
    for event in events:
        name = event.get("event")
        if name in NOTICE_EVENTS:
            notices.append(event)
            continue
        if (event.get("host"), event.get("pid")) in servers:
            continue
        entry = raw[rank_key(event)]
        if name in _LATEST:
            entry[_LATEST[name]] = event
        elif name in _LISTED:
            entry[_LISTED[name]].append(event)
    return raw, notices


def _path_mix(entry: dict) -> tuple[list, str]:
    """The rank's forwards by role, mode, path and TBO, and where the counts come from: the latest summary's, or
    (before the first summary) the forward events logged."""
    if entry["summary"]:
        return [dict(f) for f in entry["summary"].get("forwards", [])], "summary"
    counts = Counter((f.get("role"), f.get("mode"), f.get("path"), bool(f.get("can_run_tbo")))
                     for f in entry["forwards"])
    mix = [{"role": r, "mode": m, "path": p, "tbo": t, "count": c} for (r, m, p, t), c in sorted(
        counts.items(), key=lambda kv: tuple(str(x) for x in kv[0]))]
    return mix, "distinct forward signatures (no summary yet)"


def _rank_section(key: tuple, entry: dict) -> dict:
    """One rank's entry in the report, from its events (_events_by_rank)."""
    mix, mix_source = _path_mix(entry)
    paths = Counter()
    for f in mix:
        paths[f.get("path") + ("+tbo" if f.get("tbo") else "")] += f.get("count") or 0
    # Where the process ran (node, host): its started event, else its first capture, forward or acceptance event.
    where = entry["started"] or next((e for lst in (entry["capture"], entry["forwards"], entry["acceptance"])
                                      for e in lst), {})
    return {
        **rank_fields(key),
        "node_rank": where.get("node_rank"), "host": where.get("host"),
        "sglang_version": (entry["started"] or {}).get("sglang_version"),
        "rules": (entry["started"] or {}).get("rules"),
        "capture": entry["capture"], "forwards": _distinct_forwards(entry["forwards"]), "draft": entry["draft"],
        "path_mix": mix, "path_totals": dict(paths), "path_mix_source": mix_source,
        "findings": _group_findings(entry["findings"]), "summary": entry["summary"],
        "errors": entry["errors"], "acceptance": acceptance_section(entry["acceptance"]),
        "statement": entry["statement"],
        "model_forwards": (entry["summary"] or {}).get("model_forwards") or [],
    }


def _add_rank_findings(ranks, raw, findings):
    """Findings the report derives (event-like dicts), added to their rank's own."""
    for rank in ranks:
        key = rank_key(rank)
        mine = [f for f in findings if rank_key(f) == key]
        if mine:
            raw[key]["findings"] = raw[key]["findings"] + mine
            rank["findings"] = _group_findings(raw[key]["findings"])


def _add_derived_findings(report: dict, raw, found: list, derived: list) -> list:
    """A section's derived findings: added to their ranks' own and, with all found before them, regrouped as the
    report's findings. Returns all the findings found so far."""
    if derived:
        _add_rank_findings(report["ranks"], raw, derived)
        report["findings"] = _group_findings(found + derived)
    return found + derived
