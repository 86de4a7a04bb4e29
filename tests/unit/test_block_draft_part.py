"""The recorder's block-draft part (runtime/parts/block_draft.py) on observations built here: pure logic, the
wrappers themselves are proven against SGLang's real classes (tests/real_sglang/test_block_capture.py, the DFlash
e2e test)."""

import json

import pytest

from eagle_probe.analysis.dflash_layers import read_block_draft_config
from eagle_probe.observations import BlockCaptureConfigured, BlockDraftFed, BlockDraftLoaded

pytestmark = pytest.mark.unit

DEFAULTED = {"architectures": ["DFlashDraftModel"], "num_hidden_layers": 2,
             "dflash_config": {"block_size": 4, "num_target_layers": 6}}


def capture(config, ids=(1, 3), positions=(2, 4)):
    return BlockCaptureConfigured(
        model_class="DeepseekV3ForCausalLM", setter="set_dflash_layers_to_capture", requested_ids=tuple(ids),
        layers_to_capture=tuple(positions), num_layers=6, is_last_pp_stage=True,
        draft_config=None if config is None else read_block_draft_config(config), draft_config_path="/d/config.json",
        caller="test")


def events(stream, name):
    return [e for e in (json.loads(line) for line in stream.getvalue().splitlines()) if e["event"] == name]


def codes(stream):
    return sorted(e["code"] for e in events(stream, "eagle_probe.finding"))


def test_defaulted_ids_are_named_with_the_default_and_the_fix(make_recorder):
    probe = make_recorder()
    probe.recorder.block_capture_configured(capture(DEFAULTED))
    [line] = events(probe.stream, "eagle_probe.block_draft.capture")
    assert line["ids_source"] == "default" and line["default_ids"] == [1, 3] and line["num_draft_layers"] == 2
    [finding] = events(probe.stream, "eagle_probe.finding")
    assert finding["code"] == "dflash_target_layers_defaulted" and finding["severity"] == "warning"
    assert "[1, 3]" in finding["message"] and "dflash_config" in finding["message"]


def test_given_ids_are_silent_until_trained_layers_differ(make_recorder):
    given = {**DEFAULTED, "dflash_config": {**DEFAULTED["dflash_config"], "target_layer_ids": [1, 3]}}
    probe = make_recorder()
    probe.recorder.block_capture_configured(capture(given))
    assert codes(probe.stream) == []
    assert events(probe.stream, "eagle_probe.block_draft.capture")[0]["ids_source"] == "dflash_config.target_layer_ids"
    probe = make_recorder(trained_layers="hf:4,5")
    probe.recorder.block_capture_configured(capture(given))
    [finding] = events(probe.stream, "eagle_probe.finding")
    assert finding["code"] == "layer_mismatch" and finding["evidence"]["fix_ids"] == [3, 4]


def test_disagreeing_aux_ids_and_an_unread_config(make_recorder):
    both = {**DEFAULTED, "target_layer_ids": [1, 3], "eagle_aux_hidden_state_layer_ids": [1, 3]}
    probe = make_recorder()
    probe.recorder.block_capture_configured(capture(both))
    assert codes(probe.stream) == ["dflash_layer_ids_disagree"]
    probe = make_recorder()
    probe.recorder.block_capture_configured(capture(None))
    assert events(probe.stream, "eagle_probe.block_draft.capture")[0]["ids_source"] == "unknown"
    assert codes(probe.stream) == []


def test_loaded_facts_and_a_feed_the_fc_does_not_take(make_recorder):
    probe = make_recorder()
    probe.recorder.block_draft_loaded(BlockDraftLoaded(
        worker_class="DFlashWorkerV2", model_class="DFlashDraftModel", block_size=4, config_block_size=4,
        mask_token_id=1, num_draft_layers=2, num_context_features=2, hidden_size=64, fc_in=128, fc_out=64,
        target_layer_ids=None))
    [loaded] = events(probe.stream, "eagle_probe.block_draft.loaded")
    assert loaded["draft_positions"] == 3 and loaded["fc_expected_in"] == 128 and loaded["target_layer_ids"] is None
    probe.recorder.block_draft_fed(BlockDraftFed("DFlashWorkerV2", "EXTEND", 128, 128, 7, "float32"))
    assert codes(probe.stream) == []
    probe.recorder.block_draft_fed(BlockDraftFed("DFlashWorkerV2", "TARGET_VERIFY", 192, 128, 8, "float32"))
    assert codes(probe.stream) == ["fc_width_mismatch"]
