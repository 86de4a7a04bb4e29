"""Which ids each EAGLE-3 draft class sizes its fc from (analysis.draft_ids), Kimi-K2.5's MLA draft's loader naming
(analysis.draft_weights "kimi"), and `eagle-probe doctor` on a Kimi draft (Eagle3DeepseekV2ForCausalLM): the fc
width by its own rule, top-level ids the target never reads (draft_target_ids_differ), a release without the class.
The facts themselves are proven on SGLang's source (tests/contract/test_contract_draft_ids.py) and its real class
(tests/real_sglang/test_kimi_draft.py)."""

import json

from eagle_probe.analysis import draft_ids
from eagle_probe.analysis.draft_ids import DRAFT_CLASSES, KIMI, LLAMA, draft_reads, ids_differ_finding
from eagle_probe.analysis.draft_weights import unconsumed_weights
from eagle_probe.commands.cli import main

KIMI_ROW, LLAMA_ROW = DRAFT_CLASSES[KIMI], DRAFT_CLASSES[LLAMA]


def test_kimi_reads_eagle_config_then_top_level_then_three_and_never_num_aux():
    assert draft_reads(KIMI_ROW, {"eagle_aux_hidden_state_layer_ids": [1, 2]}, [7, 8, 9, 10], 5) == \
        ((1, 2), "eagle_config", 2)
    assert draft_reads(KIMI_ROW, {}, [7, 8, 9, 10], 5) == ((7, 8, 9, 10), "top_level", 4)
    assert draft_reads(KIMI_ROW, None, None, 5) == (None, "default", 3)


def test_llama_reads_num_aux_then_eagle_config_and_never_top_level():
    assert draft_reads(LLAMA_ROW, {"eagle_aux_hidden_state_layer_ids": [1, 2]}, None, 4) == \
        ((1, 2), "num_aux_hidden_states", 4)
    assert draft_reads(LLAMA_ROW, {"eagle_aux_hidden_state_layer_ids": [1, 2]}, None, None) == \
        ((1, 2), "eagle_config", 2)
    assert draft_reads(LLAMA_ROW, {}, [7, 8, 9, 10], None) == (None, "default", 3)


def test_the_target_reads_a_dict_eagle_config_only():
    assert draft_ids.target_ids({"eagle_aux_hidden_state_layer_ids": [3, 4]}) == (3, 4)
    assert draft_ids.target_ids(None) is None and draft_ids.target_ids({}) is None


def test_ids_differ_only_when_the_layers_differ():
    f = ids_differ_finding(KIMI, (1, 3, 4, 5), "top_level", None, (2, 4, 5, 6), (2, 4, 5), 8)
    assert f.code == "draft_target_ids_differ" and f.severity == "error"
    assert "top level" in f.message and "[1, 3, 4, 5]" in f.message and "defaults" in f.message
    assert ids_differ_finding(KIMI, (1, 3), "top_level", None, (2, 4, 5), (2, 4, 5), 8) is None  # same layers
    assert ids_differ_finding(KIMI, (1, 3), "eagle_config", (1, 3), (2, 4), (2, 4), 8) is None
    assert ids_differ_finding(LLAMA, None, "default", None, (), (2, 4, 5), 8) is None


def test_kimi_naming_drops_prefixed_names_lone_halves_and_unknown_weights():
    params = ["model.midlayer.self_attn.fused_qkv_a_proj_with_mqa.weight", "model.midlayer.mlp.gate_up_proj.weight",
              "model.fc.weight", "model.norm.weight", "lm_head.weight"]
    names = ["layers.0.self_attn.q_a_proj.weight", "layers.0.self_attn.kv_a_proj_with_mqa.weight",
             "layers.0.mlp.gate_proj.weight", "layers.0.mlp.up_proj.weight", "fc.weight", "norm.weight",
             "lm_head.weight", "d2t", "t2d", "model.fc.weight", "fc_norm.0.weight"]
    assert unconsumed_weights(names, params, "kimi") == (("model.fc.weight", "fc_norm.0.weight"), ("t2d",))
    lone = ["layers.0.self_attn.q_a_proj.weight", "fc.weight", "model.d2t_map"]
    assert unconsumed_weights(lone, params, "kimi")[0] == ("layers.0.self_attn.q_a_proj.weight", "model.d2t_map")
    # the Llama loader's naming keeps a "model."-prefixed name and takes any name containing d2t
    assert unconsumed_weights(["model.fc.weight", "model.d2t_map"], params, "llama") == ((), ())


def _write(tmp_path, name, data):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(data))
    return str(d)


def kimi_target(tmp_path, name="target"):
    """Kimi-K2.5's language model: 61 layers, DeepSeek's rules (defaults [2, 30, 58])."""
    return _write(tmp_path, name, {"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 61,
                                   "hidden_size": 7168, "first_k_dense_replace": 1})


def doctor(capsys, *args):
    rc = main(["doctor", *args, "--format", "json"])
    out, err = capsys.readouterr()
    return rc, json.loads(out), err


def codes(result):
    return {f["code"] for f in result["findings"]}


def path(result, name):
    return next(p for p in result["paths"] if p["path"] == name)


def kimi_draft(tmp_path, name="kdraft", **cfg):
    data = {"architectures": ["Eagle3DeepseekV2ForCausalLM"], "hidden_size": 7168, "target_hidden_size": 7168,
            "num_hidden_layers": 1, **cfg}
    return _write(tmp_path, name, data)


def test_doctor_accepts_the_kimi_draft_and_names_top_level_ids(tmp_path, capsys):
    # top-level ids only, and a num_aux_hidden_states the Kimi draft never reads
    draft = kimi_draft(tmp_path, eagle_aux_hidden_state_layer_ids=[1, 29, 57, 59], num_aux_hidden_states=3)
    rc, res, _ = doctor(capsys, "--target", kimi_target(tmp_path), "--draft", draft, "--sglang-version", "0.5.23")
    assert rc == 1 and res["draft"]["model_class"] == "Eagle3DeepseekV2ForCausalLM"
    assert res["draft"]["ids_read_from"] == "top_level" and res["draft"]["top_level_layer_ids"] == [1, 29, 57, 59]
    assert res["draft"]["sglang_num_aux"] == 4 and res["draft"]["fc_in_width"] == 4 * 7168
    eager = path(res, "eager")
    assert eager["requested_ids"] is None and eager["layers_to_capture"] == [2, 30, 58]  # the target's defaults
    assert "draft_target_ids_differ" in codes(res) and "fc_width_mismatch" in codes(res)
    differ = next(f for f in res["findings"] if f["code"] == "draft_target_ids_differ")
    assert differ["evidence"]["expected"] == [2, 30, 58, 60] and differ["evidence"]["captured"] == [2, 30, 58]


def test_doctor_kimi_draft_with_eagle_config_ids_is_clean(tmp_path, capsys):
    draft = kimi_draft(tmp_path, eagle_config={"eagle_aux_hidden_state_layer_ids": [2, 30, 58]})
    rc, res, _ = doctor(capsys, "--target", kimi_target(tmp_path), "--draft", draft, "--sglang-version", "0.5.23")
    assert res["draft"]["ids_read_from"] == "eagle_config" and res["draft"]["fc_in_width"] == 3 * 7168
    assert "draft_target_ids_differ" not in codes(res) and "fc_width_mismatch" not in codes(res)


def test_doctor_kimi_draft_norm_before_fc_and_a_release_without_the_class(tmp_path, capsys):
    draft = kimi_draft(tmp_path, eagle_config={"eagle_aux_hidden_state_layer_ids": [2, 30, 58],
                                               "norm_before_fc": True})
    _, res, _ = doctor(capsys, "--target", kimi_target(tmp_path), "--draft", draft, "--sglang-version", "0.5.11")
    assert "draft_weights_dropped" in codes(res)
    assert any("no Eagle3DeepseekV2ForCausalLM" in n and "0.5.12" in n for n in res["notes"])
    _, res, _ = doctor(capsys, "--target", kimi_target(tmp_path, name="t2"), "--draft", draft,
                       "--sglang-version", "0.5.12")
    assert not any("no Eagle3DeepseekV2ForCausalLM" in n for n in res["notes"])


def test_doctor_llama_draft_top_level_ids_reach_neither_side(tmp_path, capsys):
    d = tmp_path / "ldraft"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 7168,
                                               "num_hidden_layers": 1, "eagle_aux_hidden_state_layer_ids": [1, 2]}))
    _, res, _ = doctor(capsys, "--target", kimi_target(tmp_path), "--draft", str(d), "--sglang-version", "0.5.23")
    assert res["draft"]["ids_read_from"] == "default" and res["draft"]["sglang_num_aux"] == 3
    assert path(res, "eager")["requested_ids"] is None
    assert "draft_target_ids_differ" not in codes(res)
    assert any("not read by the target" in n for n in res["notes"])
