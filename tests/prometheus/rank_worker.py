"""One real probe process at a given tensor-parallel rank, as SGLang's scheduler ranks are (test support).

    python tests/prometheus/rank_worker.py --tp-rank R --tp-size N --state-dir D [--node-rank K] [--moe-tbo]
                                           [--unreachable]

Runs SGLang 0.5.23's real tiny DeepSeek-V3 in this process (sglang_cpu/runtime.py) with eagle-probe installed.
The environment carries PROMETHEUS_MULTIPROC_DIR (shared by all ranks, as SGLang's --enable-metrics sets it) and
EAGLE_PROBE_* settings. A single CPU process is a TP world of one, so this rank's place in the launch is stated
through SGLang's own runtime context: the first probe observation (the capture configuration call) runs while
`get_parallel().override_permanently(tp_rank=R, tp_size=N, node_rank=K, ...)` holds, which is where the probe reads
its ranks once per process; the real values are stamped back after it. SGLang validates these values against the
built process groups, so they name width-N group handles; those are read by that validation only (forwards run
afterwards, on the real TP-1 groups).

- default: capture ids 1 3 4, EXTEND and DECODE forwards;
- --unreachable: capture ids 1 3 40 on a 6-layer target (a real capture_id_unreachable finding);
- --nan-layer L: a NaN in layer L's MLP weights, so the aux slots after it carry non-finite values;
- --moe-tbo: a MoE target and one EXTEND batch split for Two-Batch-Overlap, which SGLang cannot run on the CPU
  (it raises); the probe sees the capture slots that fall in the TBO layers (real captures lost).

Every rank also verifies draft steps at two depths (as adaptive depth does) through the probe's real Recorder until it
exits: VERIFY_BATCH every VERIFY_PERIOD_S seconds, each batch counted whole by one metrics flush, so every counter
grows by the same multiple and rates' ratios equal the hand-computed values of VERIFY_BATCH (tests/prometheus).

Protocol: writes D/ready-R when done, then waits until D/exit-R exists and exits normally (atexit runs).
"""

import argparse
import os
import sys
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

# (accepted drafts per request, draft depth) of the verify steps fed per batch: a depth-1 step of two requests and a
# depth-3 step of four (the last depth fed is 3). Per position: drafted 6, 4, 4; accepted 4, 2, 1.
VERIFY_BATCH = (((1, 0), 1), ((3, 1, 0, 2), 3))
VERIFY_PERIOD_S = 0.5


def feed_verify_steps(recorder):
    """One VERIFY_BATCH through the recorder's verify-step route, then one flush. The flush lock is held while the
    batch is handed over, so that a flush from the probe's own thread never counts half a batch."""
    from eagle_probe.observations import VerifyStep

    with recorder.periodic._flush_lock:
        for accepted, depth in VERIFY_BATCH:
            recorder.observe("verify_step", VerifyStep(accepted, depth, source="rank_worker"))
    recorder.flush_metrics()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tp-rank", type=int, required=True)
    parser.add_argument("--tp-size", type=int, default=2)
    parser.add_argument("--node-rank", type=int, default=0)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--moe-tbo", action="store_true")
    parser.add_argument("--unreachable", action="store_true")
    parser.add_argument("--nan-layer", type=int, default=None, help="put a NaN into this layer's MLP weights")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    import eagle_probe

    assert eagle_probe.install(), "eagle-probe did not install"
    from sglang_cpu import runtime
    from sglang_cpu.tiny_models import deepseek_v3_config

    runtime.init_runtime()
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
    from sglang.srt.runtime_context import get_parallel

    if args.moe_tbo:
        config = deepseek_v3_config(num_hidden_layers=4, first_k_dense_replace=1)
    else:
        config = deepseek_v3_config(num_hidden_layers=6, first_k_dense_replace=6)
    model = runtime.build_deepseek(config, seed=args.tp_rank)
    if args.nan_layer is not None:  # a real non-finite aux slot (aux_nonfinite and its alert)
        with torch.no_grad():
            model.model.layers[args.nan_layer].mlp.down_proj.weight[0, 0] = float("nan")
    runner = runtime.TinyBatchRunner(model)

    n = args.tp_size
    group = types.SimpleNamespace(world_size=n)
    layer_ids = [0, 2, 3] if args.moe_tbo else ([1, 3, 40] if args.unreachable else [1, 3, 4])
    parallel = get_parallel()
    placed = dict(tp_rank=args.tp_rank, tp_size=n, attn_tp_rank=args.tp_rank, attn_tp_size=n,
                  moe_tp_rank=args.tp_rank, moe_tp_size=n, tp_group=group, attn_tp_group=group, moe_tp_group=group,
                  node_rank=args.node_rank, nnodes=max(args.node_rank + 1, 1))
    real = {name: getattr(parallel, name) for name in placed}
    # Stamped for the process as SGLang stamps a rank's places (a scoped override is what the draft's group swap
    # uses, which the probe looks past), then the real TP-1 values again for the forwards.
    parallel.override_permanently(**placed)
    try:
        model.set_eagle3_layers_to_capture(layer_ids)
    finally:
        parallel.override_permanently(**real)

    tokens = [[10, 11, 12, 13, 14], [7, 3, 99, 120]]
    if args.moe_tbo:
        try:
            runner.extend(tokens, capture_hidden_mode=CaptureHiddenMode.FULL, tbo_split_seq_index=1)
        except Exception as exc:  # SGLang's TBO stage executor needs CUDA; the probe saw the batch first
            print(f"rank_worker: TBO batch failed in SGLang as expected: {type(exc).__name__}", flush=True)
        runner.reset()
        runner.extend(tokens, capture_hidden_mode=CaptureHiddenMode.FULL)
    else:
        try:
            runner.extend(tokens, capture_hidden_mode=CaptureHiddenMode.FULL)
            for _ in range(3):
                runner.decode([1, 2], capture_hidden_mode=CaptureHiddenMode.FULL)
        except Exception as exc:  # with an unreachable id SGLang itself raises ("captured 2 of 3")
            print(f"rank_worker: SGLang raised: {type(exc).__name__}: {exc}", flush=True)

    from eagle_probe.runtime.state import STATE

    recorder = STATE.recorder
    assert recorder.ranks is not None, "the probe read no ranks"
    feed_verify_steps(recorder)
    open(os.path.join(args.state_dir, f"ready-{args.tp_rank}"), "w").close()
    deadline = time.monotonic() + 1800
    while not os.path.exists(os.path.join(args.state_dir, f"exit-{args.tp_rank}")) and time.monotonic() < deadline:
        time.sleep(VERIFY_PERIOD_S)
        feed_verify_steps(recorder)


if __name__ == "__main__":
    main()
