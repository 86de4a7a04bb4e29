"""What the probe costs a whole server: the client's tokens/s of real SGLang servers with the probe injected and
without it, measured in one run. The committed seed pair, all servers up at once: the target without speculation
(plain) and the target with its EAGLE-3 draft (spec, greedy chain), each once with the probe (default settings) and
once without, and a control: a second plain server without the probe, started last. Each is measured alone
(sglang_cpu.throughput: the others stopped), at batch 1 and batch 6, in blocks whose order turns, after a warm-up.

Printed per row and batch size: the ratio of tokens/s with the probe over without in every block (measured back to
back, so that the machine's slower spells fall on both), their median and range, and the pooled ratio over all
blocks. A ratio under 1 is a cost. The control row compares the two servers without the probe (an A/A comparison):
its ratios are what the method reads where nothing differs, i.e. its resolution on this machine. The probe's own
per-step work is tens of microseconds (benchmarks/overhead.py) against steps of 8 to 25 ms here.

Run:  .venv/bin/python benchmarks/probe_throughput.py [--blocks 6] [--json]
"""

import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from eagle_probe.bootstrap import BOOTSTRAP_DIR  # noqa: E402
from sglang_cpu import seed, throughput  # noqa: E402
from sglang_cpu.server import SGLangServer  # noqa: E402
from sglang_cpu.spec_shims import SPEC_ENV  # noqa: E402

BATCHES = {1: 6, 6: 4}  # batch size -> rounds of requests per block
CONTROL = "plain-control"
PAIRS = {"plain": ("plain-probe", "plain-bare"), "spec": ("spec-probe", "spec-bare"),
         "control": (CONTROL, "plain-bare")}  # row -> (measured, against)


def servers(root: str) -> dict:
    """name -> an unstarted server."""
    out = {}
    for probed in (False, True):
        suffix = "probe" if probed else "bare"
        env = {"EAGLE_PROBE_LOG_DIR": os.path.join(root, f"logs-{suffix}")} if probed else {}
        prefix = [BOOTSTRAP_DIR] if probed else []
        out[f"plain-{suffix}"] = SGLangServer(seed.TARGET_PATH, env={**SPEC_ENV, **env}, pythonpath_prefix=prefix,
                                              log_path=os.path.join(root, f"plain-{suffix}.log"))
        out[f"spec-{suffix}"] = seed.server(seed.DRAFT_PATH, env=env, pythonpath_prefix=prefix,
                                            log_path=os.path.join(root, f"spec-{suffix}.log"))
    # the control: a second plain server without the probe, started last, against the first (an A/A comparison)
    out[CONTROL] = SGLangServer(seed.TARGET_PATH, env=SPEC_ENV, log_path=os.path.join(root, f"{CONTROL}.log"))
    return out


def measure(blocks: int) -> list[dict]:
    """Per block, {(name, batch): (tokens, seconds)}."""
    root = tempfile.mkdtemp(prefix="probe-throughput-")
    group = servers(root)
    started = []
    try:
        for server in group.values():
            server.start()
            started.append(server)
        throughput.warm_up(group)
        return list(throughput.blocks_measured(group, BATCHES, blocks))
    finally:
        for server in started:
            server.stop()


def ratios(per_block: list[dict]) -> list[dict]:
    rows = []
    for kind, (probe, bare) in PAIRS.items():
        for batch in BATCHES:
            rate = {name: [t / s for t, s in (block[(name, batch)] for block in per_block)] for name in (probe, bare)}
            block_ratios = [p / b for p, b in zip(rate[probe], rate[bare])]
            pooled = {name: sum(block[(name, batch)][0] for block in per_block)
                      / sum(block[(name, batch)][1] for block in per_block) for name in (probe, bare)}
            rows.append({"row": kind, "batch": batch, "tokens_per_s": round(pooled[probe], 1),
                         "tokens_per_s_against": round(pooled[bare], 1),
                         "pooled_ratio": round(pooled[probe] / pooled[bare], 3),
                         "median_block_ratio": round(statistics.median(block_ratios), 3),
                         "block_ratios": [round(r, 3) for r in block_ratios]})
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--json", action="store_true", help="print one JSON object of the rows as the last line")
    args = parser.parse_args(argv)
    if args.blocks < 1:
        parser.error(f"--blocks must be at least 1, got {args.blocks}")
    rows = ratios(measure(args.blocks))
    print(f"{'row':<8}{'batch':>6}{'tok/s':>12}{'against':>10}{'pooled':>9}{'median':>9}   per block (range: "
          "each)")
    for row in rows:
        print(f"{row['row']:<8}{row['batch']:>6}{row['tokens_per_s']:>12.1f}{row['tokens_per_s_against']:>10.1f}"
              f"{row['pooled_ratio']:>9.3f}{row['median_block_ratio']:>9.3f}   "
              f"{min(row['block_ratios']):.3f}-{max(row['block_ratios']):.3f}: "
              + " ".join(f"{r:.3f}" for r in row["block_ratios"]))
    if args.json:
        print(json.dumps({"blocks": args.blocks, "batches": BATCHES, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
