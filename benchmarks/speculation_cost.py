"""Does speculation pay on this machine, measured and estimated in one run: the committed seed pair served by a real
SGLang server with speculation (the probe injected), the seed target by one without speculation with the probe
injected and by one without either (the same environment, Triton's interpreter included), all up at once and
measured in turn, each alone (sglang_cpu.throughput: the others stopped), at batch 1 and batch 6, in blocks that
take turns, after a warm-up that the estimates leave out (`advise --since`).

Printed per batch size: the client's tokens/s of each server and the measured ratio (speculative over plain with
the probe); the estimate `eagle-probe advise` gives from both probed servers' logs (the plain step measured) and the
one from the speculative server's logs alone (the plain step fitted: an upper bound), each over the measured ratio;
the speculative tokens/s the probe's timing gives against the client's; and the probe's cost on the plain server
(its tokens/s with the probe over without).

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
from eagle_probe.commands import speculation_advice  # noqa: E402
from eagle_probe.commands.summarize.logread import read_events  # noqa: E402
from eagle_probe.events import SPEC_COSTS  # noqa: E402
from sglang_cpu import seed, throughput  # noqa: E402
from sglang_cpu.server import SGLangServer  # noqa: E402
from sglang_cpu.spec_shims import SPEC_ENV  # noqa: E402

BATCHES = {1: 8, 6: 6}  # batch size -> rounds of requests per block


SUMMARY_INTERVAL_S = 1.0  # the probes write their counts each second: the warm-up is taken away (--since)


def _estimate(since: str, *log_dirs: str) -> dict:
    events = [e for e in read_events(list(log_dirs)) if e.get("event") == SPEC_COSTS]
    if not events:
        raise SystemExit(f"no {SPEC_COSTS} line in {', '.join(log_dirs)}")
    return speculation_cost.estimate(speculation_cost.merge(speculation_advice.last_costs(events, since)))


def measure(blocks: int) -> tuple[dict, dict, dict]:
    logs, plain_logs = tempfile.mkdtemp(prefix="spec-cost-"), tempfile.mkdtemp(prefix="plain-cost-")
    interval = {"EAGLE_PROBE_SUMMARY_INTERVAL_S": str(SUMMARY_INTERVAL_S)}
    bare = SGLangServer(seed.TARGET_PATH, env=SPEC_ENV)
    plain = SGLangServer(seed.TARGET_PATH, env={**SPEC_ENV, "EAGLE_PROBE_LOG_DIR": plain_logs, **interval},
                         pythonpath_prefix=[BOOTSTRAP_DIR])
    spec = seed.server(seed.DRAFT_PATH, env={"EAGLE_PROBE_LOG_DIR": logs, **interval},
                       pythonpath_prefix=[BOOTSTRAP_DIR])
    with bare, plain, spec:
        servers = {"bare": bare, "plain": plain, "spec": spec}
        throughput.warm_up(servers)
        since = throughput.since_now(2.5 * SUMMARY_INTERVAL_S)
        rates = throughput.interleaved(servers, BATCHES, blocks, warm=False)
    return rates, _estimate(since, logs, plain_logs), _estimate(since, logs)


def _bucket(report: dict, batch: int) -> dict:
    label = batch_buckets.LABELS[batch_buckets.bucket_of(batch)]
    return next((b for b in report["buckets"] if b["bucket"] == label), {})


def rows(rates: dict, with_plain: dict, spec_only: dict) -> list[dict]:
    out = []
    for batch in BATCHES:
        plain, spec, bare = rates["plain"][batch], rates["spec"][batch], rates["bare"][batch]
        row = {"batch": batch, "plain_tokens_per_s": round(plain, 1), "spec_tokens_per_s": round(spec, 1),
               "plain_without_probe_tokens_per_s": round(bare, 1), "probe_on_plain": round(plain / bare, 3),
               "measured_ratio": round(spec / plain, 3)}
        for name, report in (("with_plain_server", with_plain), ("spec_logs_only", spec_only)):
            bucket = _bucket(report, batch)
            if not bucket.get("estimated"):
                row[name] = {"why": bucket.get("why", "no steps in this bucket")}
                continue
            row[name] = {"estimate": bucket["estimated_speedup"], "uncertainty": bucket["uncertainty"],
                         "over_measured": round(bucket["estimated_speedup"] / row["measured_ratio"], 3),
                         "plain_step_s": bucket["plain_step_seconds"], "plain_source": bucket["plain_source"]}
        bucket = _bucket(with_plain, batch)
        if bucket.get("estimated"):
            probe_spec = bucket["mean_batch_size"] * bucket["tokens_per_step"] / bucket["phase_seconds"]["period"]
            row.update(probe_spec_tokens_per_s=round(probe_spec, 1), spec_side_over_client=round(probe_spec / spec, 3),
                       plain_step_from_client_s=round(batch / plain, 6))
        out.append(row)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    table = rows(*measure(args.blocks))
    if args.json:
        print(json.dumps({"blocks": args.blocks, "batches": BATCHES, "rows": table}, indent=1))
        return 0
    for row in table:
        print(f"batch {row['batch']}: plain {row['plain_tokens_per_s']} tok/s (without the probe "
              f"{row['plain_without_probe_tokens_per_s']}: the probe costs x{row['probe_on_plain']}), speculative "
              f"{row['spec_tokens_per_s']} tok/s, measured ratio {row['measured_ratio']}")
        for name in ("with_plain_server", "spec_logs_only"):
            item = row[name]
            if "why" in item:
                print(f"  {name}: not estimated: {item['why']}")
                continue
            print(f"  {name}: estimate {item['estimate']} +- {item['uncertainty']} ({item['over_measured']}x the "
                  f"measured ratio); plain step {item['plain_step_s']} s ({item['plain_source']})")
        if "probe_spec_tokens_per_s" in row:
            print(f"  speculative side: the probe's {row['probe_spec_tokens_per_s']} tok/s against the client's "
                  f"({row['spec_side_over_client']}x); the plain server's step from the client "
                  f"{row['plain_step_from_client_s']} s (prefill included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
