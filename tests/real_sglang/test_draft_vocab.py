"""The draft's vocabulary map at load time, through SGLang's real LlamaForCausalLMEagle3.load_weights: a reduced
vocabulary without d2t is draft_vocab_map_missing, a d2t that maps two draft ids to one target id is
draft_vocab_map_invalid, a valid d2t (and a full vocabulary) give neither."""

import torch

import eagle_probe
from eagle_probe.commands.summarize.logread import read_events
from eagle_probe.observations import Ranks
from eagle_probe.runtime.state import STATE
from sglang_cpu.draft_models import (
    DEFAULT_LAYER_IDS,
    eagle3_draft_config,
    spec_target_config,
    write_eagle3_draft_checkpoint,
)
from sglang_cpu.draft_runner import build_sglang_draft

CODES = ("draft_vocab_map_missing", "draft_vocab_map_invalid")


def _vocab_findings(tmp_path, name, draft_vocab, d2t):
    target = spec_target_config()
    config = eagle3_draft_config(target, draft_vocab_size=draft_vocab)
    state = None if d2t is None else {"d2t": d2t}
    path = write_eagle3_draft_checkpoint(str(tmp_path / name), config, state=state)
    logs = tmp_path / f"logs-{name}"
    eagle_probe.uninstall()
    assert eagle_probe.install(env={"EAGLE_PROBE_LOG_DIR": str(logs), "EAGLE_PROBE_FLUSH_INTERVAL_S": "0"})
    try:
        STATE.recorder._read_ranks = lambda: Ranks(tp_rank=0, tp_size=1, pp_rank=0)
        build_sglang_draft(path)
    finally:
        eagle_probe.uninstall()
    events = read_events([str(logs)])
    [loaded] = [e for e in events if e["event"] == "eagle_probe.draft.loaded"]
    return loaded, {e["code"]: e for e in events if e["event"] == "eagle_probe.finding" and e["code"] in CODES}, \
        target.vocab_size


def test_reduced_vocabulary_without_d2t_is_named(tmp_path):
    loaded, found, vocab = _vocab_findings(tmp_path, "missing", 64, None)
    assert loaded["d2t_size"] is None and loaded["target_vocab_size"] == vocab
    # the ids the Llama draft sized its fc from: eagle_config's (the same the target is given)
    assert loaded["ids_read"] == list(DEFAULT_LAYER_IDS) == loaded["eagle_layer_ids"]
    assert loaded["ids_read_from"] == "eagle_config" and loaded["num_aux"] == len(DEFAULT_LAYER_IDS)
    assert set(found) == {"draft_vocab_map_missing"}
    assert found["draft_vocab_map_missing"]["severity"] == "error"
    assert str(vocab - 64) in found["draft_vocab_map_missing"]["message"]


def test_a_colliding_d2t_is_invalid_and_a_valid_one_is_silent(tmp_path):
    colliding = torch.zeros(64, dtype=torch.int64)
    colliding[1] = -1  # draft ids 0 and 1 both map to target id 0
    _, found, _ = _vocab_findings(tmp_path, "invalid", 64, colliding)
    assert set(found) == {"draft_vocab_map_invalid"}
    valid = torch.arange(64, dtype=torch.int64)  # draft id i -> target id 2i: distinct, in range
    loaded, found, _ = _vocab_findings(tmp_path, "valid", 64, valid)
    assert loaded["d2t_size"] == 64 and found == {}


def test_full_vocabulary_needs_no_map(tmp_path):
    _, found, vocab = _vocab_findings(tmp_path, "full", None, None)  # the draft keeps the target's vocabulary
    assert found == {}
