"""Vocabulary coverage in real SGLang 0.5.23 EAGLE-3 servers on the CPU.

First server: a served fault of the missing vocabulary map (`sglang_cpu.draft_models` case "vocab_missing": a draft over
128 of the target's 256 ids whose checkpoint has no d2t). Every verify step is sampled
(EAGLE_PROBE_COVERAGE_INTERVAL_S=1e-6); the draft never proposes what the map target says, so every step commits one
token, the target's, and the verified tokens of a request are its output ids after the first (the prefill's). The
probe's coverage counters must equal the share of those served tokens under 128, computed here from SGLang's responses
alone; `summarize` must name draft_vocab_map_missing and show the coverage. The silent control (the full-vocabulary
"map" draft: coverage 1.0, no finding) is in test_spec_server.py.

Second server (the `domain_run` tests): draft_vocab_coverage_low as a user meets it. The draft ("vocab_domain") is
compact with a VALID d2t (its vocabulary: the target ids 128..255, as if chosen from another domain's data) and
proposes the map target's tokens wherever they are in its vocabulary. One server, two phases of traffic of the same
shape (4 concurrent requests, 240 verified tokens): first in its domain (the silent control: every verified token
in its vocabulary, acceptance as trained; `summarize` on the logs at that point names nothing), then outside it
(tokens under 128: nothing accepted). Then the coverage falls to about 0.49, `summarize` names
draft_vocab_coverage_low with the coverage computed here from SGLang's responses (and the warm-up's known tokens),
and the acceptance findings (acceptance_collapse at run time, the training comparison in summarize) name it."""

import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from eagle_probe.analysis import findings as finding_codes
from sglang_cpu.draft_models import DOMAIN_PROMPTS, VOCAB_MISSING_DRAFT_VOCAB, build_case, simulate_chain

from .conftest import SGLANG_WARMUP, metric_samples, probe_events, start_spec_server

KEYS = ("below", "across", "above")


def _coverage_counts(text):
    """(in the draft's vocabulary, all) from the probe's counters."""
    counts = {labels["in_vocab"]: value for labels, value in
              metric_samples(text, "eagle_probe_draft_vocab_verified_tokens_total")}
    inside = counts.get("true", 0.0)
    return inside, inside + counts.get("false", 0.0)


def _settled(server, tries=8):
    last = _coverage_counts(server.flushed_metrics_text())
    for _ in range(tries):
        current = _coverage_counts(server.flushed_metrics_text())
        if current == last:
            return current
        last = current
    return last


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("vocab-coverage"))
    case = build_case(root, "vocab_missing", num_steps=2)
    env = {"EAGLE_PROBE_COVERAGE_INTERVAL_S": "0.000001"}
    server = start_spec_server(root, "vocab", case, env)
    try:
        before = _settled(server)
        out = {}
        for key in KEYS:
            prompt, new = case["expected"]["prompts"][key]
            out[key] = server.generate_raw(prompt, max_new_tokens=new)
        after = _settled(server)
        metrics = server.metrics_text()
        log = server.log_text()
    finally:
        server.stop()
    log_dir = os.path.join(root, "probe-vocab")
    return dict(case=case, out=out, before=before, after=after, metrics=metrics, log=log, log_dir=log_dir, root=root)


def test_served_tokens_follow_the_target_and_no_draft_is_accepted(run):
    for key in KEYS:
        got, expected = run["out"][key], run["case"]["expected"]["runs"][key]
        assert got["output_ids"] == expected["output_ids"], key
        assert got["meta_info"]["spec_num_correct_drafts"] == 0, key
        assert got["meta_info"]["spec_verify_ct"] == len(got["output_ids"]) - 1, key  # one token per step


def test_coverage_counters_equal_the_share_of_served_tokens_in_the_draft_vocabulary(run):
    verified = [t for key in KEYS for t in run["out"][key]["output_ids"][1:]]
    inside = sum(1 for t in verified if t < VOCAB_MISSING_DRAFT_VOCAB)
    got_in = run["after"][0] - run["before"][0]
    got_total = run["after"][1] - run["before"][1]
    assert (got_in, got_total) == (inside, len(verified))
    assert 0 < inside < len(verified)  # a coverage strictly under 1
    [(_, share)] = metric_samples(run["metrics"], "eagle_probe_draft_vocab_coverage")
    assert share < 1.0


def test_coverage_event_and_findings_in_the_logs(run):
    events = probe_events(run["log_dir"], "eagle_probe.draft.vocab_coverage")
    assert events
    last = events[-1]
    assert (last["map"], last["hot_vocab_size"], last["draft_vocab_size"], last["target_vocab_size"]) == \
        ("none", 128, 128, 256)
    assert last["verified_tokens"] >= run["after"][1] and 0 < last["coverage"] < 1
    codes = {e["code"] for e in probe_events(run["log_dir"], "eagle_probe.finding")}
    assert "draft_vocab_map_missing" in codes


def test_summarize_names_the_missing_map_and_shows_the_coverage(run):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "eagle_probe", "summarize", run["log_dir"], "--format", "json"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert "draft_vocab_map_missing" in {f["code"] for f in report["findings"]}
    section = report["draft_vocab_coverage"]
    [row] = section["ranks"]
    last = probe_events(run["log_dir"], "eagle_probe.draft.vocab_coverage")[-1]
    assert (row["in_vocab"], row["verified_tokens"], row["map"]) == (last["in_vocab"], last["verified_tokens"], "none")
    assert section["coverage"] == pytest.approx(last["in_vocab"] / last["verified_tokens"])
    text = subprocess.run([sys.executable, "-m", "eagle_probe", "summarize", run["log_dir"]], capture_output=True,
                          text=True, env=env, timeout=300).stdout
    assert "draft vocabulary coverage:" in text and "no d2t: draft ids used as target ids 0..127" in text
    assert "FINDING draft_vocab_map_missing" in text


def test_nothing_escaped(run):
    assert not probe_events(run["log_dir"], "eagle_probe.internal_error")
    assert "Traceback" not in run["log"]


# ------------------------------------------------------------ draft_vocab_coverage_low on a compact draft with a d2t

DOMAIN_ACCURACY = "0.85,0.2"  # the training record: promises 1 + 0.85 + 0.17 = 2.02 tokens per step; served in domain 2
DOMAIN_ENV = {"EAGLE_PROBE_COVERAGE_INTERVAL_S": "0.000001", "EAGLE_PROBE_DRAFT_ACCURACY": DOMAIN_ACCURACY,
              # windows long enough, and judged from 16 request-steps, so that the off-domain phase gives collapses
              "EAGLE_PROBE_SUMMARY_INTERVAL_S": "0.5", "EAGLE_PROBE_COLLAPSE_MIN_DRAFTS": "16",
              # off: the map target's every captured layer carries the token embedding by construction, which the
              # fingerprints rightly name aux_slots_identical; this server is about the vocabulary
              "EAGLE_PROBE_FINGERPRINT_INTERVAL_S": "0"}


def _summarize(log_dir, *args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "eagle_probe", "summarize", log_dir, *args], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _wait_for_coverage_event(log_dir, total, timeout=60.0):
    """The probe's logs once a coverage event counts `total` verified tokens (written at its next summary tick)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        events = probe_events(log_dir, "eagle_probe.draft.vocab_coverage")
        if events and events[-1]["verified_tokens"] >= total:
            return events[-1]
        time.sleep(0.2)
    raise AssertionError(f"no coverage event counting {total} tokens in {log_dir}")


def _serve_phase(server, prompts):
    with ThreadPoolExecutor(len(prompts)) as pool:
        keys = sorted(prompts)
        outs = pool.map(lambda k: server.generate_raw(prompts[k][0], max_new_tokens=prompts[k][1], timeout=300), keys)
        return dict(zip(keys, outs))


def _verified(outs):
    """The verified tokens of SGLang's responses: each request's output ids after the first (the prefill's)."""
    return [t for out in outs.values() for t in out["output_ids"][1:]]


@pytest.fixture(scope="module")
def domain_run(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("vocab-domain"))
    case = build_case(root, "vocab_domain", num_steps=2)
    started = time.time()
    server = start_spec_server(root, "domain", case, DOMAIN_ENV)
    log_dir = os.path.join(root, "probe-domain")
    try:
        warmup = _settled(server)
        served_in = _serve_phase(server, DOMAIN_PROMPTS["in"])
        mid = _settled(server)
        _wait_for_coverage_event(log_dir, mid[1])
        control_dir = os.path.join(root, "probe-domain-in-domain")  # the logs as they stood after the first phase
        shutil.copytree(log_dir, control_dir)
        served_out = _serve_phase(server, DOMAIN_PROMPTS["out"])
        after = _settled(server)
        metrics = server.metrics_text()
    finally:
        server.stop()
    seconds = time.time() - started
    return dict(case=case, warmup=warmup, mid=mid, after=after, served_in=served_in, served_out=served_out,
                metrics=metrics, log=server.log_text(), log_dir=log_dir, control_dir=control_dir, seconds=seconds,
                startup_seconds=server.startup_seconds)


def _hot(tokens):
    return sum(1 for t in tokens if 128 <= t < 256)


def test_domain_served_tokens_and_acceptance_are_the_constructions(domain_run):
    runs = domain_run["case"]["expected"]["runs"]
    for outs in (domain_run["served_in"], domain_run["served_out"]):
        for key, got in outs.items():
            assert got["output_ids"] == runs[key]["output_ids"], key
            meta = got["meta_info"]
            assert (meta["spec_verify_ct"], meta["spec_num_correct_drafts"]) == \
                (runs[key]["verify_ct"], runs[key]["num_correct_drafts"]), key
    # in its domain every step accepts the draft's first token; outside it none
    assert {o["meta_info"]["spec_num_correct_drafts"] for o in domain_run["served_in"].values()} == {30}
    assert {o["meta_info"]["spec_num_correct_drafts"] for o in domain_run["served_out"].values()} == {0}


def test_domain_coverage_counters_equal_the_share_of_served_tokens_in_the_draft_vocabulary(domain_run):
    prompt, new = SGLANG_WARMUP  # SGLang's own warm-up request, before any of ours: its verified tokens, known
    warm = simulate_chain(domain_run["case"]["expected"]["T"], domain_run["case"]["expected"]["D"], prompt, new)
    warm_tokens = warm["output_ids"][1:]
    assert domain_run["warmup"] == (_hot(warm_tokens), len(warm_tokens)) == (0, 7)
    tokens_in, tokens_out = _verified(domain_run["served_in"]), _verified(domain_run["served_out"])
    assert len(tokens_in) == len(tokens_out) == 240  # each phase alone over MIN_TOKENS (200)
    assert domain_run["mid"] == (_hot(warm_tokens + tokens_in), len(warm_tokens + tokens_in)) == (240, 247)
    assert domain_run["after"] == (_hot(warm_tokens + tokens_in + tokens_out),
                                   len(warm_tokens + tokens_in + tokens_out)) == (240, 487)


def test_domain_control_in_its_domain_is_silent(domain_run):
    """After the first phase (247 verified tokens, 240 in the draft's vocabulary, acceptance as trained) the probe has
    logged no finding and summarize names none: no coverage finding, no vocabulary-map finding. (Whether speculation
    pays is another question: on two CPU cores a tiny draft costs about what the tiny target does, and summarize may
    rightly say it does not; tests/e2e/test_speculation_cost.py holds that estimate to measured throughput.)"""
    control = domain_run["control_dir"]
    assert not probe_events(control, "eagle_probe.finding")
    report = json.loads(_summarize(control, "--format", "json"))
    cost_codes = {finding_codes.SPECULATION_SLOWER_THAN_PLAIN, finding_codes.SPECULATION_DEPTH_OFF}
    assert [f for f in report["findings"] if f["code"] not in cost_codes] == []
    section = report["draft_vocab_coverage"]
    assert (section["in_vocab"], section["verified_tokens"]) == domain_run["mid"]
    assert section["coverage"] == pytest.approx(240 / 247)
    [row] = section["ranks"]
    assert (row["map"], row["hot_vocab_size"], row["draft_vocab_size"], row["target_vocab_size"]) == \
        ("d2t", 128, 128, 256)
    [rank] = report["training"]["ranks"]
    assert not rank["below"] and rank["promised_mean_accept_length"] == pytest.approx(2.02)
    checks = _summarize(control)
    finding_lines = [line for line in checks.splitlines() if line.strip().startswith("FINDING ")]
    assert "draft_vocab_coverage_low" not in checks
    assert all(line.split()[1] in cost_codes for line in finding_lines), finding_lines
    assert finding_lines or "findings: none" in checks


def test_domain_summarize_names_coverage_low_with_the_served_share(domain_run):
    report = json.loads(_summarize(domain_run["log_dir"], "--format", "json"))
    codes = {f["code"] for f in report["findings"]}
    assert "draft_vocab_coverage_low" in codes
    assert not codes & {"draft_vocab_map_missing", "draft_vocab_map_invalid", "acceptance_below_training"}
    tokens = _verified(domain_run["served_in"]) + _verified(domain_run["served_out"])
    section = report["draft_vocab_coverage"]
    # the warm-up's 7 verified tokens (none in the vocabulary: see the counters test) and ours
    assert (section["in_vocab"], section["verified_tokens"]) == (_hot(tokens), 7 + len(tokens))
    assert section["coverage"] == pytest.approx(_hot(tokens) / (7 + len(tokens)))
    [row] = section["ranks"]
    assert row["map"] == "d2t" and row["hot_vocab_size"] == 128
    assert row["mean_accept_length_cap"] == pytest.approx(min(1 / (1 - section["coverage"]), 3.0))
    # the training comparison: below the promise, explained by the coverage
    [rank] = report["training"]["ranks"]
    assert rank["below"]
    assert "draft_vocab_coverage_low" in report["training"]["explained_by"]
    text = _summarize(domain_run["log_dir"])
    assert "FINDING draft_vocab_coverage_low" in text and "128 target ids through d2t" in text
    assert "findings that may explain the shortfall:" in text
    print(f"vocab_domain: summarize coverage {section['coverage']:.4f} ({section['in_vocab']} of "
          f"{section['verified_tokens']}), cap {row['mean_accept_length_cap']:.3f}, served mean accept length "
          f"{rank['served_mean_accept_length']:.3f} of the promised {rank['promised_mean_accept_length']:.3f}")


def test_domain_runtime_finding_and_the_collapses_name_it(domain_run):
    events = probe_events(domain_run["log_dir"])
    findings = [e for e in events if e.get("event") == "eagle_probe.finding"]
    [low] = [e for e in findings if e["code"] == "draft_vocab_coverage_low"]
    evidence = low["evidence"]
    # fired in the second phase: all 240 in-domain tokens counted, and then enough outside to be sure
    assert evidence["in_vocab"] == 240 and 247 < evidence["verified_tokens"] <= 487
    assert evidence["low"] and evidence["map"] == "d2t" and evidence["hot_vocab_size"] == 128
    assert evidence["coverage"] == pytest.approx(240 / evidence["verified_tokens"], abs=1e-6)
    collapses = [e for e in findings if e["code"] == "acceptance_collapse"]
    after = [e for e in collapses if events.index(e) > events.index(low)]
    assert after, [e["message"] for e in collapses]  # the off-domain windows collapse
    for collapse in after:
        assert "draft_vocab_coverage_low" in collapse["evidence"]["likely_causes"]
    assert {e["code"] for e in findings} <= {"draft_vocab_coverage_low", "acceptance_collapse"}
    print(f"vocab_domain: runtime draft_vocab_coverage_low at {evidence['in_vocab']} of {evidence['verified_tokens']} "
          f"({evidence['coverage']:.4f}); acceptance_collapse {len(collapses)} windows, {len(after)} after it")


def test_domain_nothing_escaped(domain_run):
    assert not probe_events(domain_run["log_dir"], "eagle_probe.internal_error")
    assert "Traceback" not in domain_run["log"]
    print(f"vocab_domain server: {domain_run['seconds']:.1f} s from start to stop (start-up "
          f"{domain_run['startup_seconds']:.1f} s)")
