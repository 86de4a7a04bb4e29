"""The in-process harness really runs SGLang 0.5.23's DeepSeek classes: outputs match transformers."""

import time

import pytest
import torch

from sglang_cpu.tiny_models import deepseek_v3_config

TOKENS = [[5, 9, 17, 33, 2, 71, 8], [3, 4, 5]]
ATOL = 1e-5  # float32 everywhere; observed differences are ~2e-7


def _build(runtime, config, seed):
    model = runtime.build_deepseek(config, seed=seed)
    return model, runtime.TinyBatchRunner(model)


@pytest.fixture(scope="module")
def dense(sglang_runtime):
    return _build(sglang_runtime, deepseek_v3_config(num_hidden_layers=6, first_k_dense_replace=6), seed=0)


@pytest.fixture(scope="module")
def moe(sglang_runtime):
    return _build(sglang_runtime, deepseek_v3_config(num_hidden_layers=4, first_k_dense_replace=1), seed=1)


@pytest.fixture(params=["dense", "moe"])
def tiny(request, sglang_runtime):
    model, runner = request.getfixturevalue(request.param)
    sglang_runtime.clear_aux_capture(model)
    runner.reset()
    yield model, runner
    sglang_runtime.clear_aux_capture(model)


def hf_forward(model, tokens):
    with torch.no_grad():
        return model.hf_model(torch.tensor([tokens]), output_hidden_states=True)


def test_model_is_sglangs_and_init_is_idempotent(sglang_runtime, dense):
    from sglang.srt.models.deepseek_v2 import DeepseekV3ForCausalLM
    from sglang.srt.runtime_context import get_parallel, get_server_args

    model, runner = dense
    assert type(model) is DeepseekV3ForCausalLM
    assert model.model.layers[0].self_attn.w_kc is not None  # post_load_weights ran
    assert "hf_model" not in dict(model.named_children())  # reference kept out of the module tree
    assert (get_parallel().tp_rank, get_parallel().tp_size) == (0, 1)
    assert get_server_args().attention_backend == "torch_native"
    start = time.perf_counter()
    sglang_runtime.init_runtime()
    assert time.perf_counter() - start < 0.05


def test_extend_logits_match_transformers(tiny):
    from sglang.srt.layers.logits_processor import LogitsProcessorOutput

    model, runner = tiny
    out = runner.extend(TOKENS)
    assert isinstance(out, LogitsProcessorOutput) and out.hidden_states is None
    expected = torch.stack([hf_forward(model, t).logits[0, -1] for t in TOKENS])
    assert out.next_token_logits.shape == (2, model.config.vocab_size)
    torch.testing.assert_close(out.next_token_logits, expected, atol=ATOL, rtol=0)
    assert runner.last_forward_batch.forward_mode.name == "EXTEND"
    assert not runner.last_forward_batch.can_run_tbo


def test_aux_capture_plus_one_rule_matches_hf_hidden_states(sglang_runtime, dense):
    model, runner = dense
    runner.reset()
    model.set_eagle3_layers_to_capture([1, 3, 4])
    try:
        assert model.model.layers_to_capture == [2, 4, 5]  # 0.5.23: +1 because the first id is 1
        out = runner.extend(TOKENS, capture_hidden_mode="full")
    finally:
        sglang_runtime.clear_aux_capture(model)
    hidden = model.config.hidden_size
    assert out.hidden_states.shape == (sum(map(len, TOKENS)), 3 * hidden)
    slots = sglang_runtime.aux_slots(out, hidden)
    hf = [hf_forward(model, t).hidden_states for t in TOKENS]
    for slot, index in zip(slots, [2, 4, 5]):
        expected = torch.cat([h[index][0] for h in hf])  # HF index i = input of decoder layer i
        torch.testing.assert_close(slot, expected, atol=ATOL, rtol=0)


def test_aux_capture_ids_as_given_on_moe_model(sglang_runtime, moe):
    model, runner = moe
    runner.reset()
    model.set_eagle3_layers_to_capture([0, 2, 3])
    try:
        assert model.model.layers_to_capture == [0, 2, 3]  # first id != 1: used as given
        out = runner.extend(TOKENS, capture_hidden_mode="full")
    finally:
        sglang_runtime.clear_aux_capture(model)
    hf = [hf_forward(model, t).hidden_states for t in TOKENS]
    for slot, index in zip(sglang_runtime.aux_slots(out, model.config.hidden_size), [0, 2, 3]):
        torch.testing.assert_close(slot, torch.cat([h[index][0] for h in hf]), atol=ATOL, rtol=0)


def test_decode_then_verify_match_transformers(tiny):
    model, runner = tiny
    vocab = model.config.vocab_size
    runner.extend(TOKENS)
    out = runner.decode([11, 12])
    assert out.next_token_logits.shape == (2, vocab)
    assert [r.tokens for r in runner.last_requests] == [TOKENS[0] + [11], TOKENS[1] + [12]]
    expected = torch.stack([hf_forward(model, r.tokens).logits[0, -1] for r in runner.last_requests])
    torch.testing.assert_close(out.next_token_logits, expected, atol=ATOL, rtol=0)

    drafts = [[12, 40, 41], [11, 50, 51]]
    out = runner.target_verify(drafts)
    assert runner.last_forward_batch.forward_mode.name == "TARGET_VERIFY"
    assert out.next_token_logits.shape == (6, vocab)  # one row per verified token
    assert out.hidden_states.shape == (6, model.config.hidden_size)  # FULL, no aux: final hidden
    expected = torch.cat(
        [hf_forward(model, r.tokens + d).logits[0, -3:] for r, d in zip(runner.last_requests, drafts)]
    )
    torch.testing.assert_close(out.next_token_logits, expected, atol=ATOL, rtol=0)

    # verify commits nothing: a decode afterwards still continues the committed prefix
    out = runner.decode([7, 7])
    expected = torch.stack([hf_forward(model, r.tokens).logits[0, -1] for r in runner.last_requests])
    torch.testing.assert_close(out.next_token_logits, expected, atol=ATOL, rtol=0)


def test_verify_with_aux_capture_returns_packed_slots(sglang_runtime, dense):
    model, runner = dense
    runner.reset()
    runner.extend(TOKENS)
    model.set_eagle3_layers_to_capture([1, 3, 4])
    try:
        out = runner.target_verify([[12, 40, 41], [11, 50, 51]])
    finally:
        sglang_runtime.clear_aux_capture(model)
    assert out.hidden_states.shape == (6, 3 * model.config.hidden_size)


def test_tbo_split_on_dense_model_runs_normal_loop(dense):
    model, runner = dense
    runner.reset()
    plain = runner.extend(TOKENS)
    out = runner.extend(TOKENS, tbo_split_seq_index=1)
    assert runner.last_forward_batch.can_run_tbo
    torch.testing.assert_close(out.next_token_logits, plain.next_token_logits, atol=0, rtol=0)


def test_tbo_split_on_moe_model_enters_stage_executor(moe):
    """Layers from first_k_dense_replace on go to SGLang's TBO stage executor, which the CPU
    cannot run: for EXTEND it asks CUDA for the device's SM count."""
    model, runner = moe
    runner.reset()
    with pytest.raises(RuntimeError, match="NVIDIA driver") as raised:
        runner.extend(TOKENS, tbo_split_seq_index=1)
    assert runner.last_forward_batch.can_run_tbo
    names = [frame.name for frame in raised.traceback]
    assert "model_forward_stages" in names and "_compute_moe_deepseek_blog_prefill" in names


def test_forward_inside_sglangs_capture_mode_flag(dense):
    from sglang.srt.model_executor.runner_utils.capture_mode import get_is_capture_mode, model_capture_mode

    model, runner = dense
    runner.reset()
    eager = runner.extend(TOKENS)
    assert not get_is_capture_mode()
    with model_capture_mode():  # what SGLang's graph runners wrap capture in; no GPU needed
        assert get_is_capture_mode()
        captured = runner.extend(TOKENS)
    assert not get_is_capture_mode()
    torch.testing.assert_close(captured.next_token_logits, eager.next_token_logits, atol=0, rtol=0)


def test_runner_reuse_resets_when_full_and_refuses_stale_requests(sglang_runtime, dense):
    model, _ = dense
    runner = sglang_runtime.TinyBatchRunner(model, max_requests=2, max_tokens=24)
    expected = runner.extend(TOKENS).next_token_logits
    old = runner.last_requests
    for _ in range(3):  # each EXTEND needs the whole pool: the runner resets itself
        torch.testing.assert_close(runner.extend(TOKENS).next_token_logits, expected, atol=0, rtol=0)
    with pytest.raises(RuntimeError, match="no live requests"):
        runner.decode([1, 2], old)
    assert runner.decode([1, 2]).next_token_logits.shape == (2, model.config.vocab_size)
