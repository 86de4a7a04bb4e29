"""Regenerates the documentation's pictures from a real run, never drawn by hand:

  the `eagle-probe summarize --html` report of a run's logs, as headless Chromium shows it (a PNG), and
  the dashboard's main panels, their own queries (dashboards/eagle-probe.json) run against a real Prometheus that
  scraped the run, plotted as SVG.

  .venv/bin/python tools/docs_pictures.py --logs out/example/logs                      # the report
  .venv/bin/python tools/docs_pictures.py --prometheus http://127.0.0.1:9090 --minutes 30    # the panels

Pictures go to docs/images/ (--out). Chromium is Debian's `chromium` (scripts/system-deps.sh installs it).
"""

import argparse
import html
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "dashboards" / "eagle-probe.json"
# The panels the documentation shows, by their title in the dashboard.
MAIN_PANELS = ("Mean acceptance length", "Acceptance rate per draft position", "Drafts and verify steps per second",
               "Aux RMS per slot and rank")
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


def _panels(dashboard: dict):
    for panel in dashboard.get("panels", []):
        yield panel
        yield from _panels(panel)


def panel_queries(title: str, dashboard_path: pathlib.Path = DASHBOARD) -> list:
    """The PromQL expressions of the dashboard panel with this title."""
    dashboard = json.loads(dashboard_path.read_text(encoding="utf-8"))
    for panel in _panels(dashboard):
        if panel.get("title") == title:
            return [target["expr"] for target in panel.get("targets", []) if target.get("expr")]
    raise KeyError(f"no panel {title!r} in {dashboard_path}")


def concrete(expr: str, rate_interval: str) -> str:
    """A panel query with Grafana's variables set as 'all' (every instance, rank and role)."""
    for variable in ("$instance", "$node_rank", "$tp_rank", "$role"):
        expr = expr.replace(f'"{variable}"', '".*"')
    return expr.replace("$__rate_interval", rate_interval).replace('"$slice"', '"batch"')


def query_range(url: str, expr: str, start: float, end: float, step: float) -> list:
    """Prometheus' /api/v1/query_range result: [{"metric": {...}, "values": [[t, "v"], ...]}, ...]."""
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{url.rstrip('/')}/api/v1/query_range?{params}", timeout=30) as response:
        body = json.load(response)
    if body.get("status") != "success":
        raise RuntimeError(f"Prometheus refused {expr!r}: {body.get('error')}")
    return body["data"]["result"]


def _legend(metric: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(metric.items()) if k != "__name__") or "value"


def render_svg(title: str, series: list, width: int = 720, height: int = 300) -> str:
    """A line chart of query_range results: one line per series, time on x, value on y, a legend below."""
    points = [(float(t), float(v)) for s in series for t, v in s["values"] if v not in ("NaN", "+Inf", "-Inf")]
    left, top, plot_w, plot_h = 60, 30, width - 80, height - 70
    legend_h = 16 * len(series)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + legend_h}" '
           f'font-family="sans-serif" font-size="11">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{left}" y="18" font-size="13" font-weight="bold">{html.escape(title)}</text>']
    if not points:
        out.append(f'<text x="{left}" y="{top + plot_h / 2}">no data</text></svg>')
        return "\n".join(out) + "\n"
    t0, t1 = min(p[0] for p in points), max(p[0] for p in points)
    v0, v1 = min(0.0, min(p[1] for p in points)), max(p[1] for p in points)
    t1, v1 = (t1 if t1 > t0 else t0 + 1), (v1 if v1 > v0 else v0 + 1)

    def x(t):
        return left + (t - t0) / (t1 - t0) * plot_w

    def y(v):
        return top + plot_h - (v - v0) / (v1 - v0) * plot_h

    out.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>')
    for k in range(5):
        value = v0 + (v1 - v0) * k / 4
        out.append(f'<text x="{left - 6}" y="{y(value) + 4:.1f}" text-anchor="end">{value:.3g}</text>')
        out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y(value):.1f}" y2="{y(value):.1f}" stroke="#eee"/>')
    out.append(f'<text x="{left}" y="{top + plot_h + 16}">{time.strftime("%H:%M:%S", time.gmtime(t0))} UTC</text>')
    out.append(f'<text x="{left + plot_w}" y="{top + plot_h + 16}" text-anchor="end">'
               f'{time.strftime("%H:%M:%S", time.gmtime(t1))} UTC</text>')
    for index, s in enumerate(series):
        colour = COLOURS[index % len(COLOURS)]
        line = " ".join(f"{x(float(t)):.1f},{y(float(v)):.1f}" for t, v in s["values"]
                        if v not in ("NaN", "+Inf", "-Inf"))
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{line}"/>')
        legend_y = height - 28 + 16 * index
        out.append(f'<rect x="{left}" y="{legend_y - 9}" width="10" height="10" fill="{colour}"/>')
        out.append(f'<text x="{left + 16}" y="{legend_y}">{html.escape(_legend(s["metric"]))}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def slug(title: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in title.lower()).strip("-").replace("--", "-")


def plot_panels(url: str, out: pathlib.Path, minutes: float, end: float = None, step: float = 15.0) -> list:
    end = time.time() if end is None else end
    start = end - minutes * 60
    written = []
    for title in MAIN_PANELS:
        series = []
        for expr in panel_queries(title):
            series += query_range(url, concrete(expr, f"{int(4 * step)}s"), start, end, step)
        path = out / f"panel-{slug(title)}.svg"
        path.write_text(render_svg(title, series), encoding="utf-8")
        written.append(path)
    return written


def screenshot_report(logs: list, out: pathlib.Path, width: int = 1200, height: int = 2000) -> pathlib.Path:
    """`eagle-probe summarize LOGS --html` as headless Chromium shows it."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("chromium is not installed (run scripts/system-deps.sh as root)")
    with tempfile.TemporaryDirectory() as tmp:
        report = pathlib.Path(tmp) / "report.html"
        summarize = [sys.executable, "-m", "eagle_probe.commands.cli", "summarize", *map(str, logs),
                     "--html", str(report)]
        subprocess.run(summarize, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
        path = out / "summarize-report.png"
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--no-first-run", "--disable-background-networking", "--disable-component-update",
                        f"--user-data-dir={tmp}/profile", f"--window-size={width},{height}",
                        "--virtual-time-budget=5000", f"--screenshot={path}", report.as_uri()],
                       check=True, capture_output=True, timeout=120)
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--logs", nargs="+", help="the run's probe logs (files or directories)")
    parser.add_argument("--prometheus", help="URL of the Prometheus that scraped the run")
    parser.add_argument("--minutes", type=float, default=30.0, help="the time range plotted, ending now (default 30)")
    parser.add_argument("--end", type=float, help="the range's end as a Unix time (default: now)")
    parser.add_argument("--height", type=int, default=2000, help="the report screenshot's height in pixels")
    parser.add_argument("--out", default=str(ROOT / "docs" / "images"))
    args = parser.parse_args(argv)
    if not args.logs and not args.prometheus:
        parser.error("give --logs, --prometheus or both")
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.logs:
        print(screenshot_report(args.logs, out, height=args.height))
    if args.prometheus:
        for path in plot_panels(args.prometheus, out, args.minutes, args.end):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
