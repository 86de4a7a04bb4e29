"""Real `python -m sglang.launch_server` EAGLE-3 servers on tiny random-weight targets of the non-DeepSeek
families (SGLang 0.5.23, CPU, greedy chain of 2 steps, hidden 64), the probe injected only through PYTHONPATH, one
server per family (module-scoped, all assertions on its one run).

For each family: the probe's capture set-up and forwards follow the family's own rule (ids starting at 0, so
DeepSeek's rule would keep them and the family's +1 moves them), its fingerprints equal transformers'
`output_hidden_states` at the predicted indices for SGLang's warm-up request, and its acceptance counters equal
SGLang's own figures for the request (zero lm_head on target and draft: every draft token accepted).
GPT-OSS is not served here: its attention passes `sinks=` to the attention backend, which `torch_native` does not
take (proven by the contract check alone)."""

import os
import re
import sys
import time

import pytest

from eagle_probe import families, versions
from eagle_probe.commands.summarize.logread import read_events

from .conftest import (
    SGLANG_WARMUP,
    counts_delta,
    probe_spec_counts,
    settled_probe_counts,
    sglang_spec_counts,
    start_spec_server,
)

HIDDEN = 64
# family -> (layers, draft's ids, positions SGLang 0.5.23 captures by the family's rule, target class, inner class)
CASES = {
    "llama": (8, [0, 3, 5], [1, 4, 6], "LlamaForCausalLM", "LlamaModel"),
    "qwen3": (6, [0, 2, 4], [1, 3, 5], "Qwen3ForCausalLM", "Qwen3Model"),
    "qwen3_moe": (4, [0, 1, 2], [1, 2, 3], "Qwen3MoeForCausalLM", "Qwen3MoeModel"),
    "glm4_moe": (4, [0, 1, 2], [1, 2, 3], "Glm4MoeForCausalLM", "Glm4MoeModel"),  # layer 0 dense, 1-3 MoE
}
PROMPT, NEW = [10, 11, 12, 13, 14], 7  # a prefill token, then 2 verify steps of 3 tokens
ACCEPT_LEN = re.compile(r"Decode batch, .*accept len: (\d+\.\d\d),")


@pytest.fixture(scope="module", params=sorted(CASES))
def family_run(request, tmp_path_factory):
    from sglang_cpu.draft_models import eagle3_draft_config, spec_server_args, write_eagle3_draft_checkpoint
    from sglang_cpu.target_families import write_family_checkpoint

    name = request.param
    layers, ids = CASES[name][:2]
    root = str(tmp_path_factory.mktemp(f"{name}-spec"))
    target, config = write_family_checkpoint(os.path.join(root, "target"), name, layers, seed=0,
                                             zero_lm_head=True, vocab_size=256)
    draft = write_eagle3_draft_checkpoint(os.path.join(root, "draft"), eagle3_draft_config(config, layer_ids=ids),
                                          seed=0, zero_lm_head=True)
    t0 = time.monotonic()
    server = start_spec_server(root, name, dict(target=target, args=spec_server_args(draft)),
                               env={"EAGLE_PROBE_FINGERPRINT_INTERVAL_S": "1e-9"})
    try:
        before = probe_spec_counts(server.flushed_metrics_text())
        out = server.generate_raw(PROMPT, max_new_tokens=NEW)
        after = settled_probe_counts(server)
        log = server.log_text()
    finally:
        server.stop()
    wall = time.monotonic() - t0
    print(f"\n[{name}] server run {wall:.1f} s (start-up {server.startup_seconds or 0:.1f} s)", file=sys.stderr)
    events = read_events([os.path.join(root, f"probe-{name}")])
    return dict(name=name, target=target, out=out, before=before, after=after, log=log, events=events, wall=wall)


def _events(run, name, role="target"):
    return [e for e in run["events"] if e["event"] == name and e.get("role") == role]


def test_sglang_serves_the_target_with_every_draft_accepted(family_run):
    meta = family_run["out"]["meta_info"]
    assert family_run["out"]["output_ids"] == [0] * NEW
    assert meta["spec_verify_ct"] == 2 and meta["spec_num_correct_drafts"] == 4
    assert set(ACCEPT_LEN.findall(family_run["log"])) == {"3.00"}


def test_the_probe_reports_the_captures_by_the_familys_own_rule(family_run):
    name = family_run["name"]
    layers, ids, captures, class_name, inner = CASES[name]
    row = families.family_for_architecture(class_name, versions.parse_version("0.5.23"))
    assert row is not None and row.name == name
    assert list(families.ids_to_positions(row, ids, layers)) == captures  # the table's prediction
    [configured] = _events(family_run, "eagle_probe.capture.configured")
    assert configured["model_class"] == class_name and configured["family"] == name
    assert configured["requested_ids"] == ids and configured["layers_to_capture"] == captures
    assert configured["num_layers"] == layers
    assert configured["family_rule"] == configured["rule_applied"] == families.RULE_PLUS_ONE
    forwards = _events(family_run, "eagle_probe.target.forward")
    assert {"EXTEND", "TARGET_VERIFY"} <= {f["mode"] for f in forwards}
    for forward in forwards:
        assert forward["model_class"] == inner and forward["layers_to_capture"] == captures
        assert forward["aux_returned"] == 3 and forward["slot_widths"] == [HIDDEN] * 3 and forward["error"] is None
    assert not [e for e in family_run["events"] if e["event"] == "eagle_probe.internal_error"]
    assert not [e for e in family_run["events"] if e["event"] == "eagle_probe.finding" and e["severity"] == "error"]


def test_fingerprints_equal_transformers_at_the_predicted_indices(family_run):
    from sglang_cpu.target_families import checkpoint_hidden_states

    captures = CASES[family_run["name"]][2]
    tokens, _ = SGLANG_WARMUP
    states = checkpoint_hidden_states(family_run["target"], tokens)
    prints = [e for e in _events(family_run, "eagle_probe.aux.fingerprint") if e["mode"] == "EXTEND"]
    first = min(e["step"] for e in prints)  # the warm-up's prefill (the prompt's later one reuses its cached prefix)
    by_slot = {e["slot"]: e for e in prints if e["step"] == first}
    assert sorted(by_slot) == [0, 1, 2]
    for slot, index in enumerate(captures):
        fp, x = by_slot[slot], states[index]
        assert fp["capture_index"] == index and fp["width"] == HIDDEN and fp["tokens"] == len(tokens)
        assert fp["rms"] == pytest.approx(float(x.pow(2).mean().sqrt()), rel=1e-4)
        assert fp["absmax"] == pytest.approx(float(x.abs().max()), rel=1e-4)


def test_the_probes_acceptance_counters_equal_sglangs(family_run):
    probe = counts_delta(family_run["after"], family_run["before"])
    sglang = sglang_spec_counts([family_run["out"]["meta_info"]])
    assert probe == sglang
    assert sglang == {"drafts": 2.0, "draft_tokens": 4.0, "accepted": 4.0, "per_position": [2.0, 2.0]}
