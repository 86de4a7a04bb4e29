"""Kimi-K2.5's MLA EAGLE-3 draft at load time, through SGLang 0.5.23's REAL Eagle3DeepseekV2ForCausalLM (tiny config,
CPU, in-process, its own load_weights) next to a real tiny DeepSeek target's real set_eagle3_layers_to_capture, with
the probe installed: the ids the draft read and where (top level vs eagle_config) against the ids the target was
given (draft_target_ids_differ), its fc width, the checkpoint tensors its loader dropped (checked against SGLang's
own "skipping unexpected weight" warnings, plus the lone q_a_proj half it drops without one), and its vocabulary
map (draft_vocab_map_missing; a valid d2t gives nothing)."""

import logging

import pytest
import torch

import eagle_probe
from eagle_probe.commands.summarize.logread import read_events
from eagle_probe.observations import Ranks
from eagle_probe.runtime.state import STATE

HIDDEN = 64
LAYERS = 8  # the target's; SGLang's default capture set is [2, N//2, N-3] = [2, 4, 5]
IDS = [1, 3, 4, 5]  # four ids: the draft sizes its fc for 4 states; 0.5.23 maps them (first is 1) to [2, 4, 5, 6]


@pytest.fixture(scope="module")
def target(sglang_runtime):
    from sglang_cpu.tiny_models import deepseek_v3_config

    return sglang_runtime.build_deepseek(deepseek_v3_config(num_hidden_layers=LAYERS, first_k_dense_replace=LAYERS))


def _load(tmp_path, name, target, config, state, target_ids):
    """Install the probe, load the draft through SGLang's load_weights, give the target `target_ids` through its
    real setter (what SGLang passes it: eagle_config's ids or None); (events by name, findings by code, model,
    what the target captures as SGLang set it)."""
    from sglang_cpu.kimi_draft import build_kimi_draft
    from sglang_cpu.runtime import clear_aux_capture

    logs = tmp_path / f"logs-{name}"
    eagle_probe.uninstall()
    assert eagle_probe.install(env={"EAGLE_PROBE_LOG_DIR": str(logs), "EAGLE_PROBE_FLUSH_INTERVAL_S": "0"})
    try:
        STATE.recorder._read_ranks = lambda: Ranks(tp_rank=0, tp_size=1, pp_rank=0)
        model = build_kimi_draft(config, state)
        target.set_eagle3_layers_to_capture(target_ids)
        captured = list(target.model.layers_to_capture)
    finally:
        clear_aux_capture(target)
        eagle_probe.uninstall()
    events = read_events([str(logs)])
    findings = {e["code"]: e for e in events if e["event"] == "eagle_probe.finding"}
    [loaded] = [e for e in events if e["event"] == "eagle_probe.draft.loaded"]
    assert not [e for e in events if e["event"] == "eagle_probe.internal_error"]
    return loaded, findings, model, captured


def test_top_level_ids_the_target_ignores_are_named(tmp_path, target):
    from sglang_cpu.kimi_draft import kimi_draft_config, kimi_draft_state

    config = kimi_draft_config(top_level_ids=IDS)  # no eagle_config ids: SGLang gives the target none
    loaded, findings, model, captured = _load(tmp_path, "top", target, config,
                                              kimi_draft_state(config, len(IDS)), None)
    assert loaded["model_class"] == "Eagle3DeepseekV2ForCausalLM"
    assert loaded["ids_read"] == IDS and loaded["ids_read_from"] == "top_level"
    assert loaded["eagle_layer_ids"] is None  # what the target reads
    # fc width: 4 aux states of the target's width, as SGLang built it
    assert loaded["fc_in"] == len(IDS) * HIDDEN == model.model.fc.input_size
    assert loaded["num_aux"] == len(IDS) and loaded["fc_out"] == HIDDEN
    assert captured == [2, LAYERS // 2, LAYERS - 3]  # SGLang's defaults, not the draft's ids
    differ = findings["draft_target_ids_differ"]
    assert differ["severity"] == "error"
    evidence = differ["evidence"]
    assert evidence["draft_ids"] == IDS and evidence["ids_read_from"] == "top_level"
    assert evidence["target_ids"] is None and evidence["captured"] == captured
    assert evidence["expected"] == [2, 4, 5, 6] and "eagle_config.eagle_aux_hidden_state_layer_ids" in differ["message"]
    assert "layer_mismatch" not in findings  # the config's eagle_config names no ids: nothing else to compare


def test_eagle_config_ids_both_read_give_no_finding(tmp_path, target):
    from sglang_cpu.kimi_draft import kimi_draft_config, kimi_draft_state

    config = kimi_draft_config(eagle_ids=IDS, top_level_ids=[0, 1, 2])  # eagle_config wins for the draft too
    loaded, findings, model, captured = _load(tmp_path, "nested", target, config,
                                              kimi_draft_state(config, len(IDS)), IDS)
    assert loaded["ids_read"] == IDS and loaded["ids_read_from"] == "eagle_config"
    assert loaded["eagle_layer_ids"] == IDS and captured == [2, 4, 5, 6]
    assert loaded["fc_in"] == model.model.fc.input_size == len(IDS) * HIDDEN
    assert "draft_target_ids_differ" not in findings and "layer_mismatch" not in findings


def test_dropped_tensors_and_a_missing_vocabulary_map(tmp_path, target, caplog):
    from sglang_cpu.kimi_draft import kimi_draft_config, kimi_draft_state

    config = kimi_draft_config(eagle_ids=IDS)  # draft_vocab_size 64 < 256, no d2t
    state = kimi_draft_state(config, len(IDS))
    fused = "model.midlayer.self_attn.fused_qkv_a_proj_with_mqa.weight"
    del state["layers.0.self_attn.kv_a_proj_with_mqa.weight"]  # q_a_proj alone: never fused, no warning
    state["model.fc.weight"] = state["fc.weight"].clone()  # prefixed again by the loader: model.model.fc
    state["fc_norm.0.weight"] = torch.ones(HIDDEN)  # no fc_norm flag in the config: no such parameter
    state["t2d"] = torch.ones(256, dtype=torch.bool)  # skipped on purpose
    with caplog.at_level(logging.WARNING, logger="sglang.srt.models.kimi_k25_eagle3"):
        loaded, findings, model, _ = _load(tmp_path, "dropped", target, config, state, IDS)
    warned = sorted(r.args[0] for r in caplog.records if "skipping unexpected weight" in r.getMessage())
    assert warned == ["fc_norm.0.weight", "model.fc.weight"]  # SGLang's own account of what it skipped
    assert sorted(loaded["dropped"]) == sorted(warned + ["layers.0.self_attn.q_a_proj.weight"])
    assert loaded["ignored"] == ["t2d"]
    assert fused in dict(model.named_parameters())  # the parameter the lone half never reached
    dropped = findings["draft_weights_dropped"]
    assert dropped["severity"] == "warning" and "layers.0.self_attn.q_a_proj.weight" in dropped["message"]
    missing = findings["draft_vocab_map_missing"]
    assert loaded["d2t_size"] is None and loaded["draft_vocab_size"] == 64 and loaded["target_vocab_size"] == 256
    assert missing["severity"] == "error" and str(256 - 64) in missing["message"]
    assert model.hot_token_id is None  # SGLang took no map either


def test_a_valid_map_is_silent_and_a_misnamed_one_is_missing(tmp_path, target):
    from sglang_cpu.kimi_draft import kimi_draft_config, kimi_draft_state

    config = kimi_draft_config(eagle_ids=IDS)
    state = kimi_draft_state(config, len(IDS))
    state["d2t"] = torch.arange(64, dtype=torch.int64)  # draft id i -> target id 2i
    loaded, findings, model, _ = _load(tmp_path, "valid", target, config, state, IDS)
    assert loaded["d2t_size"] == 64 and loaded["dropped"] == []
    assert model.hot_token_id is not None and int(model.hot_token_id[5]) == 10  # SGLang took it as a map
    assert not {"draft_vocab_map_missing", "draft_vocab_map_invalid", "draft_weights_dropped"} & set(findings)

    state = kimi_draft_state(config, len(IDS))
    state["d2t_map"] = torch.arange(64, dtype=torch.int64)  # the Llama loader takes any name with d2t; this one not
    loaded, findings, model, _ = _load(tmp_path, "misnamed", target, config, state, IDS)
    assert model.hot_token_id is None
    assert loaded["d2t_size"] is None and loaded["dropped"] == ["d2t_map"]
    assert "draft_vocab_map_missing" in findings


@pytest.mark.parametrize("target_hidden_size,width", [(32, 32), (None, HIDDEN)])
def test_the_forward_event_names_the_width_of_each_aux_state(tmp_path, sglang_runtime, target_hidden_size, width):
    """Eagle3MLAModel has no hidden_size_in: the width per aux state is config.target_hidden_size, else hidden_size,
    as its fc was sized; one draft-extend forward of the real class, fed 3 target states of that width."""
    from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    from sglang_cpu.kimi_draft import build_kimi_draft, kimi_draft_config, kimi_draft_state

    config = kimi_draft_config(eagle_ids=[1, 3, 4], target_hidden_size=target_hidden_size)
    logs = tmp_path / "logs"
    eagle_probe.uninstall()
    assert eagle_probe.install(env={"EAGLE_PROBE_LOG_DIR": str(logs), "EAGLE_PROBE_FLUSH_INTERVAL_S": "0"})
    try:
        STATE.recorder._read_ranks = lambda: Ranks(tp_rank=0, tp_size=1, pp_rank=0)
        model = build_kimi_draft(config, kimi_draft_state(config, 3))
        runner = sglang_runtime.TinyBatchRunner(model)  # an MLA KV pool, as the draft's config is MLA
        aux = torch.randn(3, 3 * width, generator=torch.Generator().manual_seed(0))
        spec_info = EagleDraftExtendInput(hidden_states=aux, num_tokens_per_req=1, num_tokens_for_logprob_per_req=1)
        runner.extend([[5, 6, 7]], spec_info=spec_info, spec_algorithm=SpeculativeAlgorithm.EAGLE3)
    finally:
        eagle_probe.uninstall()
    events = read_events([str(logs)])
    [forward] = [e for e in events if e["event"] == "eagle_probe.draft.forward"]
    assert model.model.fc.input_size == 3 * width  # SGLang sized fc for 3 states of this width
    assert forward["model_class"] == "Eagle3MLAModel" and forward["fc_ran"]
    assert forward["target_hidden_size"] == width and forward["aux_width"] == forward["fc_in"] == 3 * width
    assert not [e for e in events if e["event"] == "eagle_probe.internal_error"]
