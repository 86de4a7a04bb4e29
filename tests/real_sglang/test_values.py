"""Hidden-state values on SGLang 0.5.23's real DeepseekV3ForCausalLM (tiny random weights, CPU): fingerprints
against transformers' hidden_states, the signature against the layers, non-finite and identical slots, the
no-sync rule of the sampled path, dumps (layout, all layers, cap, permissions, an unusable directory), and
outputs bit-identical with fingerprints and dumps on and off."""

import json
import math
import os

import pytest
import torch
from safetensors import safe_open

import eagle_probe
from eagle_probe.analysis.fingerprints import cosine
from eagle_probe.commands.summarize.logread import read_events
from eagle_probe.dump_format import FORMAT_VERSION
from eagle_probe.runtime.state import STATE
from eagle_probe.runtime.values.fingerprint import projection
from sglang_cpu.runtime import TinyBatchRunner, build_deepseek, init_runtime
from sglang_cpu.tiny_models import deepseek_v3_config

TOKENS = [[5, 9, 17, 33, 2, 71, 8], [3, 4, 5, 6, 200, 31]]
IDS = [1, 3, 4]  # captures indices 2, 4, 5 (0.5.23: +1 when the first id is 1)
INDICES = [2, 4, 5]
EVERY_FORWARD = {"EAGLE_PROBE_FINGERPRINT_INTERVAL_S": "1e-9"}  # a new sampling bucket on every forward


def events(log_dir, name=None):
    if STATE.recorder is not None:
        STATE.recorder.drain()  # the fingerprints the flush thread has not read yet
    return [e for e in read_events([str(log_dir)]) if name is None or e["event"] == name]


def full():
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
    return CaptureHiddenMode.FULL


@pytest.fixture(scope="module")
def dense(sglang_runtime):
    init_runtime()
    model = build_deepseek(deepseek_v3_config(num_hidden_layers=6, first_k_dense_replace=6), seed=3)
    model.set_eagle3_layers_to_capture(IDS)
    return model, TinyBatchRunner(model)


@pytest.fixture
def probed(tmp_path):
    started = []

    def start(**env):
        eagle_probe.uninstall()
        assert eagle_probe.install(env={"EAGLE_PROBE_LOG_DIR": str(tmp_path), **env})
        started.append(True)
        return str(tmp_path)

    yield start
    eagle_probe.uninstall()


def hf_states(model, tokens):
    with torch.no_grad():
        return model.hf_model(torch.tensor([tokens]), output_hidden_states=True).hidden_states


def batch_states(model, index):
    """HF hidden_states[index] of every request, concatenated in the batch's token order: [T, H]."""
    return torch.cat([hf_states(model, t)[index][0] for t in TOKENS])


def extend(runner):
    runner.reset()
    return runner.extend(TOKENS, capture_hidden_mode=full())


def test_fingerprints_equal_statistics_of_transformers_hidden_states(dense, probed):
    model, runner = dense
    log_dir = probed(**EVERY_FORWARD)
    extend(runner)
    prints = {e["slot"]: e for e in events(log_dir, "eagle_probe.aux.fingerprint") if e["role"] == "target"}
    assert sorted(prints) == [0, 1, 2]
    hidden = model.config.hidden_size
    matrix = projection(hidden, torch.device("cpu"))
    all_signatures = [(batch_states(model, i).mean(0) @ matrix).tolist() for i in range(7)]
    for slot, index in enumerate(INDICES):
        fp, x = prints[slot], batch_states(model, index)
        assert fp["capture_index"] == index and fp["tokens"] == x.shape[0] and fp["width"] == hidden
        assert fp["rms"] == pytest.approx(float(x.pow(2).mean().sqrt()), rel=1e-4)
        assert fp["mean"] == pytest.approx(float(x.mean()), rel=1e-3, abs=1e-7)
        assert fp["absmax"] == pytest.approx(float(x.abs().max()), rel=1e-4)
        assert fp["nonfinite"] == 0 and len(fp["signature"]) == 32
        # the signature tells the layers apart: it is nearest to its own layer's among all HF layers
        similarity = [cosine(fp["signature"], signature) for signature in all_signatures]
        assert max(range(7), key=lambda i: similarity[i]) == index
        assert similarity[index] > 0.9999 and sorted(similarity)[-2] < 0.99
    assert not [e for e in events(log_dir, "eagle_probe.finding")]


def test_a_long_prefill_is_fingerprinted_over_its_first_rows(dense, probed):
    """A sample reduces MAX_ROWS rows at most: its device temporaries stay bounded on a long prefill chunk."""
    from eagle_probe.runtime.values.sampler import MAX_ROWS

    model, _ = dense
    runner = TinyBatchRunner(model, max_context_len=MAX_ROWS + 64)
    log_dir = probed(**EVERY_FORWARD)
    long = [(7 * i + 3) % 250 for i in range(MAX_ROWS + 44)]
    runner.extend([long], capture_hidden_mode=full())
    prints = {e["slot"]: e for e in events(log_dir, "eagle_probe.aux.fingerprint") if e["role"] == "target"}
    for slot, index in enumerate(INDICES):
        x = hf_states(model, long)[index][0][:MAX_ROWS]
        assert prints[slot]["tokens"] == MAX_ROWS
        assert prints[slot]["rms"] == pytest.approx(float(x.pow(2).mean().sqrt()), rel=1e-4)
        assert prints[slot]["absmax"] == pytest.approx(float(x.abs().max()), rel=1e-4)


def test_gauges_carry_the_last_sample(dense, probed):
    _, runner = dense
    probed(**EVERY_FORWARD)
    extend(runner)
    from prometheus_client import REGISTRY
    samples = {(s.labels["role"], s.labels["slot"]): s.value for m in REGISTRY.collect()
               if m.name == "eagle_probe_aux_rms" for s in m.samples}
    assert {("target", "0"), ("target", "1"), ("target", "2")} <= set(samples)
    assert all(v > 0 for k, v in samples.items() if k[0] == "target")


def test_nan_in_one_layers_weights_is_named_with_its_slot(sglang_runtime, probed):
    model = build_deepseek(deepseek_v3_config(num_hidden_layers=6, first_k_dense_replace=6), seed=4)
    model.set_eagle3_layers_to_capture(IDS)
    with torch.no_grad():
        model.model.layers[4].mlp.down_proj.weight[0, 0] = float("nan")  # layer 4's output: capture index 5
    log_dir = probed(**EVERY_FORWARD)
    runner = TinyBatchRunner(model)
    extend(runner)
    findings = [e for e in events(log_dir, "eagle_probe.finding") if e["code"] == "aux_nonfinite"]
    assert [f["evidence"]["slot"] for f in findings] == [2]
    found = findings[0]
    assert found["severity"] == "error" and found["evidence"]["capture_index"] == 5
    assert found["evidence"]["label"] == "output of layer 4" and found["evidence"]["nonfinite"] >= sum(map(len, TOKENS))
    extend(runner)  # reported once
    assert len([e for e in events(log_dir, "eagle_probe.finding") if e["code"] == "aux_nonfinite"]) == 1


def test_a_layer_that_adds_nothing_makes_two_slots_identical(sglang_runtime, probed):
    model = build_deepseek(deepseek_v3_config(num_hidden_layers=6, first_k_dense_replace=6), seed=5)
    model.set_eagle3_layers_to_capture(IDS)
    with torch.no_grad():  # layer 4 adds zero to the residual: the stream entering layer 5 equals the one entering 4
        model.model.layers[4].self_attn.o_proj.weight.zero_()
        model.model.layers[4].mlp.down_proj.weight.zero_()
    log_dir = probed(**EVERY_FORWARD)
    extend(TinyBatchRunner(model))
    [found] = [e for e in events(log_dir, "eagle_probe.finding") if e["code"] == "aux_slots_identical"]
    assert found["evidence"]["slots"] == [1, 2] and found["evidence"]["capture_indices"] == [4, 5]


def test_sampled_path_reads_only_its_host_buffers(dense, probed, monkeypatch, tmp_path):
    """The no-sync rule on the CPU path: inside the probe, .item(), .cpu(), .tolist(), .numpy() and truth or number
    conversions are called on no tensor but the fingerprint host buffers (on a GPU: pinned memory, read on the flush
    thread after its event reported done)."""
    _, runner = dense
    probed(**EVERY_FORWARD, EAGLE_PROBE_DUMP_DIR=str(tmp_path / "dumps"), EAGLE_PROBE_DUMP_EVERY="1",
           EAGLE_PROBE_DUMP_LAYERS="all")
    calls = []
    for name in ("item", "cpu", "tolist", "numpy", "__bool__", "__float__", "__int__", "__index__"):
        original = getattr(torch.Tensor, name)

        def spy(self, *args, _original=original, _name=name, **kwargs):
            import sys
            frame = sys._getframe(1)
            if "/eagle_probe/" in frame.f_code.co_filename:
                calls.append((_name, id(self), frame.f_code.co_filename, frame.f_lineno))
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, spy)
    extend(runner)
    runner.target_verify([[12, 40, 41], [11, 50, 51]])
    STATE.recorder.drain()  # the flush thread's read, here
    monkeypatch.undo()
    STATE.recorder.dump_writer.drain()
    hosts = {id(h) for f in STATE.recorder.fingerprints._fingerprinters.values() for h in f.host_tensors()}
    assert calls and all(name == "numpy" and ident in hosts for name, ident, _, _ in calls), calls


def test_outputs_bit_identical_with_fingerprints_and_dumps(dense, probed, tmp_path):
    model, runner = dense

    def run_all():
        runner.reset()
        outs = [runner.extend(TOKENS, capture_hidden_mode=full())]
        outs.append(runner.decode([11, 12], capture_hidden_mode=full()))
        outs.append(runner.target_verify([[12, 40, 41], [11, 50, 51]]))
        return [(o.next_token_logits, o.hidden_states) for o in outs]

    eagle_probe.uninstall()
    without = run_all()
    probed(**EVERY_FORWARD, EAGLE_PROBE_DUMP_DIR=str(tmp_path / "dumps"), EAGLE_PROBE_DUMP_EVERY="1",
           EAGLE_PROBE_DUMP_LAYERS="all")
    with_values = run_all()
    STATE.recorder.dump_writer.drain()
    assert len(os.listdir(tmp_path / "dumps")) == 1  # the EXTEND forward was dumped
    for (logits_a, aux_a), (logits_b, aux_b) in zip(without, with_values):
        assert torch.equal(logits_a, logits_b) and torch.equal(aux_a, aux_b)


def test_all_layer_dump_holds_what_the_readme_says_and_matches_transformers(dense, probed, tmp_path):
    model, runner = dense
    dumps = tmp_path / "dumps"
    log_dir = probed(EAGLE_PROBE_DUMP_DIR=str(dumps), EAGLE_PROBE_DUMP_EVERY="2", EAGLE_PROBE_DUMP_LAYERS="all")
    served = [extend(runner).hidden_states for _ in range(3)]  # eligible forwards 1, 2, 3: 1 and 3 are dumped
    STATE.recorder.dump_writer.drain()
    files = sorted(dumps.iterdir())
    assert len(files) == 2 and oct(dumps.stat().st_mode & 0o777) == "0o700"
    assert all(oct(f.stat().st_mode & 0o777) == "0o600" for f in files)
    written = events(log_dir, "eagle_probe.dump.written")
    assert sorted(e["path"] for e in written) == [str(f) for f in files]
    hidden = model.config.hidden_size
    with safe_open(str(files[0]), "pt") as handle:
        meta = json.loads(handle.metadata()["eagle_probe.meta"])
        tensors = {k: handle.get_tensor(k) for k in handle.keys()}  # noqa: SIM118  (safe_open)
    assert handle is not None and meta["format_version"] == FORMAT_VERSION and meta["capture_indices"] == INDICES
    assert meta["labels"] == ["output of layer 1", "output of layer 3", "output of layer 4"]
    assert meta["layer_indices"] == list(range(6)) and meta["all_layers"] is True and meta["tp_rank"] == 0
    assert meta["sglang_version"] == "0.5.23" and meta["dtype"] == "float32" and meta["tokens"] == 13
    assert tensors["input_ids"].tolist() == TOKENS[0] + TOKENS[1]
    assert tensors["positions"].tolist() == list(range(7)) + list(range(6))
    assert tensors["extend_seq_lens"].tolist() == [7, 6] and tensors["extend_prefix_lens"].tolist() == [0, 0]
    assert torch.equal(tensors["aux_hidden_states"], served[0])
    assert tensors["final_hidden_state"].shape == (13, hidden)
    for index in range(6):
        assert torch.allclose(tensors[f"hidden_states.{index}"], batch_states(model, index), atol=1e-5, rtol=1e-4)
    final = torch.cat([hf_states(model, t)[-1][0] for t in TOKENS])  # transformers' last entry: after the norm
    assert torch.allclose(tensors["final_hidden_state"], final, atol=1e-5, rtol=1e-4)


def test_dump_cap_and_unusable_directory_stop_dumps_with_one_event(dense, probed, tmp_path):
    _, runner = dense
    capped = tmp_path / "capped"
    log_dir = probed(EAGLE_PROBE_DUMP_DIR=str(capped), EAGLE_PROBE_DUMP_EVERY="1", EAGLE_PROBE_DUMP_MAX_MB="0.01")
    for _ in range(3):
        extend(runner)
    STATE.recorder.dump_writer.drain()
    [stopped] = events(log_dir, "eagle_probe.dump.stopped")
    assert stopped["reason"] == "cap" and "EAGLE_PROBE_DUMP_MAX_MB" in stopped["error"]
    assert list(capped.iterdir()) == []
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    eagle_probe.uninstall()
    other_logs = tmp_path / "logs2"
    assert eagle_probe.install(env={"EAGLE_PROBE_LOG_DIR": str(other_logs), "EAGLE_PROBE_DUMP_DIR": str(blocker),
                                    "EAGLE_PROBE_DUMP_EVERY": "1"})
    out = [extend(runner).hidden_states for _ in range(2)]
    assert all(torch.isfinite(o).all() for o in out)
    [stopped] = events(str(other_logs), "eagle_probe.dump.stopped")
    assert stopped["reason"] == "unwritable" and not events(str(other_logs), "eagle_probe.internal_error")
    assert math.isfinite(out[0].sum().item())
