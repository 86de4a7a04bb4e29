"""Open `eagle-probe summarize --html` output in headless Chromium (Debian's chromium package) and check that
the plots decoded and the tables rendered. Install it with scripts/system-deps.sh."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "unit"))
from test_summarize import make_dir  # noqa: E402

from eagle_probe.commands.cli import main  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def need_chromium():
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing in CI: run scripts/system-deps.sh")
        pytest.skip("chromium not installed (run scripts/system-deps.sh as root); CI installs it")


def dump_dom(report, tmp_path) -> str:
    """The page's DOM after load (and after its scripts ran), from headless Chromium."""
    profile = tmp_path / "profile"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", "--virtual-time-budget=5000", "--dump-dom", report.as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def rendered(logs, tmp_path, capsys) -> str:
    """`summarize LOGS --html` rendered by headless Chromium: the DOM after its scripts ran."""
    need_chromium()
    report = tmp_path / "report.html"
    assert main(["summarize", str(logs), "--html", str(report)]) == 0
    capsys.readouterr()
    return dump_dom(report, tmp_path)


def test_html_renders_in_headless_chromium(tmp_path, capsys):
    dom = rendered(make_dir(tmp_path), tmp_path, capsys)
    check = re.search(r'<pre id="img-check" data-done="1">(.*?)</pre>', dom, re.S)
    assert check, f"the page's check script did not run; DOM head: {dom[:500]}"
    rows = dict(line.split(" ", 1) for line in check.group(1).strip().splitlines())
    assert set(rows) == {"plot-position", "plot-histogram", "plot-time"}
    for plot, size in rows.items():
        assert size.startswith("560x300 complete"), (plot, size)
    assert dom.count("<table") >= 5 and "output of layer 1" in dom and "layer_mismatch" in dom


SCRIPT = "<script>document.title='pwned'</script>"
IMG = "<img src=x onerror=\"document.title='pwned-img'\">"


def hostile_logs(tmp_path):
    """Log fields that reach the page, each holding markup: a finding's code and message, model classes, versions,
    error texts, labels, a notice, and a skipped line's reason and file name."""
    d = tmp_path / "logs"
    d.mkdir()
    rank = {"pid": 1, "tp_rank": 0, "pp_rank": 0, "dp_rank": None, "timestamp": "2026-01-01T00:00:00Z"}
    events = [
        dict(rank, event="eagle_probe.started", sglang_version=SCRIPT, rules=IMG),
        dict(rank, event="eagle_probe.finding", code=SCRIPT, severity="error", message=IMG, role=SCRIPT),
        dict(rank, event="eagle_probe.finding", code="layer_mismatch", severity=IMG, message=SCRIPT),
        dict(rank, event="eagle_probe.draft.loaded", model_class=SCRIPT, dropped=[IMG]),
        dict(rank, event="eagle_probe.capture.configured", role=SCRIPT, caller=IMG, requested_ids=[1],
             slots=[{"slot": 0, "capture_index": 2, "hf_index": 2, "label": SCRIPT}]),
        dict(rank, event="eagle_probe.target.forward", model_class=SCRIPT, role="target", mode=IMG, path=SCRIPT,
             slot_labels=[IMG], dtype=SCRIPT, error=IMG),
        dict(rank, event="eagle_probe.internal_error", where=SCRIPT, error=IMG),
        dict(rank, event="eagle_probe.acceptance", drafts=4, accepted_tokens=2, draft_tokens=8,
             per_position_rate=[0.5], accept_length_histogram={"0": 2, "1": 2}, mean_accept_length=1.5, read_at=IMG),
        dict(event="eagle_probe.config_error", variable=SCRIPT, value=IMG, accepted=SCRIPT),
        dict(rank, event="eagle_probe.finding", code="x", tp_rank=SCRIPT),  # skipped: the reason quotes it
    ]
    (d / "eagle-probe-1.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (d / "<img src=x onerror=document.title='pwned-file'>.jsonl").write_text('{"truncated\n')
    return d


def test_html_escapes_everything_from_the_logs(tmp_path, capsys):
    dom = rendered(hostile_logs(tmp_path), tmp_path, capsys)
    assert re.search(r"<title>eagle-probe report</title>", dom) and "pwned" not in dom.split("</title>")[0]
    assert 'data-done="1"' in dom  # the page's own script ran; no injected one did
    assert "<script>document.title" not in dom and "<img src=\"x\"" not in dom and "<img src=x" not in dom
    shown_script = "&lt;script&gt;document.title='pwned'&lt;/script&gt;"
    shown_img = "&lt;img src=x onerror=\"document.title='pwned-img'\"&gt;"
    assert dom.count(shown_script) >= 10 and dom.count(shown_img) >= 8, dom[:3000]
    assert "&lt;img src=x onerror=document.title='pwned-file'&gt;.jsonl" in dom  # the skipped line's file name
    assert "field 'tp_rank' must be an integer or null; got \"&lt;script&gt;" in dom
