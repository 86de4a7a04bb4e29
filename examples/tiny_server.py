"""The main job on the built-in example: a real speculative SGLang server on the CPU, observed by eagle-probe.

1. builds a tiny random-weight DeepSeek-V3 target (6 layers) and an EAGLE-3 draft for it whose acceptance is
   known by construction (sglang_cpu.draft_models, case "map"; no download);
2. starts `eagle-probe run --log-dir ... -- python -m sglang.launch_server ... --speculative-algorithm EAGLE3
   --speculative-draft-model-path ... --enable-metrics` on the CPU (greedy, chain of 2 draft tokens);
3. sends the case's requests;
4. prints what the probe saw: captured layers with labels, shapes, paths, the draft's input, acceptance per
   draft position against SGLang's own per-request figures, findings; its series from SGLang's /metrics; and
   where the logs are.

Run:  .venv/bin/python examples/tiny_server.py [--out out/example]
"""

import os
import sys

from example_common import eagle_probe_command, parse_args  # first: it puts the checkout on sys.path

from eagle_probe.commands.summarize.logread import read_events
from eagle_probe.commands.summarize.report import build_report, render_text

# The draft's per-token accuracy as "training" would report it: the probe compares observed acceptance with
# the length it implies (EAGLE_PROBE_DRAFT_ACCURACY); this draft is built to fall short of it.
CLAIMED_DRAFT_ACCURACY = "0.9"


def main():
    args = parse_args(__doc__)

    from sglang_cpu.draft_models import build_case
    from sglang_cpu.server import SGLangServer
    from sglang_cpu.spec_shims import SPEC_ENV

    out = args.out
    log_dir = os.path.join(out, "probe-logs")
    print(f"building a tiny DeepSeek-V3 target and an EAGLE-3 draft under {out}", flush=True)
    case = build_case(os.path.join(out, "models"), "map")

    launcher = eagle_probe_command() + ["run", "--log-dir", log_dir, "--summary-interval", "1", "--"]
    env = dict(SPEC_ENV, EAGLE_PROBE_DRAFT_ACCURACY=CLAIMED_DRAFT_ACCURACY, EAGLE_PROBE_COLLAPSE_MIN_DRAFTS="8")
    server = SGLangServer(case["target"], extra_args=["--enable-metrics", *case["args"]], command_prefix=launcher,
                          env=env, log_path=os.path.join(out, "server.log"))
    print("starting: " + " ".join(server.command()), flush=True)
    print("(a real sglang.launch_server on the CPU; start-up takes one to three minutes)", flush=True)
    server.start(timeout=args.start_timeout)
    try:
        print(f"server up in {server.startup_seconds:.0f} s; sending {len(case['expected']['prompts'])} requests",
              flush=True)
        for name, (prompt, max_new) in case["expected"]["prompts"].items():
            meta = server.generate_raw(prompt, max_new_tokens=max_new)
            info = meta["meta_info"]
            print(f"  {name}: input {prompt} -> output {meta['output_ids']}", flush=True)
            print(f"    SGLang: verify steps {info['spec_verify_ct']}, accepted drafts "
                  f"{info['spec_num_correct_drafts']}, histogram {info['spec_correct_drafts_histogram']}", flush=True)
        metrics = [line for line in server.metrics_text().splitlines() if line.startswith("eagle_probe_")]
    finally:
        server.stop()

    print("\n==== what eagle-probe saw (eagle-probe summarize) ====")
    print(render_text(build_report(read_events([log_dir]))))
    print("\n==== eagle_probe_* series in SGLang's /metrics ====")
    print("\n".join(metrics) if metrics else "(none)")
    print(f"\nprobe logs (JSON lines, one file per process): {log_dir}")
    print(f"server log: {server.log_path}")
    print(f"again with: eagle-probe summarize {log_dir} [--html report.html]")
    return 0 if metrics else 1


if __name__ == "__main__":
    sys.exit(main())
