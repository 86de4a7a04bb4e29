"""Draft config keys at load, through SGLang 0.5.23's REAL LlamaForCausalLMEagle3 (config read from its directory as
SGLang does, with transformers' from_pretrained; weights through its own load_weights), with the probe installed:
keys 0.5.23 never reads where they are written are named (draft_config_ignored, with key, value and release), keys it
reads and applies are not; and the trained length the load event states (SpecForge's training_state.pt, written here
with torch.save as SpecForge writes it; an unreadable one falls back to max_position_embeddings, saying so)."""

import argparse
import os

import pytest
import torch

import eagle_probe
from eagle_probe.commands.summarize.logread import read_events
from eagle_probe.draft_dir import CONFIG_SOURCE, ENV_SOURCE, SPECFORGE_SOURCE
from eagle_probe.observations import Ranks
from eagle_probe.runtime.state import STATE
from sglang_cpu.draft_models import eagle3_draft_config, spec_target_config, write_eagle3_draft_checkpoint


def _load(tmp_path, name, env=None, state_file=None, **overrides):
    """Write a draft with config overrides, load it as SGLang does; (draft.loaded event, findings by code, model)."""
    from safetensors.torch import load_file
    from sglang.srt.models.llama_eagle3 import LlamaForCausalLMEagle3
    from transformers import AutoConfig

    from sglang_cpu.draft_runner import init_runtime

    init_runtime()
    path = write_eagle3_draft_checkpoint(str(tmp_path / name), eagle3_draft_config(spec_target_config(), **overrides))
    if state_file is not None:
        state_file(os.path.join(path, "training_state.pt"))
    logs = tmp_path / f"logs-{name}"
    eagle_probe.uninstall()
    assert eagle_probe.install(env={"EAGLE_PROBE_LOG_DIR": str(logs), "EAGLE_PROBE_FLUSH_INTERVAL_S": "0",
                                    **(env or {})})
    try:
        STATE.recorder._read_ranks = lambda: Ranks(tp_rank=0, tp_size=1, pp_rank=0)
        config = AutoConfig.from_pretrained(path)  # what SGLang's get_config does: _name_or_path is the directory
        model = LlamaForCausalLMEagle3(config, quant_config=None).eval()
        model.load_weights(load_file(os.path.join(path, "model.safetensors")).items())
    finally:
        eagle_probe.uninstall()
    events = read_events([str(logs)])
    assert not [e for e in events if e["event"] == "eagle_probe.internal_error"]
    [loaded] = [e for e in events if e["event"] == "eagle_probe.draft.loaded"]
    findings = {e["code"]: e for e in events if e["event"] == "eagle_probe.finding"}
    return loaded, findings, model


def test_keys_the_release_never_reads_are_named(tmp_path, sglang_runtime):
    loaded, findings, model = _load(tmp_path, "ignored", norm_before_residual=True,
                                    eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 3, 4], "fc_norm": True})
    # SGLang built the module without them: no per-state norm (fc_norm nested is not read), nothing for the residual
    assert model.model.fc_norm is None
    finding = findings["draft_config_ignored"]
    assert finding["severity"] == "warning"
    evidence = finding["evidence"]
    assert evidence["release"] == "0.5.23" and evidence["model_class"] == "LlamaForCausalLMEagle3"
    assert {(i["key"], i["value"], i["reason"]) for i in evidence["ignored"]} == {
        ("norm_before_residual", True, "release table"), ("eagle_config.fc_norm", True, "release table")}
    message = finding["message"]
    assert "SGLang 0.5.23 ignores 2 key(s)" in message and "norm_before_residual = True" in message
    assert "move it to the top level" in message  # fc_norm is read at the top level in 0.5.23
    assert [list(i) for i in loaded["config_ignored"]] == [["norm_before_residual", "true", "release table"],
                                                           ["eagle_config.fc_norm", "true", "release table"]]
    assert loaded["config_source"].endswith("config.json")


def test_keys_the_release_reads_and_applies_are_silent(tmp_path, sglang_runtime):
    loaded, findings, model = _load(tmp_path, "read", norm_before_fc=True, fc_norm=True, norm_output=True,
                                    norm_before_residual=False)
    assert model.model.input_norm is not None and model.model.fc_norm is not None and model.model.norm_output
    assert "draft_config_ignored" not in findings and loaded["config_ignored"] == []


def _specforge_state(max_length):
    def write(path):  # SpecForge's train_eagle3.py: torch.save({"epoch", "global_step", "args", optimizer...})
        args = argparse.Namespace(max_length=max_length, target_model_path="/models/target", num_epochs=1)
        torch.save({"epoch": 0, "global_step": 10, "args": args,
                    "state": {0: {"exp_avg": torch.zeros(4), "step": torch.tensor(10.0)}}, "param_groups": []}, path)
    return write


@pytest.mark.parametrize("env, state_file, length, source", [
    ({}, _specforge_state(96), 96, SPECFORGE_SOURCE),
    ({"EAGLE_PROBE_DRAFT_MAX_LENGTH": "48"}, _specforge_state(96), 48, ENV_SOURCE),
    ({}, None, 512, CONFIG_SOURCE),
])
def test_the_trained_length_and_where_it_came_from(tmp_path, sglang_runtime, env, state_file, length, source):
    loaded, _, _ = _load(tmp_path, "length", env=env, state_file=state_file, max_position_embeddings=512)
    assert (loaded["trained_length"], loaded["trained_length_source"]) == (length, source)
    assert loaded["trained_length_notes"] == []


def test_unreadable_training_arguments_fall_back_and_say_so(tmp_path, sglang_runtime):
    def garbage(path):
        with open(path, "wb") as handle:
            handle.write(b"not a torch file")

    loaded, _, _ = _load(tmp_path, "garbage", state_file=garbage, max_position_embeddings=512)
    assert (loaded["trained_length"], loaded["trained_length_source"]) == (512, CONFIG_SOURCE)
    [note] = loaded["trained_length_notes"]
    assert "training_state.pt: not a zip" in note and "falling back to config.json" in note
