"""The target-family table and the rules that use it (the per-release proof over the wheels is
tests/contract/test_contract_families.py)."""

import pytest

from eagle_probe import families, versions
from eagle_probe.analysis.draft_rules import ids_for_capture, layer_mismatch_findings
from eagle_probe.analysis.layers import apply_capture_rule, capture_label, default_layer_ids, unreachable_indices
from eagle_probe.families import (
    RULE_AS_GIVEN_IF_MAX_IS_N,
    RULE_PLUS_ONE,
    RULE_PLUS_ONE_IF_FIRST_IS_ONE,
    RULE_PLUS_ONE_WITH_DEFAULT,
)

V = versions.parse_version
R0523, R058 = versions.rules_for(V("0.5.23")), versions.rules_for(V("0.5.8"))


def fam(name, release="0.5.23"):
    row = families.family(name, V(release))
    assert row is not None, (name, release)
    return row


@pytest.mark.parametrize("rule, ids, n, expected", [
    (RULE_PLUS_ONE, [2, 15, 28], 32, (3, 16, 29)),
    (RULE_PLUS_ONE, None, 32, (2, 16, 29)),
    (RULE_PLUS_ONE_IF_FIRST_IS_ONE, [1, 29, 57], 61, (2, 30, 58)),
    (RULE_PLUS_ONE_IF_FIRST_IS_ONE, [2, 30, 58], 61, (2, 30, 58)),
    (RULE_AS_GIVEN_IF_MAX_IS_N, [2, 12, 24], 24, (2, 12, 24)),  # the largest is N: as given
    (RULE_AS_GIVEN_IF_MAX_IS_N, [1, 11, 22], 24, (2, 12, 23)),
    (RULE_PLUS_ONE_WITH_DEFAULT, [2, 15, 28], 32, (3, 16, 29)),
    (RULE_PLUS_ONE_WITH_DEFAULT, None, 32, (3, 17, 30)),  # MiniMax-M3 ConditionalGeneration: +1 on the default
])
def test_the_four_rules(rule, ids, n, expected):
    assert families.positions(rule, ids, n)[0] == expected
    assert apply_capture_rule(rule, ids, n)[0] == expected


def test_llama_on_0523_ids_to_set_for_hf_3_16_29():
    llama = families.family_for_architecture("LlamaForCausalLM", V("0.5.23"))
    assert llama.name == "llama" and llama.rule == RULE_PLUS_ONE
    assert ids_for_capture([3, 16, 29], 32, R0523, llama) == ((2, 15, 28), "")
    assert families.ids_to_positions(llama, [2, 15, 28], 32) == (3, 16, 29)
    # without a family the default stays DeepSeek's rule (0.5.23: ids as given unless the first is 1)
    assert ids_for_capture([3, 16, 29], 32, R0523) == ((3, 16, 29), "")
    (f,) = layer_mismatch_findings(captured=[4, 17, 30], trained_hf=[3, 16, 29], num_layers=32, rules=R0523,
                                   requested_ids=[3, 16, 29], family=llama)
    ev = f.evidence_dict()
    assert ev["fix_ids"] == [2, 15, 28] and ev["family"] == "llama" and ev["version_rule"] == RULE_PLUS_ONE
    assert "adds 1 to every id" in f.message and "Llama" in f.message


def test_default_call_signatures_keep_deepseeks_behaviour():
    for release in ("0.5.8", "0.5.12.post1", "0.5.13", "0.5.23"):
        rules = versions.rules_for(V(release))
        ds = families.deepseek(V(release))
        for ids in ([1, 29, 57], [2, 30, 58], None):
            assert apply_capture_rule(rules.capture_id_rule, ids, 61) == apply_capture_rule("x", ids, 61, ds)
        (a,) = layer_mismatch_findings(captured=[3, 31, 59], trained_hf=[2, 30, 58], num_layers=61, rules=rules,
                                       requested_ids=[2, 30, 58])
        assert "family" not in a.evidence_dict()


def test_deepseek_rows_are_versions_rules():
    for release in families.RELEASES:
        ds, rules = families.deepseek(release), versions.rules_for(release)
        assert ds.rule == rules.capture_id_rule
        assert ds.embedding_capturable == rules.embedding_capturable
    assert fam("deepseek_v2", "0.5.12.post1").rule == versions.PLUS_ONE_ALWAYS
    assert fam("deepseek_v2", "0.5.13").rule == versions.PLUS_ONE_IF_FIRST_IS_ONE


def test_every_family_has_one_row_per_release_without_gaps():
    for name in families.family_names():
        present = [r for r in families.RELEASES if families.family(name, r) is not None]
        first = families.first_release(name)
        assert present == [r for r in families.RELEASES if r >= first], name
        for release in present:
            holding = [row for row in families.FAMILIES if row.name == name and row.first <= release
                       and (row.last is None or release <= row.last)]
            assert len(holding) == 1, (name, release, holding)


@pytest.mark.parametrize("architecture, release, name", [
    ("LlamaForCausalLM", "0.5.8", "llama"), ("MistralForCausalLM", "0.5.23", "llama"),
    ("Llama4ForConditionalGeneration", "0.5.23", "llama"), ("Qwen2ForCausalLM", "0.5.23", "qwen2"),
    ("Qwen3ForCausalLM", "0.5.23", "qwen3"), ("Qwen3MoeForCausalLM", "0.5.23", "qwen3_moe"),
    ("Qwen2MoeForCausalLM", "0.5.8", "qwen2_moe"), ("GptOssForCausalLM", "0.5.23", "gpt_oss"),
    ("Glm4MoeForCausalLM", "0.5.23", "glm4_moe"), ("Glm4MoeLiteForCausalLM", "0.5.13", "glm4_moe_lite"),
    ("DeepseekV3ForCausalLM", "0.5.8", "deepseek_v2"), ("KimiK25ForConditionalGeneration", "0.5.23", "deepseek_v2"),
    ("GlmMoeDsaForCausalLM", "0.5.23", "deepseek_v2"), ("MiniMaxM2ForCausalLM", "0.5.8", "minimax_m2"),
    ("MiniMaxM3SparseForCausalLM", "0.5.16", "minimax_m3"),
    ("MiniMaxM3SparseForConditionalGeneration", "0.5.23", "minimax_m3_vl"),
    ("Gemma3ForCausalLM", "0.5.12", "gemma3"), ("Gemma3ForConditionalGeneration", "0.5.23", "gemma3"),
    ("Gemma4ForCausalLM", "0.5.23", "gemma4"), ("Gemma4ForConditionalGeneration", "0.5.23", "gemma4_vl"),
])
def test_family_for_architecture(architecture, release, name):
    assert families.family_for_architecture(architecture, V(release)).name == name


@pytest.mark.parametrize("architecture, release", [
    ("Glm4MoeLiteForCausalLM", "0.5.12"), ("Gemma3ForCausalLM", "0.5.11"), ("KimiK25ForConditionalGeneration", "0.5.9"),
    ("MiniMaxM3SparseForConditionalGeneration", "0.5.17"), ("OPTForCausalLM", "0.5.23"),
    ("Glm4ForCausalLM", "0.5.23"), ("Qwen3VLForConditionalGeneration", "0.5.23"),
])
def test_absent_or_unserved_architectures_have_no_row(architecture, release):
    assert families.family_for_architecture(architecture, V(release)) is None


def test_rows_that_change_with_the_release():
    gpt = fam("gpt_oss", "0.5.16"), fam("gpt_oss", "0.5.17"), fam("gpt_oss", "0.5.23")
    assert [g.rule for g in gpt] == [RULE_PLUS_ONE, RULE_AS_GIVEN_IF_MAX_IS_N, RULE_AS_GIVEN_IF_MAX_IS_N]
    assert [g.final_capturable for g in gpt] == [False, True, True]
    assert [g.embedding_capturable for g in gpt] == [False, True, True]
    assert not fam("llama", "0.5.21").embedding_capturable and fam("llama", "0.5.22").embedding_capturable
    assert fam("gemma3", "0.5.16").captures == families.CAPTURES_RESIDUAL
    assert fam("gemma3", "0.5.17").captures == families.CAPTURES_BRANCH_OUTPUT
    assert not fam("minimax_m3", "0.5.22").final_capturable and fam("minimax_m3", "0.5.23").final_capturable
    assert fam("qwen3_moe").tbo == families.TBO_ALL and fam("glm4_moe").tbo == families.TBO_FROM_FIRST_K_DENSE
    assert fam("llama").tbo == families.TBO_NONE and not fam("gemma3").pp_guard and fam("llama").pp_guard
    assert fam("deepseek_v2", "0.5.9").delegates == () and fam("deepseek_v2", "0.5.10").delegates


def test_final_layer_and_embedding_by_family():
    gpt, llama, qwen_moe = fam("gpt_oss"), fam("llama"), fam("qwen3_moe")
    # GPT-OSS: the largest id equals N, so the ids are positions, and N (the final layer) is captured
    assert ids_for_capture([3, 13, 24], 24, R0523, gpt) == ((3, 13, 24), "")
    assert ids_for_capture([3, 13, 23], 24, R0523, gpt) == ((2, 12, 22), "")
    ids, why = ids_for_capture([3, 16, 32], 32, R0523, llama)
    assert ids is None and "last layer's output cannot be captured" in why
    ids, why = ids_for_capture([3, 16, 32], 32, R0523, qwen_moe)
    assert ids is None and "IndexError" in why
    assert ids_for_capture([0, 16, 29], 32, R0523, llama) == ((-1, 15, 28), "")  # embedding: id -1 (+1 = 0)
    ids, why = ids_for_capture([0, 16, 29], 32, R0523, fam("llama", "0.5.21"))
    assert ids is None and "embedding" in why
    assert capture_label(24, 24, final_capturable=True).startswith("output of layer 23")
    assert unreachable_indices([24], 24, True, final_capturable=True) == ()
    assert default_layer_ids(32, fam("minimax_m3_vl")) == (3, 17, 30)


def test_untabled_classes_and_architectures():
    assert "not proven" in families.untabled("Qwen3VLForConditionalGeneration")
    assert families.untabled("ApertusForCausalLM") is None  # a row
    assert "BailingMoEForCausalLM" in families.untabled("BailingMoeV2ForCausalLM")
    assert families.untabled("OPTForCausalLM") is None
    table = families.table(V("0.5.23"))
    assert {r["family"] for r in table} >= {"llama", "qwen3", "qwen3_moe", "gpt_oss", "glm4_moe", "glm4_moe_lite",
                                            "deepseek_v2", "minimax_m2", "minimax_m3_vl", "gemma3", "gemma4"}
    assert all(r["since"] and r["rule_letter"] in "ABCD" for r in table)
    assert {r["family"] for r in families.table(V("0.5.8"))} == {
        "llama", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "gpt_oss", "glm4_moe", "deepseek_v2", "minimax_m2",
        "qwen2_5_vl", "apertus", "longcat_flash"}


def test_runtime_lookups():
    v = V("0.5.23")
    # a subclass no row names is found through its MRO
    assert families.family_for_class_names(["MyLlama", "LlamaForCausalLM", "Module", "object"], v).name == "llama"
    assert families.family_for_class_names(["OPTForCausalLM", "Module"], v) is None
    assert families.predicted_positions("LlamaForCausalLM", v, [2, 15, 28], 32) == ((3, 16, 29), RULE_PLUS_ONE)
    assert families.predicted_positions("GptOssForCausalLM", v, [2, 12, 24], 24)[0] == (2, 12, 24)
    assert families.predicted_positions("Qwen3VLForConditionalGeneration", v, [2], 32) == (None, families.UNVERIFIED)
