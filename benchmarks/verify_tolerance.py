"""How far a correctly wired server's verify rows are from a prefill of the same tokens: the measurement behind
`consistency`'s tolerance (eagle_probe/analysis/consistency.py, MEASURED_FP32).

Run:  .venv/bin/python benchmarks/verify_tolerance.py [--prompts 6] [--new 24] [--case random]

Starts the tiny speculative EAGLE-3 server of `sglang_cpu.draft_models` (CPU, float32, greedy chain of 2 steps; the
"random" case: random-weight target, so both paths carry real rounding noise; "map": a target whose aux states are
its token embeddings, where drafts are accepted) with the probe dumping every EXTEND and TARGET_VERIFY forward,
serves the prompts two at a time, then runs `consistency` against it and prints, per slot, the committed rows
compared and the largest rel_diff; then the same with the verify forwards' aux states shifted by one row (the fault
of `sglang_cpu/verify_faults.py`), for the distance between noise and a fault.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _settle(directory, quiet_s=3.0):
    last, since = None, time.monotonic()
    while True:
        names = sorted(os.listdir(directory)) if os.path.isdir(directory) else []
        if names != last:
            last, since = names, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
        time.sleep(0.2)


def _phase(server, dumps, prompts, label):
    from eagle_probe.commands.consistency.command import check

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda p: server.generate(p, ARGS.new), prompts))
    _settle(dumps)
    start = time.monotonic()
    report = check(dumps, server.base_url, max_sequences=10_000)
    took = time.monotonic() - start
    print(f"{label}: {report['verify_dumps']} verify dumps, {report['requests_compared']} requests, "
          f"{report['rows_compared']} committed rows, {report['prefills']} prefills in {took:.1f} s; tolerance "
          f"{report['tolerance']:.3g}")
    for slot in report["slots"]:
        print(f"  slot {slot['slot']} (hidden_states[{slot['hf_index']}]): {slot['rows']} rows, largest rel_diff "
              f"{slot['largest_rel_diff']:.3g}")
    return report


def main():
    from sglang_cpu.draft_models import build_case
    from tests.e2e.conftest import start_spec_server

    root = tempfile.mkdtemp(prefix="eagle-probe-verify-tolerance-")
    case = build_case(root, ARGS.case)
    dumps, flag = os.path.join(root, "dumps"), os.path.join(root, "shift.flag")
    env = {"EAGLE_PROBE_DUMP_DIR": dumps, "EAGLE_PROBE_DUMP_EVERY": "1",
           "EAGLE_PROBE_DUMP_MODES": "extend,target_verify", "SGLANG_CPU_SHIFT_VERIFY_AUX": flag}
    server = start_spec_server(root, "tolerance", case, env=env)
    try:
        prompts = [[(17 * i + 7 * j + 3) % 250 + 1 for j in range(5 + 3 * i)] for i in range(ARGS.prompts)]
        _phase(server, dumps, prompts, f"clean ({ARGS.case})")
        os.makedirs(dumps + "-clean")
        for name in os.listdir(dumps):  # the server keeps writing into `dumps`: move its files, not the directory
            shutil.move(os.path.join(dumps, name), dumps + "-clean")
        open(flag, "w").close()
        _phase(server, dumps, prompts[:2], f"verify aux shifted by one row ({ARGS.case})")
    finally:
        server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--new", type=int, default=24)
    parser.add_argument("--case", choices=("random", "map"), default="random")
    ARGS = parser.parse_args()
    main()
