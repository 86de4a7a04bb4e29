"""The main job on the built-in example: a real SGLang server on the CPU, observed by eagle-probe.

1. writes a tiny random-weight DeepSeek-V3 checkpoint (6 layers: 2 dense, 4 MoE; no download);
2. starts `eagle-probe run --log-dir ... -- python -m sglang.launch_server ...` with aux hidden-state
   capture on (`--return-aux-hidden-state-layer-ids 1 3 4`) and SGLang's metrics endpoint;
3. sends a few greedy requests;
4. prints what the probe saw (captured layers with labels, shapes, paths, findings), its series from
   SGLang's /metrics, and where the logs are.

Run:  .venv/bin/python examples/tiny_server.py [--out out/example]
"""

import argparse
import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from eagle_probe.logread import read_events  # noqa: E402
from eagle_probe.report import build_report, render_text  # noqa: E402

AUX_LAYER_IDS = ["1", "3", "4"]
PROMPTS = [[10, 11, 12, 13, 14], [7, 3, 99, 120, 5, 6, 200, 31], [42, 42, 42]]


def eagle_probe_command():
    exe = os.path.join(os.path.dirname(sys.executable), "eagle-probe")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "eagle_probe"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(ROOT, "out", "example"))
    parser.add_argument("--start-timeout", type=float, default=900)
    args = parser.parse_args()

    from sglang_cpu.server import SGLangServer
    from sglang_cpu.tiny_models import deepseek_v3_config, write_deepseek_v3_checkpoint

    out = os.path.abspath(args.out)
    checkpoint = os.path.join(out, "tiny-deepseek-v3")
    log_dir = os.path.join(out, "probe-logs")
    shutil.rmtree(log_dir, ignore_errors=True)
    if not os.path.exists(os.path.join(checkpoint, "config.json")):
        print(f"writing tiny DeepSeek-V3 checkpoint to {checkpoint}", flush=True)
        write_deepseek_v3_checkpoint(checkpoint, deepseek_v3_config(num_hidden_layers=6, first_k_dense_replace=2))

    launcher = eagle_probe_command() + ["run", "--log-dir", log_dir, "--summary-interval", "2", "--"]
    server_args = ["--enable-metrics", "--speculative-algorithm", "EAGLE3", "--enable-return-aux-hidden-states",
                   "--return-aux-hidden-state-layer-ids", *AUX_LAYER_IDS]
    server = SGLangServer(checkpoint, extra_args=server_args, command_prefix=launcher,
                          log_path=os.path.join(out, "server.log"))
    print("starting: " + " ".join(server.command()), flush=True)
    print("(a real sglang.launch_server on the CPU; start-up takes one to three minutes)", flush=True)
    server.start(timeout=args.start_timeout)
    try:
        print(f"server up in {server.startup_seconds:.0f} s; sending {len(PROMPTS)} requests", flush=True)
        for prompt in PROMPTS:
            print(f"  input {prompt} -> output {server.generate(prompt, max_new_tokens=8)}", flush=True)
        metrics = [line for line in server.metrics_text().splitlines() if line.startswith("eagle_probe_")]
    finally:
        server.stop()

    print("\n==== what eagle-probe saw ====")
    print(render_text(build_report(read_events([log_dir]))))
    print("\n==== eagle_probe_* series in SGLang's /metrics ====")
    print("\n".join(metrics) if metrics else "(none)")
    print(f"\nprobe logs (JSON lines, one file per process): {log_dir}")
    print(f"server log: {server.log_path}")
    print(f"summarise again with: eagle-probe summarize {log_dir}")
    return 0 if metrics else 1


if __name__ == "__main__":
    sys.exit(main())
