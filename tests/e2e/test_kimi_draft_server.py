"""Kimi-K2.5's MLA EAGLE-3 draft (SGLang 0.5.23's real Eagle3DeepseekV2ForCausalLM, kimi_k25_eagle3) served by a
real `python -m sglang.launch_server` on the CPU next to a tiny random DeepSeek-V3 target (8 dense MLA layers), the
probe injected only through PYTHONPATH. Two servers, one request each:

- fault: the draft's config.json has its ids only at the top level. The draft sizes its fc from them; the target
  reads only eagle_config's ids, gets none and captures SGLang's defaults [2, 4, 5], other layers than the draft's
  ids name. `eagle-probe summarize` names draft_target_ids_differ, and the server serves on.
- control: the same ids at the top level, but eagle_config carries [1, 3, 4]: both sides read eagle_config's (the
  Kimi draft looks at the top level only when eagle_config has none), so the draft gets what it was built for and
  the finding is silent.

The draft's own forward events give the aux width per state it takes (target_hidden_size), read off the real class.
On the CPU the Kimi draft needs one more test-only shim: its set_embed calls torch.cuda.synchronize()
(sglang_cpu.shims.no_cuda_synchronize_without_cuda)."""

import json
import os
import subprocess
import sys
import time

import pytest

from eagle_probe.commands.summarize.logread import read_events

from .conftest import start_spec_server

LAYERS, HIDDEN = 8, 64
DEFAULTS = [2, LAYERS // 2, LAYERS - 3]  # what a DeepSeek target captures when given no ids (SGLang's rule)
TOP_LEVEL = [0, 2, 6]  # name embedding output, layers 1 and 5 (first id not 1: DeepSeek's rule keeps them)
NESTED = [1, 3, 4]  # DeepSeek's rule (first id 1) makes them [2, 4, 5]
PROMPT, NEW = [10, 11, 12, 13, 14], 7


def _serve(root, name, **ids):
    from sglang_cpu.kimi_draft import build_kimi_case

    case = build_kimi_case(root, name, **ids)
    t0 = time.monotonic()
    server = start_spec_server(root, name, case)
    try:
        out = server.generate_raw(PROMPT, max_new_tokens=NEW)
        server.flushed_metrics_text()  # one flush interval: the request's events are written
        alive = server.is_running()
    finally:
        server.stop()
    wall = time.monotonic() - t0
    print(f"\n[kimi {name}] server run {wall:.1f} s (start-up {server.startup_seconds or 0:.1f} s)", file=sys.stderr)
    log_dir = os.path.join(root, f"probe-{name}")
    done = subprocess.run([sys.executable, "-m", "eagle_probe", "summarize", log_dir, "--format", "json"],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ))
    with open(os.path.join(case["draft"], "config.json")) as handle:
        config = json.load(handle)
    return dict(case=case, config=config, out=out, alive=alive, events=read_events([log_dir]),
                summary=json.loads(done.stdout), summarize_status=done.returncode, summarize_err=done.stderr)


@pytest.fixture(scope="module")
def fault(tmp_path_factory):
    return _serve(str(tmp_path_factory.mktemp("kimi-fault")), "fault", top_level_ids=TOP_LEVEL)


@pytest.fixture(scope="module")
def control(tmp_path_factory):
    return _serve(str(tmp_path_factory.mktemp("kimi-control")), "control", eagle_ids=NESTED, top_level_ids=TOP_LEVEL)


@pytest.fixture(scope="module")
def reference(fault):
    """The target's greedy continuation by transformers (no SGLang, no draft): what any EAGLE-3 server must give."""
    import torch

    from sglang_cpu.tiny_models import random_deepseek_v3

    model = random_deepseek_v3(fault["case"]["target_config"], 0)
    ids = list(PROMPT)
    with torch.no_grad():
        for _ in range(NEW):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(PROMPT):]


def _one(run, event):
    found = [e for e in run["events"] if e["event"] == event]
    assert len(found) == 1, f"{event}: {len(found)} events"
    return found[0]


def _codes(run):
    return {f["code"]: f for f in run["summary"]["findings"]}


def test_both_servers_serve_through_the_kimi_draft(fault, control, reference):
    for run in (fault, control):
        meta = run["out"]["meta_info"]
        assert run["out"]["output_ids"] == reference  # greedy speculation gives the target's own tokens
        assert meta["spec_verify_ct"] > 0 and meta["spec_num_proposed_drafts"] == 2 * meta["spec_verify_ct"]
        assert run["alive"]  # the server was still up after the request
        assert not [e for e in run["events"] if e["event"] == "eagle_probe.internal_error"]
        assert run["summary"]["ranks"][0]["summary"]["internal_errors"] == 0


def test_the_draft_reads_the_top_level_ids_and_the_target_its_defaults(fault):
    loaded = _one(fault, "eagle_probe.draft.loaded")
    assert "eagle_config" not in fault["config"]
    assert loaded["model_class"] == "Eagle3DeepseekV2ForCausalLM"
    assert loaded["ids_read"] == fault["config"]["eagle_aux_hidden_state_layer_ids"] == TOP_LEVEL
    assert loaded["ids_read_from"] == "top_level" and loaded["eagle_layer_ids"] is None
    assert loaded["fc_in"] == len(TOP_LEVEL) * HIDDEN and loaded["num_aux"] == len(TOP_LEVEL)
    captured = _one(fault, "eagle_probe.capture.configured")
    assert captured["requested_ids"] is None and captured["layers_to_capture"] == DEFAULTS


def test_summarize_names_draft_target_ids_differ(fault):
    differ = _codes(fault).get("draft_target_ids_differ")
    assert differ is not None, fault["summary"]["findings"]
    assert differ["severity"] == "error" and differ["count"] == 1 and differ["roles"] == ["draft"]
    message = differ["first_message"]
    assert f"eagle_aux_hidden_state_layer_ids {TOP_LEVEL}" in message  # the draft's ids ...
    assert "2 (output of layer 1), 4 (output of layer 3), 5 (output of layer 4)" in message  # ... what is captured
    assert "0 (embedding output), 2 (output of layer 1), 6 (output of layer 5)" in message  # ... what they name
    assert "eagle_config.eagle_aux_hidden_state_layer_ids" in message  # the fix
    assert fault["summarize_status"] == 0, fault["summarize_err"]  # summarize reports; it does not fail on findings
    [event] = [e for e in fault["events"] if e["event"] == "eagle_probe.finding"
               and e["code"] == "draft_target_ids_differ"]
    evidence = event["evidence"]
    assert evidence["draft_ids"] == TOP_LEVEL and evidence["captured"] == DEFAULTS and evidence["target_ids"] is None
    assert evidence["expected"] == TOP_LEVEL  # DeepSeek's rule keeps ids whose first is not 1


def test_eagle_config_ids_read_by_both_sides_are_silent(control):
    loaded = _one(control, "eagle_probe.draft.loaded")
    assert control["config"]["eagle_aux_hidden_state_layer_ids"] == TOP_LEVEL  # still there, and ignored
    assert loaded["ids_read"] == loaded["eagle_layer_ids"] == NESTED and loaded["ids_read_from"] == "eagle_config"
    captured = _one(control, "eagle_probe.capture.configured")
    assert captured["requested_ids"] == NESTED and captured["layers_to_capture"] == [2, 4, 5]
    codes = _codes(control)
    assert "draft_target_ids_differ" not in codes and "layer_mismatch" not in codes
    assert not [c for c, f in codes.items() if f["severity"] == "error"], codes
    assert control["summarize_status"] == 0, control["summarize_err"]


def test_the_draft_forward_events_name_the_width_each_aux_state_has(fault):
    forwards = [e for e in fault["events"] if e["event"] == "eagle_probe.draft.forward"]
    assert {e["model_class"] for e in forwards} == {"Eagle3MLAModel"}
    fed = [e for e in forwards if e["fc_ran"]]
    assert fed and {e["mode"] for e in fed} >= {"EXTEND"}
    for event in fed:  # the target's 3 captured states, 64 wide each, into fc's 3 x 64
        assert event["target_hidden_size"] == HIDDEN and event["aux_width"] == event["fc_in"] == 3 * HIDDEN
    own = [e for e in forwards if not e["fc_ran"]]
    assert own and all(e["aux_width"] == e["embed_width"] == HIDDEN for e in own)  # its own state: fc skipped
