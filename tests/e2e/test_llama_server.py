"""A real `python -m sglang.launch_server` EAGLE-3 server on a Llama-family target (SGLang 0.5.23, CPU, greedy chain
of 2 steps), the probe injected only through PYTHONPATH: the probe's capture set-up and forwards follow Llama's own
rule (ids [0, 3, 5] -> captures [1, 4, 6]; DeepSeek's rule would keep [0, 3, 5]), its fingerprints equal transformers'
hidden_states at those indices for SGLang's warm-up request, and its acceptance counters equal SGLang's own figures
(zero lm_head on target and draft: every draft token accepted)."""

import os
import re

import pytest

from eagle_probe.commands.summarize.logread import read_events

from .conftest import SGLANG_WARMUP, probe_spec_counts, settled_probe_counts, start_spec_server

IDS, CAPTURES, LAYERS, HIDDEN = [0, 3, 5], [1, 4, 6], 8, 64
PROMPT, NEW = [10, 11, 12, 13, 14], 7
ACCEPT_LEN = re.compile(r"Decode batch, .*accept len: (\d+\.\d\d),")


@pytest.fixture(scope="module")
def llama_run(tmp_path_factory):
    from sglang_cpu.draft_models import eagle3_draft_config, spec_server_args, write_eagle3_draft_checkpoint
    from sglang_cpu.target_families import write_family_checkpoint

    root = str(tmp_path_factory.mktemp("llama-spec"))
    target, config = write_family_checkpoint(os.path.join(root, "target"), "llama", LAYERS, seed=0,
                                             zero_lm_head=True, vocab_size=256)
    draft = write_eagle3_draft_checkpoint(os.path.join(root, "draft"), eagle3_draft_config(config, layer_ids=IDS),
                                          seed=0, zero_lm_head=True)
    server = start_spec_server(root, "llama", dict(target=target, args=spec_server_args(draft)),
                               env={"EAGLE_PROBE_FINGERPRINT_INTERVAL_S": "1e-9"})
    try:
        before = probe_spec_counts(server.flushed_metrics_text())
        out = server.generate_raw(PROMPT, max_new_tokens=NEW)
        after = settled_probe_counts(server)
        log = server.log_text()
    finally:
        server.stop()
    events = read_events([os.path.join(root, "probe-llama")])
    return dict(target=target, out=out, before=before, after=after, log=log, events=events)


def _events(run, name, role="target"):
    return [e for e in run["events"] if e["event"] == name and e.get("role") == role]


def test_sglang_serves_the_llama_target_with_every_draft_accepted(llama_run):
    meta = llama_run["out"]["meta_info"]
    assert llama_run["out"]["output_ids"] == [0] * NEW
    assert meta["spec_verify_ct"] == 2 and meta["spec_num_correct_drafts"] == 4
    assert {a for a in ACCEPT_LEN.findall(llama_run["log"])} == {"3.00"}


def test_the_probe_reports_llamas_captures_by_its_own_rule(llama_run):
    [configured] = _events(llama_run, "eagle_probe.capture.configured")
    assert configured["model_class"] == "LlamaForCausalLM" and configured["family"] == "llama"
    assert configured["requested_ids"] == IDS and configured["layers_to_capture"] == CAPTURES
    assert configured["family_rule"] == configured["rule_applied"] == "plus_one_always"
    forwards = _events(llama_run, "eagle_probe.target.forward")
    assert {"EXTEND", "TARGET_VERIFY"} <= {f["mode"] for f in forwards}
    for forward in forwards:
        assert forward["model_class"] == "LlamaModel" and forward["layers_to_capture"] == CAPTURES
        assert forward["aux_returned"] == 3 and forward["slot_widths"] == [HIDDEN] * 3 and forward["error"] is None
    assert not [e for e in llama_run["events"] if e["event"] == "eagle_probe.internal_error"]
    assert not [e for e in llama_run["events"] if e["event"] == "eagle_probe.finding" and e["severity"] == "error"]


def test_fingerprints_equal_transformers_at_the_predicted_indices(llama_run):
    from sglang_cpu.target_families import checkpoint_hidden_states

    tokens, _ = SGLANG_WARMUP
    states = checkpoint_hidden_states(llama_run["target"], tokens)
    prints = [e for e in _events(llama_run, "eagle_probe.aux.fingerprint") if e["mode"] == "EXTEND"]
    first = min(e["step"] for e in prints)  # the warm-up's prefill (the prompt's later one reuses its cached prefix)
    by_slot = {e["slot"]: e for e in prints if e["step"] == first}
    assert {e["tokens"] for e in by_slot.values()} == {len(tokens)}
    assert sorted(by_slot) == [0, 1, 2]
    for slot, index in enumerate(CAPTURES):
        fp, x = by_slot[slot], states[index]
        assert fp["capture_index"] == index and fp["width"] == HIDDEN
        assert fp["rms"] == pytest.approx(float(x.pow(2).mean().sqrt()), rel=1e-4)


def test_the_probe_counts_every_draft_position_accepted(llama_run):
    before, after = llama_run["before"], llama_run["after"]
    steps = after["drafts"] - before["drafts"]
    assert steps == llama_run["out"]["meta_info"]["spec_verify_ct"] == 2
    assert after["accepted"] - before["accepted"] == 4
    assert [a - b for a, b in zip(after["per_position"], before["per_position"])] == [2.0, 2.0]
