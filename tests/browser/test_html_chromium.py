"""Open `eagle-probe summarize --html` output in headless Chromium (Debian's chromium package) and check that
the plots decoded and the tables rendered. Install it with scripts/system-deps.sh."""

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


def test_html_renders_in_headless_chromium(tmp_path, capsys):
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing in CI: run scripts/system-deps.sh")
        pytest.skip("chromium not installed (run scripts/system-deps.sh as root); CI installs it")
    report = tmp_path / "report.html"
    assert main(["summarize", str(make_dir(tmp_path)), "--html", str(report)]) == 0
    capsys.readouterr()
    profile = tmp_path / "profile"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", "--virtual-time-budget=5000", "--dump-dom", report.as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    dom = proc.stdout
    assert proc.returncode == 0, proc.stderr[-2000:]
    check = re.search(r'<pre id="img-check" data-done="1">(.*?)</pre>', dom, re.S)
    assert check, f"the page's check script did not run; DOM head: {dom[:500]}"
    rows = dict(line.split(" ", 1) for line in check.group(1).strip().splitlines())
    assert set(rows) == {"plot-position", "plot-histogram", "plot-time"}
    for plot, size in rows.items():
        assert size.startswith("560x300 complete"), (plot, size)
    assert dom.count("<table") >= 5 and "output of layer 1" in dom and "layer_mismatch" in dom
