"""Does speculation pay, against measurement on the CPU: the committed seed pair served by a real SGLang server with
speculation and the probe injected, at batch 1 and at batch 6 (sglang_cpu.throughput).

The speculative side of the estimate is held to the client: the tokens a step yields (read from the acceptance) over
the step's period (the probe's timing), times the batch, must come within 20 % of the tokens per second the client
measures. The plain side cannot be held to a plain server on this machine: SGLang's verify and prefill forwards
cost about twice a plain decode step here (benchmarks/speculation_cost.py measures both and prints the ratios), so
the plain step the probe fits from them is an upper bound, as its output says. Then SGLang starts with the adaptive
config the estimate advises and serves with it."""

import json
import os

import pytest

from eagle_probe.analysis import batch_buckets, speculation_cost
from eagle_probe.bootstrap import BOOTSTRAP_DIR
from eagle_probe.commands.cli import main as cli_main
from eagle_probe.commands.summarize.logread import read_events
from eagle_probe.events import SPEC_COSTS
from sglang_cpu import seed, throughput

BATCHES = {1: 8, 6: 6}  # batch size -> rounds of requests (seed.MAX_NEW_TOKENS tokens each)
TOLERANCE = 0.20


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    logs = str(tmp_path_factory.mktemp("cost-logs"))
    spec = seed.server(seed.DRAFT_PATH, env={"EAGLE_PROBE_LOG_DIR": logs}, pythonpath_prefix=[BOOTSTRAP_DIR])
    with spec:
        rates = throughput.interleaved({"spec": spec}, BATCHES, blocks=1)["spec"]
    events = [e for e in read_events([logs]) if e.get("event") == SPEC_COSTS and e.get("tp_rank") == 0]
    assert events, f"no {SPEC_COSTS} line in {logs}"
    report = speculation_cost.estimate(events[-1])  # cumulative: the last holds the whole run
    return rates, report, logs


def test_the_speculative_step_is_what_the_client_measures(measured):
    rates, report, _ = measured
    by_bucket = {b["bucket"]: b for b in report["buckets"]}
    rows = []
    for batch, measured_rate in rates.items():
        bucket = by_bucket[batch_buckets.LABELS[batch_buckets.bucket_of(batch)]]
        assert bucket["estimated"], bucket
        estimated_rate = bucket["mean_batch_size"] * bucket["tokens_per_step"] / bucket["phase_seconds"]["period"]
        rows.append((batch, round(measured_rate, 1), round(estimated_rate, 1), bucket["tokens_per_step"],
                     bucket["phase_seconds"]["period"], bucket["mean_batch_size"]))
    print("\n(batch, client tok/s, probe's tok/s, tokens per step, period s, mean batch):", *rows, sep="\n  ")
    for batch, measured_rate, estimated_rate, *_ in rows:
        assert abs(estimated_rate / measured_rate - 1) <= TOLERANCE, (batch, measured_rate, estimated_rate)


def test_the_plain_step_is_said_to_be_an_upper_bound(measured):
    _, report, _ = measured
    for bucket in report["buckets"]:
        if bucket.get("estimated"):
            assert "upper bound" in bucket["plain_source"], bucket["plain_source"]


def test_sglang_starts_with_the_advised_config_and_serves(measured, tmp_path, capsys):
    *_, logs = measured
    path = tmp_path / "adaptive.json"
    assert cli_main(["advise", logs, "--write", str(path), "--format", "json"]) == 0
    advice = json.loads(capsys.readouterr().out)
    config = json.loads(path.read_text())
    assert config == advice["adaptive_config"] and all(key.isdigit() for key in config)
    launch = advice["launch_args"]
    steps = int(launch[launch.index("--speculative-num-steps") + 1])
    server = seed.server(seed.DRAFT_PATH, num_steps=steps,  # seed.server passes the steps, draft tokens and topk
                         extra_args=["--speculative-adaptive", "--speculative-adaptive-config", str(path)])
    with server:
        prompt = seed.PROMPTS[0]
        answer = server.generate_raw(prompt, max_new_tokens=seed.MAX_NEW_TOKENS)
        assert list(answer["output_ids"]) == seed.continuation(prompt)
        assert os.path.exists(path)
