"""`eagle-probe doctor` on the shape of speculation: adaptive depth (--speculative-adaptive) and tree drafts
(--speculative-eagle-topk > 1), what each needs in SGLang 0.5.23 and what the probe sees under each."""

import pytest

from eagle_probe.analysis.config_rules import (
    ADAPTIVE_DEFAULT_CANDIDATES,
    SpeculationSpec,
    adaptive_off_reasons,
    speculation_report,
    speculation_shapes,
)
from eagle_probe.commands.cli import main
from tests.unit.test_doctor import doctor, eagle3_draft, kimi_target

FIXED = ("--sglang-version", "0.5.23", "--trained-layers", "hf:0,3,31")


def run(tmp_path, capsys, *flags):
    rc, res, err = doctor(capsys, "--target", kimi_target(tmp_path), "--draft", eagle3_draft(tmp_path, ids=(0, 3, 31)),
                          *FIXED, *flags)
    assert res is not None, err
    return rc, res["speculation"]


def text(tmp_path, capsys, *flags):
    rc = main(["doctor", "--target", kimi_target(tmp_path), "--draft", eagle3_draft(tmp_path, ids=(0, 3, 31)),
               *FIXED, *flags])
    return rc, capsys.readouterr().out


def test_adaptive_counts_each_step_at_its_depth(tmp_path, capsys):
    rc, s = run(tmp_path, capsys, "--speculative-adaptive", "--speculative-num-steps", "3")
    assert rc == 0 and s["shape"] == "adaptive depth" and s["adaptive"] and s["adaptive_off"] == []
    assert s["topk"] == 1 and s["num_steps"] == 3 and not s["warnings"] and not s["errors"]
    probe = " ".join(s["probe"])
    assert "counts each verify step at its own draft depth" in probe and "accept_index" in probe
    assert "`draft depth in use`" in probe and "'Draft depth in use' panel" in probe
    assert "[1, 3, 5, 7]" in probe  # the default candidate steps of small batches


@pytest.mark.parametrize("flags, reason", [
    (("--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8"), "--speculative-eagle-topk 4"),
    (("--attn-dp-size", "2"), "DP attention"),
    (("--enable-dp-attention",), "DP attention"),
    (("--tbo",), "--enable-two-batch-overlap"),
    (("--enable-two-batch-overlap",), "--enable-two-batch-overlap"),
    (("--enable-pdmux",), "--enable-pdmux"),
    (("--enable-multi-layer-eagle",), "--enable-multi-layer-eagle"),
])
def test_adaptive_turned_off_by_sglang_is_named(tmp_path, capsys, flags, reason):
    rc, s = run(tmp_path, capsys, "--speculative-adaptive", "--speculative-num-steps", "3", *flags)
    assert s["adaptive_requested"] and not s["adaptive"]
    assert any(reason in r for r in s["adaptive_off"]), s["adaptive_off"]
    [warning] = [w for w in s["warnings"] if "turned off by SGLang" in w]
    assert reason in warning and "_maybe_disable_adaptive" in warning
    assert "The probe will see one fixed depth (3), not an adaptive one" in warning
    assert not any("counts each verify step at its own draft depth" in p for p in s["probe"])


def test_adaptive_off_text_output(tmp_path, capsys):
    rc, out = text(tmp_path, capsys, "--speculative-adaptive", "--speculative-num-steps", "3", "--attn-dp-size", "2")
    assert rc == 0
    assert "speculation: chain, topk auto, depth 3" in out
    assert "WARNING --speculative-adaptive is turned off by SGLang" in out and "fixed depth" in out
    assert "result: 0 error(s), 1 warning(s)" in out


def test_adaptive_num_steps_outside_the_candidates_is_an_error(tmp_path, capsys):
    rc, s = run(tmp_path, capsys, "--speculative-adaptive", "--speculative-num-steps", "4")
    assert rc == 1 and any("not among the adaptive candidate steps [0, 1, 3, 5, 7]" in e for e in s["errors"])
    # with a config file its candidates are not known: not judged
    (tmp_path / "b").mkdir()
    rc, s = run(tmp_path / "b", capsys, "--speculative-adaptive", "--speculative-num-steps", "4",
                "--speculative-adaptive-config", "adaptive.json")
    assert rc == 0 and not s["errors"] and "adaptive.json" in " ".join(s["probe"])


def test_adaptive_without_steps_starts_at_the_middle_candidate():
    s = speculation_report(SpeculationSpec(adaptive=True))
    candidates = sorted({c for cs in ADAPTIVE_DEFAULT_CANDIDATES.values() for c in cs})
    assert s["num_steps"] == candidates[len(candidates) // 2] == 3 and s["num_draft_tokens"] == 4


def test_tree_positions_are_depths_and_accept_rate_is_over_proposed(tmp_path, capsys):
    rc, s = run(tmp_path, capsys, "--speculative-eagle-topk", "4", "--speculative-num-steps", "5",
                "--speculative-num-draft-tokens", "8")
    assert rc == 0 and s["shape"] == "tree" and s["topk"] == 4 and s["num_steps"] == 5
    assert s["num_draft_tokens"] == 8 and s["proposed_per_request"] == 7 and not s["warnings"]
    probe = " ".join(s["probe"])
    assert "positions are depths along the accepted path" in probe
    assert "accept rate = accepted / proposed drafts (7 per request-step" in probe
    assert "lower than the per-position rates" in probe and "#23530" in probe
    assert "V2" in probe


def test_tree_too_many_draft_tokens_is_an_error():
    s = speculation_report(SpeculationSpec(topk=2, num_steps=2, num_draft_tokens=8))  # 1 + 2 + 1 x 4 = 7 at most
    assert any("1 + 2 + 1 x 2^2 = 7" in e for e in s["errors"])
    assert not speculation_report(SpeculationSpec(topk=2, num_steps=2, num_draft_tokens=7))["errors"]


def test_tree_too_few_draft_tokens_is_a_warning():
    s = speculation_report(SpeculationSpec(topk=4, num_steps=5, num_draft_tokens=4))
    assert any("cannot reach depth 5" in w for w in s["warnings"]) and not s["errors"]


def test_chain_fixed_depth_and_sglang_adjusts_draft_tokens():
    s = speculation_report(SpeculationSpec(topk=1, num_steps=3, num_draft_tokens=6))
    assert s["shape"] == "chain" and s["num_draft_tokens"] == 4 and s["proposed_per_request"] == 3
    assert any("SGLang sets it to num steps + 1 = 4" in w for w in s["warnings"])
    assert any(p.startswith("fixed depth 3") for p in s["probe"])


def test_no_steps_given_says_sglang_chooses(tmp_path, capsys):
    rc, s = run(tmp_path, capsys)
    assert s["shape"] == "chain" and any("_auto_choose_speculative_params" in p for p in s["probe"])


def test_off_reasons_follow_sglang_order_and_algorithm():
    spec = SpeculationSpec(algorithm="EAGLE", adaptive=True, topk=2, dp_attention=True, tbo=True, pdmux=True,
                           multi_layer_eagle=True)
    reasons = adaptive_off_reasons(spec)
    assert [r.split(" ")[0] for r in reasons] == ["--speculative-eagle-topk", "DP", "--enable-multi-layer-eagle",
                                                  "--enable-two-batch-overlap", "--enable-pdmux"]
    assert adaptive_off_reasons(SpeculationSpec(algorithm="NGRAM", adaptive=True))[0].startswith(
        "--speculative-algorithm NGRAM")


def test_bad_speculation_option_is_bad_input(tmp_path, capsys):
    rc, res, err = doctor(capsys, "--target", kimi_target(tmp_path), "--draft", eagle3_draft(tmp_path),
                          "--speculative-eagle-topk", "0")
    assert rc == 2 and res is None and "--speculative-eagle-topk 0: must be >= 1" in err


def test_shapes_table_names_what_the_probe_reads():
    shapes = {s["shape"]: s for s in speculation_shapes()}
    assert set(shapes) == {"chain", "adaptive depth", "tree"}
    for s in shapes.values():
        reads = " ".join(s["probe_reads"])
        assert "accept_index" in reads and "[requests, spec_steps + 1]" in reads
        assert "speculative_num_draft_tokens" in reads
    assert "topk 1" in shapes["adaptive depth"]["needs"] and "DP attention" in shapes["adaptive depth"]["needs"]
    assert "V2 worker" in shapes["tree"]["needs"]
