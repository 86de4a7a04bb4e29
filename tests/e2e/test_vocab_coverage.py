"""Vocabulary coverage in a real SGLang 0.5.23 EAGLE-3 server on the CPU: a served fault of the missing vocabulary
map (`sglang_cpu.draft_models` case "vocab_missing": a draft over 128 of the target's 256 ids whose checkpoint has no
d2t). Every verify step is sampled (EAGLE_PROBE_COVERAGE_INTERVAL_S=1e-6); the draft never proposes what the map target
says, so every step commits one token, the target's, and the verified tokens of a request are its output ids after
the first (the prefill's). The probe's coverage counters must equal the share of those served tokens under 128,
computed here from SGLang's responses alone; `summarize` must name draft_vocab_map_missing and show the coverage. The
silent control (the full-vocabulary "map" draft: coverage 1.0, no finding) is in test_spec_server.py."""

import json
import os
import subprocess
import sys

import pytest

from sglang_cpu.draft_models import VOCAB_MISSING_DRAFT_VOCAB, build_case

from .conftest import metric_samples, probe_events, start_spec_server

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
