"""The real run behind the documentation's pictures: a speculative EAGLE-3 server on the CPU with the probe injected
through PYTHONPATH and --enable-metrics, a real Prometheus scraping it, traffic for a few minutes; then
tools/docs_pictures.py takes the `summarize --html` screenshot of the probe's logs and plots the dashboard's main
panels from that Prometheus into docs/images/.

  .venv/bin/python tools/docs_run.py --minutes 4      # about 6 minutes here; needs Debian's prometheus and chromium

The server is the tests' "map" case (sglang_cpu/draft_models.py): a target and a draft built so that, of a chain of 2
draft tokens, one prompt gets the first accepted and never the second, one climbs into every draft accepted, one is
mixed; the requests cycle through them, so the acceptance panels move.
"""

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from eagle_probe.bootstrap import BOOTSTRAP_DIR  # noqa: E402
from sglang_cpu.draft_models import build_case  # noqa: E402
from sglang_cpu.ports import allocate_block  # noqa: E402
from sglang_cpu.server import SGLangServer  # noqa: E402
from sglang_cpu.spec_shims import SPEC_ENV  # noqa: E402
from tools import docs_pictures  # noqa: E402


def start_prometheus(root: str, port: int, target: str) -> subprocess.Popen:
    config = os.path.join(root, "prometheus.yml")
    with open(config, "w") as f:
        f.write("global:\n  scrape_interval: 5s\n  scrape_timeout: 4s\nscrape_configs:\n"
                f"  - job_name: sglang\n    static_configs:\n      - targets: [{json.dumps(target)}]\n")
    binary = shutil.which("prometheus")
    if binary is None:
        raise SystemExit("prometheus is not installed (run scripts/system-deps.sh as root)")
    proc = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={root}/tsdb",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=open(os.path.join(root, "prometheus.log"), "wb"),  # noqa: SIM115
                            stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2):
                return proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"prometheus did not become ready; see {root}/prometheus.log")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=4.0, help="minutes of traffic (default 4)")
    parser.add_argument("--out", default=str(ROOT / "docs" / "images"))
    args = parser.parse_args(argv)
    root = tempfile.mkdtemp(prefix="docs-run-")
    case = build_case(os.path.join(root, "case"), "map")
    logs = os.path.join(root, "probe-logs")
    env = dict(SPEC_ENV, EAGLE_PROBE_LOG_DIR=logs, EAGLE_PROBE_SUMMARY_INTERVAL_S="5",
               EAGLE_PROBE_FINGERPRINT_INTERVAL_S="1")
    server = SGLangServer(case["target"], extra_args=["--enable-metrics", *case["args"]],
                          pythonpath_prefix=[BOOTSTRAP_DIR], env=env, log_path=os.path.join(root, "server.log"))
    ports = allocate_block()
    prometheus = None
    try:
        server.start()
        prometheus = start_prometheus(root, ports.extra(0), f"127.0.0.1:{server.port}")
        prompts = list(case["expected"]["prompts"].values())
        t0 = time.time()
        sent = 0
        while time.time() - t0 < args.minutes * 60:
            prompt, new = prompts[sent % len(prompts)]
            server.generate_raw(prompt, max_new_tokens=new)
            sent += 1
            time.sleep(0.5)
        time.sleep(12)  # two more scrapes after the last request
        out = pathlib.Path(args.out)
        print(f"{sent} requests over {args.minutes} min; logs {logs}")
        print(docs_pictures.plot_panels(f"http://127.0.0.1:{ports.extra(0)}", out, args.minutes + 0.5))
    finally:
        if prometheus is not None:
            prometheus.terminate()
            prometheus.wait(30)
        server.stop()
        ports.release()
    print(docs_pictures.screenshot_report([logs], out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
