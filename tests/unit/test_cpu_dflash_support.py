"""sglang_cpu's DFLASH support on the CPU (test-only, not the probe), without SGLang: the draft checkpoints of
sglang_cpu.dflash_models (config, weight names) and the pure
parts of sglang_cpu.dflash_shims (the platform SGLang's DFLASH gate sees, the draft backend list, embeddings' dtype,
record_stream on CPU tensors). Real servers run them in tests/e2e/test_dflash_seed.py."""

import json
import os
from types import SimpleNamespace

import torch

from sglang_cpu import dflash_models as M
from sglang_cpu import dflash_shims as S
from sglang_cpu import seed

TARGET = {"hidden_size": 64, "num_hidden_layers": 6, "vocab_size": 128, "max_position_embeddings": 512,
          "rms_norm_eps": 1e-6}


def test_draft_config_names_the_dflash_fields():
    cfg = M.dflash_draft_config(TARGET, target_layer_ids=[3, 4], mask_token_id=1)
    assert cfg["architectures"] == ["DFlashDraftModel"]
    assert cfg["block_size"] == 4 and cfg["num_hidden_layers"] == 2 and cfg["hidden_size"] == 64
    assert cfg["dflash_config"] == {"mask_token_id": 1, "num_target_layers": 6, "target_layer_ids": [3, 4]}


def test_draft_config_without_ids_leaves_the_key_out():
    cfg = M.dflash_draft_config(SimpleNamespace(**TARGET), num_layers=3, block_size=8)
    assert "target_layer_ids" not in cfg["dflash_config"]
    assert cfg["dflash_config"]["mask_token_id"] == M.DEFAULT_MASK_TOKEN_ID
    assert M.num_context_features(cfg) == 3 and cfg["block_size"] == 8


def test_random_state_has_the_names_dflash_load_weights_reads():
    cfg = M.dflash_draft_config(TARGET, target_layer_ids=[1, 3, 4])
    state = M.random_dflash_draft_state(cfg)
    assert state["fc.weight"].shape == (64, 3 * 64)
    assert {"norm.weight", "hidden_norm.weight", "layers.1.self_attn.q_norm.weight",
            "layers.0.mlp.gate_proj.weight"} <= set(state)
    assert not any(name.startswith(("embed_tokens", "lm_head")) for name in state)  # the target's are used


def test_writer_puts_config_and_weights(tmp_path):
    path = M.write_random_dflash_draft(tmp_path / "d", seed.TARGET_PATH, target_layer_ids=[3, 4])
    with open(os.path.join(path, "config.json")) as f:
        assert json.load(f)["dflash_config"]["target_layer_ids"] == [3, 4]
    assert os.path.isfile(os.path.join(path, "model.safetensors"))


def test_server_args():
    args = M.dflash_server_args("/d", block_size=8)
    assert args[args.index("--speculative-algorithm") + 1] == "DFLASH"
    assert args[args.index("--speculative-num-draft-tokens") + 1] == "8"


class _Platform:
    device_type = "cpu"
    name = "real"

    def is_out_of_tree(self):
        return False


def test_platform_seen_by_the_dflash_gate():
    p = S.CpuDflashPlatform(_Platform(), ["triton", "torch_native"])
    assert p.is_out_of_tree() and p.supports_speculative_algorithm("DFLASH")
    assert not p.supports_speculative_algorithm("DSPARK")
    assert p.supports_speculative_draft_attention_backend("DFLASH", "torch_native")
    assert not p.supports_speculative_draft_attention_backend("DFLASH", "flashinfer")
    assert p.get_default_speculative_draft_attention_backend("DFLASH") == "torch_native"
    assert p.name == "real"
    assert S.is_cpu_platform(_Platform()) and not S.is_cpu_platform(p)


def test_torch_native_joins_the_draft_backends_once():
    choices, calls = ["flashinfer"], []
    S.add_torch_native(choices, lambda names: (calls.append(names), choices.extend(names)))
    S.add_torch_native(choices)
    assert choices == ["flashinfer", "torch_native"] and calls == [["torch_native"]]


def test_embeds_keep_their_dtype():
    original = torch.ones(2, 4)
    assert S.embeds_in_own_dtype({"input_embeds": original.bfloat16()}, original)["input_embeds"] is original
    replaced = S.embeds_in_own_dtype({"input_embeds": original.bfloat16() * 2}, original, replaced=True)
    assert replaced["input_embeds"].dtype == torch.float32 and replaced["input_embeds"][0, 0] == 2
    bf16 = original.bfloat16()
    assert S.embeds_in_own_dtype({"input_embeds": bf16}, bf16)["input_embeds"] is bf16
    assert S.embeds_in_own_dtype({}, original) == {}


def test_record_stream_is_a_no_op_on_cpu_tensors():
    def wrapped(*args, **kwargs):
        raise AssertionError("called")

    assert S._record_stream(wrapped, torch.zeros(1), (object(),), {}) is None
