"""`eagle-probe summarize --html FILE`: one self-contained HTML page with the report's tables and plots.

Plots are SVG drawn here (no plotting dependency) and inlined as data: URIs in <img> tags; a
Content-Security-Policy forbids every network load. A small inline script writes each image's decoded
size into the page (`#img-check`), so a headless browser can prove that the plots rendered; it is the only
script the policy lets run. Everything from the logs is HTML-escaped (_e).
"""

import base64
import hashlib
import html
import json
import math
from collections.abc import Sequence

W, H = 560, 300
ML, MR, MT, MB = 56, 16, 34, 46
COLOURS = ("#2b6cb0", "#c05621", "#2f855a", "#6b46c1", "#b7791f", "#c53030", "#319795", "#4a5568")


def _e(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _svg(title: str, body: list[str], xlabel: str, ylabel: str) -> str:
    return "".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
        f'font-family="sans-serif" font-size="11">',
        f'<rect width="{W}" height="{H}" fill="#ffffff"/>',
        f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="13" font-weight="bold">{_e(title)}</text>',
        f'<line x1="{ML}" y1="{H - MB}" x2="{W - MR}" y2="{H - MB}" stroke="#333"/>',
        f'<line x1="{ML}" y1="{MT}" x2="{ML}" y2="{H - MB}" stroke="#333"/>',
        f'<text x="{(ML + W - MR) / 2}" y="{H - 8}" text-anchor="middle">{_e(xlabel)}</text>',
        f'<text x="14" y="{(MT + H - MB) / 2}" text-anchor="middle" transform="rotate(-90 14 {(MT + H - MB) / 2})">'
        f'{_e(ylabel)}</text>',
        *body, "</svg>"])


def _y_axis(ymax: float) -> tuple[list[str], callable]:
    top, bottom = MT, H - MB

    def y(v):
        return bottom - (bottom - top) * (v / ymax if ymax else 0)
    parts = []
    for i in range(5):
        v = ymax * i / 4
        parts.append(f'<line x1="{ML - 4}" y1="{y(v):.1f}" x2="{W - MR}" y2="{y(v):.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{ML - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>')
    return parts, y


def bar_chart(title: str, labels: Sequence[str], series: dict[str, Sequence[float | None]], xlabel: str,
              ylabel: str, ymax: float | None = None) -> str:
    values = [v for vals in series.values() for v in vals if v is not None]
    ymax = ymax or (max(values) * 1.1 if values and max(values) > 0 else 1.0)
    parts, y = _y_axis(ymax)
    n, k = max(len(labels), 1), max(len(series), 1)
    slot = (W - ML - MR) / n
    bw = slot * 0.8 / k
    for si, (name, vals) in enumerate(series.items()):
        for i, v in enumerate(vals):
            if v is None:
                continue
            x = ML + i * slot + slot * 0.1 + si * bw
            parts.append(f'<rect x="{x:.1f}" y="{y(v):.1f}" width="{bw:.1f}" height="{(H - MB) - y(v):.1f}" '
                         f'fill="{COLOURS[si % len(COLOURS)]}">'
                         f'<title>{_e(name)} {_e(labels[i])}: {v:.3f}</title></rect>')
    for i, label in enumerate(labels):
        parts.append(f'<text x="{ML + (i + 0.5) * slot:.1f}" y="{H - MB + 14}" text-anchor="middle">{_e(label)}</text>')
    if len(series) > 1:
        parts += _legend(list(series))
    return _svg(title, parts, xlabel, ylabel)


def _legend(names: list[str]) -> list[str]:
    out = []
    for i, name in enumerate(names):
        x = W - MR - 150
        out.append(f'<rect x="{x}" y="{MT + i * 14}" width="10" height="10" fill="{COLOURS[i % len(COLOURS)]}"/>')
        out.append(f'<text x="{x + 14}" y="{MT + i * 14 + 9}">{_e(name)}</text>')
    return out


def line_chart(title: str, series: dict[str, Sequence[float | None]], xlabel: str, ylabel: str) -> str:
    values = [v for vals in series.values() for v in vals if v is not None]
    ymax = max(values) * 1.1 if values and max(values) > 0 else 1.0
    parts, y = _y_axis(ymax)
    longest = max((len(v) for v in series.values()), default=1)
    span = (W - ML - MR)

    def x(i):
        return ML + (span * i / (longest - 1) if longest > 1 else span / 2)
    for si, (_name, vals) in enumerate(series.items()):
        colour = COLOURS[si % len(COLOURS)]
        points = [(x(i), y(v)) for i, v in enumerate(vals) if v is not None]
        if len(points) > 1:
            coords = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{coords}"/>')
        for px, py in points:
            parts.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{colour}"/>')
    for i in range(longest):
        if longest <= 12 or i % max(1, longest // 10) == 0:
            parts.append(f'<text x="{x(i):.1f}" y="{H - MB + 14}" text-anchor="middle">{i + 1}</text>')
    parts += _legend(list(series))
    return _svg(title, parts, xlabel, ylabel)


def _img(svg: str, alt: str, plot_id: str) -> str:
    data = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    return (f'<img class="plot" id="{plot_id}" alt="{_e(alt)}" width="{W}" height="{H}" '
            f'src="data:image/svg+xml;base64,{data}">')


def plots(report: dict) -> list[tuple[str, str, str]]:
    """(id, alt, svg) for each plot the report's acceptance data supports."""
    ranks = [r for r in report["ranks"] if r.get("acceptance")]
    if not ranks:
        return []
    name = {id(r): f"tp{r['tp_rank']} pid {r['pid']}" for r in ranks}
    out = []
    positions = max(len(r["acceptance"]["per_position_rate"]) for r in ranks)
    out.append(("plot-position", "acceptance by draft position", bar_chart(
        "Acceptance by draft position", [str(k + 1) for k in range(positions)],
        {name[id(r)]: r["acceptance"]["per_position_rate"] for r in ranks},
        "draft position", "accepted fraction", ymax=1.0)))
    lengths = sorted({int(k) for r in ranks for k in r["acceptance"]["accept_length_histogram"]})
    if lengths:
        series = {}
        for r in ranks:
            hist = r["acceptance"]["accept_length_histogram"]
            total = sum(hist.values()) or 1
            series[name[id(r)]] = [hist.get(str(n), 0) / total for n in lengths]
        out.append(("plot-histogram", "accept-length distribution", bar_chart(
            "Accepted drafts per step", [str(n) for n in lengths], series, "accepted drafts (bonus excluded)",
            "fraction of request-steps")))
    out.append(("plot-time", "acceptance over time", line_chart(
        "Mean accept length per window (bonus included)",
        {name[id(r)]: [w["mean_accept_length"] for w in r["acceptance"]["over_time"]] for r in ranks},
        "window", "tokens per step")))
    return out


def _values_section(values: dict) -> list[str]:
    """Fingerprints per rank and slot, the ranks compared, and RMS per slot per rank over the samples logged."""
    rows = values.get("fingerprints") or []
    if not rows:
        return []
    parts = ["<h2>Hidden-state values</h2>", _table(
        ("tp_rank", "role", "slot", "label", "samples", "rms last", "rms min", "rms max", "absmax", "non-finite"),
        [(r["tp_rank"], r["role"], r["slot"], r["label"], r["samples"], _num(r["rms_last"], 5),
          _num(r["rms_min"], 5), _num(r["rms_max"], 5), _num(r["absmax"], 5), r["nonfinite"]) for r in rows],
        "fingerprints")]
    notes = [f"ranks compared at {values.get('compared', 0)} (step, slot) pairs"] + list(values.get("not_compared", []))
    parts.append("<p>" + _e("; ".join(notes)) + "</p>")
    for f in values.get("findings", []):
        parts.append(f"<p class=\"finding\">{_e(f['severity'].upper())} {_e(f['code'])}: {_e(f['message'])}</p>")
    series = {f"tp{r['tp_rank']} {r['role']} slot {r['slot']}":
              [v if math.isfinite(v) else None for _, v in r["series"]] for r in rows}
    svg = line_chart("RMS per aux slot and rank (samples logged)", series, "sample", "rms")
    parts.append("<div>" + _img(svg, "rms per slot per rank", "plot-values-rms") + "</div>")
    return parts


def _table(headers: Sequence[str], rows: Sequence[Sequence], cls: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _num(v, d=3):
    return "n/a" if v is None else (f"{v:.{d}f}" if isinstance(v, float) else v)


CSS = """body{font-family:sans-serif;margin:24px;color:#1a202c;max-width:1200px}
table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #cbd5e0;padding:3px 8px;text-align:left;
font-size:13px;vertical-align:top}th{background:#edf2f7}.error{color:#c53030;font-weight:bold}
.warning{color:#b7791f;font-weight:bold}h2{border-bottom:2px solid #2b6cb0;padding-bottom:2px}
.plot{border:1px solid #cbd5e0;margin:4px}#img-check{color:#718096;font-size:11px}"""

CHECK_SCRIPT = """(function(){var out=[];var imgs=document.querySelectorAll('img.plot');
for(var i=0;i<imgs.length;i++){var im=imgs[i];out.push(im.id+' '+im.naturalWidth+'x'+im.naturalHeight+
(im.complete?' complete':' pending'));im.setAttribute('data-natural-width',String(im.naturalWidth));}
var el=document.getElementById('img-check');el.textContent=out.join('\\n');el.setAttribute('data-done','1');})();"""


SCRIPT = f"window.addEventListener('load',function(){{{CHECK_SCRIPT}}});"
# Only this script may run (its hash, not 'unsafe-inline'): if log text ever reached the page unescaped,
# a <script> or onerror= in it would still be refused.
SCRIPT_SRC = "'sha256-" + base64.b64encode(hashlib.sha256(SCRIPT.encode("utf-8")).digest()).decode("ascii") + "'"


def _input_section(stats: dict | None) -> str:
    """Lines read and skipped, and why; the first skipped lines with file:line."""
    if not stats:
        return ""
    why = ", ".join(f"{reason}: {n}" for reason, n in stats["skipped_by_reason"].items())
    out = [f"<h2>Input</h2><p>{stats['files']} file(s), {stats['lines']} line(s): {stats['events']} probe "
           f"event(s), {stats['skipped']} skipped{_e(f' ({why})' if why else '')}.</p>"]
    if stats["skipped_lines"]:
        out.append(_table(("file", "line", "reason"), [(s["file"], s["line"], s["reason"])
                                                      for s in stats["skipped_lines"]], "skipped"))
    if stats["skipped_not_listed"]:
        out.append(f"<p>... and {stats['skipped_not_listed']} more skipped line(s) not listed.</p>")
    return "".join(out)


def _training_section(training: dict) -> list:
    """Served acceptance against the training accuracies (summarize/training.py), per rank and position."""
    if training.get("accuracy") is None:
        return []
    out = [f"<h2>Acceptance against training</h2><p>accuracies {_e(training['accuracy'])} "
           f"({_e(training['accuracy_source'])})</p>"]
    rows = [(row["where"], p["position"], _num(p["served_rate"]), _num(p["promised_rate"]),
             _num(p["served_conditional"]), _num(p["promised_conditional"]), "short" if p["below"] else "")
            for row in training["ranks"] for p in row["per_position"]]
    out.append(_table(("rank", "position", "served", "promised", "served conditional", "promised conditional",
                       ""), rows, "training"))
    out.append(_table(("rank", "served mean accept length", "promised", "ratio", "drafts", "verdict"), [
        (row["where"], _num(row["served_mean_accept_length"], 2), _num(row["promised_mean_accept_length"], 2),
         _num(row["served_over_promised"]), row["drafts"], "below" if row["below"] else "within")
        for row in training["ranks"]], "training-totals"))
    if training.get("checks"):
        out.append(_table(("check", "status", "detail"), [(c["check"], c["status"], c["detail"])
                                                         for c in training["checks"]], "checks"))
        out.append("<ol>" + "".join(f"<li>{_e(step)}</li>" for step in training["next_steps"]) + "</ol>")
    return out


def _speculation_section(section: dict | None) -> list[str]:
    """Does speculation pay? Each batch-size bucket's estimate (summarize/speculation.py, as `advise` reads it)."""
    if not section:
        return []
    rows = [(b["bucket"], b["steps"], b["served_depth"], _num(b["estimated_speedup"], 2), _num(b["uncertainty"], 2),
             _num(b["break_even_accept_length"], 2), _num(b["tokens_per_step"], 2), _num(b["recommended_num_steps"]),
             _num(b["plain_step_seconds"], 4), b["why"] or "") for b in section["buckets"]]
    return [f"<h2>Does speculation pay?</h2><p>eagle_probe.spec.costs of {_e(section['runs'])} process(es), clock "
            f"{_e(section['source'])}; <code>eagle-probe advise</code> prints the phase costs and writes the adaptive "
            f"config.</p>",
            _table(("batch size", "steps", "served depth", "speed-up", "±", "break-even accept length",
                    "tokens per step", "best depth", "plain step s", "not estimated because"), rows, "speculation")]


def _nodes_section(nodes: dict | None, notes: list[str]) -> list[str]:
    """Ranks by node and what differs across nodes (summarize/nodes.py), when the logs hold several nodes."""
    if not nodes or (len(nodes["nodes"]) < 2 and not notes):
        return []
    out = ["<h2>Nodes</h2>", _table(("node_rank", "host", "input", "tp_ranks", "pids", "drafts", "mean accept length",
                                     "findings"), [
        (n["node_rank"], ", ".join(n["hosts"]), ", ".join(n["inputs"]), n["tp_ranks"], n["pids"], n["drafts"],
         _num(n["mean_accept_length"], 2), ", ".join(n["findings"]) or "none") for n in nodes["nodes"]])]
    out += [f"<p class=\"finding\">DIFFERS: {_e(d)}</p>" for d in nodes["differences"]]
    out += [f"<p class=\"error\">{_e(note)}</p>" for note in notes]
    return out


def render_html(report: dict, title: str = "eagle-probe report") -> str:
    # One element per block of the page, joined by newlines.
    parts = _head(report, title)
    parts += _notices_section(report["notices"])
    parts += _nodes_section(report.get("nodes"), report.get("node_notices") or [])
    parts += _findings_section(report["findings"])
    parts += _acceptance_section(report)
    parts += _coverage_section(report.get("draft_vocab_coverage") or {})
    parts += _training_section(report.get("training") or {})
    parts += _speculation_section(report.get("speculation"))
    parts += _values_section(report.get("values") or {})
    for r in report["ranks"]:
        parts += _rank_section(r)
    parts.append('<pre id="img-check"></pre>')
    parts.append(f"<script>{SCRIPT}</script>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _head(report: dict, title: str) -> list[str]:
    """The page's head (its Content-Security-Policy: no network load, only SCRIPT runs), title and input."""
    return [
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; "
        f"style-src 'unsafe-inline'; script-src {SCRIPT_SRC}\">",
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f"<p>{len(report['ranks'])} process(es), {report.get('events', 0)} probe events.</p>",
        _input_section(report.get("input")),
    ]


def _notices_section(notices: list) -> list[str]:
    """Events that are no rank's (config errors, unsupported versions, skipped integrations), with their fields."""
    if not notices:
        return []
    return ["<h2>Notices</h2>" + _table(("event", "details"), [
        (n.get("event"), ", ".join(f"{k}={v}" for k, v in n.items()
                                   if k not in ("event", "timestamp", "level", "logger")))
        for n in notices], "notices")]


def _findings_section(findings: list) -> list[str]:
    """The findings of all ranks, one row per code."""
    heading = "<h2>Findings (all ranks)</h2>"
    if not findings:
        return [heading, "<p>No findings.</p>"]
    return [heading, _table(("code", "severity", "count", "ranks", "first", "last", "message"), [
        (f["code"], f["severity"], f["count"], ", ".join(str(r) for r in f["ranks"]), f["first_time"],
         f["last_time"], f["last_message"]) for f in findings], "findings")]


def _acceptance_section(report: dict) -> list[str]:
    """Each rank's acceptance figures and the plots (plots()), when the logs hold acceptance events."""
    plot_list = plots(report)
    if not plot_list:
        return ["<h2>Acceptance</h2>", "<p>No <code>eagle_probe.acceptance</code> events in these logs.</p>"]
    rows = []
    for r in report["ranks"]:
        acc = r.get("acceptance")
        if acc:
            rows.append((r["tp_rank"], r["pid"], acc["windows"], acc["drafts"], _num(acc["mean_accept_length"], 2),
                         _num(acc["expected_mean_accept_length"], 2), _num(acc["accept_rate"]),
                         ", ".join(str(_num(v)) for v in acc["per_position_rate"]),
                         ", ".join(str(_num(v)) for v in acc["conditional_rate"]),
                         ", ".join(acc.get("read_at") or [])))
    return ["<h2>Acceptance</h2>",
            _table(("tp_rank", "pid", "windows", "drafts", "mean accept length", "expected", "accept rate",
                    "per position", "conditional", "read at"), rows, "acceptance"),
            "<div>" + "".join(_img(svg, alt, pid) for pid, alt, svg in plot_list) + "</div>"]


def _coverage_section(coverage: dict) -> list[str]:
    """How much of the verified tokens the draft's vocabulary holds, per rank (summarize/coverage.py)."""
    rows = coverage.get("ranks") or []
    if not rows:
        return []
    return ["<h3>Draft vocabulary coverage</h3>" + _table(
        ("tp_rank", "pid", "coverage", "in vocabulary", "verified tokens", "map", "hot ids", "accept length cap"),
        [(r["tp_rank"], r["pid"], _num(r["coverage"]), r["in_vocab"], r["verified_tokens"], r["map"],
          r["hot_vocab_size"], _num(r["mean_accept_length_cap"], 2)) for r in rows], "coverage")]


def _rank_section(r: dict) -> list[str]:
    """One rank: where it ran, what it captured and forwarded, its draft events, path mix, findings and errors."""
    node = "" if r.get("node_rank") is None else f"node_rank {_e(r['node_rank'])} ({_e(r.get('host'))}), "
    parts = [f"<h2>{node}tp_rank {_e(r['tp_rank'])}, pp_rank {_e(r['pp_rank'])}, dp_rank {_e(r['dp_rank'])}, "
             f"pid {_e(r['pid'])}</h2>"]
    if r.get("sglang_version"):
        parts.append(f"<p>SGLang {_e(r['sglang_version'])}: {_e(r.get('rules'))}</p>")
    parts += _capture_table(r["capture"])
    parts += _forwards_table(r["forwards"])
    parts += _draft_table(r["draft"])
    if r["path_mix"]:
        parts.append(f"<h3>Path mix</h3><p>from {_e(r['path_mix_source'])}</p>" + _table(
            ("role", "mode", "path", "TBO", "count"),
            [(f.get("role"), f.get("mode"), f.get("path"), f.get("tbo"), f.get("count")) for f in r["path_mix"]],
            "pathmix"))
    parts.append("<h3>Findings</h3>")
    if r["findings"]:
        parts.append(_table(("code", "severity", "count", "first", "last", "message"), [
            (f["code"], f["severity"], f["count"], f["first_time"], f["last_time"], f["last_message"])
            for f in r["findings"]], "findings"))
    else:
        parts.append("<p>none</p>")
    for err in r["errors"]:
        parts.append(f"<p class=\"error\">probe internal error in {_e(err.get('where'))}: "
                     f"{_e(err.get('error'))}</p>")
    return parts


def _capture_table(capture: list) -> list[str]:
    """Each capture.configured event's aux slots: the capture index and HF hidden_states index of each."""
    if not capture:
        return []
    rows = []
    for c in capture:
        for s in c.get("slots") or []:
            rows.append((c.get("role"), c.get("caller"), "yes" if c.get("during_graph_setup") else "no",
                         c.get("requested_ids"), s["slot"], s["capture_index"], s["hf_index"], s["label"]))
    return ["<h3>Captured layers</h3>" + _table(
        ("role", "configured by", "graph set-up", "ids", "slot", "capture index", "HF index", "label"),
        rows, "capture")]


def _forwards_table(forwards: list) -> list[str]:
    """The rank's distinct forward signatures (report._distinct_forwards)."""
    if not forwards:
        return []
    return ["<h3>Forward signatures</h3>" + _table(
        ("role", "mode", "path", "TBO", "layers", "labels", "aux", "shape", "slot widths", "dtype", "lost",
         "error"),
        [(f.get("role"), f.get("mode"), f.get("path"), f.get("can_run_tbo"), f.get("layers_to_capture"),
          ", ".join(f.get("slot_labels") or []),
          f"{f.get('aux_returned')}/{f.get('aux_expected')} {f.get('aux_format')}",
          f.get("aux_shape"), f.get("slot_widths"), f.get("dtype"), f.get("lost"), f.get("error"))
         for f in forwards], "forwards")]


def _draft_table(draft: list) -> list[str]:
    """The draft's events on this rank, each with its own fields as JSON (where it ran is the section's heading)."""
    if not draft:
        return []
    return ["<h3>Draft</h3>" + _table(("event", "details"), [
        (d["event"], json.dumps({k: v for k, v in d.items() if k not in (
            "event", "timestamp", "level", "logger", "pid", "tp_rank", "tp_size", "pp_rank", "dp_rank")},
            default=str))
        for d in draft], "draft")]
