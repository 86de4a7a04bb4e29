"""The replay's plain-torch EAGLE-3 draft (eagle_probe/commands/replay/draft.py) against SGLang 0.5.23's real
LlamaForCausalLMEagle3 on the CPU: the same checkpoint, the same inputs (aux states, shifted tokens, positions,
several requests), logits equal within float32 tolerance at every row, for each way SGLang 0.5.23 builds the draft:
plain fc, norm_before_fc, fc_norm, a reduced vocabulary with d2t, GQA with llama3 rope and a draft narrower than the
target (own embedding), yarn and linear rope, the lm_head taken from the target, two decoder layers."""

import os

import pytest
import torch

from sglang_cpu.draft_models import eagle3_draft_config, spec_target_config, write_eagle3_draft_checkpoint

TARGET_HIDDEN = 64
VOCAB = 256
REQUESTS = [list(range(3, 40)), [7, 9, 11, 200, 31, 5], list(range(100, 230))]  # 130 rows: late rope angles too


def _random_norms(config, seed):
    """Non-trivial norm weights (the checkpoint builder writes ones) so that every norm is checked."""
    g = torch.Generator().manual_seed(seed)
    h, k = config["hidden_size"], config.get("num_aux_hidden_states") or 3
    h_in = config.get("target_hidden_size", h)
    out = {}
    for name in ("midlayer.hidden_norm.weight", "midlayer.input_layernorm.weight",
                 "midlayer.post_attention_layernorm.weight", "norm.weight"):
        out[name] = 1 + 0.3 * torch.randn(h, generator=g)
    out["input_norm.weight"] = 1 + 0.3 * torch.randn(h_in * k, generator=g)
    for _i, name in enumerate(("aux_norm_low", "aux_norm_mid", "aux_norm_high")):
        out[f"{name}.weight"] = 1 + 0.3 * torch.randn(h_in, generator=g)
    return out


def _second_layer(config, seed):
    g = torch.Generator().manual_seed(seed)
    h, hd = config["hidden_size"], config["head_dim"]
    q, kv, inter = config["num_attention_heads"] * hd, config["num_key_value_heads"] * hd, config["intermediate_size"]
    p = "layers.1."
    return {p + "self_attn.q_proj.weight": 0.05 * torch.randn(q, h, generator=g),
            p + "self_attn.k_proj.weight": 0.05 * torch.randn(kv, h, generator=g),
            p + "self_attn.v_proj.weight": 0.05 * torch.randn(kv, h, generator=g),
            p + "self_attn.o_proj.weight": 0.05 * torch.randn(h, q, generator=g),
            p + "mlp.gate_proj.weight": 0.05 * torch.randn(inter, h, generator=g),
            p + "mlp.up_proj.weight": 0.05 * torch.randn(inter, h, generator=g),
            p + "mlp.down_proj.weight": 0.05 * torch.randn(h, inter, generator=g),
            p + "hidden_norm.weight": 1 + 0.3 * torch.randn(h, generator=g),
            p + "input_layernorm.weight": torch.ones(h),
            p + "post_attention_layernorm.weight": 1 + 0.3 * torch.randn(h, generator=g)}


CASES = {
    "plain_fc": dict(cfg=dict(draft_vocab_size=VOCAB)),
    "norm_before_fc": dict(cfg=dict(draft_vocab_size=VOCAB, eagle_config={
        "eagle_aux_hidden_state_layer_ids": [1, 3, 4], "norm_before_fc": True})),
    "fc_norm": dict(cfg=dict(draft_vocab_size=VOCAB, fc_norm=True)),
    "both_norms_fc_bias": dict(cfg=dict(draft_vocab_size=VOCAB, fc_norm=True, norm_before_fc=True, bias=True)),
    "reduced_vocab_d2t": dict(cfg=dict(draft_vocab_size=64), d2t=True),
    "gqa_llama3_narrow_draft": dict(cfg=dict(
        draft_vocab_size=VOCAB, hidden_size=48, target_hidden_size=TARGET_HIDDEN, num_attention_heads=4,
        num_key_value_heads=2, rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                                "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                "original_max_position_embeddings": 64}), own_embedding=True),
    "yarn_rope": dict(cfg=dict(draft_vocab_size=VOCAB, rope_parameters={
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 64,
        "beta_fast": 32.0, "beta_slow": 1.0})),
    "linear_rope_partial_rotary": dict(cfg=dict(draft_vocab_size=VOCAB, partial_rotary_factor=0.5,
                                                rope_parameters={"rope_type": "linear", "rope_theta": 10000.0,
                                                                 "factor": 2.0})),
    "lm_head_from_target": dict(cfg=dict(draft_vocab_size=None), head_from_target=True),
    "two_layers": dict(cfg=dict(draft_vocab_size=VOCAB, num_hidden_layers=2), second_layer=True),
}


@pytest.fixture(scope="module")
def target_weights():
    g = torch.Generator().manual_seed(11)
    return torch.randn(VOCAB, TARGET_HIDDEN, generator=g), torch.randn(VOCAB, TARGET_HIDDEN, generator=g)


def _build(tmp_path, name, case):
    overrides = dict(case["cfg"])
    hidden = overrides.pop("hidden_size", None)
    target_hidden = overrides.pop("target_hidden_size", None)
    vocab = overrides.pop("draft_vocab_size")
    config = eagle3_draft_config(spec_target_config(), hidden_size=hidden, target_hidden_size=target_hidden,
                                 draft_vocab_size=vocab, **overrides)
    state = _random_norms(config, 5)
    if case.get("second_layer"):
        state.update(_second_layer(config, 6))
    if config.get("bias"):
        state["fc.bias"] = 0.1 * torch.randn(config["hidden_size"], generator=torch.Generator().manual_seed(8))
        state["midlayer.self_attn.o_proj.bias"] = 0.1 * torch.randn(config["hidden_size"])
    if case.get("d2t"):
        g = torch.Generator().manual_seed(9)
        hot = torch.sort(torch.randperm(VOCAB, generator=g)[:vocab]).values
        state["d2t"] = hot - torch.arange(vocab)
        state["t2d"] = torch.zeros(VOCAB, dtype=torch.bool)
    path = write_eagle3_draft_checkpoint(str(tmp_path / name), config, seed=3, state=state)
    if "d2t" in state:  # the checkpoint writer stores floats; d2t is int64 on disk in real drafts
        from safetensors.torch import load_file, save_file
        tensors = load_file(os.path.join(path, "model.safetensors"))
        tensors["d2t"], tensors["t2d"] = state["d2t"].to(torch.int64), state["t2d"]
        save_file(tensors, os.path.join(path, "model.safetensors"))
    return path, config


@pytest.mark.parametrize("name", list(CASES))
def test_torch_draft_equals_sglangs_llama_eagle3(sglang_runtime, tmp_path, target_weights, name):
    from eagle_probe.commands.replay.draft import load_torch_draft
    from sglang_cpu.draft_runner import DraftBatchRunner, build_sglang_draft

    case = CASES[name]
    path, config = _build(tmp_path, name, case)
    target_embed, target_head = target_weights
    own = case.get("own_embedding")
    from_target = case.get("head_from_target")
    # as the EAGLE worker does: set_embed (which keeps the draft's own when its width differs), or
    # set_embed_and_head when the draft config has no draft_vocab_size
    model = build_sglang_draft(path, embedding=target_embed, lm_head=target_head if from_target else None)
    runner = DraftBatchRunner(model)
    rows = sum(len(r) for r in REQUESTS)
    width = config.get("target_hidden_size", config["hidden_size"]) * 3
    aux = 2.0 * torch.randn(rows, width, generator=torch.Generator().manual_seed(4))
    sglang_hidden = runner.draft_extend(REQUESTS, aux)
    sglang_logits = sglang_hidden @ model.lm_head.weight.detach().T

    draft = load_torch_draft(path, target_embed, target_head)
    assert draft.w.embedding_source == ("own" if own else "target")
    assert draft.w.lm_head_source == ("target" if from_target else "draft")
    tokens = torch.tensor([t for r in REQUESTS for t in r])
    positions = torch.tensor([p for r in REQUESTS for p in range(len(r))])
    starts = [sum(len(r) for r in REQUESTS[:i]) for i in range(len(REQUESTS))]
    prepared = draft.prepare(tokens, positions, [(s, len(r)) for s, r in zip(starts, REQUESTS)])
    with torch.no_grad():
        ours = draft.logits(aux, prepared)
        predicted = draft.predict(aux, prepared)
    assert ours.shape == sglang_logits.shape
    torch.testing.assert_close(ours, sglang_logits, rtol=1e-5, atol=1e-5)
    sglang_ids = sglang_logits.argmax(-1)
    if model.hot_token_id is not None:  # what the EAGLE worker proposes: hot_token_id[draft id]
        sglang_ids = model.hot_token_id[sglang_ids]
        assert draft.w.d2t is not None
    assert torch.equal(predicted, sglang_ids)
    # several wirings in one pass (tiled rows) give the same proposals as one at a time
    tiled = draft.tile(prepared, 3)
    with torch.no_grad():
        three = draft.predict(torch.cat([aux, aux.flip(0), aux]), tiled)
        flipped = draft.predict(aux.flip(0), prepared)
    assert torch.equal(three[:rows], predicted) and torch.equal(three[2 * rows:], predicted)
    assert torch.equal(three[rows:2 * rows], flipped)
    # the score near-ties are told apart by: log p(label) from SGLang's own logits, for labels given as target ids
    # (half its proposals, half not; one outside a reduced draft vocabulary: -inf)
    hot = model.hot_token_id if model.hot_token_id is not None else torch.arange(sglang_logits.shape[1])
    draft_id = {int(t): i for i, t in enumerate(hot.tolist())}
    labels = torch.cat([sglang_ids[:rows // 2], sglang_ids.flip(0)[rows // 2:]])
    absent = next((t for t in range(target_head.shape[0]) if t not in draft_id), None)
    if absent is not None:
        labels[0] = absent
    reference = torch.log_softmax(sglang_logits.double(), -1)
    expected = torch.tensor([float(reference[r, draft_id[int(t)]]) if int(t) in draft_id else -float("inf")
                             for r, t in enumerate(labels)], dtype=torch.float64)
    with torch.no_grad():
        hits, log_probs = draft.judge(aux, prepared, labels, draft.draft_ids(labels))
    assert torch.equal(hits, sglang_ids == labels)
    torch.testing.assert_close(log_probs.double(), expected, rtol=1e-5, atol=1e-5)
