"""The draft's vocabulary map: the pure rules (analysis.vocab_map) and `doctor --draft DIR` reading only the
safetensors header(s) and d2t, on small real safetensors files written by safetensors' own writer."""

import json
import os

import numpy as np
import pytest
from safetensors.numpy import save_file

from eagle_probe.analysis import findings as F
from eagle_probe.analysis.vocab_map import vocab_map_findings
from eagle_probe.commands.cli import main
from eagle_probe.commands.safetensors_header import read_header

TARGET_VOCAB, DRAFT_VOCAB = 1000, 200


def target_dir(tmp_path, vocab=TARGET_VOCAB, nested=False):
    text = {"model_type": "deepseek_v3", "num_hidden_layers": 8, "hidden_size": 64, "first_k_dense_replace": 1,
            "vocab_size": vocab}
    cfg = ({"architectures": ["KimiK25ForConditionalGeneration"], "text_config": text} if nested
           else dict(text, architectures=["DeepseekV3ForCausalLM"]))
    d = tmp_path / "target"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


def draft_dir(tmp_path, draft_vocab=DRAFT_VOCAB, tensors=None, name="draft"):
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 64, "target_hidden_size": 64,
           "num_hidden_layers": 1, "vocab_size": TARGET_VOCAB,
           "eagle_config": {"use_aux_hidden_state": True, "eagle_aux_hidden_state_layer_ids": [1, 4, 5]}}
    if draft_vocab is not None:
        cfg["draft_vocab_size"] = draft_vocab
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    if tensors is not None:
        weights = {"fc.weight": np.zeros((64, 192), np.float32), "lm_head.weight": np.zeros((8, 64), np.float32)}
        weights.update(tensors)
        save_file(weights, str(d / "model.safetensors"))
    return str(d)


def good_d2t(draft_vocab=DRAFT_VOCAB, target_vocab=TARGET_VOCAB):
    """A hot vocabulary: every 5th target id, as offsets (target id = i + d2t[i])."""
    hot = np.arange(draft_vocab) * (target_vocab // draft_vocab)
    return (hot - np.arange(draft_vocab)).astype(np.int64)


def doctor(capsys, *args):
    rc = main(["doctor", *args, "--sglang-version", "0.5.23", "--format", "json"])
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if out.strip() else None), err


def codes(result):
    return sorted({f["code"] for f in result["findings"]})


# -- the rules ------------------------------------------------------------------------------------------------------

def test_missing_map_counts_the_target_ids_never_proposed():
    [finding] = vocab_map_findings("Draft", 32000, 128256, None)
    assert finding.code == F.DRAFT_VOCAB_MAP_MISSING and finding.severity == F.ERROR
    assert finding.evidence_dict()["never_proposed"] == 128256 - 32000
    assert "96256 target ids" in finding.message and "d2t" in finding.message and "Fix:" in finding.message


def test_equal_vocabularies_and_target_lm_head_need_no_map():
    assert vocab_map_findings("Draft", 1000, 1000, None) == []
    assert vocab_map_findings("Draft", None, 1000, None) == []  # draft_vocab_size null: the target's lm_head
    assert vocab_map_findings("Draft", 200, None, None) == []  # the target's size unknown: nothing to judge
    assert vocab_map_findings("Draft", 200, 1000, good_d2t().tolist()) == []
    assert vocab_map_findings("Draft", 1000, 1000, [0] * 1000) == []  # an identity map is a valid map


def test_invalid_maps_name_the_ids():
    d2t = good_d2t().tolist()
    d2t[3] = 5000  # draft id 3 -> 5003, past the target's vocabulary
    d2t[7] = d2t[6] + 6 - 7  # draft id 7 -> the target id of draft id 6
    [finding] = vocab_map_findings("Draft", DRAFT_VOCAB, TARGET_VOCAB, d2t)
    evidence = finding.evidence_dict()
    assert finding.code == F.DRAFT_VOCAB_MAP_INVALID
    assert evidence["out_of_range"] == 1 and evidence["out_of_range_examples"] == [[3, 5003]]
    assert evidence["collisions"] == 1 and evidence["collision_examples"] == [[30, [6, 7]]]
    assert "draft id 3 -> 5003" in finding.message and "target id 30 <- draft ids 6, 7" in finding.message
    [negative] = vocab_map_findings("Draft", 2, TARGET_VOCAB, [-1, 0])
    assert negative.evidence_dict()["out_of_range_examples"] == [[0, -1]]
    [short] = vocab_map_findings("Draft", DRAFT_VOCAB, TARGET_VOCAB, good_d2t()[:150].tolist())
    assert "150 entries for a draft_vocab_size of 200" in short.message


def test_draft_vocabulary_larger_than_the_target_is_invalid():
    [finding] = vocab_map_findings("Draft", 2000, 1000, None)
    assert finding.code == F.DRAFT_VOCAB_MAP_INVALID and "larger" in finding.message


# -- doctor --draft DIR ------------------------------------------------------------------------------------------------

def test_doctor_finds_a_missing_map(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", target_dir(tmp_path), "--draft", draft_dir(tmp_path, tensors={}))
    assert rc == 1 and codes(res) == [F.DRAFT_VOCAB_MAP_MISSING]
    assert res["vocab_map"] == {"draft_vocab_size": 200, "target_vocab_size": 1000, "needs_map": True,
                                "checkpoint_files": 1, "d2t": None, "checked": True}
    [finding] = res["findings"]
    assert finding["evidence"]["never_proposed"] == 800


def test_doctor_accepts_a_good_map_and_reads_only_it(tmp_path, capsys, monkeypatch):
    draft = draft_dir(tmp_path, tensors={"d2t": good_d2t(), "t2d": np.ones(TARGET_VOCAB, np.bool_)})
    import safetensors
    monkeypatch.setattr(safetensors, "safe_open", None)  # doctor must not open the checkpoint with the loader
    rc, res, _ = doctor(capsys, "--target", target_dir(tmp_path, nested=True), "--draft", draft)
    assert rc == 0 and codes(res) == []
    assert res["vocab_map"]["d2t"]["dtype"] == "I64" and res["vocab_map"]["d2t"]["shape"] == [200]
    assert main(["doctor", "--target", str(tmp_path / "target"), "--draft", draft, "--sglang-version", "0.5.23"]) == 0
    assert "vocab   draft_vocab_size 200, target vocab_size 1000, map needed; d2t d2t I64 [200] checked" in \
        capsys.readouterr().out


def test_doctor_finds_an_invalid_map(tmp_path, capsys):
    d2t = good_d2t()
    d2t[0] = -1
    d2t[10] = d2t[11] + 1  # draft 10 -> the target id of draft 11
    rc, res, _ = doctor(capsys, "--target", target_dir(tmp_path), "--draft",
                        draft_dir(tmp_path, tensors={"model.d2t": d2t.astype(np.int32)}))
    assert rc == 1 and codes(res) == [F.DRAFT_VOCAB_MAP_INVALID]
    assert res["findings"][0]["evidence"]["out_of_range"] == 1 and res["findings"][0]["evidence"]["collisions"] == 1


def test_doctor_equal_vocabulary_needs_no_map(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", target_dir(tmp_path),
                        "--draft", draft_dir(tmp_path, draft_vocab=TARGET_VOCAB, tensors={}))
    assert rc == 0 and codes(res) == [] and res["vocab_map"]["needs_map"] is False


def test_doctor_config_without_checkpoint_only_notes(tmp_path, capsys):
    rc, res, _ = doctor(capsys, "--target", target_dir(tmp_path), "--draft", draft_dir(tmp_path))
    assert rc == 0 and codes(res) == []
    assert any("no *.safetensors" in n for n in res["notes"])


@pytest.mark.parametrize("d2t, expect", [
    (np.zeros(DRAFT_VOCAB, np.float32), "dtype F32, expected an integer dtype"),
    (np.zeros((DRAFT_VOCAB, 1), np.int64), "shape [200, 1], expected one dimension"),
])
def test_doctor_refuses_a_map_of_the_wrong_dtype_or_shape(tmp_path, capsys, d2t, expect):
    draft = draft_dir(tmp_path, tensors={"d2t": d2t})
    rc, res, err = doctor(capsys, "--target", target_dir(tmp_path), "--draft", draft)
    assert rc == 2 and res is None
    assert err.startswith("eagle-probe doctor: safetensors file ") and "tensor d2t" in err and expect in err


@pytest.mark.parametrize("cut, expect", [
    (lambda size, header: 5, "shorter than the 8-byte header length: truncated"),
    (lambda size, header: 8 + header // 2, "truncated header"),
    (lambda size, header: size - 16, "truncated"),
])
def test_doctor_refuses_truncated_files(tmp_path, capsys, cut, expect):
    draft = draft_dir(tmp_path, tensors={"d2t": good_d2t()})
    file = os.path.join(draft, "model.safetensors")
    size = os.path.getsize(file)
    with open(file, "rb") as handle:
        header = int.from_bytes(handle.read(8), "little")
    with open(file, "r+b") as handle:
        handle.truncate(cut(size, header))
    rc, res, err = doctor(capsys, "--target", target_dir(tmp_path), "--draft", draft)
    assert rc == 2 and res is None and "Traceback" not in err
    assert f"safetensors file {file}" in err and expect in err


def test_doctor_refuses_a_corrupt_header(tmp_path, capsys):
    draft = draft_dir(tmp_path, tensors={"d2t": good_d2t()})
    file = os.path.join(draft, "model.safetensors")
    with open(file, "r+b") as handle:
        handle.seek(8)
        handle.write(b"!")
    rc, _, err = doctor(capsys, "--target", target_dir(tmp_path), "--draft", draft)
    assert rc == 2 and "the header is not JSON" in err


def test_doctor_refuses_a_vocab_size_of_the_wrong_type(tmp_path, capsys):
    draft = draft_dir(tmp_path, draft_vocab="200", tensors={})
    rc, _, err = doctor(capsys, "--target", target_dir(tmp_path), "--draft", draft)
    assert rc == 2 and "key 'draft_vocab_size' must be an integer >= 1 or null" in err


def test_header_reader_matches_safetensors(tmp_path):
    draft = draft_dir(tmp_path, tensors={"d2t": good_d2t()})
    header = read_header(os.path.join(draft, "model.safetensors"), ValueError)
    assert header["d2t"]["dtype"] == "I64" and header["fc.weight"]["shape"] == [64, 192]


def test_kimi_draft_takes_only_the_exact_name(tmp_path, capsys):
    draft = draft_dir(tmp_path, tensors={"model.d2t_map": good_d2t()})
    config = json.loads((tmp_path / "draft" / "config.json").read_text())
    config["architectures"] = ["Eagle3DeepseekV2ForCausalLM"]
    (tmp_path / "draft" / "config.json").write_text(json.dumps(config))
    rc, res, _ = doctor(capsys, "--target", target_dir(tmp_path), "--draft", draft)
    assert codes(res) == [F.DRAFT_VOCAB_MAP_MISSING] and any("is ignored by SGLang" in n for n in res["notes"])
