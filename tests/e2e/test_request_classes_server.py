"""Acceptance by entry point and custom label on a real SGLang 0.5.23 EAGLE-3 server with a tokenizer (CPU, greedy,
topk 1, 2 steps), the probe injected through PYTHONPATH: the fault is a chat template the draft does well after.

The "map" pair (sglang_cpu.draft_models): the target's next token is x + 1 up to its fixed point 200; the draft is
right all the way once there. The chat template (sglang_cpu.word_tokenizer) ends every chat prompt with t195, from
which the target climbs into the fixed point: chat requests accept nearly every draft. The same words sent raw
(/v1/completions, /generate) end at t14, where the second draft position is never accepted. Expected counts come
from draft_models.simulate_chain, never from the server; SGLang's own meta_info is compared for /generate."""

import json
import os
import time
import urllib.request

import pytest

from eagle_probe.bootstrap import BOOTSTRAP_DIR
from eagle_probe.commands.summarize.logread import read_events
from eagle_probe.commands.summarize.report import build_report, render_text
from sglang_cpu.draft_models import VOCAB, build_case, map_draft, map_target, simulate_chain
from sglang_cpu.ports import allocate_block
from sglang_cpu.server import SGLangServer
from sglang_cpu.spec_shims import SPEC_ENV
from sglang_cpu.word_tokenizer import text_of, write_word_tokenizer

from .conftest import metric_samples

NUM_STEPS = 2
ASSISTANT = 195  # the chat template's last token
WORDS = [10, 11, 12, 13, 14]
TEMPLATE = ("{% for m in messages %}{{ m['content'] }} {% endfor %}{% if add_generation_prompt %}t"
            f"{ASSISTANT}{{% endif %}}")
NEW_TOKENS = 12
REQUESTS = 10  # per entry point: about 60 request-steps each, enough for the slice test beside the other two


def _expected(prompt):
    return simulate_chain(map_target, map_draft, prompt, NEW_TOKENS, NUM_STEPS)


def _per_position(histogram):
    return [sum(n for k, n in enumerate(histogram) if k > j) for j in range(NUM_STEPS)]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("request-classes"))
    case = build_case(root, "map", num_steps=NUM_STEPS)
    write_word_tokenizer(case["target"], VOCAB, TEMPLATE)
    log_dir = os.path.join(root, "probe")
    # No --enable-metrics: TP rank 0's exporter listens on the probe's port, which the HTTP server process must
    # leave alone (a real Prometheus reads that process's series from SGLang's /metrics: tests/prometheus)
    exporter = allocate_block()
    server = SGLangServer(case["target"], tokenizer=True, pythonpath_prefix=[BOOTSTRAP_DIR],
                          extra_args=case["args"] + ["--tokenizer-metrics-allowed-custom-labels", "app"],
                          env={**SPEC_ENV, "EAGLE_PROBE_LOG_DIR": log_dir, "EAGLE_PROBE_SUMMARY_INTERVAL_S": "0.2",
                               "EAGLE_PROBE_METRICS_PORT": str(exporter.extra(0))},
                          log_path=os.path.join(root, "server.log"))
    server.start()
    sampling = {"temperature": 0, "max_tokens": NEW_TOKENS, "ignore_eos": True}
    metas = []
    try:
        for _ in range(REQUESTS):
            server.post_json("/v1/chat/completions", {"model": "m", "messages": [
                {"role": "user", "content": text_of(WORDS)}], **sampling}, headers={"x-custom-labels": json.dumps(
                    {"app": "bot"})})
            server.post_json("/v1/completions", {"model": "m", "prompt": text_of(WORDS), **sampling},
                             headers={"x-custom-labels": json.dumps({"app": "batch", "team": "x"})})  # SGLang
            # drops the header's keys it does not allow; /generate hands its body's labels on as they are
            metas.append(server.generate_raw(WORDS, NEW_TOKENS, custom_labels={"app": "batch", "team": "y"})[
                "meta_info"])
        time.sleep(0.5)  # past the summary interval: the next finished request writes an event with all of them
        metas.append(server.generate_raw(WORDS, NEW_TOKENS, custom_labels={"app": "batch"})["meta_info"])
        time.sleep(1.5)  # past a flush of the exporter's series
        with urllib.request.urlopen(f"http://127.0.0.1:{exporter.extra(0)}/metrics", timeout=10) as response:
            exported = response.read().decode()
    finally:
        server.stop()
        exporter.release()
    events = read_events([log_dir])
    return dict(events=events, metas=metas, log=server.log_text(), exported=exported)


def _server_slices(events):
    slices = [e for e in events if e["event"] == "eagle_probe.acceptance_slices" and e.get("role") == "http_server"]
    assert slices, "no acceptance_slices event from the HTTP server process"
    return slices[-1]


def test_each_entry_point_counts_what_sglang_and_the_construction_say(served):
    chat, raw = _expected(WORDS + [ASSISTANT]), _expected(WORDS)
    assert sum(chat["histogram"][1:]) > 0 and chat["per_position"][1] > raw["per_position"][1] == 0
    event = _server_slices(served["events"])
    entry = event["slices"]["entry"]
    # a fixed depth: every request-step drafted every position
    assert entry["chat"] == {"request_steps": REQUESTS * chat["verify_ct"],
                             "accepted": [REQUESTS * n for n in _per_position(chat["histogram"])],
                             "drafted": [REQUESTS * chat["verify_ct"]] * NUM_STEPS}
    assert entry["completions"] == {"request_steps": REQUESTS * raw["verify_ct"],
                                    "accepted": [REQUESTS * n for n in _per_position(raw["histogram"])],
                                    "drafted": [REQUESTS * raw["verify_ct"]] * NUM_STEPS}
    assert entry["generate"] == _sglang_counts(served["metas"])
    assert event["requests_classified"] == 3 * REQUESTS + 1


def _sglang_counts(metas):
    """Request-steps and accepted drafts per position as SGLang's own meta_info gives them."""
    steps = sum(m["spec_verify_ct"] for m in metas)
    return {"request_steps": steps,
            "accepted": [sum(_per_position(m["spec_correct_drafts_histogram"])[j] for m in metas)
                         for j in range(NUM_STEPS)], "drafted": [steps] * NUM_STEPS}


def test_the_scheduler_slices_every_request_as_greedy(served):
    """Temperature 0 is greedy (SGLang makes it top_k 1): the scheduler's `sampling` slice holds every verify step of
    every entry point, as the construction and SGLang's meta_info count them. (No other bucket on the CPU: EAGLE-3
    at temperature > 0 needs SGLang's CUDA rejection-sampling kernel, None here.)"""
    [*_, last] = [e for e in served["events"] if e["event"] == "eagle_probe.acceptance_slices"
                  and e.get("role") == "target"]
    chat, raw = _expected(WORDS + [ASSISTANT]), _expected(WORDS)
    generate = _sglang_counts(served["metas"])
    steps = generate["request_steps"] + REQUESTS * (chat["verify_ct"] + raw["verify_ct"])
    greedy = {"request_steps": steps,
              "accepted": [n + REQUESTS * (c + r) for n, c, r in zip(
                  generate["accepted"], _per_position(chat["histogram"]), _per_position(raw["histogram"]))],
              "drafted": [steps] * NUM_STEPS}
    assert last["slices"]["sampling"] == {"greedy": greedy}


def test_allowed_labels_are_sliced_and_a_refused_key_is_named_once(served):
    labels = _server_slices(served["events"])["slices"]["label:app"]
    assert set(labels) == {"bot", "batch"} and labels["bot"] == _server_slices(served["events"])["slices"]["entry"][
        "chat"]
    refused = [e for e in served["events"] if e["event"] == "eagle_probe.custom_label.not_sliced"]
    assert [(e["key"], e["reason"], e["allowed"]) for e in refused] == [("team", "not_allowed", ["app"])]


def test_raw_prompts_are_named_low_with_the_chat_template_as_cause_and_summarize_shows_it(served):
    events = served["events"]
    lows = [e for e in events if e["event"] == "eagle_probe.finding" and e["code"] == "acceptance_slice_low"
            and e["role"] == "http_server"]
    named = {(e["evidence"]["dimension"], e["evidence"]["bucket"]) for e in lows}
    assert ("entry", "chat") not in named and named & {("entry", "generate"), ("entry", "completions")}
    assert all("chat template" in e["message"] for e in lows if e["evidence"]["dimension"] == "entry")
    report = build_report(events)
    [server] = report["acceptance_slices"]["servers"]
    [rank] = report["acceptance_slices"]["ranks"]  # the scheduler's own slices, unchanged
    assert rank["tp_rank"] == 0 and "entry" not in rank["slices"] and server["slices"]["entry"]["chat"]
    assert "SGLang's HTTP server" in render_text(report)
    assert [n["pids"] for n in report["nodes"]["nodes"]] == [[rank["pid"]]]  # the HTTP server is no rank
    assert not [e for e in events if e["event"] == "eagle_probe.internal_error"], served["log"][-3000:]


def test_the_http_server_is_a_process_of_node_0_whose_series_only_sglang_would_serve(served):
    """Its started event names its node and host and no rank; without --enable-metrics nothing serves its series,
    and TP rank 0's exporter on the probe's port holds the schedulers' slices only (no port taken twice, no error)."""
    started = [e for e in served["events"] if e["event"] == "eagle_probe.started"]
    [server] = [e for e in started if e.get("role") == "http_server"]
    [rank] = [e for e in started if e.get("role") != "http_server"]
    assert server["node_rank"] == 0 and server["host"] == rank["host"] and server["tp_rank"] is None
    assert server["metrics_port"] is None and server["metrics_served_by"].startswith("not served")
    assert rank["metrics_port"] is not None and rank["tp_rank"] == 0
    dimensions = {labels["dimension"] for labels, _ in metric_samples(served["exported"],
                                                                       "eagle_probe_spec_slice_drafts_total")}
    assert "batch" in dimensions and "entry" not in dimensions
