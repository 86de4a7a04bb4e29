"""`eagle-probe doctor` and the shared draft/config rules, on configs built here (no downloads)."""

import json

import pytest

from eagle_probe.analysis import findings as F
from eagle_probe.analysis.draft_rules import draft_input_findings, ids_for_capture, layer_mismatch_findings
from eagle_probe.commands.cli import main
from eagle_probe.versions import parse_version, rules_for

V058, V0523 = rules_for(parse_version("0.5.8")), rules_for(parse_version("0.5.23"))


def kimi_target(tmp_path, layers=61, fkdr=1, hidden=7168, nested=True, name="target"):
    text = {"model_type": "deepseek_v3", "num_hidden_layers": layers, "hidden_size": hidden,
            "first_k_dense_replace": fkdr}
    cfg = ({"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25", "text_config": text}
           if nested else dict(text, architectures=["DeepseekV3ForCausalLM"]))
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


def eagle3_draft(tmp_path, ids=(2, 30, 58), hidden=7168, name="draft", **extra):
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": hidden, "target_hidden_size": hidden,
           "num_hidden_layers": 1, "eagle_config": {"use_aux_hidden_state": True}}
    if ids is not None:
        cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = list(ids)
    cfg.update(extra)
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


def doctor(capsys, *args):
    rc = main(["doctor", *args, "--format", "json"])
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if out.strip() else None), err


def codes(result):
    return sorted({f["code"] for f in result["findings"]})


def path(result, name):
    return next(p for p in result["paths"] if p["path"] == name)


# -- the motivating scenario: Kimi-K2.5, draft ids [2, 30, 58], trained on [embedding, out(L2), out(L30)] -----

def test_kimi_scenario_on_0_5_8(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", kimi_target(tmp_path), "--draft", eagle3_draft(tmp_path),
                        "--sglang-version", "0.5.8", "--trained-layers", "hf:0,3,31")
    assert rc == 1
    assert res["trained"]["labels"] == ["embedding output", "output of layer 2", "output of layer 30"]
    eager, graph = path(res, "eager"), path(res, "cuda_graph")
    assert eager["layers_to_capture"] == [3, 31, 59]
    assert [s["label"] for s in eager["captured"]] == ["output of layer 2", "output of layer 30", "output of layer 58"]
    assert graph["requested_ids"] is None and graph["layers_to_capture"] == [2, 30, 58]
    assert codes(res) == [F.GRAPH_EAGER_LAYER_MISMATCH, F.LAYER_MISMATCH]
    assert res["fix"]["ids"] is None and "id -1" in res["fix"]["impossible"]
    mismatch = [f for f in res["findings"] if f["code"] == F.LAYER_MISMATCH]
    assert len(mismatch) == 2  # eager and graph capture differ, each against the trained layers
    assert "No eagle_aux_hidden_state_layer_ids can capture them" in mismatch[0]["message"]
    assert ("slot 0: 3 (output of layer 2) instead of 0 (embedding output), the layer trained for slot 1"
            in mismatch[0]["message"])


def test_kimi_scenario_on_0_5_23(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", kimi_target(tmp_path), "--draft", eagle3_draft(tmp_path),
                        "--sglang-version", "0.5.23", "--trained-layers", "sglang:-1,2,30")
    assert rc == 1
    assert path(res, "eager")["layers_to_capture"] == path(res, "cuda_graph")["layers_to_capture"] == [2, 30, 58]
    assert codes(res) == [F.LAYER_MISMATCH]
    assert res["fix"] == {"ids": [0, 3, 31], "impossible": None, "notes": [], "trained_hf": [0, 3, 31],
                          "labels": ["embedding output", "output of layer 2", "output of layer 30"]}
    (finding,) = res["findings"]
    assert "eager and cuda_graph" in finding["message"]
    assert "Set eagle_aux_hidden_state_layer_ids to [0, 3, 31]" in finding["message"]


def test_kimi_scenario_fixed_ids_are_clean_on_0_5_23(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", kimi_target(tmp_path), "--draft", eagle3_draft(tmp_path, ids=(0, 3, 31)),
                        "--sglang-version", "0.5.23", "--trained-layers", "hf:0,3,31")
    assert rc == 0 and res["findings"] == []
    assert [s["label"] for s in path(res, "eager")["captured"]] == \
        ["embedding output", "output of layer 2", "output of layer 30"]


def test_kimi_scenario_with_tbo_loses_all_but_the_embedding(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", kimi_target(tmp_path), "--draft", eagle3_draft(tmp_path, ids=(0, 3, 31)),
                        "--sglang-version", "0.5.23", "--trained-layers", "hf:0,3,31", "--tbo")
    assert rc == 1
    tbo = path(res, "eager+tbo")
    assert [s["capture_index"] for s in tbo["captured"]] == [0]
    assert [s["capture_index"] for s in tbo["lost"]] == [3, 31]
    assert F.TBO_CAPTURE_LOST in codes(res)
    assert any("Two-Batch-Overlap still drops" in n for n in res["fix"]["notes"])


def test_text_output_names_paths_and_fix(tmp_path, capsys):
    rc = main(["doctor", "--target", kimi_target(tmp_path), "--draft", eagle3_draft(tmp_path),
               "--sglang-version", "0.5.23", "--trained-layers", "hf:0,3,31"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "eagle_aux_hidden_state_layer_ids = [0, 3, 31]" in out
    assert "2 = HF hidden_states[2] = output of layer 1" in out
    assert "ERROR layer_mismatch" in out


# -- each finding code -------------------------------------------------------------------------------

def test_plus_one_offset_explained_with_fix(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", kimi_target(tmp_path), "--draft", eagle3_draft(tmp_path),
                        "--sglang-version", "0.5.8", "--no-cuda-graph", "--trained-layers", "hf:2,30,58")
    assert rc == 1 and codes(res) == [F.LAYER_MISMATCH]
    assert "+1 offset" in res["findings"][0]["message"]
    assert res["fix"]["ids"] == [1, 29, 57]


def test_unreachable_ids(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", kimi_target(tmp_path), "--draft", eagle3_draft(tmp_path, ids=(-1, 2, 30)),
                        "--sglang-version", "0.5.8", "--no-cuda-graph")
    assert rc == 1 and codes(res) == [F.CAPTURE_ID_UNREACHABLE]
    assert "embedding output (index 0) fails" in res["findings"][0]["message"]
    rc, res, _ = doctor(capsys, "--target", kimi_target(tmp_path, name="t2"),
                        "--draft", eagle3_draft(tmp_path, ids=(2, 30, 61), name="d2"), "--sglang-version", "0.5.23")
    assert rc == 1 and F.CAPTURE_ID_UNREACHABLE in codes(res)
    assert "index >= number of layers (61)" in res["findings"][0]["message"]


def test_graph_setup_defaults_on_0_5_8_only(tmp_path, capsys):
    t, d = kimi_target(tmp_path), eagle3_draft(tmp_path, ids=(1, 3, 31))
    rc, res, _ = doctor(capsys, "--target", t, "--draft", d, "--sglang-version", "0.5.8")
    assert F.GRAPH_EAGER_LAYER_MISMATCH in codes(res)
    rc, res, _ = doctor(capsys, "--target", t, "--draft", d, "--sglang-version", "0.5.8", "--no-cuda-graph")
    assert rc == 0 and res["findings"] == []
    rc, res, _ = doctor(capsys, "--target", t, "--draft", d, "--sglang-version", "0.5.23")
    assert rc == 0 and res["findings"] == []


def test_pipeline_stages(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", kimi_target(tmp_path), "--draft", eagle3_draft(tmp_path),
                        "--sglang-version", "0.5.23", "--pp-size", "2")
    assert F.PP_STAGE_NO_CAPTURE in codes(res)
    assert res["launch"]["last_stage_layers"] == [30, 61]
    assert [s["capture_index"] for s in path(res, "eager")["lost"]] == [2]


def test_eagle3_draft_under_plain_eagle_skips_fc(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", kimi_target(tmp_path), "--draft", eagle3_draft(tmp_path),
                        "--sglang-version", "0.5.23", "--speculative-algorithm", "EAGLE")
    assert rc == 1 and codes(res) == [F.FC_SKIPPED]
    assert "--speculative-algorithm EAGLE3" in res["findings"][0]["message"]


def test_fc_width_mismatch(tmp_path, capsys):
    # 4 ids on 0.5.8, whose fc always takes 3 states
    rc, res, _ = doctor(capsys, "--target", kimi_target(tmp_path),
                        "--draft", eagle3_draft(tmp_path, ids=(1, 10, 30, 58)),
                        "--sglang-version", "0.5.8", "--no-cuda-graph")
    assert rc == 1 and codes(res) == [F.FC_WIDTH_MISMATCH]
    assert "4 aux states of width 7168" in res["findings"][0]["message"]
    # draft trained for another target width
    rc, res, _ = doctor(capsys, "--target", kimi_target(tmp_path, name="t2"),
                        "--draft", eagle3_draft(tmp_path, name="d2", target_hidden_size=4096),
                        "--sglang-version", "0.5.23")
    assert rc == 1 and codes(res) == [F.FC_WIDTH_MISMATCH]


def test_num_aux_and_norms_ignored_by_0_5_8(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", kimi_target(tmp_path),
                        "--draft", eagle3_draft(tmp_path, num_aux_hidden_states=4, fc_norm=True),
                        "--sglang-version", "0.5.8", "--no-cuda-graph")
    assert codes(res) == [F.DRAFT_CONFIG_IGNORED, F.DRAFT_WEIGHTS_DROPPED, F.FC_WIDTH_MISMATCH]
    [ignored] = [f for f in res["findings"] if f["code"] == F.DRAFT_CONFIG_IGNORED]
    assert {i["key"] for i in ignored["evidence"]["ignored"]} == {"num_aux_hidden_states", "fc_norm"}
    assert ignored["evidence"]["release"] == "0.5.8" and "serve with SGLang 0.5.12 or later" in ignored["message"]


def test_draft_config_ignored_predicted_per_release(tmp_path, capsys):
    """norm_before_fc is read from 0.5.17 on; norm_before_residual by no release; the same config on 0.5.23 names
    only the latter (what the running probe names at load, tests/real_sglang/test_draft_config_loader.py)."""
    draft = eagle3_draft(tmp_path, ids=(1, 30, 58), norm_before_fc=True, norm_before_residual=True)
    _, old, _ = doctor(capsys, "--target", kimi_target(tmp_path), "--draft", draft, "--sglang-version", "0.5.16")
    _, new, _ = doctor(capsys, "--target", kimi_target(tmp_path, name="t2"), "--draft", draft,
                       "--sglang-version", "0.5.23")
    keys = {name: {i["key"] for f in res["findings"] if f["code"] == F.DRAFT_CONFIG_IGNORED
                   for i in f["evidence"]["ignored"]} for name, res in (("old", old), ("new", new))}
    assert keys == {"old": {"norm_before_fc", "norm_before_residual"}, "new": {"norm_before_residual"}}


def test_default_layers_when_the_draft_names_none(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", kimi_target(tmp_path, nested=False),
                        "--draft", eagle3_draft(tmp_path, ids=None), "--sglang-version", "0.5.23")
    assert rc == 0 and path(res, "eager")["layers_to_capture"] == [2, 30, 58]
    assert any("defaults" in n for n in res["notes"])


# -- the shared functions the running probe calls ------------------------------------------------------

def test_draft_input_findings():
    kw = dict(model_class="LlamaForCausalLMEagle3", mode="EXTEND", embed_width=64, fc_in_width=192,
              target_hidden_size=64, num_aux=3)
    assert draft_input_findings(aux_width=192, **kw) == []
    (skip,) = draft_input_findings(aux_width=64, **kw)
    assert skip.code == F.FC_SKIPPED and "--speculative-algorithm EAGLE" in skip.message
    (wide,) = draft_input_findings(aux_width=128, **kw)
    assert wide.code == F.FC_WIDTH_MISMATCH and "2 aux states of width 64" in wide.message
    assert draft_input_findings(aux_width=64, **dict(kw, fc_in_width=None)) == []


def test_layer_mismatch_findings_and_inversion():
    assert layer_mismatch_findings(captured=[0, 3, 31], trained_hf=[0, 3, 31], num_layers=61, rules=V0523,
                                   requested_ids=[0, 3, 31]) == []
    (f,) = layer_mismatch_findings(captured=[3, 31, 59], trained_hf=[2, 30, 58], num_layers=61, rules=V058,
                                   requested_ids=[2, 30, 58])
    assert f.code == F.LAYER_MISMATCH and "+1 offset" in f.message and f.evidence_dict()["fix_ids"] == [1, 29, 57]
    assert "CUDA-graph replays still capture the defaults" not in f.message  # defaults == trained here
    assert ids_for_capture([2, 30, 58], 61, V0523) == ((2, 30, 58), "")
    ids, why = ids_for_capture([1, 3, 31], 61, V0523)
    assert ids is None and "first index is 1" in why
    ids, why = ids_for_capture([0, 3, 31], 61, V058)
    assert ids is None and "id -1" in why
    assert ids_for_capture([61], 61, V0523)[0] is None


def test_every_code_in_codes_is_known():
    assert set(F.CODES) >= {F.TBO_CAPTURE_LOST, F.GRAPH_EAGER_LAYER_MISMATCH, F.CAPTURE_ID_UNREACHABLE,
                            F.PP_STAGE_NO_CAPTURE, F.FC_WIDTH_MISMATCH, F.FC_SKIPPED, F.LAYER_MISMATCH}


# -- bad input: exit 2, the message names the file and the key ---------------------------------------------

@pytest.mark.parametrize("target_cfg, draft_cfg, extra, expected", [
    (None, {}, [], ["no such file"]),
    ("{not json", {}, [], ["not valid JSON", "target", "config.json"]),
    ({"text_config": {"num_hidden_layers": 61}}, {}, [], ["missing required key 'text_config.hidden_size'"]),
    ({"hidden_size": 8}, {}, [], ["missing required key 'num_hidden_layers'"]),
    ({"hidden_size": 8, "num_hidden_layers": "61"}, {}, [], ["'num_hidden_layers' must be an integer"]),
    ({"hidden_size": 8, "num_hidden_layers": 6}, {"architectures": ["LlamaForCausalLMEagle3"]}, [],
     ["draft config", "missing required key 'hidden_size'"]),
    ({"hidden_size": 8, "num_hidden_layers": 6}, {"architectures": ["LlamaForCausalLM"], "hidden_size": 8}, [],
     ["not an EAGLE-3 draft", "'architectures'"]),
    ({"hidden_size": 8, "num_hidden_layers": 6},
     {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 8,
      "eagle_config": {"eagle_aux_hidden_state_layer_ids": "2,3"}}, [],
     ["'eagle_config.eagle_aux_hidden_state_layer_ids' must be a list of integers"]),
    ({"hidden_size": 8, "num_hidden_layers": 6}, {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 8},
     ["--tbo"], ["missing required key 'first_k_dense_replace'"]),
    ({"hidden_size": 8, "num_hidden_layers": 6}, {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 8},
     ["--trained-layers", "0,3,31"], ["--trained-layers", "name the convention"]),
    ({"hidden_size": 8, "num_hidden_layers": 6}, {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 8},
     ["--trained-layers", "hf:0,x"], ["--trained-layers", "'x'"]),
    ({"hidden_size": 8, "num_hidden_layers": 6}, {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 8},
     ["--sglang-version", "latest"], ["--sglang-version", "not a release number"]),
])
def test_bad_input_exits_2(tmp_path, capsys, target_cfg, draft_cfg, extra, expected):
    t, d = tmp_path / "t", tmp_path / "d"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(draft_cfg))
    if target_cfg is not None:
        t.mkdir()
        (t / "config.json").write_text(target_cfg if isinstance(target_cfg, str) else json.dumps(target_cfg))
    rc = main(["doctor", "--target", str(t), "--draft", str(d / "config.json"), "--sglang-version", "0.5.23", *extra])
    err = capsys.readouterr().err
    assert rc == 2
    for text in expected:
        assert text in err
    if "--" not in expected[0]:
        assert "config" in err and str(tmp_path) in err  # names the file


def test_doctor_states_the_trained_length_and_its_source(tmp_path, capsys):
    import argparse
    import pickle
    import zipfile

    draft = eagle3_draft(tmp_path, ids=(1, 30, 58), max_position_embeddings=8192)
    _, res, _ = doctor(capsys, "--target", kimi_target(tmp_path), "--draft", draft, "--sglang-version", "0.5.23")
    assert res["trained_length"]["length"] == 8192 and "max_position_embeddings" in res["trained_length"]["source"]
    with zipfile.ZipFile(f"{draft}/training_state.pt", "w") as archive:  # torch.save's layout
        archive.writestr("archive/data.pkl", pickle.dumps({"args": argparse.Namespace(max_length=2048)}, protocol=2))
    _, res, _ = doctor(capsys, "--target", kimi_target(tmp_path, name="t2"), "--draft", draft,
                       "--sglang-version", "0.5.23")
    assert res["trained_length"]["length"] == 2048 and "training_state.pt" in res["trained_length"]["source"]
    assert any(n.startswith("trained length: 2048") for n in res["notes"])
    with open(f"{draft}/training_state.pt", "wb") as handle:
        handle.write(b"junk")
    _, res, _ = doctor(capsys, "--target", kimi_target(tmp_path, name="t3"), "--draft", draft,
                       "--sglang-version", "0.5.23")
    assert res["trained_length"]["length"] == 8192 and "not a zip" in " ".join(res["notes"])
