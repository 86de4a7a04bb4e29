"""A readable report of what the probe saw, per process (rank), from its JSON logs."""

from collections import defaultdict


def _rank_key(event: dict):
    return (event.get("tp_rank"), event.get("pp_rank"), event.get("dp_rank"), event.get("pid"))


def build_report(events: list) -> dict:
    ranks = defaultdict(lambda: {"capture": [], "forwards": [], "findings": {}, "summary": None, "errors": []})
    notices = []
    for event in events:
        name = event["event"]
        if name in ("eagle_probe.config_error", "eagle_probe.unsupported_version", "eagle_probe.integration.skipped"):
            notices.append(event)
            continue
        entry = ranks[_rank_key(event)]
        if name == "eagle_probe.capture.configured":
            entry["capture"].append(event)
        elif name == "eagle_probe.target.forward":
            entry["forwards"].append(event)
        elif name == "eagle_probe.finding":
            found = entry["findings"].setdefault(event["code"], {"count": 0, "first": event, "last": event})
            found["count"] += 1
            found["last"] = event
        elif name == "eagle_probe.summary":
            entry["summary"] = event
        elif name == "eagle_probe.internal_error":
            entry["errors"].append(event)
    return {"ranks": dict(ranks), "notices": notices}


def render_text(report: dict) -> str:
    out = []
    for notice in report["notices"]:
        out.append(f"! {notice['event']}: " + ", ".join(f"{k}={v}" for k, v in notice.items()
                                                         if k not in ("event", "timestamp", "level", "logger")))
    if not report["ranks"]:
        out.append("No probe events found.")
    for (tp, pp, dp, pid), entry in sorted(report["ranks"].items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        out.append(f"== tp_rank={tp} pp_rank={pp} dp_rank={dp} pid={pid}")
        for cfg in entry["capture"]:
            setup = " (during CUDA-graph set-up)" if cfg.get("during_graph_setup") else ""
            out.append(f"  capture configured by {cfg['caller']}{setup}: ids {cfg['requested_ids']} -> "
                       f"layers_to_capture {cfg['layers_to_capture']} [{cfg['mapping']}; rule {cfg['version_rule']}]")
            for slot in cfg["slots"]:
                out.append(f"    slot {slot['slot']}: capture index {slot['capture_index']} = HF hidden_states"
                           f"[{slot['hf_index']}] = {slot['label']}")
        for fwd in entry["forwards"]:
            tbo = f", TBO layers {fwd['tbo_layers']} (lost {fwd['lost']})" if fwd.get("tbo_layers") else ""
            out.append(f"  forward {fwd['model_class']} {fwd['role']} {fwd['mode']} path={fwd['path']}"
                       f" tbo={fwd['can_run_tbo']}{tbo}: aux {fwd['aux_returned']}/{fwd['aux_expected']}"
                       f" {fwd['aux_format']} shape={fwd['aux_shape']} widths={fwd['slot_widths']} "
                       f"dtype={fwd['dtype']} tokens={fwd['tokens']}" + (f" ERROR {fwd['error']}" if fwd.get("error") else ""))
        if entry["summary"]:
            counts = ", ".join(f"{f['role']}/{f['mode']}/{f['path']}{'/tbo' if f['tbo'] else ''}: {f['count']}"
                               for f in entry["summary"]["forwards"])
            out.append(f"  forwards so far: {counts}; captures lost: {entry['summary']['captures_lost']}")
        if not entry["findings"]:
            out.append("  findings: none")
        for code, found in sorted(entry["findings"].items()):
            out.append(f"  FINDING {code} [{found['first']['severity']}] x{found['count']}: {found['last']['message']}")
        for err in entry["errors"]:
            out.append(f"  probe internal error in {err['where']}: {err['error']}")
    return "\n".join(out)
