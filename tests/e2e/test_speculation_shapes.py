"""Every shape of speculation SGLang 0.5.23 serves, on real CPU servers with the probe injected, under concurrency:
the probe's request-steps, accepted drafts, accept-length histogram and mean accept length equal SGLang's own
per-request figures (meta_info: spec_verify_ct, spec_num_correct_drafts, spec_correct_drafts_histogram) summed over
the same requests, for adaptive depth, sampled chains, tree drafts (topk 2 and 4) and sampled trees.

One adaptive server (the committed trained seed pair, launched with 3 steps and a config whose batch-size slots
differ) takes greedy and sampled chain traffic; the tree servers take greedy and sampled tree traffic. The counts are
read as deltas of the probe's flushed series around each workload (SGLang's warm-up request is outside them)."""

import json
import os
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from eagle_probe.bootstrap import BOOTSTRAP_DIR
from eagle_probe.commands.cli import main as cli_main
from eagle_probe.commands.summarize.logread import read_events
from sglang_cpu import seed

# Up to three requests at once run in the batch-1 slot (candidates 1, 3, 5, 7; a lowered up-hysteresis makes it
# move: the seed draft accepts about 2.2 of 3); four or more run in the batch-4 slot, whose only candidate is 0 (a
# width-1 verify without drafts, as SGLang's default config serves batch 64 and up).
ADAPTIVE_CONFIG = {
    "1": {"candidate_steps": [1, 3, 5, 7], "up_hysteresis": -1.0, "down_hysteresis": -0.25, "ceiling_coeff": 0},
    "4": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
}
SAMPLED = {"temperature": 1.0}
MAX_NEW_TOKENS = 20
HISTOGRAM = re.compile(r'^eagle_probe_spec_accepted_length_bucket\{[^}]*le="([^"]+)"[^}]*\} (\S+)$', re.M)
SERIES = re.compile(r'^(eagle_probe_spec_[a-z_]+)\{([^}]*)\} (\S+)$', re.M)
SLICE = re.compile(r'^eagle_probe_spec_slice_drafts_total\{([^}]*)\} (\S+)$', re.M)


def _counters(text):
    """{(series, label value of depth or position or None)}: value, for the probe's spec series."""
    out = {}
    for name, labels, value in SERIES.findall(text):
        if name.endswith("_bucket") or "slice" in name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        out[(name, got.get("depth", got.get("position")))] = float(value)
    for labels, value in SLICE.findall(text):
        got = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if got.get("dimension") == "sampling":
            out[("sampling", got["bucket"])] = float(value)
    cumulative = {float(le): float(v) for le, v in HISTOGRAM.findall(text)}
    previous = 0.0
    for le in sorted(cumulative):
        out[("histogram", le)] = cumulative[le] - previous
        previous = cumulative[le]
    return out


def _delta(after, before):
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)}


def _sglang(answers):
    """SGLang's own figures, summed over the requests."""
    histogram = []
    for answer in answers:
        for k, n in enumerate(answer["meta_info"].get("spec_correct_drafts_histogram") or []):
            histogram += [0] * (k + 1 - len(histogram))
            histogram[k] += n
    verify = sum(a["meta_info"]["spec_verify_ct"] for a in answers)
    correct = sum(a["meta_info"]["spec_num_correct_drafts"] for a in answers)
    return {"request_steps": verify, "accepted": correct, "histogram": histogram,
            "mean_accept_length": 1 + correct / verify}


def _probe(delta):
    histogram = [0] * (1 + int(max((le for (name, le) in delta if name == "histogram" and le != float("inf")),
                                   default=0)))
    for (name, le), n in delta.items():
        if name == "histogram" and n:
            histogram[int(le)] += int(n)
    while histogram and not histogram[-1]:
        histogram.pop()
    steps = delta.get(("eagle_probe_spec_drafts_total", None), 0)
    accepted = delta.get(("eagle_probe_spec_accepted_tokens_total", None), 0)
    depths = {int(d): int(n) for (name, d), n in delta.items() if name == "eagle_probe_spec_depth_verify_steps_total"}
    sampling = {bucket: int(n) for (name, bucket), n in delta.items() if name == "sampling"}
    return {"request_steps": int(steps), "accepted": int(accepted), "histogram": histogram,
            "mean_accept_length": 1 + accepted / steps if steps else None, "depth_steps": depths,
            "sampling": sampling}


def _workload(server, requests, workers):
    """(prompt, sampling params) requests, `workers` at a time; the answers in request order."""
    def one(request):
        prompt, params = request
        return server.generate_raw(prompt, max_new_tokens=MAX_NEW_TOKENS, sampling_params=params, timeout=300)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, requests))


def _measured(server, phases):
    """{phase name: {"sglang": ..., "probe": ..., "answers": ...}} for phases run one after another."""
    out = {}
    before = _counters(server.flushed_metrics_text())
    for name, requests, workers in phases:
        answers = _workload(server, requests, workers)
        after = _counters(server.flushed_metrics_text(flush_interval_s=2.0))
        out[name] = {"sglang": _sglang(answers), "probe": _probe(_delta(after, before)), "answers": answers}
        before = after
    return out


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("shapes-e2e"))


@pytest.fixture(scope="module")
def adaptive(root):
    config = os.path.join(root, "adaptive.json")
    with open(config, "w") as f:
        json.dump(ADAPTIVE_CONFIG, f)
    draft = seed.write_draft_copy(os.path.join(root, "seed-draft"), seed.TRAINED_IDS)
    log_dir = os.path.join(root, "probe-adaptive")
    env = {"EAGLE_PROBE_LOG_DIR": log_dir, "EAGLE_PROBE_SUMMARY_INTERVAL_S": "0.5"}
    server = seed.server(draft, log_path=os.path.join(root, "adaptive.log"), env=env,
                         pythonpath_prefix=[BOOTSTRAP_DIR], num_steps=3,
                         extra_args=["--speculative-adaptive", "--speculative-adaptive-config", config,
                                     "--enable-metrics"])
    server.start()
    prompts = seed.make_prompts(count=12, seed=4321)
    try:
        phases = _measured(server, [
            ("sequential", [(p, None) for p in prompts[:4]], 1),
            ("concurrent", [(p, None) for p in prompts[4:]], 8),
            ("sampled", [(p, dict(SAMPLED, sampling_seed=100 + i)) for i, p in enumerate(prompts)], 3),
        ])
        phases["log"] = server.log_text()
    finally:
        server.stop(grace=2.0)
    phases["log_dir"] = log_dir
    return phases


@pytest.mark.parametrize("phase", ["sequential", "concurrent", "sampled"])
def test_adaptive_counts_equal_sglangs(adaptive, phase):
    got, want = adaptive[phase]["probe"], adaptive[phase]["sglang"]
    assert {k: got[k] for k in want} == want, f"probe {got} vs SGLang {want}"


def test_adaptive_depth_changes_and_each_step_counts_at_its_own(adaptive):
    assert "AdaptiveSpeculativeParams initialized" in adaptive["log"]
    sequential = adaptive["sequential"]["probe"]["depth_steps"]
    concurrent = adaptive["concurrent"]["probe"]["depth_steps"]
    assert len(set(sequential)) >= 2 and 0 not in sequential, sequential  # the batch-1 slot moved
    assert 0 in concurrent, concurrent  # the batch-4 slot ran its width-1 verify
    # deeper than the launch's 3 steps: SGLang accepted past position 3 only if the probe saw a deeper step
    histogram = adaptive["sequential"]["sglang"]["histogram"]
    if len(histogram) > 4:
        assert max(sequential) >= len(histogram) - 1


@pytest.mark.parametrize("phase, bucket", [("sequential", "greedy"), ("concurrent", "greedy"),
                                           ("sampled", "temp<=1")])
def test_the_sampling_slice_holds_each_request_step_of_its_traffic(adaptive, phase, bucket):
    # the probe's slice of the requests' temperature, against SGLang's verify count of the same requests
    assert adaptive[phase]["probe"]["sampling"] == {bucket: adaptive[phase]["sglang"]["request_steps"]}


def test_summarize_shows_the_time_at_each_depth(adaptive, capsys):
    assert cli_main(["summarize", adaptive["log_dir"]]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "draft depth in use" in line)
    depths = {int(d) for d in re.findall(r"\b(\d+): \d+\.\d%", line)}
    served = set()
    for phase in ("sequential", "concurrent", "sampled"):
        served |= set(adaptive[phase]["probe"]["depth_steps"])
    assert served <= depths and 0 in depths, line
    events = [e for e in read_events([adaptive["log_dir"]]) if e["event"] == "eagle_probe.acceptance"]
    assert any(len(e.get("per_depth") or {}) > 1 for e in events)
