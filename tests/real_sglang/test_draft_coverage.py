"""The draft's hot vocabulary the coverage counts against, read at load through SGLang's real
LlamaForCausalLMEagle3.load_weights: it equals SGLang's own hot_token_id (d2t + arange) where the checkpoint has a d2t,
ids 0..draft_vocab_size-1 where a reduced vocabulary has none (SGLang then uses draft ids as target ids), and every
id for a full vocabulary; tokens then count as SGLang would propose them (a real torch tensor on the device path)."""

import torch

import eagle_probe
from eagle_probe.observations import Ranks
from eagle_probe.runtime.state import STATE
from sglang_cpu.draft_models import eagle3_draft_config, spec_target_config, write_eagle3_draft_checkpoint
from sglang_cpu.draft_runner import build_sglang_draft


def _loaded(tmp_path, name, draft_vocab, d2t):
    """(SGLang's draft model, the probe's coverage sampler after the load, the target's vocabulary size)."""
    target = spec_target_config()
    config = eagle3_draft_config(target, draft_vocab_size=draft_vocab)
    path = write_eagle3_draft_checkpoint(str(tmp_path / name), config, state=None if d2t is None else {"d2t": d2t})
    eagle_probe.uninstall()
    assert eagle_probe.install(env={"EAGLE_PROBE_LOG_DIR": str(tmp_path / f"logs-{name}"),
                                    "EAGLE_PROBE_FLUSH_INTERVAL_S": "0"})
    try:
        STATE.recorder._read_ranks = lambda: Ranks(tp_rank=0, tp_size=1, pp_rank=0)
        model = build_sglang_draft(path)
        sampler = STATE.recorder.coverage
    finally:
        eagle_probe.uninstall()
    return model, sampler, target.vocab_size


def _hot(sampler):
    return [i for i, v in enumerate(sampler.table) if v]


def test_hot_ids_equal_sglangs_hot_token_id(tmp_path):
    d2t = torch.arange(64, dtype=torch.int64)  # draft id i -> target id 2i
    model, sampler, vocab = _loaded(tmp_path, "d2t", 64, d2t)
    assert sampler.known and len(sampler.table) == vocab
    assert _hot(sampler) == sorted(model.hot_token_id.tolist())
    ids = torch.arange(vocab)
    assert sampler.sample_device(0.0, ids)
    sampler.count()
    assert (sampler.in_vocab, sampler.total) == (64, vocab)  # each hot id once


def test_no_d2t_is_the_first_ids_and_a_full_vocabulary_is_everything(tmp_path):
    model, sampler, vocab = _loaded(tmp_path, "missing", 64, None)
    assert model.hot_token_id is None  # SGLang proposes draft ids as target ids
    assert _hot(sampler) == list(range(64))
    sampler.sample_lists(0.0, [[0, 63, 64, vocab - 1]])
    sampler.count()
    assert (sampler.in_vocab, sampler.total) == (2, 4)
    _, full, _ = _loaded(tmp_path, "full", None, None)
    assert full.known and full.table is None
    full.sample_lists(0.0, [[0, vocab - 1]])
    full.count()
    assert (full.in_vocab, full.total) == (2, 2)
