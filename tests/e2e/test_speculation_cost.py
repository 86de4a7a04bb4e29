"""Does speculation pay, against measurement on the CPU: the committed seed pair served by a real SGLang server with
speculation and the seed target by one without, the probe injected into both, measured in turn at batch 1 and at
batch 6 (sglang_cpu.throughput).

The estimate `eagle-probe advise` gives from both servers' logs (the plain step measured on the plain server, the
speculative step and the acceptance on the other) must come within 20 % of the ratio of the two servers' tokens per
second at the client. The speculative side alone is held to the client too. From the speculative server's logs alone
the plain step is fitted from SGLang's verify and prefill forwards, which cost about twice a plain decode step here
(benchmarks/speculation_cost.py measures both and prints the ratios): an upper bound, as its output says. Then SGLang
starts with the adaptive config the estimate advises and serves with it."""

import json
import os

import pytest

from eagle_probe.analysis import batch_buckets, speculation_cost
from eagle_probe.bootstrap import BOOTSTRAP_DIR
from eagle_probe.commands import speculation_advice
from eagle_probe.commands.cli import main as cli_main
from eagle_probe.commands.summarize.logread import read_events
from eagle_probe.events import SPEC_COSTS
from sglang_cpu import seed, throughput
from sglang_cpu.server import SGLangServer
from sglang_cpu.spec_shims import SPEC_ENV

BATCHES = {1: 8, 6: 6}  # batch size -> rounds of requests (seed.MAX_NEW_TOKENS tokens each)
TOLERANCE = 0.20


SUMMARY_INTERVAL_S = 1.0  # the probes write their counts each second: --since can take the warm-up away


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Client tokens/s of both servers at each batch size, their log directories, and the time the measured
    traffic began (after a warm-up: SGLang's own start-up request and the first calls of each shape ran steps two
    to three times as long as the measured ones, which a short run's totals would carry)."""
    logs, plain_logs = str(tmp_path_factory.mktemp("cost-logs")), str(tmp_path_factory.mktemp("plain-logs"))
    interval = {"EAGLE_PROBE_SUMMARY_INTERVAL_S": str(SUMMARY_INTERVAL_S)}
    spec = seed.server(seed.DRAFT_PATH, env={"EAGLE_PROBE_LOG_DIR": logs, **interval},
                       pythonpath_prefix=[BOOTSTRAP_DIR])
    plain = SGLangServer(seed.TARGET_PATH, env={**SPEC_ENV, "EAGLE_PROBE_LOG_DIR": plain_logs, **interval},
                         pythonpath_prefix=[BOOTSTRAP_DIR])
    with spec, plain:
        servers = {"spec": spec, "plain": plain}
        throughput.warm_up(servers)
        since = throughput.since_now(2.5 * SUMMARY_INTERVAL_S)
        rates = throughput.interleaved(servers, BATCHES, blocks=1, warm=False)
    return rates, logs, plain_logs, since


@pytest.fixture(scope="module")
def measured(served):
    rates, logs, _, since = served
    events = [e for e in read_events([logs]) if e.get("tp_rank") == 0]
    assert any(e.get("event") == SPEC_COSTS for e in events), f"no {SPEC_COSTS} line in {logs}"
    [costs] = speculation_advice.last_costs(events, since)  # the measured traffic's counts
    return rates["spec"], speculation_cost.estimate(costs), logs


def test_the_estimate_with_the_plain_servers_steps_is_the_measured_ratio(served, capsys):
    rates, logs, plain_logs, since = served
    assert cli_main(["advise", logs, plain_logs, "--since", since, "--format", "json"]) == 0
    advice = json.loads(capsys.readouterr().out)
    assert (advice["runs"], advice["plain_runs"]) == (2, 1)
    by_bucket = {b["bucket"]: b for b in advice["buckets"]}
    rows = []
    for batch in BATCHES:
        bucket = by_bucket[batch_buckets.LABELS[batch_buckets.bucket_of(batch)]]
        assert bucket["estimated"] and bucket["plain_source"].startswith("measured"), bucket
        measured_ratio = rates["spec"][batch] / rates["plain"][batch]
        rows.append((batch, round(rates["plain"][batch], 1), round(rates["spec"][batch], 1), round(measured_ratio, 3),
                     bucket["estimated_speedup"], bucket["plain_step_seconds"], bucket["phase_seconds"]["period"]))
    with capsys.disabled():
        print("\n(batch, plain tok/s, speculative tok/s, measured ratio, estimate, plain step s, spec period s):",
              *rows, sep="\n  ")
    for batch, _, _, measured_ratio, estimate, *_ in rows:
        assert abs(estimate / measured_ratio - 1) <= TOLERANCE, (batch, measured_ratio, estimate)


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
