"""Does speculation pay on this machine, measured and estimated in one run: the committed seed pair served by a real
SGLang server with speculation (the probe injected) and the seed target by one without (no probe; the same
environment, Triton's interpreter included), both up at once and measured in turn, each alone (sglang_cpu.throughput:
the other stopped), at batch 1 and batch 6, in blocks that take turns.

Printed per batch size: the client's tokens/s of each server, the measured ratio and the probe's estimate (tokens per
step x plain step / speculative period) with their ratio; then each side apart: the speculative tokens/s the probe's
timing gives against the client's, and the plain step the probe estimates against the plain server's time per step
(batch / its tokens per second; prefill included).

Run:  .venv/bin/python benchmarks/speculation_cost.py [--blocks 3] [--json]
"""

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from eagle_probe.analysis import batch_buckets, speculation_cost  # noqa: E402
from eagle_probe.bootstrap import BOOTSTRAP_DIR  # noqa: E402
from eagle_probe.commands.summarize.logread import read_events  # noqa: E402
from eagle_probe.events import SPEC_COSTS  # noqa: E402
from sglang_cpu import seed, throughput  # noqa: E402
from sglang_cpu.server import SGLangServer  # noqa: E402
from sglang_cpu.spec_shims import SPEC_ENV  # noqa: E402

BATCHES = {1: 8, 6: 6}  # batch size -> rounds of requests per block


def measure(blocks: int) -> tuple[dict, dict]:
    logs = tempfile.mkdtemp(prefix="spec-cost-")
    plain = SGLangServer(seed.TARGET_PATH, env=SPEC_ENV)
    spec = seed.server(seed.DRAFT_PATH, env={"EAGLE_PROBE_LOG_DIR": logs}, pythonpath_prefix=[BOOTSTRAP_DIR])
    with plain, spec:
        rates = throughput.interleaved({"plain": plain, "spec": spec}, BATCHES, blocks)
    events = [e for e in read_events([logs]) if e.get("event") == SPEC_COSTS and e.get("tp_rank") == 0]
    if not events:
        raise SystemExit(f"no {SPEC_COSTS} line in {logs}")
    return rates, speculation_cost.estimate(events[-1])


def rows(rates: dict, report: dict) -> list[dict]:
    by_bucket = {b["bucket"]: b for b in report["buckets"]}
    out = []
    for batch in BATCHES:
        bucket = by_bucket.get(batch_buckets.LABELS[batch_buckets.bucket_of(batch)], {})
        plain, spec = rates["plain"][batch], rates["spec"][batch]
        row = {"batch": batch, "plain_tokens_per_s": round(plain, 1), "spec_tokens_per_s": round(spec, 1),
               "measured_ratio": round(spec / plain, 3), "estimated": bool(bucket.get("estimated"))}
        if row["estimated"]:
            period = bucket["phase_seconds"]["period"]
            probe_spec = bucket["mean_batch_size"] * bucket["tokens_per_step"] / period
            measured_plain_step = batch / plain
            row.update(estimate=bucket["estimated_speedup"], estimate_over_measured=round(
                bucket["estimated_speedup"] / row["measured_ratio"], 3),
                probe_spec_tokens_per_s=round(probe_spec, 1), spec_side_over_client=round(probe_spec / spec, 3),
                plain_step_estimate_s=bucket["plain_step_seconds"], plain_step_measured_s=round(measured_plain_step, 6),
                plain_side_over_measured=round(bucket["plain_step_seconds"] / measured_plain_step, 3),
                plain_source=bucket["plain_source"])
        else:
            row["why"] = bucket.get("why", "no steps in this bucket")
        out.append(row)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rates, report = measure(args.blocks)
    table = rows(rates, report)
    if args.json:
        print(json.dumps({"blocks": args.blocks, "batches": BATCHES, "rows": table}, indent=1))
        return 0
    for row in table:
        print(f"batch {row['batch']}: plain {row['plain_tokens_per_s']} tok/s, speculative {row['spec_tokens_per_s']}"
              f" tok/s, measured ratio {row['measured_ratio']}")
        if not row["estimated"]:
            print(f"  not estimated: {row['why']}")
            continue
        print(f"  estimate {row['estimate']} ({row['estimate_over_measured']}x the measured ratio)")
        print(f"  speculative side: the probe's {row['probe_spec_tokens_per_s']} tok/s against the client's "
              f"({row['spec_side_over_client']}x)")
        print(f"  plain side: the probe's plain step {row['plain_step_estimate_s']} s against the plain server's "
              f"{row['plain_step_measured_s']} s a step ({row['plain_side_over_measured']}x; {row['plain_source']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
