"""What the examples share: the checkout on sys.path, their command line (a fresh --out folder) and how they call
the eagle-probe command (the venv's console script, else `python -m eagle_probe`)."""

import argparse
import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def parse_args(doc: str) -> argparse.Namespace:
    """--out (made empty: an example's output is all from this run) and --start-timeout for its servers."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(ROOT, "out", "example"))
    parser.add_argument("--start-timeout", type=float, default=None,
                        help="seconds a server may take to start (default: sglang_cpu.server.STARTUP_TIMEOUT_S)")
    args = parser.parse_args()
    args.out = os.path.abspath(args.out)
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    return args


def eagle_probe_command() -> list:
    exe = os.path.join(os.path.dirname(sys.executable), "eagle-probe")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "eagle_probe"]
