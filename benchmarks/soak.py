"""Runs for weeks? A soak of two real speculative SGLang servers on this machine, one with the probe and one
without, serving the same mixed traffic at once (sglang_cpu.soak: concurrency rising and falling, streams aborted
and dropped by the client, max_new_tokens 1, long prompts on a small KV pool so that SGLang retracts, /flush_cache
now and then), the probe at its default intervals.

Printed: each scheduler's RSS growth from the idle baseline after warm-up to the idle end, and the probe's over the
plain server's (budget: under 5 MB); the probe's log bytes per hour; its eagle_probe_ series; the containers it
keeps that grew; the probe's acceptance counts against SGLang's meta_info summed over every request the client saw
end; and the RSS time series. --json prints everything.

Run:  .venv/bin/python benchmarks/soak.py [--minutes 30] [--warmup-s 60] [--sample-s 10] [--retract-every 40]
      [--json]
"""

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sglang_cpu.soak import soak  # noqa: E402

RSS_BUDGET_MB = 5.0


def _print(result: dict) -> None:
    print(f"soak: {result['soak_s']:.0f} s after a {result['warmup_s']:.0f} s warm-up, {result['samples']} samples")
    for name, kinds in result["requests"].items():
        errors = result["errors"][name]
        print(f"  {name}: requests {kinds}, /flush_cache {result['flush_cache'][name]}, requests SGLang retracted "
              f"{result['retracted_requests'][name]}" + (f", errors {errors}" if errors else ""))
    growth = result["rss_growth_mb"]
    verdict = "within" if result["probe_rss_growth_over_plain_mb"] < RSS_BUDGET_MB else "OVER"
    print(f"scheduler RSS growth: probe {growth['probe']:+.2f} MB, plain {growth['plain']:+.2f} MB; the probe's "
          f"over plain {result['probe_rss_growth_over_plain_mb']:+.2f} MB ({verdict} the {RSS_BUDGET_MB} MB budget); "
          f"RSS at baseline {result['rss_mb']['baseline']}, at the end {result['rss_mb']['end']}")
    logs = result["log_bytes"]
    print(f"probe log: {logs['end']} bytes, {logs['per_hour'] / 2**20:.2f} MB per hour after warm-up (one scheduler)")
    print(f"probe log bytes by event (whole run): {result['log_bytes_by_event']}")
    print(f"eagle_probe_ series: {result['series']}")
    print(f"probe containers grown since the baseline: {result['state_grown'] or 'none'}")
    counts = result["counts"]
    print(f"acceptance counts, probe: {counts['probe']}")
    print(f"acceptance counts, SGLang's meta_info: {counts['sglang_meta_info']} (disconnected requests: at most "
          f"{counts['disconnected_tokens_bound']} tokens not seen by the client)")
    print("RSS over time (s: probe MB / plain MB): " + ", ".join(
        f"{r['t_s']:.0f}: {r['probe_rss_mb']:.1f}/{r['plain_rss_mb']:.1f}" for r in result["rows"]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--warmup-s", type=float, default=60.0)
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--retract-every", type=int, default=40, help="SGLang's own retraction test every N "
                        "forwards as well as the small KV pool (0: the pool alone)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    root = tempfile.mkdtemp(prefix="soak-")
    result = soak(root, args.minutes * 60, sample_s=args.sample_s, warmup_s=args.warmup_s,
                  retract_every=args.retract_every)
    result["root"] = root
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        _print(result)
        print(f"servers' logs and the probe's under {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
