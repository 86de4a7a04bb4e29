"""Traffic classes through the real TokenizerManager hooks' wrappers, with SGLang's real GenerateReqInput (as the
OpenAI chat handler and /generate build it), a real Starlette request for the route, and a real BatchTokenIDOutput
carrying the per-request histogram of accepted drafts; the manager is a stand-in holding its server_args."""

import json
import os
from types import SimpleNamespace

import msgspec
import pytest

import eagle_probe
from eagle_probe import events as names
from eagle_probe import versions
from eagle_probe.runtime.integrations import request_classes
from eagle_probe.runtime.state import STATE

MANAGER = SimpleNamespace(server_args=SimpleNamespace(speculative_algorithm="EAGLE3", speculative_num_steps=2,
                                                      tokenizer_metrics_allowed_custom_labels=["app"]))


def read_events(log_dir, name):
    out = []
    for file in sorted(os.listdir(log_dir)):
        if file.endswith(".jsonl"):
            with open(os.path.join(log_dir, file)) as handle:
                out += [json.loads(line) for line in handle if line.strip()]
    return [e for e in out if e["event"] == name]


def _request(path):
    from starlette.requests import Request

    return Request({"type": "http", "method": "POST", "path": path, "headers": [], "query_string": b""})


def _output(rids, histograms):
    from sglang.srt.managers.io_struct import BatchTokenIDOutput

    required = {f.name: [None] * len(rids) for f in msgspec.structs.fields(BatchTokenIDOutput) if f.required}
    required.update(rids=rids, spec_correct_drafts_histogram=histograms)
    return BatchTokenIDOutput(**required)


def _arrive(obj, request):
    obj.normalize_batch_and_arguments()
    request_classes.arrival_wrapper(lambda *a, **k: None, MANAGER, (obj, request), {})


def _finish(output, i):
    request_classes.finish_wrapper(lambda *a, **k: None, MANAGER, ({}, output, i), {})


@pytest.fixture
def probe(tmp_path):
    eagle_probe.uninstall()
    assert eagle_probe.install(env={"EAGLE_PROBE_LOG_DIR": str(tmp_path), "EAGLE_PROBE_FLUSH_INTERVAL_S": "0"})
    yield tmp_path
    eagle_probe.uninstall()


def test_the_hooks_are_wrapped_on_sglang_0_5_23s_tokenizer_manager(probe):
    import sglang.srt.managers.tokenizer_manager  # noqa: F401  (the HTTP server process imports it)

    wrapped = set(eagle_probe.patched_targets())
    assert {f"{versions.TOKENIZER_MODULE}.{versions.REQUEST_ARRIVAL_HOOK}",
            f"{versions.TOKENIZER_MODULE}.{versions.REQUEST_FINISH_HOOK}"} <= wrapped


def test_entry_points_and_labels_of_finished_requests(probe):
    from sglang.srt.managers.io_struct import GenerateReqInput

    chat = GenerateReqInput(input_ids=[1, 2, 3], sampling_params={"max_new_tokens": 4}, custom_labels={"app": "bot"})
    raw = GenerateReqInput(input_ids=[[1, 2], [3, 4]], sampling_params={"max_new_tokens": 4},
                           custom_labels={"app": "batch", "team": "x"})
    _arrive(chat, _request("/v1/chat/completions"))
    _arrive(raw, _request("/generate"))
    # SGLang's histogram per request: verify steps that accepted 0, 1, 2 drafts
    _finish(_output([chat.rid, raw.rid[0], raw.rid[1]], [[0, 1, 3], [4], []]), 0)
    _finish(_output([raw.rid[0]], [[4]]), 0)
    _finish(_output([raw.rid[1]], [[]]), 0)  # no verify step: not counted
    slices = STATE.recorder.slices.snapshot()["slices"]
    assert slices["entry"] == {"chat": {"request_steps": 4, "accepted": [4, 3], "drafted": [4, 4]},
                               "generate": {"request_steps": 4, "accepted": [0, 0], "drafted": [4, 4]}}
    assert slices["label:app"] == {"batch": {"request_steps": 4, "accepted": [0, 0], "drafted": [4, 4]},
                                   "bot": {"request_steps": 4, "accepted": [4, 3], "drafted": [4, 4]}}
    assert request_classes._pending == {}  # every request that finished left, with or without verify steps
    [refused] = read_events(str(probe), names.CUSTOM_LABEL_NOT_SLICED)
    assert refused["key"] == "team" and refused["reason"] == "not_allowed" and refused["allowed"] == ["app"]


def test_an_engine_request_and_a_request_never_seen_arriving(probe):
    from sglang.srt.managers.io_struct import GenerateReqInput

    engine = GenerateReqInput(input_ids=[5, 6], sampling_params={})
    _arrive(engine, None)
    _finish(_output([engine.rid, "not-seen"], [[1, 1], [0, 2]]), 0)
    _finish(_output([engine.rid, "not-seen"], [[1, 1], [0, 2]]), 1)
    slices = STATE.recorder.slices.snapshot()["slices"]
    assert slices["entry"] == {"engine": {"request_steps": 2, "accepted": [1, 0], "drafted": [2, 2]},
                               "unknown": {"request_steps": 2, "accepted": [2, 0], "drafted": [2, 2]}}
    assert slices["label:app"] == {"none": {"request_steps": 4, "accepted": [3, 0], "drafted": [4, 4]}}
    assert STATE.recorder.out.errors_total == 0


def test_many_raw_requests_below_chat_reach_summarize_as_the_http_servers_slices(probe):
    """The runtime's own events, read back by summarize: the HTTP server's slices are a section of their own (not
    a rank), and raw prompts far below chat are named with the chat template as the likely cause."""
    from sglang.srt.managers.io_struct import GenerateReqInput

    from eagle_probe.commands.summarize.report import build_report, render_text

    for _n in range(40):
        chat = GenerateReqInput(input_ids=[1, 2], sampling_params={}, custom_labels={"app": "bot"})
        raw = GenerateReqInput(input_ids=[3, 4], sampling_params={}, custom_labels={"app": "bot"})
        _arrive(chat, _request("/v1/chat/completions"))
        _arrive(raw, _request("/generate"))
        _finish(_output([chat.rid, raw.rid], [[1, 1, 8], [8, 1, 1]]), 0)
        _finish(_output([chat.rid, raw.rid], [[1, 1, 8], [8, 1, 1]]), 1)
    eagle_probe.uninstall()  # the final flush: the last acceptance_slices event
    events = read_events(str(probe), names.ACCEPTANCE_SLICES) + read_events(str(probe), names.FINDING)
    assert events and {e["role"] for e in events} == {"http_server"}
    report = build_report(events)
    [server] = report["acceptance_slices"]["servers"]
    assert report["acceptance_slices"]["ranks"] == [] and report["ranks"] == []
    assert server["requests"] == 80 and server["slices"]["entry"]["chat"]["request_steps"] == 400
    assert [(i["dimension"], i["bucket"]) for i in server["low"]] == [("entry", "generate")]
    [low] = [f for f in report["findings"] if f["code"] == "acceptance_slice_low"]
    assert low["roles"] == ["http_server"] and "chat template" in low["first_message"]
    text = render_text(report)
    assert "SGLang's HTTP server" in text and "LOW entry=generate" in text
