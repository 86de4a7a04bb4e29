"""`eagle-probe doctor` with a DFlash/DSpark draft: the target_layer_ids SGLang uses, where they come from, what they
capture and the findings; `replay` taking a DFlash draft to its block forward (and refusing a DSpark one) and `parity`
giving its fix as target_layer_ids. Configs are written to tmp dirs (no downloads)."""

import json

import pytest

from eagle_probe.analysis import findings as F
from eagle_probe.commands.cli import main

V = ("--sglang-version", "0.5.23")


def write(tmp_path, name, cfg):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


def target(tmp_path, layers=6, hidden=64, name="target", **extra):
    return write(tmp_path, name, {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                                  "num_hidden_layers": layers, "hidden_size": hidden, "vocab_size": 1000, **extra})


def draft(tmp_path, ids=None, layers=2, name="draft", dflash=None, **extra):
    section = dict(dflash or {"block_size": 16, "mask_token_id": 999})
    if ids is not None:
        section["target_layer_ids"] = list(ids)
    return write(tmp_path, name, {"architectures": ["DFlashDraftModel"], "num_hidden_layers": layers,
                                  "hidden_size": 64, "dflash_config": section, **extra})


def doctor(capsys, *args):
    try:
        rc = main(["doctor", *args, "--format", "json"])
    except SystemExit as exc:
        rc = exc.code
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, (json.loads(out) if out.strip() else None), err


def text(capsys, *args):
    rc = main(["doctor", *args])
    return rc, capsys.readouterr().out


def codes(result):
    return sorted(f["code"] for f in result["findings"])


def test_defaulted_ids_are_computed_and_named(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", target(tmp_path), "--draft", draft(tmp_path), *V)
    assert rc == 0 and res["block_draft"] and res["launch"]["speculative_algorithm"] == "DFLASH"
    layers = res["layers"]
    assert layers["target_layer_ids"] == [1, 3] and layers["source"] == "default" and layers["default_formula"]
    assert [s["hf_index"] for s in layers["captured"]] == [2, 4]
    assert [s["label"] for s in layers["captured"]] == ["output of layer 1", "output of layer 3"]
    assert layers["fc"] == {"features": 2, "hidden_size": 64, "in_width": 128, "target_feeds": 128}
    assert codes(res) == [F.DFLASH_TARGET_LAYERS_DEFAULTED]
    rc, out = text(capsys, "--target", target(tmp_path, name="t2"), "--draft", draft(tmp_path, name="d2"), *V)
    assert rc == 0
    assert "target_layer_ids [1, 3]: SGLang's default for 6 target layers and 2 draft layers" in out
    assert "captured: 2 = HF hidden_states[2] = output of layer 1, 4 = HF hidden_states[4] = output of layer 3" in out
    assert "block_size 16, mask_token_id 999" in out and "draft's fc takes 2 x 64 = 128" in out
    assert "WARNING dflash_target_layers_defaulted" in out and out.rstrip().endswith("result: 0 error(s), 1 warning(s)")


def test_given_ids_that_match_the_trained_layers_are_clean(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", target(tmp_path), "--draft", draft(tmp_path, ids=(3, 4)),
                        "--trained-layers", "hf:4,5", *V)
    assert rc == 0 and res["findings"] == [] and res["errors"] == [] and res["fix"] is None
    assert res["layers"]["source"] == "dflash_config.target_layer_ids" and res["layers"]["default_formula"] is None
    assert [s["hf_index"] for s in res["layers"]["captured"]] == [4, 5]
    assert res["trained"]["labels"] == ["output of layer 3", "output of layer 4"]


def test_given_ids_that_miss_the_trained_layers_name_the_fix(tmp_path, capsys):
    args = ("--target", target(tmp_path), "--draft", draft(tmp_path, ids=(1, 3)), "--trained-layers", "hf:4,5", *V)
    rc, res, _ = doctor(capsys, *args)
    assert rc == 1 and codes(res) == [F.LAYER_MISMATCH]
    assert res["fix"] == {"target_layer_ids": [3, 4], "impossible": None}
    rc, out = text(capsys, *args)
    assert rc == 1 and 'to capture the trained layers: "dflash_config": {"target_layer_ids": [3, 4]}' in out
    assert "ERROR layer_mismatch" in out and "result: 1 error(s), 0 warning(s)" in out


def test_trained_on_the_embedding_cannot_be_captured(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", target(tmp_path), "--draft", draft(tmp_path, ids=(1, 3)),
                        "--trained-layers", "hf:0,4", *V)
    assert rc == 1 and res["fix"] == {"target_layer_ids": None, "impossible": [0]}


def test_disagreeing_aux_ids(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", target(tmp_path), "--draft",
                        draft(tmp_path, ids=(1, 3), eagle_aux_hidden_state_layer_ids=[1, 3]), *V)
    assert rc == 0 and codes(res) == [F.DFLASH_LAYER_IDS_DISAGREE]
    rc, res, _ = doctor(capsys, "--target", target(tmp_path, name="t2"), "--draft",
                        draft(tmp_path, ids=(1, 3), name="d2", eagle_aux_hidden_state_layer_ids=[2, 4]), *V)
    assert rc == 0 and res["findings"] == []


def test_out_of_range_ids_are_refused_and_the_final_layer_is_never_captured(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", target(tmp_path), "--draft", draft(tmp_path, ids=(1, 6, 5)), *V)
    assert rc == 1 and codes(res) == [F.CAPTURE_ID_UNREACHABLE] * 2
    refused, final = res["findings"]
    assert "target_layer_ids[1] = 6 is out of range" in refused["message"]
    assert "SGLang refuses to start" in refused["message"] and "the range is 0 to 5 for 6 target layers" in \
        refused["message"]
    assert refused["evidence"]["valid_ids"] == [0, 5] and refused["evidence"]["refused_at_start"]
    assert "target_layer_ids[2] = 5 names the final layer's output" in final["message"]
    assert not final["evidence"]["refused_at_start"]
    rc, res, _ = doctor(capsys, "--target", target(tmp_path, name="t2"), "--draft",
                        draft(tmp_path, ids=(-1,), name="d2"), *V)
    assert rc == 1 and "target_layer_ids[0] = -1 is out of range" in res["findings"][0]["message"]


def test_default_over_too_few_target_layers_is_refused(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", target(tmp_path, layers=3), "--draft", draft(tmp_path), *V)
    assert rc == 1 and res["layers"] is None
    assert "needs at least 4 target layers for 2 draft layers" in res["errors"][0]


def test_num_target_layers_and_loops(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", target(tmp_path, layers=3, num_loops=2), "--draft",
                        draft(tmp_path, dflash={"num_target_layers": 36}), *V)
    assert rc == 0 and res["target"]["num_layers"] == 6 and res["layers"]["target_layer_ids"] == [1, 3]
    notes = " ".join(res["notes"])
    assert "num_loops 2: SGLang counts 3 x 2 = 6 target layers" in notes
    assert "num_target_layers 36 differs from the target's 6 layers" in notes and "runtime target" in notes
    rc, res, _ = doctor(capsys, "--target", target(tmp_path, layers=3, num_loops=2, name="t2"), "--draft",
                        draft(tmp_path, name="d2"), "--sglang-version", "0.5.19")
    assert rc == 1 and res["target"]["num_layers"] == 3 and "does not count it" in " ".join(res["notes"])


def test_launch_flags_sglang_overrides_or_refuses(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", target(tmp_path), "--draft", draft(tmp_path, ids=(1, 3)), *V,
                        "--speculative-num-draft-tokens", "8", "--speculative-eagle-topk", "4", "--pp-size", "2")
    assert rc == 1 and res["launch"]["block_size"] == 8
    notes = " ".join(res["notes"])
    assert "SGLang serves 8 and logs 'DFLASH block size mismatch'" in notes and "overrides it to 1" in notes
    assert any("--pp-size 2" in e and "pp_size == 1" in e for e in res["errors"])
    rc, res, _ = doctor(capsys, "--target", target(tmp_path, name="t2", vocab_size=500), "--draft",
                        draft(tmp_path, ids=(1, 3), name="d2"), *V)
    assert rc == 1 and "mask_token_id 999 is outside the target's vocabulary of 500" in res["errors"][0]


@pytest.mark.parametrize("release, algorithm, since", [("0.5.10", "DFLASH", "0.5.11"),
                                                       ("0.5.8", "DFLASH", "0.5.11"),
                                                       ("0.5.15", "DSPARK", "0.5.16")])
def test_a_release_without_the_algorithm(tmp_path, capsys, release, algorithm, since):
    rc, res, _ = doctor(capsys, "--target", target(tmp_path), "--draft", draft(tmp_path), "--sglang-version",
                        release, "--speculative-algorithm", algorithm)
    assert rc == 1 and res["layers"] is None and res["launch"] is None
    [error] = res["errors"]
    assert f"SGLang {release} has no --speculative-algorithm {algorithm}" in error and f"arrive in {since}" in error


def test_dspark_ids_replace_the_dflash_ones(tmp_path, capsys):
    d = write(tmp_path, "ds", {"architectures": ["Qwen3DSparkModel"], "num_hidden_layers": 1, "hidden_size": 64,
                               "dflash_config": {"target_layer_ids": [2]}, "dspark_target_layer_ids": [1, 3]})
    rc, res, _ = doctor(capsys, "--target", target(tmp_path), "--draft", d, *V)
    assert res["launch"]["speculative_algorithm"] == "DSPARK" and res["layers"]["target_layer_ids"] == [1, 3]
    assert res["layers"]["source"] == "dspark_target_layer_ids" and "set_dspark_layers_to_capture" in \
        " ".join(res["notes"])
    rc, res, _ = doctor(capsys, "--target", target(tmp_path, name="t2"), "--draft", d, *V,
                        "--speculative-algorithm", "DFLASH")
    assert res["layers"]["target_layer_ids"] == [2] and res["layers"]["source"] == "dflash_config.target_layer_ids"


def test_target_wider_than_the_draft(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", target(tmp_path, hidden=128), "--draft", draft(tmp_path, ids=(1, 3)), *V)
    assert rc == 1 and codes(res) == [F.FC_WIDTH_MISMATCH]
    assert "2 x 64 = 128" in res["findings"][0]["message"] and "2 x 128 = 256" in res["findings"][0]["message"]


@pytest.mark.parametrize("cfg, extra, needles", [
    ({"dflash_config": {"target_layer_ids": "1,3"}}, (), ["'dflash_config.target_layer_ids' must be a list"]),
    ({"dflash_config": {"target_layer_ids": []}}, (), ["'dflash_config.target_layer_ids' is empty"]),
    ({"dflash_config": {"block_size": "16"}}, (), ["'dflash_config.block_size' must be an integer >= 1"]),
    ({"dflash_config": []}, (), ["key 'dflash_config' must be an object"]),
    ({"dflash_config": {"mask_token_id": -1}}, (), ["'dflash_config.mask_token_id' must be an integer >= 0"]),
    ({"dflash_config": {}, "num_hidden_layers": None}, (), ["missing required key 'num_hidden_layers'"]),
    ({"dflash_config": {}}, ("--speculative-algorithm", "EAGLE3"), ["--speculative-algorithm EAGLE3",
                                                                     "block-diffusion draft", "DFLASH"]),
    ({"architectures": ["LlamaForCausalLMEagle3"], "eagle_config": {}}, ("--speculative-algorithm", "DFLASH"),
     ["--speculative-algorithm DFLASH", "is an EAGLE-3 draft's"]),
    ({"dflash_config": {}}, ("--speculative-num-draft-tokens", "0"), ["--speculative-num-draft-tokens 0"]),
])
def test_bad_input_is_named(tmp_path, capsys, cfg, extra, needles):
    base = {"architectures": ["DFlashDraftModel"], "num_hidden_layers": 2, "hidden_size": 64}
    d = write(tmp_path, "draft", {k: v for k, v in {**base, **cfg}.items() if v is not None})
    rc, res, err = doctor(capsys, "--target", target(tmp_path), "--draft", d, *extra)
    assert rc == 2 and res is None
    for needle in needles:
        assert needle in err, err


# -- replay and parity ---------------------------------------------------------------------------------------

def test_replay_takes_a_dflash_draft_to_its_block_forward_and_refuses_dspark(tmp_path, capsys):
    """No refusal for a DFlash draft any more: replay reads its config as a DFlash draft's (this config-only one
    lacks what the forward needs, named); a DSpark draft is refused naming it (tests/unit/test_replay_dflash.py runs
    the forward)."""
    pytest.importorskip("torch")
    for extra in ((), ("--search",), ("--wiring", "hf:2,4")):
        rc = main(["replay", "--draft", draft(tmp_path, name=f"d{len(extra)}"), "--target", target(tmp_path, name=
                   f"t{len(extra)}"), "--dump-dir", str(tmp_path), *extra])
        err = capsys.readouterr().err
        assert rc == 2 and "Traceback" not in err and "block-diffusion draft" not in err, err
        assert "draft config" in err and "missing key 'num_attention_heads'" in err, err
    rc = main(["replay", "--draft", draft(tmp_path, name="ds", dspark_target_layer_ids=[1, 3]), "--target",
               target(tmp_path, name="tds"), "--dump-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and "a DSpark draft" in err and "Traceback" not in err, err


def test_parity_gives_a_block_drafts_fix_as_target_layer_ids(tmp_path, capsys):
    pytest.importorskip("torch")
    from tests.unit.test_parity_family import TRAINED, write_inputs

    data, dumps = write_inputs(tmp_path)
    rc = main(["parity", "--data", data, "--dump-dir", dumps, "--draft", draft(tmp_path), "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and [s["best_hf_index"] for s in report["slots"]] == list(TRAINED)
    fix = report["ids_to_set"]
    assert fix["ids"] == [t - 1 for t in TRAINED] and fix["key"] == "dflash_config.target_layer_ids"
    assert main(["parity", "--data", data, "--dump-dir", dumps, "--draft", draft(tmp_path, name="d2")]) == 0
    assert "dflash_config.target_layer_ids = [2, 4, 5]" in capsys.readouterr().out
    rc = main(["parity", "--data", data, "--dump-dir", dumps, "--draft", str(tmp_path / "missing")])
    assert rc == 2 and "missing" in capsys.readouterr().err
