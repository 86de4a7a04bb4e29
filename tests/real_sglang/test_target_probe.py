"""The target-side wrappers against SGLang 0.5.23's real DeepSeek classes, running tiny models on the CPU."""

import json
import os

import pytest
import torch

import eagle_probe
from eagle_probe.runtime.integrations import target_forward
from eagle_probe.runtime.state import STATE
from sglang_cpu.runtime import TinyBatchRunner, build_deepseek, init_runtime
from sglang_cpu.tiny_models import deepseek_v3_config

TOKENS = [[5, 9, 17, 33, 2, 71, 8], [3, 4, 5]]


class ProbeLogs:
    def __init__(self, log_dir):
        self.log_dir = log_dir

    def events(self, name=None):
        out = []
        for file in sorted(os.listdir(self.log_dir)):
            with open(os.path.join(self.log_dir, file)) as handle:
                out += [json.loads(line) for line in handle if line.strip()]
        return [e for e in out if name is None or e["event"] == name]

    def findings(self, code=None):
        return [e for e in self.events("eagle_probe.finding") if code is None or e["code"] == code]


@pytest.fixture
def probe(tmp_path):
    eagle_probe.uninstall()
    assert eagle_probe.install(env={"EAGLE_PROBE_LOG_DIR": str(tmp_path)})
    yield ProbeLogs(str(tmp_path))
    eagle_probe.uninstall()


@pytest.fixture(scope="module")
def dense(sglang_runtime):
    init_runtime()
    model = build_deepseek(deepseek_v3_config(num_hidden_layers=6, first_k_dense_replace=6), seed=1)
    return model, TinyBatchRunner(model)


@pytest.fixture(scope="module")
def moe(sglang_runtime):
    init_runtime()
    model = build_deepseek(deepseek_v3_config(num_hidden_layers=4, first_k_dense_replace=1), seed=2)
    return model, TinyBatchRunner(model)


def full_capture():
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
    return CaptureHiddenMode.FULL


def run_all_modes(runner):
    """EXTEND, DECODE and TARGET_VERIFY on fresh requests; returns the outputs' tensors."""
    runner.reset()
    outs = [runner.extend(TOKENS, capture_hidden_mode=full_capture())]
    outs.append(runner.decode([11, 12], capture_hidden_mode=full_capture()))
    outs.append(runner.target_verify([[12, 40, 41], [11, 50, 51]]))
    return [(o.next_token_logits, o.hidden_states) for o in outs]


def hf_hidden_states(model, tokens):
    with torch.no_grad():
        out = model.hf_model(torch.tensor([tokens]), output_hidden_states=True)
    return out.hidden_states


def test_capture_config_first_id_one_gets_plus_one(dense, probe):
    model, _ = dense
    model.set_eagle3_layers_to_capture([1, 3, 4])
    [cfg] = probe.events("eagle_probe.capture.configured")
    assert cfg["requested_ids"] == [1, 3, 4]
    assert cfg["layers_to_capture"] == list(model.model.layers_to_capture) == [2, 4, 5]
    assert cfg["mapping"] == "plus_one" and cfg["version_rule"] == "plus_one_if_first_is_one"
    assert [s["label"] for s in cfg["slots"]] == ["output of layer 1", "output of layer 3", "output of layer 4"]
    assert cfg["during_graph_setup"] is False
    assert cfg["tp_rank"] == 0 and cfg["tp_size"] == 1 and cfg["role"] == "target"
    assert cfg["model_class"] == "DeepseekV3ForCausalLM"  # the subclass, through the inherited wrapper


def test_embedding_slot_label_matches_real_tensors(dense, probe):
    model, runner = dense
    model.set_eagle3_layers_to_capture([0, 2, 3])
    [cfg] = probe.events("eagle_probe.capture.configured")
    assert cfg["layers_to_capture"] == [0, 2, 3] and cfg["mapping"] == "as_given"
    assert cfg["slots"][0]["label"] == "embedding output" and cfg["slots"][0]["hf_index"] == 0
    runner.reset()
    out = runner.extend([TOKENS[0]], capture_hidden_mode=full_capture())
    hf = hf_hidden_states(model, TOKENS[0])
    hidden = model.config.hidden_size
    for slot in cfg["slots"]:
        captured = out.hidden_states[:, slot["slot"] * hidden:(slot["slot"] + 1) * hidden]
        # the label's claim (HF hidden_states[i]) checked against SGLang's actual capture
        assert torch.allclose(captured, hf[slot["hf_index"]][0], atol=1e-4), slot
    assert not probe.findings()


def test_forward_event_reports_path_ranges_and_shapes(dense, probe):
    model, runner = dense
    model.set_eagle3_layers_to_capture([1, 3, 4])
    run_all_modes(runner)
    forwards = probe.events("eagle_probe.target.forward")
    assert [f["mode"] for f in forwards] == ["EXTEND", "DECODE", "TARGET_VERIFY"]
    extend = forwards[0]
    hidden = model.config.hidden_size
    assert extend["model_class"] == "DeepseekV2Model" and extend["role"] == "target"
    assert extend["path"] == "eager" and extend["capturing"] is False and extend["can_run_tbo"] is False
    assert extend["normal_layers"] == [0, 6] and extend["tbo_layers"] is None and extend["lost"] == []
    assert extend["aux_format"] == "packed" and extend["aux_returned"] == 3 == extend["aux_expected"]
    assert extend["aux_shape"] == [sum(map(len, TOKENS)), 3 * hidden]
    assert extend["slot_widths"] == [hidden] * 3 and extend["dtype"] == "float32"
    assert forwards[2]["tokens"] == 6  # 2 requests x 3 verify tokens
    assert not probe.findings()
    from prometheus_client import REGISTRY

    STATE.recorder.flush_metrics()  # counted values reach the series at a flush (every second in a server)
    labels = dict(role="target", mode="TARGET_VERIFY", path="eager", tbo="false", tp_rank="0", pp_rank="0")
    value = [s.value for m in REGISTRY.collect() if m.name == "eagle_probe_target_forwards"
             for s in m.samples if s.name.endswith("_total") and all(s.labels.get(k) == v for k, v in labels.items())]
    assert value and value[0] >= 1


def test_layers_assigned_without_the_setter_or_edited_in_place_are_seen(dense, probe):
    """A forward like the one before is only counted; layers that SGLang assigns directly (qwen3_vl,
    glm4_moe_lite do) are a new forward at once, and a list edited in place is one by its aux width, which the
    wrapper reads every SHAPE_EVERY forwards."""
    model, runner = dense
    model.set_eagle3_layers_to_capture([1, 3, 4])
    runner.reset()
    runner.extend(TOKENS, capture_hidden_mode=full_capture())
    for _ in range(3):
        runner.decode([11, 12], capture_hidden_mode=full_capture())
    assert [f["mode"] for f in probe.events("eagle_probe.target.forward")] == ["EXTEND", "DECODE"]
    model.model.layers_to_capture = [2, 3]
    runner.decode([11, 12], capture_hidden_mode=full_capture())
    *_, replaced = probe.events("eagle_probe.target.forward")
    assert replaced["layers_to_capture"] == [2, 3] and replaced["aux_returned"] == 2
    model.model.layers_to_capture.append(5)
    for decodes in range(1, target_forward.SHAPE_EVERY + 1):  # noqa: B007  (read after the loop)
        runner.decode([11, 12], capture_hidden_mode=full_capture())
        if len(probe.events("eagle_probe.target.forward")) == 4:
            break
    *_, edited = probe.events("eagle_probe.target.forward")
    assert edited["layers_to_capture"] == [2, 3, 5] and edited["aux_returned"] == 3
    assert decodes <= target_forward.SHAPE_EVERY


def test_outputs_bit_identical_with_and_without_probe(dense, tmp_path):
    model, runner = dense
    eagle_probe.uninstall()
    model.set_eagle3_layers_to_capture([1, 3, 4])
    without = run_all_modes(runner)
    assert eagle_probe.install(env={"EAGLE_PROBE_LOG_DIR": str(tmp_path)})
    try:
        with_probe = run_all_modes(runner)
    finally:
        eagle_probe.uninstall()
    for (logits_a, aux_a), (logits_b, aux_b) in zip(without, with_probe):
        assert torch.equal(logits_a, logits_b)
        assert torch.equal(aux_a, aux_b)


def test_unreachable_index_and_fewer_aux_states(dense, probe):
    model, runner = dense
    model.set_eagle3_layers_to_capture([2, 4, 9])  # 9 >= 6 layers: never captured
    [unreachable] = probe.findings("capture_id_unreachable")
    assert unreachable["evidence"]["unreachable"] == [9]
    runner.reset()
    with pytest.raises(RuntimeError) as raised:
        runner.extend(TOKENS, capture_hidden_mode=full_capture())
    assert "captured 2 of 3" in str(raised.value)  # SGLang's own error reaches the caller unchanged
    [mismatch] = probe.findings("aux_count_mismatch")
    assert mismatch["evidence"]["expected"] == 3 and "captured 2 of 3" in mismatch["evidence"]["error"]
    [forward] = probe.events("eagle_probe.target.forward")
    assert forward["aux_format"] == "error" and forward["error"].startswith("RuntimeError")


def test_tbo_batch_reports_lost_slots_before_sglang_fails(moe, probe):
    model, runner = moe
    model.set_eagle3_layers_to_capture([0, 2, 3])
    runner.reset()
    eagle_probe.uninstall()
    with pytest.raises(Exception) as plain:
        runner.extend(TOKENS, capture_hidden_mode=full_capture(), tbo_split_seq_index=1)
    runner.reset()
    eagle_probe.install(env={"EAGLE_PROBE_LOG_DIR": probe.log_dir})
    with pytest.raises(Exception) as probed:
        runner.extend(TOKENS, capture_hidden_mode=full_capture(), tbo_split_seq_index=1)
    assert type(probed.value) is type(plain.value) and str(probed.value) == str(plain.value)
    [forward] = probe.events("eagle_probe.target.forward")
    assert forward["can_run_tbo"] is True
    assert forward["normal_layers"] == [0, 1] and forward["tbo_layers"] == [1, 4]
    assert forward["lost"] == [2, 3]
    [lost] = probe.findings("tbo_capture_lost")
    assert lost["evidence"]["lost"] == [2, 3] and lost["evidence"]["kept"] == [0]
    assert "output of layer 1" in lost["message"] and "embedding output" in lost["message"]


def test_graph_capture_layers_differ_from_eager(dense, probe):
    from sglang.srt.model_executor.runner_utils import capture_mode
    model, runner = dense
    model.set_eagle3_layers_to_capture([0, 2, 3])  # graphs captured with one layer set ...
    runner.reset()
    capture_mode.is_capture_mode = True  # SGLang's own flag, as model_capture_mode() sets it
    try:
        runner.extend(TOKENS, capture_hidden_mode=full_capture())
    finally:
        capture_mode.is_capture_mode = False
    model.set_eagle3_layers_to_capture([1, 3, 4])  # ... eager forwards with another, as 0.5.8 does
    runner.reset()
    runner.extend(TOKENS, capture_hidden_mode=full_capture())
    paths = [(f["path"], f["layers_to_capture"]) for f in probe.events("eagle_probe.target.forward")]
    assert paths == [("graph_capture", [0, 2, 3]), ("eager", [2, 4, 5])]
    [mismatch] = probe.findings("graph_eager_layer_mismatch")
    assert mismatch["evidence"]["graph_layers"] == [0, 2, 3] and mismatch["evidence"]["eager_layers"] == [2, 4, 5]


def test_a_breakable_graph_capture_is_a_graph_capture(dense, probe):
    from sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph import context
    from sglang.srt.model_executor.runner_utils import capture_mode
    model, runner = dense
    model.set_eagle3_layers_to_capture([1, 3, 4])
    runner.reset()
    context._in_breakable_cuda_graph = True  # SGLang's other flag, as enable_breakable_cuda_graph() sets it
    try:
        assert capture_mode.get_is_capture_mode() is True
        runner.extend(TOKENS, capture_hidden_mode=full_capture())
    finally:
        context._in_breakable_cuda_graph = False
    runner.reset()
    runner.extend(TOKENS, capture_hidden_mode=full_capture())
    assert [f["path"] for f in probe.events("eagle_probe.target.forward")] == ["graph_capture", "eager"]


def test_raising_sink_never_reaches_sglang(dense, probe):
    model, runner = dense
    model.set_eagle3_layers_to_capture([1, 3, 4])
    expected = run_all_modes(runner)

    def broken(*args, **kwargs):
        raise RuntimeError("sink is broken")

    recorder = STATE.recorder
    recorder.forget()
    target_forward.reset()  # forget the wrapper's last signatures too, so every forward is new again
    recorder.logs.emit = broken  # every log line now raises inside the probe
    got = run_all_modes(runner)
    for (logits_a, aux_a), (logits_b, aux_b) in zip(expected, got):
        assert torch.equal(logits_a, logits_b) and torch.equal(aux_a, aux_b)
    assert recorder._errors_total >= 1


def test_uninstall_restores_exact_originals():
    import sglang.srt.models.deepseek_v2 as ds
    eagle_probe.uninstall()
    forward = ds.DeepseekV2Model.__dict__["forward"]
    setter = ds.DeepseekV2ForCausalLM.__dict__["set_eagle3_layers_to_capture"]
    assert eagle_probe.install(env={})
    assert eagle_probe.install(env={})  # idempotent
    assert ds.DeepseekV2Model.__dict__["forward"] is not forward
    assert ds.DeepseekV2Model.__dict__["forward"].__wrapped__ is forward
    eagle_probe.uninstall()
    eagle_probe.uninstall()
    assert ds.DeepseekV2Model.__dict__["forward"] is forward
    assert ds.DeepseekV2ForCausalLM.__dict__["set_eagle3_layers_to_capture"] is setter
    assert "set_eagle3_layers_to_capture" not in vars(ds.DeepseekV3ForCausalLM)  # nothing copied down


def test_missing_target_stays_off_with_one_event_and_the_rest_runs(dense, tmp_path, monkeypatch):
    """A release without a target the version table expects (here: 0.5.23's classes with the setter removed):
    that target stays unwrapped, one warning names the release, the range and what is off, the rest works."""
    import sglang.srt.models.deepseek_v2 as ds

    model, runner = dense
    model.set_eagle3_layers_to_capture([1, 3, 4])
    expected = run_all_modes(runner)
    eagle_probe.uninstall()
    monkeypatch.delattr(ds.DeepseekV2ForCausalLM, "set_eagle3_layers_to_capture")
    try:
        assert eagle_probe.install(env={"EAGLE_PROBE_LOG_DIR": str(tmp_path)})
        target = "sglang.srt.models.deepseek_v2.DeepseekV2ForCausalLM.set_eagle3_layers_to_capture"
        assert target not in eagle_probe.patched_targets()
        assert "sglang.srt.models.deepseek_v2.DeepseekV2Model.forward" in eagle_probe.patched_targets()
        got = run_all_modes(runner)
    finally:
        eagle_probe.uninstall()
    for (logits_a, aux_a), (logits_b, aux_b) in zip(expected, got):
        assert torch.equal(logits_a, logits_b) and torch.equal(aux_a, aux_b)
    logs = ProbeLogs(str(tmp_path))
    [skipped] = logs.events("eagle_probe.integration.skipped")
    assert skipped["target"] == target and skipped["level"] == "warning" and skipped["expected"] is True
    assert skipped["sglang_version"] == "0.5.23" and skipped["supported"] == "0.5.8 to 0.5.23"
    assert skipped["off"].startswith("capture set-up events") and skipped["off"] in skipped["message"]
    assert {f["mode"] for f in logs.events("eagle_probe.target.forward")} >= {"EXTEND", "DECODE", "TARGET_VERIFY"}
    assert not logs.events("eagle_probe.capture.configured") and not logs.events("eagle_probe.internal_error")
