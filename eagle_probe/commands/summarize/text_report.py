"""`eagle-probe summarize`'s text report: report.build_report's dict drawn as lines, one block per rank, then the
sections that span ranks (training, slices, speculation, values) and what was read."""

from ... import events as names
from .acceptance import render_acceptance_text
from .coverage import render_coverage_line
from .fields import rank_key
from .nodes import render_nodes_text
from .slices import render_slices_text
from .speculation import render_speculation_text
from .training import render_training_text
from .values import render_values_text

RANK_FIELDS = ("tp_rank", "tp_size", "pp_rank", "pp_size", "dp_rank", "attn_tp_rank", "attn_tp_size", "attn_dp_rank",
               "attn_dp_size", "node_rank", "nnodes")


def render_text(report: dict) -> str:
    out = [_notice_line(notice) for notice in report["notices"]]
    if report.get("nodes"):
        out += render_nodes_text(report["nodes"], report.get("node_notices") or [])
    if not report["ranks"]:
        out.append("No probe events found.")
    for rank in report["ranks"]:
        out += _rank_lines(rank, report)
    out += render_training_text(report["training"]) if report.get("training") else []
    out += render_slices_text(report["acceptance_slices"]) if report.get("acceptance_slices") else []
    out += render_speculation_text(report.get("speculation"))
    out += render_values_text(report["values"])
    out += input_lines(report.get("input"))
    return "\n".join(out)


def _notice_line(notice: dict) -> str:
    return f"! {notice['event']}: " + ", ".join(f"{k}={v}" for k, v in notice.items()
                                                if k not in ("event", "timestamp", "level", "logger"))


def _rank_lines(rank: dict, report: dict) -> list:
    """One rank's block: where it ran, what the probe sees and captured there, its forwards, acceptance, findings."""
    out = [_rank_heading(rank)]
    out += _statement_lines(rank.get("statement"))
    for cfg in rank["capture"]:
        out += _capture_lines(cfg)
    out += [_forward_line(fwd) for fwd in rank["forwards"]]
    out += [_draft_line(ev) for ev in rank["draft"]]
    out += _forward_count_lines(rank)
    if rank["summary"]:
        out.append(f"  captures lost: {rank['summary'].get('captures_lost')}; probe internal errors: "
                   f"{rank['summary'].get('internal_errors')}")
    out += render_acceptance_text(rank["acceptance"])
    out += render_coverage_line(rank.get("draft_vocab_coverage"))
    out += _finding_lines(rank, report)
    out += [f"  probe internal error in {err.get('where')}: {err.get('error')}" for err in rank["errors"]]
    return out


def _rank_heading(rank: dict) -> str:
    node = "" if rank.get("node_rank") is None else f"node_rank={rank['node_rank']} "
    return (f"== {node}tp_rank={rank['tp_rank']} pp_rank={rank['pp_rank']} dp_rank={rank['dp_rank']} "
            f"pid={rank['pid']}" + (f" run {rank['run']} (restarted under the same pid)" if rank.get("run") else "")
            + (f" host {rank['host']}" if rank.get("host") else "")
            + (f" sglang {rank['sglang_version']}" if rank["sglang_version"] else ""))


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


def _capture_lines(cfg: dict) -> list:
    """One capture.configured event: the ids asked for, the layers captured, and what each aux slot holds."""
    setup = " (during CUDA-graph set-up)" if cfg.get("during_graph_setup") else ""
    out = [f"  capture configured by {cfg.get('caller')}{setup}: ids {cfg.get('requested_ids')} -> "
           f"layers_to_capture {cfg.get('layers_to_capture')} "
           f"[{cfg.get('mapping')}; rule {cfg.get('version_rule')}]"]
    for slot in cfg.get("slots") or []:
        out.append(f"    slot {slot['slot']}: capture index {slot['capture_index']} = HF hidden_states"
                   f"[{slot['hf_index']}] = {slot['label']}")
    return out


def _forward_line(fwd: dict) -> str:
    """One distinct forward signature (report._distinct_forwards) and how often it was logged."""
    tbo = f", TBO layers {fwd.get('tbo_layers')} (lost {fwd.get('lost')})" if fwd.get("tbo_layers") else ""
    return (f"  forward {fwd.get('model_class')} {fwd.get('role')} {fwd.get('mode')} path={fwd.get('path')}"
            f" tbo={fwd.get('can_run_tbo')}{tbo}: aux {fwd.get('aux_returned')}/{fwd.get('aux_expected')}"
            f" {fwd.get('aux_format')} shape={fwd.get('aux_shape')} widths={fwd.get('slot_widths')} "
            f"dtype={fwd.get('dtype')} tokens={fwd.get('tokens_seen')} (logged {fwd.get('seen')}x)"
            + (f" ERROR {fwd['error']}" if fwd.get("error") else ""))


def _draft_line(ev: dict) -> str:
    if ev.get("event") == names.BLOCK_CAPTURE:
        return _block_capture_line(ev)
    # The draft event's own fields: where it ran is the rank's heading already.
    fields = ", ".join(f"{k}={v}" for k, v in ev.items() if k not in (
        "event", "timestamp", "level", "logger", "pid", "host", *RANK_FIELDS))
    return f"  {ev['event'].split('.', 1)[1]}: {fields}"


def _block_capture_line(ev: dict) -> str:
    """A DFlash/DSpark capture: the ids, where they came from, and what each slot holds."""
    source = ev.get("ids_source")
    source = "SGLang's default: the draft config names none" if source == "default" else source
    slots = ", ".join(f"{s.get('hf_index')} ({s.get('label')})" for s in ev.get("slots") or [] if isinstance(s, dict))
    return (f"  block-draft capture ({ev.get('algorithm')}, {ev.get('model_class')}): target_layer_ids "
            f"{ev.get('requested_ids')} ({source}) -> HF hidden_states {slots or 'none'}; {ev.get('rule_text')}")


def _forward_count_lines(rank: dict) -> list:
    """The path mix of the probed forwards, and the model runner's forwards on every path."""
    out = []
    if rank["path_mix"]:
        counts = ", ".join(f"{f.get('role')}/{f.get('mode')}/{f.get('path')}{'/tbo' if f.get('tbo') else ''}: "
                           f"{f.get('count')}" for f in rank["path_mix"])
        out.append(f"  path mix ({rank['path_mix_source']}): {counts}")
    if rank.get("model_forwards"):
        counts = ", ".join(f"{f.get('role')}/{f.get('mode')}/{f.get('path')}"
                           f"{'/' + str(f.get('graph')) if f.get('graph') not in (None, 'none') else ''}: "
                           f"{f.get('count')}" for f in rank["model_forwards"])
        out.append(f"  model runner forwards (every path): {counts}")
    return out


def _finding_lines(rank: dict, report: dict) -> list:
    """The rank's findings, one line per code with its count and time span."""
    if not rank["findings"]:
        return [_no_findings(rank, report)]
    out = []
    for f in rank["findings"]:
        when = (f"{f['first_time']} .. {f['last_time']}" if f["first_time"] != f["last_time"]
                else f"{f['first_time']}")
        out.append(f"  FINDING {f['code']} [{f['severity']}] x{f['count']} ({when}): {f['last_message']}")
    return out


def _no_findings(rank: dict, report: dict) -> str:
    """A rank without findings of its own; never a bare 'findings: none' over acceptance below training."""
    training = report.get("training") or {}
    below = [r for r in training.get("ranks") or [] if r["below"] and rank_key(r) == rank_key(rank)]
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
    if stats.get("restarts"):
        out.append(f"  {stats['restarts']} process(es) started again under a pid already read: each run is "
                   f"counted apart (run 2, 3, ...)")
    out += [f"  skipped {s['file']}:{s['line']}: {s['reason']}" for s in stats["skipped_lines"]]
    if stats["skipped_not_listed"]:
        out.append(f"  ... and {stats['skipped_not_listed']} more skipped line(s) not listed")
    return out
