"""A readable report of what the probe saw, per process (rank), from its JSON logs.

build_report(events) returns one JSON-ready dict; render_text and html_report.render_html draw it.
The fields read here, with their types, are listed in fields.py (logread skips lines that break them).
"""

import json
from collections import Counter, defaultdict

from ... import events as names
from ...analysis.traffic import HTTP_SERVER
from .acceptance import acceptance_section, render_acceptance_text
from .causes import causes_section
from .coverage import coverage_section, render_coverage_line
from .nodes import nodes_section, render_nodes_text
from .nodes import notices as node_notices
from .slices import render_slices_text, slices_section
from .training import find_accuracy, render_training_text, training_section
from .values import render_values_text, values_section

RANK_FIELDS = ("tp_rank", "tp_size", "pp_rank", "pp_size", "dp_rank", "attn_tp_rank", "attn_tp_size", "attn_dp_rank",
               "attn_dp_size", "node_rank", "nnodes")
NOTICE_EVENTS = (names.CONFIG_ERROR, names.UNSUPPORTED_VERSION, names.INTEGRATION_SKIPPED,
                 names.CUSTOM_LABEL_NOT_SLICED)


def _rank_key(event: dict):
    return (event.get("tp_rank"), event.get("pp_rank"), event.get("dp_rank"), event.get("pid"))


def _sort_key(key):
    return tuple((x is None, str(x).zfill(12) if isinstance(x, int) else str(x)) for x in key)


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
           names.ACCEPTANCE: "acceptance"}


def build_report(events: list, input_stats=None, draft_accuracy=None, draft_max_length=None, inputs=None) -> dict:
    """input_stats: LogReader.stats(), the lines read and skipped (shown as the report's input section);
    draft_accuracy: summarize's --draft-accuracy (one number or per-position numbers; else read from the logs);
    draft_max_length: summarize's --draft-max-length (else the trained length the draft.loaded event states);
    inputs: nodes.describe_input of each path given (several nodes' directories), for the nodes section."""
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
        entry = raw[_rank_key(event)]
        if name in _LATEST:
            entry[_LATEST[name]] = event
        elif name in _LISTED:
            entry[_LISTED[name]].append(event)
    ranks = []
    for key in sorted(raw, key=_sort_key):
        entry = raw[key]
        if entry["summary"]:
            mix = [dict(f) for f in entry["summary"].get("forwards", [])]
            mix_source = "summary"
        else:
            counts = Counter((f.get("role"), f.get("mode"), f.get("path"), bool(f.get("can_run_tbo")))
                             for f in entry["forwards"])
            mix = [{"role": r, "mode": m, "path": p, "tbo": t, "count": c} for (r, m, p, t), c in sorted(
                counts.items(), key=lambda kv: tuple(str(x) for x in kv[0]))]
            mix_source = "distinct forward signatures (no summary yet)"
        paths = Counter()
        for f in mix:
            paths[f.get("path") + ("+tbo" if f.get("tbo") else "")] += f.get("count") or 0
        where = entry["started"] or next((e for lst in (entry["capture"], entry["forwards"], entry["acceptance"])
                                          for e in lst), {})
        ranks.append({
            "tp_rank": key[0], "pp_rank": key[1], "dp_rank": key[2], "pid": key[3],
            "node_rank": where.get("node_rank"), "host": where.get("host"),
            "sglang_version": (entry["started"] or {}).get("sglang_version"),
            "rules": (entry["started"] or {}).get("rules"),
            "capture": entry["capture"], "forwards": _distinct_forwards(entry["forwards"]), "draft": entry["draft"],
            "path_mix": mix, "path_totals": dict(paths), "path_mix_source": mix_source,
            "findings": _group_findings(entry["findings"]), "summary": entry["summary"],
            "errors": entry["errors"], "acceptance": acceptance_section(entry["acceptance"]),
            "statement": entry["statement"],
            "model_forwards": (entry["summary"] or {}).get("model_forwards") or [],
        })
    values = values_section(events)
    # Vocabulary coverage: low, or binding the acceptance served, becomes a finding of its rank (a cause below).
    coverage = coverage_section(events, ranks, find_accuracy(events, draft_accuracy)[0])
    _add_rank_findings(ranks, raw, coverage["findings"])
    all_findings = [e for e in events if e.get("event") == names.FINDING] + values["findings"] + coverage["findings"]
    report = {"ranks": ranks, "notices": notices, "findings": _group_findings(all_findings), "values": values,
              "draft_vocab_coverage": {k: v for k, v in coverage.items() if k != "findings"},
              "events": len(events), "input": input_stats}
    # Served acceptance against training: a shortfall no finding explains becomes a finding of the rank it was seen on.
    training = training_section(events, report, draft_accuracy)
    report["training"] = training
    if training["findings"]:
        _add_rank_findings(ranks, raw, training["findings"])
        report["findings"] = _group_findings(all_findings + training["findings"])
    _add_slices(report, raw, events, all_findings + training["findings"])
    # The causes users hit (acceptance_low, acceptance_past_trained_length, acceptance_bimodal), from all the above.
    causes = causes_section(events, report, draft_max_length)
    report["causes"] = {k: v for k, v in causes.items() if k != "findings"}
    if causes["findings"]:
        _add_rank_findings(ranks, raw, causes["findings"])
        report["findings"] = _group_findings(all_findings + training["findings"]
                                             + report["acceptance_slices"]["findings"] + causes["findings"])
    inputs = inputs or []
    report["nodes"] = nodes_section(ranks, inputs)
    report["node_notices"] = node_notices(inputs)
    return report


def _add_rank_findings(ranks, raw, findings):
    """Findings the report derives (event-like dicts), added to their rank's own."""
    for rank in ranks:
        key = (rank["tp_rank"], rank["pp_rank"], rank["dp_rank"], rank["pid"])
        mine = [f for f in findings if _rank_key(f) == key]
        if mine:
            raw[key]["findings"] = raw[key]["findings"] + mine
            rank["findings"] = _group_findings(raw[key]["findings"])


def _add_slices(report: dict, raw, events, findings):
    """Acceptance by slice, and acceptance_slice_low on the rank it was seen on (after training: a low slice is not
    taken as what explains acceptance below training)."""
    section = slices_section(events)
    report["acceptance_slices"] = section
    if section["findings"]:
        _add_rank_findings(report["ranks"], raw, section["findings"])
        report["findings"] = _group_findings(findings + section["findings"])


def _fmt(value, digits=3):
    return "n/a" if value is None else (f"{value:.{digits}f}" if isinstance(value, float) else str(value))


def render_text(report: dict) -> str:
    out = []
    for notice in report["notices"]:
        out.append(f"! {notice['event']}: " + ", ".join(f"{k}={v}" for k, v in notice.items()
                                                         if k not in ("event", "timestamp", "level", "logger")))
    if report.get("nodes"):
        out += render_nodes_text(report["nodes"], report.get("node_notices") or [])
    if not report["ranks"]:
        out.append("No probe events found.")
    for rank in report["ranks"]:
        node = "" if rank.get("node_rank") is None else f"node_rank={rank['node_rank']} "
        out.append(f"== {node}tp_rank={rank['tp_rank']} pp_rank={rank['pp_rank']} dp_rank={rank['dp_rank']} "
                   f"pid={rank['pid']}" + (f" host {rank['host']}" if rank.get("host") else "")
                   + (f" sglang {rank['sglang_version']}" if rank["sglang_version"] else ""))
        out += _statement_lines(rank.get("statement"))
        for cfg in rank["capture"]:
            setup = " (during CUDA-graph set-up)" if cfg.get("during_graph_setup") else ""
            out.append(f"  capture configured by {cfg.get('caller')}{setup}: ids {cfg.get('requested_ids')} -> "
                       f"layers_to_capture {cfg.get('layers_to_capture')} "
                       f"[{cfg.get('mapping')}; rule {cfg.get('version_rule')}]")
            for slot in cfg.get("slots") or []:
                out.append(f"    slot {slot['slot']}: capture index {slot['capture_index']} = HF hidden_states"
                           f"[{slot['hf_index']}] = {slot['label']}")
        for fwd in rank["forwards"]:
            tbo = f", TBO layers {fwd.get('tbo_layers')} (lost {fwd.get('lost')})" if fwd.get("tbo_layers") else ""
            out.append(f"  forward {fwd.get('model_class')} {fwd.get('role')} {fwd.get('mode')} path={fwd.get('path')}"
                       f" tbo={fwd.get('can_run_tbo')}{tbo}: aux {fwd.get('aux_returned')}/{fwd.get('aux_expected')}"
                       f" {fwd.get('aux_format')} shape={fwd.get('aux_shape')} widths={fwd.get('slot_widths')} "
                       f"dtype={fwd.get('dtype')} tokens={fwd.get('tokens_seen')} (logged {fwd.get('seen')}x)"
                       + (f" ERROR {fwd['error']}" if fwd.get("error") else ""))
        for ev in rank["draft"]:
            fields = ", ".join(f"{k}={v}" for k, v in ev.items() if k not in (
                "event", "timestamp", "level", "logger", "pid", "host", *RANK_FIELDS))
            out.append(f"  {ev['event'].split('.', 1)[1]}: {fields}")
        if rank["path_mix"]:
            counts = ", ".join(f"{f.get('role')}/{f.get('mode')}/{f.get('path')}{'/tbo' if f.get('tbo') else ''}: "
                               f"{f.get('count')}" for f in rank["path_mix"])
            out.append(f"  path mix ({rank['path_mix_source']}): {counts}")
        if rank.get("model_forwards"):
            counts = ", ".join(f"{f.get('role')}/{f.get('mode')}/{f.get('path')}"
                               f"{'/' + str(f.get('graph')) if f.get('graph') not in (None, 'none') else ''}: "
                               f"{f.get('count')}" for f in rank["model_forwards"])
            out.append(f"  model runner forwards (every path): {counts}")
        if rank["summary"]:
            out.append(f"  captures lost: {rank['summary'].get('captures_lost')}; probe internal errors: "
                       f"{rank['summary'].get('internal_errors')}")
        out += render_acceptance_text(rank["acceptance"])
        out += render_coverage_line(rank.get("draft_vocab_coverage"))
        if not rank["findings"]:
            out.append(_no_findings(rank, report))
        for f in rank["findings"]:
            when = (f"{f['first_time']} .. {f['last_time']}" if f["first_time"] != f["last_time"]
                    else f"{f['first_time']}")
            out.append(f"  FINDING {f['code']} [{f['severity']}] x{f['count']} ({when}): {f['last_message']}")
        for err in rank["errors"]:
            out.append(f"  probe internal error in {err.get('where')}: {err.get('error')}")
    out += render_training_text(report["training"]) if report.get("training") else []
    out += render_slices_text(report["acceptance_slices"]) if report.get("acceptance_slices") else []
    out += render_values_text(report["values"])
    out += input_lines(report.get("input"))
    return "\n".join(out)


def _statement_lines(statement) -> list:
    """The process's start-up statement: its settings, and each observation's source and whether it is live."""
    if not isinstance(statement, dict):
        return []
    settings = statement.get("settings") if isinstance(statement.get("settings"), dict) else {}
    out = ["  what the probe sees here: " + ", ".join(f"{k}={v}" for k, v in settings.items())]
    for item in statement.get("observations") or []:
        if isinstance(item, dict):
            state = "live" if item.get("live") else f"NOT SEEN ({item.get('why')})"
            out.append(f"    {item.get('what')} <- {item.get('source')}: {state}")
    return out


def _no_findings(rank: dict, report: dict) -> str:
    """A rank without findings of its own; never a bare 'findings: none' over acceptance below training."""
    training = report.get("training") or {}
    below = [r for r in training.get("ranks") or [] if r["below"] and r["pid"] == rank["pid"]
             and r["tp_rank"] == rank["tp_rank"]]
    if below:
        return (f"  findings: none on this rank, but acceptance is below what training promised "
                f"({below[0]['served_over_promised']:.0%}); findings elsewhere that may explain it: "
                f"{', '.join(training['explained_by']) or 'none'}")
    return "  findings: none"


def input_lines(stats) -> list:
    """What was read and what was skipped (and why), with file:line for the first skipped lines."""
    if not stats:
        return []
    why = ", ".join(f"{reason}: {n}" for reason, n in stats["skipped_by_reason"].items())
    out = [f"input: {stats['files']} file(s), {stats['lines']} line(s): {stats['events']} probe event(s), "
           f"{stats['skipped']} skipped" + (f" ({why})" if why else "")]
    out += [f"  skipped {s['file']}:{s['line']}: {s['reason']}" for s in stats["skipped_lines"]]
    if stats["skipped_not_listed"]:
        out.append(f"  ... and {stats['skipped_not_listed']} more skipped line(s) not listed")
    return out
