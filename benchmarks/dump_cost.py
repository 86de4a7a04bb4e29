"""Cost of one dumped target forward on the forward's own thread (EAGLE_PROBE_DUMP_MODES=extend,target_verify,
EAGLE_PROBE_DUMP_EVERY=1): SGLang's real tiny DeepSeek-V3 on the CPU, the probe's wrapper around a function that
returns the real forward's result at once, with dumps on against dumps off (median per call, the writer drained
outside the timing so every call really dumps). Also the verify step's added cost while a dumped verify forward waits
for its resolution (the probe's acceptance hook handing the batch's requests over), against none waiting.

Run:  .venv/bin/python benchmarks/dump_cost.py [--n 300] [--json]
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sglang_cpu import shims  # noqa: E402

shims.apply()

import eagle_probe  # noqa: E402
from eagle_probe.dump_format import POSITIONS  # noqa: E402
from eagle_probe.runtime.integrations.target_forward import model_forward_wrapper  # noqa: E402
from eagle_probe.runtime.state import STATE  # noqa: E402
from eagle_probe.runtime.values.verify_dumps import V2, VerifyDumpJob, note_step  # noqa: E402


def wrapper_us(inner, batch, result, n, drain):
    args = (batch.input_ids, batch.positions, batch)

    def returns_result(*a, **k):
        return result

    spent = []
    for _ in range(n):
        start = time.perf_counter_ns()
        model_forward_wrapper(returns_result, inner, args, {})
        spent.append(time.perf_counter_ns() - start)
        drain()
    return statistics.median(spent) / 1000


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import torch
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    from sglang_cpu.runtime import TinyBatchRunner, build_deepseek, init_runtime
    from sglang_cpu.tiny_models import deepseek_v3_config

    init_runtime()
    model = build_deepseek(deepseek_v3_config(num_hidden_layers=6, first_k_dense_replace=6), seed=0)
    model.set_eagle3_layers_to_capture([1, 3, 4])
    runner = TinyBatchRunner(model, max_tokens=4096)
    full = CaptureHiddenMode.FULL
    runner.extend([[5, 9, 17, 33, 2, 71, 8], [3, 4, 5, 6]], capture_hidden_mode=full)
    batches = {"EXTEND": runner.last_forward_batch}
    runner.target_verify([[12, 40, 41], [11, 50, 51]], rids=["a", "b"])
    batches["TARGET_VERIFY"] = runner.last_forward_batch
    results = {}
    for mode, batch in batches.items():
        runner.attn_backend.init_forward_metadata(batch)
        from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

        with torch.no_grad(), forward_context(ForwardContext(attn_backend=runner.attn_backend), forward_batch=batch):
            results[mode] = model.model.forward(batch.input_ids, batch.positions, batch)
    figures = {"off_us": {}, "dumped_us": {}, "added_us": {}}
    root = tempfile.mkdtemp(prefix="eagle-probe-dumpcost-")
    variants = {"off": {"EAGLE_PROBE_LOG_DIR": root},
                "dumped": {"EAGLE_PROBE_LOG_DIR": root, "EAGLE_PROBE_DUMP_DIR": os.path.join(root, "d"),
                           "EAGLE_PROBE_DUMP_EVERY": "1", "EAGLE_PROBE_DUMP_MODES": "extend,target_verify",
                           "EAGLE_PROBE_DUMP_MAX_MB": "100000"}}
    for name, env in variants.items():
        eagle_probe.uninstall()
        eagle_probe.install(env=env)
        dumps = STATE.recorder.dumps

        def drain(dumps=dumps):
            if dumps.writer is not None:
                for job in dumps.waiting:
                    job.deadline = 0.0  # no resolution comes in this benchmark: write at once
                dumps.writer.drain()
                dumps.waiting.clear()

        for mode, batch in batches.items():
            wrapper_us(model.model, batch, results[mode], 20, drain)
            figures[f"{name}_us"][mode] = round(wrapper_us(model.model, batch, results[mode], args.n, drain), 2)
    for mode in batches:
        figures["added_us"][mode] = round(figures["dumped_us"][mode] - figures["off_us"][mode], 2)

    class Req:
        def __init__(self, rid):
            self.rid, self.origin_input_ids, self.output_ids = rid, [1] * 100, [2] * 20

    for batch_size in (1, 16, 128):
        reqs = [Req(f"r{i}") for i in range(batch_size)]
        counts = [1] * batch_size
        spent = []
        for _ in range(args.n):
            waiting = [VerifyDumpJob({POSITIONS: torch.arange(3)}, {}, ["r0"], 3)]
            start = time.perf_counter_ns()
            note_step(waiting, reqs, counts, V2)
            spent.append(time.perf_counter_ns() - start)
        figures.setdefault("verify_step_waiting_us", {})[batch_size] = round(statistics.median(spent) / 1000, 2)
    eagle_probe.uninstall()
    print(f"tiny DeepSeek-V3 (hidden {model.config.hidden_size}, 3 aux slots), CPU; median of {args.n} calls")
    for mode in batches:
        rows = int(batches[mode].input_ids.shape[0])
        print(f"{mode:<14} {rows:>3} rows: wrapper {figures['off_us'][mode]:8.2f} us without dumps, "
              f"{figures['dumped_us'][mode]:8.2f} us dumped: +{figures['added_us'][mode]:.2f} us per dumped forward")
    for batch_size, us in figures["verify_step_waiting_us"].items():
        print(f"verify step while a dumped verify forward waits, batch {batch_size}: +{us:.2f} us")
    if args.json:
        print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main()
