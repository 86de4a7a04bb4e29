"""The DFlash capture wrapper against SGLang 0.5.23's real DeepSeek class on the CPU: the outermost
set_dflash_layers_to_capture call, the positions the setter stored, each slot's HF index and label, and the trained
layers against them (layer_mismatch naming the target_layer_ids to pin)."""

import json
import os

import pytest

import eagle_probe
from sglang_cpu.runtime import build_deepseek, init_runtime
from sglang_cpu.tiny_models import deepseek_v3_config


def _events(log_dir, name):
    out = []
    for file in sorted(os.listdir(log_dir)):
        with open(os.path.join(log_dir, file)) as handle:
            out += [json.loads(line) for line in handle if line.strip()]
    return [e for e in out if e["event"] == name]


@pytest.fixture(scope="module")
def model(sglang_runtime):
    init_runtime()
    return build_deepseek(deepseek_v3_config(num_hidden_layers=6, first_k_dense_replace=6), seed=1)


def _probe(tmp_path, **env):
    eagle_probe.uninstall()
    assert eagle_probe.install(env={"EAGLE_PROBE_LOG_DIR": str(tmp_path), **env})
    return str(tmp_path)


def test_capture_line_names_positions_labels_and_rule(model, tmp_path):
    log_dir = _probe(tmp_path)
    try:
        model.set_dflash_layers_to_capture([1, 3])
    finally:
        eagle_probe.uninstall()
    [line] = _events(log_dir, "eagle_probe.block_draft.capture")
    assert list(model.model.layers_to_capture) == [2, 4]  # SGLang's own: id i -> position i + 1
    assert line["requested_ids"] == [1, 3] and line["layers_to_capture"] == [2, 4]
    assert line["algorithm"] == "DFLASH" and line["rule"] == "plus_one"
    assert [s["label"] for s in line["slots"]] == ["output of layer 1", "output of layer 3"]
    assert [s["hf_index"] for s in line["slots"]] == [2, 4]
    assert line["num_layers"] == 6
    assert line["ids_source"] == "unknown"  # in-process: no launch names a draft directory
    assert not [f for f in _events(log_dir, "eagle_probe.finding") if f["code"] == "layer_mismatch"]


def test_trained_layers_missed_names_the_ids_to_pin(model, tmp_path):
    log_dir = _probe(tmp_path, EAGLE_PROBE_TRAINED_LAYERS="hf:4,5")
    try:
        model.set_dflash_layers_to_capture([1, 3])
        model.set_dflash_layers_to_capture([3, 4])
    finally:
        eagle_probe.uninstall()
    mismatches = [f for f in _events(log_dir, "eagle_probe.finding") if f["code"] == "layer_mismatch"]
    assert len(mismatches) == 1, mismatches  # [3, 4] captures 4, 5: the trained layers, no finding
    evidence = mismatches[0]["evidence"]
    assert evidence["captured"] == [2, 4] and evidence["trained_hf"] == [4, 5] and evidence["fix_ids"] == [3, 4]
    assert '"target_layer_ids": [3, 4]' in mismatches[0]["message"]
