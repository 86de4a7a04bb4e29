"""Real SGLang 0.5.23 EAGLE-3 speculative servers on the CPU (greedy, topk 1, 2 steps, 3 draft tokens), each
with the probe injected only through PYTHONPATH.

Test-only support: `sglang_cpu.spec_shims` (applied through `sglang_cpu/site/sitecustomize.py`
when SGLANG_CPU_SPEC=1) and `sglang_cpu.draft_models` (tiny drafts with known acceptance). One
server per case; expectations come from `draft_models.simulate_chain`, computed from the maps the
checkpoints were built from, never from the server. The probe's figures are checked against both the
construction and SGLang's own per-request meta_info and log lines.
"""

import os
import re

import pytest

from eagle_probe.bootstrap import BOOTSTRAP_DIR
from eagle_probe.commands.summarize.logread import read_events
from sglang_cpu.draft_models import build_case
from sglang_cpu.server import ServerError, SGLangServer
from sglang_cpu.spec_shims import SPEC_ENV

NUM_STEPS = 2
RANDOM_PROMPTS = ([10, 11, 12, 13, 14], [7, 3, 99, 120, 5, 6, 200, 31])
ACCEPT_LEN = re.compile(r"Decode batch, .*accept len: (\d+\.\d\d), accept rate: (\d+\.\d\d),")


def _probe_env(root, name):
    return {"EAGLE_PROBE_LOG_DIR": os.path.join(root, f"probe-{name}"), "EAGLE_PROBE_SUMMARY_INTERVAL_S": "0.2"}


def _server(checkpoint, root, name, extra_args=(), spec=True, probe=True):
    env = dict(SPEC_ENV) if spec else {}
    if probe:
        env.update(_probe_env(root, name))
    return SGLangServer(checkpoint, extra_args=extra_args, env=env,
                        pythonpath_prefix=[BOOTSTRAP_DIR] if probe else (),
                        log_path=os.path.join(root, f"{name}.log"))


def _start(checkpoint, root, name, extra_args=(), spec=True, probe=True):
    server = _server(checkpoint, root, name, extra_args, spec, probe)
    server.start()
    return server


def _events(root, name, event=None):
    events = read_events([os.path.join(root, f"probe-{name}")])
    return [e for e in events if event is None or e["event"] == event]


def _findings(root, name, severity=None):
    return [e for e in _events(root, name, "eagle_probe.finding") if severity is None or e["severity"] == severity]


SPEC_COUNTERS = ("eagle_probe_spec_verify_steps_total", "eagle_probe_spec_drafts_total",
                 "eagle_probe_spec_draft_tokens_total", "eagle_probe_spec_accepted_tokens_total")


def _spec_counters(metrics_text):
    values = {name: _metric(metrics_text, name) or 0.0 for name in SPEC_COUNTERS}
    for k in range(NUM_STEPS):
        values[k] = _metric_labelled(metrics_text, "eagle_probe_spec_accepted_tokens_per_pos_total",
                                     f'position="{k}"') or 0.0
    return values


def _delta(after, before):
    return {k: after[k] - before.get(k, 0.0) for k in after}


_SLICE_SERIES = re.compile(r'^(eagle_probe_spec_slice_drafts_total|eagle_probe_spec_slice_accepted_tokens_per_pos_total'
                           r'|eagle_probe_spec_requests_by_accept_length_total)\{([^}]*)\} (\S+)$', re.M)


def _slice_counters(metrics_text):
    """{(series, dimension, bucket, position)}: value; labels a series does not have are None."""
    out = {}
    for name, labels, value in _SLICE_SERIES.findall(metrics_text):
        got = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        out[(name, got.get("dimension"), got.get("bucket"), got.get("position"))] = float(value)
    return out


def _metric_labelled(text, name, label):
    for line in text.splitlines():
        if line.startswith(name + "{") and label in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def _metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("spec-e2e"))


# ------------------------------------------------------------------------- a. random weights


@pytest.fixture(scope="module")
def random_runs(root, random_target_plain):
    case = build_case(root, "random", num_steps=NUM_STEPS)
    plain_out = [random_target_plain[tuple(p)] for p in RANDOM_PROMPTS]
    spec = _start(case["target"], root, "random-spec", case["args"] + ["--enable-metrics"])
    try:
        first_text = spec.flushed_metrics_text()
        before = _spec_counters(first_text)
        spec_raw = [spec.generate_raw(p, max_new_tokens=12) for p in RANDOM_PROMPTS]
        counters = _delta(_spec_counters(spec.flushed_metrics_text()), before)
        # The same prompts again: their prefixes are in SGLang's radix cache now (the slices' cache hits).
        again_raw = [spec.generate_raw(p, max_new_tokens=12) for p in RANDOM_PROMPTS]
        # two flushes: a finished request enters the per-request histogram at most one count after it is seen
        slices_text = spec.flushed_metrics_text(flush_interval_s=2.0)
        log = spec.log_text()
    finally:
        spec.stop()
    return dict(plain=plain_out, spec=spec_raw, log=log, counters=counters, root=root, again=again_raw,
                slices=_delta(_slice_counters(slices_text), _slice_counters(first_text)))


def test_random_spec_output_equals_plain(random_runs):
    assert [r["output_ids"] for r in random_runs["spec"]] == random_runs["plain"]
    assert all(len(o) == 12 for o in random_runs["plain"])


def test_random_probe_acceptance_agrees_with_sglang(random_runs):
    metas = [r["meta_info"] for r in random_runs["spec"]]
    counters = random_runs["counters"]
    verify_steps = sum(m["spec_verify_ct"] for m in metas)
    # one request at a time: every verify step is one draft of NUM_STEPS tokens
    assert counters["eagle_probe_spec_verify_steps_total"] == verify_steps
    assert counters["eagle_probe_spec_drafts_total"] == verify_steps
    assert counters["eagle_probe_spec_draft_tokens_total"] == sum(m["spec_num_proposed_drafts"] for m in metas)
    assert counters["eagle_probe_spec_accepted_tokens_total"] == sum(m["spec_num_correct_drafts"] for m in metas)
    # SGLang's per-step "accept len" (bonus included) averages to the probe's mean acceptance length
    lens = [float(a) for a, _ in ACCEPT_LEN.findall(random_runs["log"])]
    probe_mean = 1 + counters["eagle_probe_spec_accepted_tokens_total"] / counters["eagle_probe_spec_drafts_total"]
    assert sum(lens[-verify_steps:]) / verify_steps == pytest.approx(probe_mean)


def test_random_probe_sees_a_correct_draft(random_runs):
    root = random_runs["root"]
    [loaded] = _events(root, "random-spec", "eagle_probe.draft.loaded")
    assert loaded["eagle_layer_ids"] == [1, 3, 4] and loaded["fc_in"] == 3 * 64 and loaded["dropped"] == []
    drafts = {d["mode"]: d for d in _events(root, "random-spec", "eagle_probe.draft.forward")}
    # logged once per mode: target-fed forwards go through fc; multi-step DECODE feeds the draft its own state
    assert set(drafts) == {"EXTEND", "DRAFT_EXTEND_V2", "DECODE"}
    for mode in ("EXTEND", "DRAFT_EXTEND_V2"):
        assert drafts[mode]["fc_ran"] and drafts[mode]["aux_width"] == drafts[mode]["fc_in"] == 3 * 64
    assert not drafts["DECODE"]["fc_ran"] and drafts["DECODE"]["aux_width"] == drafts["DECODE"]["embed_width"] == 64
    assert {d["role"] for d in drafts.values()} == {"draft"}
    [cfg] = [e for e in _events(root, "random-spec", "eagle_probe.capture.configured") if e["role"] == "target"]
    assert cfg["layers_to_capture"] == [2, 4, 5]
    assert not _findings(root, "random-spec", "error")
    acceptance = _events(root, "random-spec", "eagle_probe.acceptance")
    assert acceptance and all(a["tp_rank"] == 0 and a["positions"] == NUM_STEPS for a in acceptance)


def test_random_slices_add_up_to_sglangs_counts(random_runs):
    """Acceptance by slice against SGLang's own per-request meta_info: in every dimension the slices' request-steps
    and per-position accepted tokens add up to SGLang's totals; cache hits, first steps and the per-request
    accept lengths are the requests SGLang says they are."""
    from eagle_probe.analysis.slices import DIMENSIONS, request_length_bucket

    metas = [r["meta_info"] for r in random_runs["spec"] + random_runs["again"]]
    # SGLang's own word on cache hits (its start-up warm-up request may already share a token with a prompt)
    assert [m["cached_tokens"] > 0 for m in metas][2:] == [True, True]
    steps = sum(m["spec_verify_ct"] for m in metas)
    per_pos = [sum(sum(n for k, n in enumerate(m["spec_correct_drafts_histogram"]) if k > j) for m in metas)
               for j in range(NUM_STEPS)]
    assert per_pos[0] == sum(m["spec_num_correct_drafts"] for m in metas) - per_pos[1]
    got = random_runs["slices"]

    def drafts(dimension, bucket):
        return got.get(("eagle_probe_spec_slice_drafts_total", dimension, bucket, None), 0.0)

    def accepted(dimension, bucket, j):
        return got.get(("eagle_probe_spec_slice_accepted_tokens_per_pos_total", dimension, bucket, str(j)), 0.0)

    for dimension, buckets in DIMENSIONS.items():
        assert sum(drafts(dimension, b) for b in buckets) == steps, dimension
        assert [sum(accepted(dimension, b, j) for b in buckets) for j in range(NUM_STEPS)] == per_pos, dimension
    assert drafts("cached_prefix", "yes") == sum(m["spec_verify_ct"] for m in metas if m["cached_tokens"] > 0)
    assert drafts("step", "first") == len(metas)
    assert drafts("batch", "1") == drafts("path", "eager") == drafts("position", "0-63") == steps
    lengths = {}
    for m in metas:
        bucket = request_length_bucket(1 + m["spec_num_correct_drafts"] / m["spec_verify_ct"])
        lengths[bucket] = lengths.get(bucket, 0) + 1
    assert {k[2]: v for k, v in got.items() if k[0] == "eagle_probe_spec_requests_by_accept_length_total"
            and v} == lengths


def test_random_summarize_shows_the_slices(random_runs, capsys):
    """summarize --format json on the server's logs: acceptance_slices adds up, in every dimension, to the totals of
    the probe's acceptance event (which agree with SGLang's, above), the start-up warm-up request included."""
    import json

    from eagle_probe.commands.cli import main

    log_dir = os.path.join(random_runs["root"], "probe-random-spec")
    assert main(["summarize", log_dir, "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    [rank] = report["acceptance_slices"]["ranks"]
    total = _events(random_runs["root"], "random-spec", "eagle_probe.acceptance")[-1]["total"]
    metas = [r["meta_info"] for r in random_runs["spec"] + random_runs["again"]]
    assert rank["positions"] == NUM_STEPS and rank["requests"] >= len(metas)
    for dimension, buckets in rank["slices"].items():
        assert sum(b["request_steps"] for b in buckets.values()) == total["drafts"], dimension
        assert sum(sum(b["accepted"]) for b in buckets.values()) == total["accepted_tokens"], dimension
    assert rank["slices"]["step"]["first"]["request_steps"] == rank["requests"]  # one first step per request
    assert rank["slices"]["cached_prefix"]["yes"]["request_steps"] >= sum(
        m["spec_verify_ct"] for m in metas if m["cached_tokens"] > 0)
    assert rank["low"] == [] and not [f for f in report["findings"] if f["code"] == "acceptance_slice_low"]
    assert main(["summarize", log_dir]) == 0
    assert "Acceptance by slice" in capsys.readouterr().out


def test_random_spec_logs_accept_len(random_runs):
    found = ACCEPT_LEN.findall(random_runs["log"])
    assert found, random_runs["log"][-3000:]
    for r in random_runs["spec"]:
        meta = r["meta_info"]
        assert meta["spec_verify_ct"] >= 1
        assert meta["spec_num_proposed_drafts"] == meta["spec_verify_ct"] * NUM_STEPS
        assert sum(meta.get("spec_correct_drafts_histogram", [])) == meta["spec_verify_ct"]


# --------------------------------------------------- b. zero lm_head: every draft accepted


@pytest.fixture(scope="module")
def zero_head_runs(root):
    case = build_case(root, "zero_head", num_steps=NUM_STEPS)
    server = _start(case["target"], root, "zero-head", case["args"] + ["--enable-metrics"])
    try:
        before = _spec_counters(server.flushed_metrics_text())
        out = {k: server.generate_raw(p, max_new_tokens=n) for k, (p, n) in case["expected"]["prompts"].items()}
        counters = _delta(_spec_counters(server.flushed_metrics_text()), before)
        log = server.log_text()
    finally:
        server.stop()
    return dict(case=case, out=out, log=log, counters=counters)


def test_zero_head_every_draft_accepted(zero_head_runs):
    expected = zero_head_runs["case"]["expected"]["runs"]["all_accepted"]
    meta = zero_head_runs["out"]["all_accepted"]["meta_info"]
    assert zero_head_runs["out"]["all_accepted"]["output_ids"] == expected["output_ids"] == [0] * 7
    assert meta["spec_verify_ct"] == expected["verify_ct"] == 2
    assert meta["spec_num_correct_drafts"] == expected["num_correct_drafts"] == 4
    assert meta["spec_correct_drafts_histogram"] == expected["histogram"] == [0, 0, 2]
    assert meta["spec_accept_rate"] == 1.0
    lens = {a for a, _ in ACCEPT_LEN.findall(zero_head_runs["log"])}
    assert lens == {"3.00"}, lens


def test_zero_head_probe_counts_every_position_accepted(zero_head_runs):
    expected = zero_head_runs["case"]["expected"]["runs"]["all_accepted"]
    counters = zero_head_runs["counters"]
    steps = expected["verify_ct"]
    assert counters["eagle_probe_spec_verify_steps_total"] == steps
    assert counters["eagle_probe_spec_drafts_total"] == steps
    assert counters["eagle_probe_spec_accepted_tokens_total"] == steps * NUM_STEPS
    assert [counters[k] / steps for k in range(NUM_STEPS)] == [1.0] * NUM_STEPS
    # tokens generated = one from prefill + (accepted drafts + bonus) per verify step
    assert 1 + counters["eagle_probe_spec_accepted_tokens_total"] + steps == len(expected["output_ids"])


# ----------------------------------------- c. map models: known per-position acceptance


@pytest.fixture(scope="module")
def map_runs(root):
    case = build_case(root, "map", num_steps=NUM_STEPS)
    server = _start(case["target"], root, "map", case["args"] + ["--enable-metrics"])
    try:
        before = _metric(server.metrics_text(), "sglang:spec_verify_calls_total") or 0.0
        out, counters = {}, {}
        for k, (p, n) in case["expected"]["prompts"].items():
            start = _spec_counters(server.flushed_metrics_text())
            out[k] = server.generate_raw(p, max_new_tokens=n)
            counters[k] = _delta(_spec_counters(server.flushed_metrics_text()), start)
        metrics = server.flushed_metrics_text()
        log = server.log_text()
    finally:
        server.stop()
    return dict(case=case, out=out, before=before, metrics=metrics, log=log, counters=counters, root=root)


@pytest.mark.parametrize("key", ["pos1_always_pos2_never", "into_fixed_point", "mixed"])
def test_map_acceptance_matches_construction(map_runs, key):
    expected = map_runs["case"]["expected"]["runs"][key]
    got = map_runs["out"][key]
    meta = got["meta_info"]
    assert got["output_ids"] == expected["output_ids"]
    assert meta["spec_verify_ct"] == expected["verify_ct"]
    assert meta["spec_num_correct_drafts"] == expected["num_correct_drafts"]
    assert meta["spec_num_proposed_drafts"] == expected["verify_ct"] * NUM_STEPS
    assert meta["spec_correct_drafts_histogram"] == expected["histogram"]
    assert meta["completion_tokens"] == len(expected["output_ids"])


@pytest.mark.parametrize("key", ["pos1_always_pos2_never", "into_fixed_point", "mixed"])
def test_map_probe_per_position_counters_match_construction(map_runs, key):
    expected = map_runs["case"]["expected"]["runs"][key]
    counters = map_runs["counters"][key]
    assert counters["eagle_probe_spec_verify_steps_total"] == expected["verify_ct"]
    assert counters["eagle_probe_spec_drafts_total"] == expected["verify_ct"]
    assert counters["eagle_probe_spec_accepted_tokens_total"] == expected["num_correct_drafts"]
    # per_position[k]: verify steps whose draft position k (0-based here) was accepted
    assert [counters[k] for k in range(NUM_STEPS)] == expected["per_position"]


def test_map_draft_embedding_measured_equal_to_the_targets_is_no_finding(map_runs):
    """The map draft carries the target's own embedding (as drafts trained with the frozen embedding do): the probe
    reads sampled rows of the target checkpoint, measures 0 and says nothing; a random draft's own differs."""
    [loaded] = _events(map_runs["root"], "map", "eagle_probe.draft.loaded")
    assert loaded["embed_in_checkpoint"] and loaded["embed_rel_diff"] == 0.0
    assert "sampled rows" in loaded["embed_compare"]
    assert not [f for f in _findings(map_runs["root"], "map") if f["code"] == "draft_embedding_replaced"]


def test_random_draft_own_embedding_is_a_measured_warning(random_runs):
    [found] = [f for f in _findings(random_runs["root"], "random-spec") if f["code"] == "draft_embedding_replaced"]
    assert found["severity"] == "warning" and found["evidence"]["embed_rel_diff"] > 0.1
    assert "relative difference" in found["message"]


def test_map_probe_acceptance_event(map_runs):
    events = _events(map_runs["root"], "map", "eagle_probe.acceptance")
    assert events
    total = events[-1]["total"]
    runs = map_runs["case"]["expected"]["runs"]
    # the last event's running total covers the three requests (plus SGLang's warm-up before them)
    assert total["steps"] >= sum(r["verify_ct"] for r in runs.values())
    assert not _findings(map_runs["root"], "map", "error")


def test_map_vocab_coverage_is_full_and_silent(map_runs):
    """The silent control of test_vocab_coverage.py: a draft over the target's whole vocabulary covers every verified
    token of the sampled steps (default interval 0.1 s); no coverage finding, no vocabulary-map finding."""
    events = _events(map_runs["root"], "map", "eagle_probe.draft.vocab_coverage")
    assert events and events[-1]["map"] == "full" and events[-1]["hot_vocab_size"] is None
    assert events[-1]["verified_tokens"] > 0 and events[-1]["in_vocab"] == events[-1]["verified_tokens"]
    assert events[-1]["coverage"] == 1.0
    codes = {f["code"] for f in _findings(map_runs["root"], "map")}
    assert not codes & {"draft_vocab_coverage_low", "draft_vocab_map_missing", "draft_vocab_map_invalid"}
    assert re.search(r'^eagle_probe_draft_vocab_coverage\{[^}]*\} 1\.0$', map_runs["metrics"], re.M)
    assert not re.search(r'^eagle_probe_draft_vocab_verified_tokens_total\{in_vocab="false"[^}]*\} [1-9]',
                         map_runs["metrics"], re.M)


def test_map_expectations_are_the_designed_patterns(map_runs):
    runs = map_runs["case"]["expected"]["runs"]
    assert runs["pos1_always_pos2_never"]["per_position"] == [4, 0]
    assert runs["into_fixed_point"]["per_step"] == [1, 1, 2, 2]
    assert runs["mixed"]["per_step"] == [1, 0] * 5


def test_map_metrics_and_log(map_runs):
    runs = map_runs["case"]["expected"]["runs"]
    after = _metric(map_runs["metrics"], "sglang:spec_verify_calls_total")
    assert after - map_runs["before"] == sum(r["verify_ct"] for r in runs.values())
    # a gauge of the last logged interval (the last verify step of "mixed" rejected its draft)
    assert _metric(map_runs["metrics"], "sglang:spec_accept_length") == 1.0
    lens = [a for a, _ in ACCEPT_LEN.findall(map_runs["log"])]
    # one log line per verify step (--decode-log-interval 1): warm-up + the three requests
    steps = [a + 1 for r in runs.values() for a in r["per_step"]]
    assert lens[-len(steps):] == [f"{s:.2f}" for s in steps]


# ------------------------------------------------------------------------ d. mis-wired drafts


def test_fc_width_mismatch_fails_start_up(root):
    """Draft fc built for 4 aux states while the target captures 3 (num_aux_hidden_states=4)."""
    case = build_case(root, "fc_width", num_steps=NUM_STEPS)
    server = _server(case["target"], root, "fc-width", case["args"])
    with pytest.raises(ServerError):
        server.start()
    assert "mat1 and mat2 shapes cannot be multiplied" in server.log_text()
    # the probe names the cause from the draft's first forward, before SGLang's shape error ends it
    [finding] = [f for f in _findings(root, "fc-width") if f["code"] == "fc_width_mismatch"]
    assert finding["evidence"]["aux_width"] == 3 * 64 and finding["evidence"]["fc_in_width"] == 4 * 64
    assert "3 aux states of width 64" in finding["message"]
    [forward] = _events(root, "fc-width", "eagle_probe.draft.forward")
    assert forward["error"].startswith("RuntimeError") and forward["fc_ran"] is True


def test_eagle3_draft_under_eagle_algorithm(root, random_runs):
    """An EAGLE-3 draft served with --speculative-algorithm EAGLE: the target captures no aux
    states, the draft gets the target's last hidden state (width H == draft H), so SGLang skips
    fc silently. The server runs and verification keeps the greedy output exact."""
    case = build_case(root, "eagle_algo", num_steps=NUM_STEPS)  # same target weights as "random"
    server = _start(case["target"], root, "eagle-algo", case["args"])
    try:
        out = server.generate_raw(RANDOM_PROMPTS[0], max_new_tokens=8)
        log = server.log_text()
    finally:
        server.stop()
    assert out["output_ids"] == random_runs["plain"][0][:8]
    assert out["meta_info"]["spec_verify_ct"] >= 1
    assert ACCEPT_LEN.search(log)
    assert "Traceback" not in log
    # SGLang says nothing; the probe names it
    skipped = [f for f in _findings(root, "eagle-algo") if f["code"] == "fc_skipped"]
    assert {f["evidence"]["mode"] for f in skipped} == {"EXTEND", "DRAFT_EXTEND_V2"}  # every target-fed forward
    for finding in skipped:
        assert finding["evidence"]["aux_width"] == finding["evidence"]["embed_width"] == 64
        assert "--speculative-algorithm EAGLE" in finding["message"] and finding["severity"] == "error"
    assert any(not d["fc_ran"] and d["mode"] != "DECODE"
               for d in _events(root, "eagle-algo", "eagle_probe.draft.forward"))
    # the checkpoint's fc_norm weight, loaded by nothing because the config lacks fc_norm
    [dropped] = [f for f in _findings(root, "eagle-algo") if f["code"] == "draft_weights_dropped"]
    assert dropped["evidence"]["dropped"] == ["fc_norm.0.weight"]
    [loaded] = _events(root, "eagle-algo", "eagle_probe.draft.loaded")
    assert loaded["dropped"] == ["fc_norm.0.weight"] and loaded["fc_norm"] is False


# ------------------------------------------------- e. eagle-probe compat against what the server did


def test_compat_tells_what_the_0_5_23_server_did(random_runs):
    from eagle_probe.analysis.layers import apply_capture_rule
    from sglang_cpu.server import compat_report

    report = compat_report()
    root = random_runs["root"]
    assert report["sglang_version"] == "0.5.23" and report["supported"] and report["exit_status"] == 0
    rules = report["rules"]
    [configured] = [e for e in _events(root, "random-spec", "eagle_probe.capture.configured") if e["role"] == "target"]
    assert not configured["during_graph_setup"] and rules["graph_setup_uses_default_layers"] is False
    predicted, _ = apply_capture_rule(rules["capture_id_rule"], configured["requested_ids"], 6)
    assert list(predicted) == configured["layers_to_capture"] == [2, 4, 5]
    forwards = [e for e in _events(root, "random-spec", "eagle_probe.target.forward") if e["role"] == "target"]
    assert {f["aux_format"] for f in forwards} == {rules["aux_format"]} == {"packed"}
    used = {a["read_at"] for a in _events(root, "random-spec", "eagle_probe.acceptance")}
    resolved = {t["target"] for t in report["targets"]
                if t["integration"] == "acceptance" and t["status"] == "resolved"}
    assert used == resolved == {"sglang.srt.managers.scheduler_components.batch_result_processor"
                                ".SchedulerBatchResultProcessor._resolve_spec_v2_tokens"}
    for target in report["targets"]:
        assert (target["status"] == "resolved") == target["expected"], target
    # every target 0.5.23 lacks lives in a module it does not have: the server never imported one, so no skips
    assert not [t for t in report["targets"] if t["status"] == "skipped" and "not found" in t["reason"]]
    assert _events(root, "random-spec", "eagle_probe.integration.skipped") == []
