"""`eagle-probe doctor` on targets of each family: the family's own rule, default set, final layer, TBO;
a target SGLang does not serve with EAGLE-3 gets a finding, never a traceback or a silent prediction."""

import json

import pytest

from eagle_probe.commands.cli import main


def write(tmp_path, name, cfg):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


def target(tmp_path, arch, layers, hidden=64, nested=False, **extra):
    text = dict({"num_hidden_layers": layers, "hidden_size": hidden}, **extra)
    cfg = {"architectures": [arch], "text_config": text} if nested else dict(text, architectures=[arch])
    return write(tmp_path, "target", cfg)


def draft(tmp_path, ids=None, hidden=64):
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": hidden, "target_hidden_size": hidden,
           "eagle_config": {"use_aux_hidden_state": True}}
    if ids is not None:
        cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = list(ids)
    return write(tmp_path, "draft", cfg)


def doctor(capsys, *args, fmt="json"):
    rc = main(["doctor", *args, "--format", fmt])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, (json.loads(out) if fmt == "json" else out), err


def eager(res):
    return next(p for p in res["paths"] if p["path"] == "eager")


def codes(res):
    return sorted({f["code"] for f in res["findings"]})


def test_llama_31_8b_shape_predicts_sglangs_plus_one(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", target(tmp_path, "LlamaForCausalLM", 32, 4096),
                        "--draft", draft(tmp_path, [2, 15, 28], 4096), "--sglang-version", "0.5.23",
                        "--trained-layers", "hf:3,16,29")
    assert rc == 0, res["findings"]
    assert eager(res)["layers_to_capture"] == [3, 16, 29]
    assert [s["hf_index"] for s in eager(res)["captured"]] == [3, 16, 29]
    assert res["fix"]["ids"] == [2, 15, 28]
    assert res["family"]["family"] == "llama" and res["family"]["verified"]
    assert "plus_one_always" in res["rules"]
    assert not any("DeepSeek's" in n for n in res["notes"])


def test_llama_with_hf_ids_as_given_gets_layer_mismatch_and_the_right_fix(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", target(tmp_path, "LlamaForCausalLM", 32, 4096),
                        "--draft", draft(tmp_path, [3, 16, 29], 4096), "--sglang-version", "0.5.23",
                        "--trained-layers", "hf:3,16,29")
    assert rc == 1 and "layer_mismatch" in codes(res)
    f = next(f for f in res["findings"] if f["code"] == "layer_mismatch")
    assert f["evidence"]["fix_ids"] == [2, 15, 28] and f["evidence"]["family"] == "llama"


@pytest.mark.parametrize("arch, release, layers, ids, expected, extra", [
    ("Qwen2ForCausalLM", "0.5.23", 28, [2, 13, 24], [3, 14, 25], {}),
    ("Qwen3ForCausalLM", "0.5.23", 36, [1, 17, 32], [2, 18, 33], {}),
    ("Qwen3MoeForCausalLM", "0.5.23", 48, [2, 23, 44], [3, 24, 45], {}),
    ("GptOssForCausalLM", "0.5.23", 24, [2, 12, 24], [2, 12, 24], {}),  # the largest is N: as given
    ("GptOssForCausalLM", "0.5.23", 24, [1, 11, 22], [2, 12, 23], {}),
    ("GptOssForCausalLM", "0.5.16", 24, [2, 12, 20], [3, 13, 21], {}),  # before 0.5.17: +1 always
    ("Glm4MoeForCausalLM", "0.5.23", 46, [1, 22, 42], [2, 23, 43], {"first_k_dense_replace": 1}),
    ("Glm4MoeLiteForCausalLM", "0.5.23", 47, [2, 23, 44], [2, 23, 44], {"first_k_dense_replace": 1}),
    ("Glm4MoeLiteForCausalLM", "0.5.23", 47, [1, 23, 44], [2, 24, 45], {"first_k_dense_replace": 1}),
    ("DeepseekV3ForCausalLM", "0.5.23", 61, [2, 30, 58], [2, 30, 58], {"first_k_dense_replace": 3}),
    ("DeepseekV3ForCausalLM", "0.5.12", 61, [2, 30, 58], [3, 31, 59], {"first_k_dense_replace": 3}),
    ("MiniMaxM2ForCausalLM", "0.5.23", 62, [2, 30, 58], [3, 31, 59], {}),
    ("Gemma3ForCausalLM", "0.5.23", 34, [2, 16, 33], [3, 17, 34], {}),  # Gemma captures the final layer (34)
    ("Gemma4ForCausalLM", "0.5.23", 30, [2, 14, 26], [3, 15, 27], {}),
])
def test_each_family_predicts_with_its_rule(tmp_path, capsys, arch, release, layers, ids, expected, extra):
    rc, res, _ = doctor(capsys, "--target", target(tmp_path, arch, layers, **extra),
                        "--draft", draft(tmp_path, ids), "--sglang-version", release)
    assert eager(res)["layers_to_capture"] == expected
    assert [s["hf_index"] for s in eager(res)["captured"]] == expected
    assert "capture_id_unreachable" not in codes(res), res["findings"]
    assert res["family"]["verified"]


def test_final_layer_only_where_the_family_captures_it(tmp_path, capsys):
    # Llama: position N is never captured (an error); GPT-OSS: it is; Qwen3-MoE: IndexError at start-up
    rc, res, _ = doctor(capsys, "--target", target(tmp_path, "LlamaForCausalLM", 32),
                        "--draft", draft(tmp_path, [2, 15, 31]), "--sglang-version", "0.5.23")
    assert rc == 1 and "capture_id_unreachable" in codes(res)
    assert [s["hf_index"] for s in eager(res)["captured"]] == [3, 16]


def test_qwen3_moe_final_layer_raises(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", target(tmp_path, "Qwen3MoeForCausalLM", 48),
                        "--draft", draft(tmp_path, [2, 23, 47]), "--sglang-version", "0.5.23")
    assert rc == 1
    f = next(f for f in res["findings"] if f["code"] == "capture_id_unreachable")
    assert "IndexError" in f["message"]


def test_gpt_oss_ids_that_work_on_0523_break_on_0516(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", target(tmp_path, "GptOssForCausalLM", 24),
                        "--draft", draft(tmp_path, [2, 12, 24]), "--sglang-version", "0.5.16")
    assert rc == 1 and eager(res)["layers_to_capture"] == [3, 13, 25] and "capture_id_unreachable" in codes(res)


def test_gpt_oss_final_layer_label(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", target(tmp_path, "GptOssForCausalLM", 24),
                        "--draft", draft(tmp_path, [2, 12, 24]), "--sglang-version", "0.5.23",
                        "--trained-layers", "hf:2,12,24")
    assert rc == 0, res["findings"]
    assert eager(res)["captured"][-1]["label"].startswith("output of layer 23 (the final layer")
    assert res["fix"]["ids"] == [2, 12, 24]


def test_minimax_m3_vl_defaults_plus_one_from_text_config(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", target(tmp_path, "MiniMaxM3SparseForConditionalGeneration", 40,
                                                   nested=True),
                        "--draft", draft(tmp_path, None), "--sglang-version", "0.5.23")
    assert eager(res)["layers_to_capture"] == [3, 21, 38]  # [2, 20, 37] + 1
    assert res["family"]["rule_letter"] == "D"


def test_nested_text_config_of_a_vl_class(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", target(tmp_path, "Gemma3ForConditionalGeneration", 34, nested=True),
                        "--draft", draft(tmp_path, [2, 16, 30]), "--sglang-version", "0.5.23")
    assert res["target"]["num_layers"] == 34 and res["family"]["family"] == "gemma3"
    assert eager(res)["layers_to_capture"] == [3, 17, 31]
    assert "target: text model read from 'text_config'" in res["notes"]


def test_tbo_by_family(tmp_path, capsys):
    # Qwen3-MoE: a TBO batch runs every layer in TBO stages, so every slot is lost; no first_k_dense_replace needed
    rc, res, _ = doctor(capsys, "--target", target(tmp_path, "Qwen3MoeForCausalLM", 48),
                        "--draft", draft(tmp_path, [2, 23, 44]), "--sglang-version", "0.5.23", "--tbo")
    tbo = next(p for p in res["paths"] if p["path"] == "eager+tbo")
    assert tbo["captured"] == [] and len(tbo["lost"]) == 3 and "tbo_capture_lost" in codes(res)
    # Llama has no TBO split: nothing lost, no TBO path
    other = tmp_path / "llama"
    other.mkdir()
    rc, res, _ = doctor(capsys, "--target", target(other, "LlamaForCausalLM", 32),
                        "--draft", draft(other, [2, 15, 28]), "--sglang-version", "0.5.23", "--tbo")
    assert rc == 0 and not any("+tbo" in p["path"] for p in res["paths"])


@pytest.mark.parametrize("arch", ["OPTForCausalLM", "Glm4ForCausalLM"])
def test_architecture_without_a_setter_gets_a_finding(tmp_path, capsys, arch):
    t, d = target(tmp_path, arch, 12), draft(tmp_path, [2, 6, 9])
    rc, res, _ = doctor(capsys, "--target", t, "--draft", d, "--sglang-version", "0.5.23")
    assert rc == 1 and codes(res) == ["target_not_eagle3"] and res["paths"] == []
    assert arch in res["findings"][0]["message"] and "ValueError" in res["findings"][0]["message"]
    rc, text, _ = doctor(capsys, "--target", t, "--draft", d, "--sglang-version", "0.5.23", fmt="text")
    assert rc == 1 and "target_not_eagle3" in text and "predicted captures" not in text


def test_family_absent_from_the_release(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", target(tmp_path, "Glm4MoeLiteForCausalLM", 47),
                        "--draft", draft(tmp_path, [2, 23, 44]), "--sglang-version", "0.5.12")
    assert rc == 1 and codes(res) == ["target_not_eagle3"]
    assert "0.5.13" in res["findings"][0]["message"]


def test_untabled_setter_class_is_predicted_unverified(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", target(tmp_path, "BailingMoeV2ForCausalLM", 32),
                        "--draft", draft(tmp_path, [2, 15, 28]), "--sglang-version", "0.5.23")
    assert "capture_rule_unverified" in codes(res) and not res["family"]["verified"]
    assert eager(res)["layers_to_capture"] == [3, 16, 29]


def test_no_architectures_family_from_model_type(tmp_path, capsys):
    t = write(tmp_path, "target", {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 64})
    rc, res, _ = doctor(capsys, "--target", t, "--draft", draft(tmp_path, [2, 15, 28]), "--sglang-version", "0.5.23")
    assert eager(res)["layers_to_capture"] == [3, 16, 29]
    assert any("from model_type 'llama'" in n for n in res["notes"])


def test_no_architectures_is_named(tmp_path, capsys):
    t = write(tmp_path, "target", {"num_hidden_layers": 61, "hidden_size": 64, "first_k_dense_replace": 3})
    rc, res, _ = doctor(capsys, "--target", t, "--draft", draft(tmp_path, [2, 30, 58]), "--sglang-version", "0.5.23")
    assert "capture_rule_unverified" in codes(res)
    assert eager(res)["layers_to_capture"] == [2, 30, 58]  # DeepSeek's rule, said so


def test_gpt_oss_layer_mismatch_labels_the_final_layer(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", target(tmp_path, "GptOssForCausalLM", 24),
                        "--draft", draft(tmp_path, [2, 12, 23]), "--sglang-version", "0.5.23",
                        "--trained-layers", "hf:2,12,24")
    f = next(f for f in res["findings"] if f["code"] == "layer_mismatch")
    assert "never captured" not in f["message"] and "24 (output of layer 23 (the final layer" in f["message"]
    assert f["evidence"]["fix_ids"] == [2, 12, 24]
