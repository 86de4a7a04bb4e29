"""The generic target integration on SGLang 0.5.23's REAL target classes of the non-DeepSeek families (tiny
random weights, CPU, in-process): with the probe installed, ids set through the real setter and EXTENDs run
through SGLang's real model, the layers the probe reports (capture.configured, target.forward), the widths and the
fingerprints (rms per slot) equal transformers' `output_hidden_states` at the indices the family's rule predicts,
for the same weights and tokens.

Families run here: Llama, Qwen3, Qwen3-MoE, GLM-4-MoE. GPT-OSS does not run on the CPU: its attention passes
`sinks=` to the attention backend, which `torch_native` does not take (proven by the contract check alone)."""


import pytest
import torch

import eagle_probe
from eagle_probe import families, versions
from eagle_probe.commands.summarize.logread import read_events
from eagle_probe.runtime.state import STATE

TOKENS = [[5, 9, 17, 33, 2, 71, 8], [3, 4, 5, 6, 100, 31]]
EVERY_FORWARD = {"EAGLE_PROBE_FINGERPRINT_INTERVAL_S": "1e-9"}  # a new sampling bucket on every forward

# family -> (layers, ids set, positions SGLang 0.5.23 captures by the family's rule, SGLang class)
CASES = {
    "llama": (32, [2, 15, 28], [3, 16, 29], "LlamaForCausalLM"),  # Llama-3.1-8B's ids
    "qwen3": (8, [1, 3, 5], [2, 4, 6], "Qwen3ForCausalLM"),
    "qwen3_moe": (4, [0, 1, 2], [1, 2, 3], "Qwen3MoeForCausalLM"),
    "glm4_moe": (4, [0, 1, 2], [1, 2, 3], "Glm4MoeForCausalLM"),  # layer 0 dense, 1-3 MoE
}


def events(log_dir, name):
    if STATE.recorder is not None:
        STATE.recorder.drain()  # the fingerprints the flush thread has not read yet
    return [e for e in read_events([str(log_dir)]) if e["event"] == name]


@pytest.fixture(scope="module", params=sorted(CASES))
def target(request, sglang_runtime):
    from sglang_cpu.runtime import TinyBatchRunner
    from sglang_cpu.target_families import build_target

    name = request.param
    model = build_target(name, CASES[name][0], seed=7)
    return name, model, TinyBatchRunner(model)


@pytest.fixture
def probed(tmp_path):
    eagle_probe.uninstall()
    assert eagle_probe.install(env={"EAGLE_PROBE_LOG_DIR": str(tmp_path), **EVERY_FORWARD})
    yield str(tmp_path)
    eagle_probe.uninstall()


def test_captures_widths_and_fingerprints_equal_transformers_at_the_family_rule(target, probed):
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    from sglang_cpu.target_families import clear_capture, hf_hidden_states

    name, model, runner = target
    layers, ids, expected, class_name = CASES[name]
    hidden = model.config.hidden_size
    row = families.family_for_architecture(class_name, versions.parse_version("0.5.23"))
    assert row is not None and row.name == name
    assert list(families.ids_to_positions(row, ids, layers)) == expected  # the table's prediction
    # the family's inner forward (found from the table row) is wrapped once, on the class that defines it
    owner = next(k for k in type(model.model).__mro__ if "forward" in vars(k))
    assert f"sglang.srt.models.{row.inner}" == f"{type(model.model).__module__}.{type(model.model).__name__}"
    assert f"{owner.__module__}.{owner.__qualname__}.forward" in eagle_probe.patched_targets()
    clear_capture(model)
    model.set_eagle3_layers_to_capture(ids)
    try:
        runner.reset()
        out = runner.extend(TOKENS, capture_hidden_mode=CaptureHiddenMode.FULL)
        runner.extend(TOKENS, capture_hidden_mode=CaptureHiddenMode.FULL)  # a repeated forward: counted only
    finally:
        clear_capture(model)

    [configured] = events(probed, "eagle_probe.capture.configured")
    assert configured["model_class"] == class_name and configured["requested_ids"] == ids
    assert configured["layers_to_capture"] == expected and configured["num_layers"] == layers
    assert configured["family"] == name and configured["family_rule"] == families.RULE_PLUS_ONE
    assert configured["rule_applied"] == families.RULE_PLUS_ONE
    assert [s["capture_index"] for s in configured["slots"]] == expected

    from eagle_probe.runtime.state import STATE
    assert sum(STATE.recorder.counts.forwards.values()) == 2  # each forward observed once (wrapped once)
    [forward] = [e for e in events(probed, "eagle_probe.target.forward") if e["mode"] == "EXTEND"]
    assert forward["model_class"] == type(model.model).__name__ and forward["layers_to_capture"] == expected
    assert forward["aux_returned"] == 3 and forward["slot_widths"] == [hidden] * 3 and forward["error"] is None
    assert forward["tokens"] == sum(map(len, TOKENS)) and forward["lost"] == []

    # SGLang's own aux output equals transformers' hidden_states at the predicted indices
    states = [hf_hidden_states(model, t) for t in TOKENS]
    reference = {i: torch.cat([s[i] for s in states]) for i in expected}
    for slot, index in enumerate(expected):
        got = out.hidden_states[:, slot * hidden:(slot + 1) * hidden]
        torch.testing.assert_close(got, reference[index], rtol=1e-4, atol=1e-5)

    prints = {e["slot"]: e for e in events(probed, "eagle_probe.aux.fingerprint") if e["role"] == "target"}
    assert sorted(prints) == [0, 1, 2]
    for slot, index in enumerate(expected):
        fp, x = prints[slot], reference[index]
        assert fp["capture_index"] == index and fp["width"] == hidden and fp["tokens"] == x.shape[0]
        assert fp["rms"] == pytest.approx(float(x.pow(2).mean().sqrt()), rel=1e-4)
        assert fp["absmax"] == pytest.approx(float(x.abs().max()), rel=1e-4)
    assert not events(probed, "eagle_probe.internal_error")
    assert not [f for f in events(probed, "eagle_probe.finding") if f["severity"] == "error"]
