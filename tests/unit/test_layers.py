import pytest

from eagle_probe.analysis.layers import (
    apply_capture_rule,
    capture_label,
    default_layer_ids,
    explain_mapping,
    split_layers,
    unreachable_indices,
)
from eagle_probe.versions import PLUS_ONE_ALWAYS, PLUS_ONE_IF_FIRST_IS_ONE


@pytest.mark.parametrize("rule, ids, expected", [
    # Kimi-K2.5 with 61 layers, under each capture-id rule
    (PLUS_ONE_ALWAYS, [2, 30, 58], (3, 31, 59)),
    (PLUS_ONE_IF_FIRST_IS_ONE, [2, 30, 58], (2, 30, 58)),
    (PLUS_ONE_ALWAYS, [1, 29, 57], (2, 30, 58)),
    (PLUS_ONE_IF_FIRST_IS_ONE, [1, 29, 57], (2, 30, 58)),
    (PLUS_ONE_ALWAYS, [0, 3, 31], (1, 4, 32)),
    (PLUS_ONE_IF_FIRST_IS_ONE, [0, 3, 31], (0, 3, 31)),
    (PLUS_ONE_ALWAYS, [-1, 2, 30], (0, 3, 31)),
    (PLUS_ONE_ALWAYS, None, (2, 30, 58)),
    (PLUS_ONE_IF_FIRST_IS_ONE, None, (2, 30, 58)),
])
def test_capture_rules_match_the_source_map(rule, ids, expected):
    indices, _ = apply_capture_rule(rule, ids, 61)
    assert indices == expected


def test_unknown_rule_is_an_error():
    with pytest.raises(ValueError, match="unknown capture-id rule"):
        apply_capture_rule("minus_one", [1, 2], 10)


def test_labels_follow_hf_hidden_states_convention():
    assert capture_label(0) == "embedding output"
    assert capture_label(31) == "output of layer 30"
    assert capture_label(61, 61).startswith("never captured")
    assert capture_label(-1).startswith("never captured")


def test_explain_mapping_names_the_observed_rule():
    assert explain_mapping([1, 29, 57], [2, 30, 58], 61) == "plus_one"
    assert explain_mapping([2, 30, 58], [2, 30, 58], 61) == "as_given"
    assert explain_mapping(None, default_layer_ids(61), 61) == "default_layers"
    assert explain_mapping([5], [9], 61) == "unknown"


def test_tbo_split_moves_moe_layers_out_of_the_capture_loop():
    kimi = split_layers(0, 61, first_k_dense_replace=1, can_run_tbo=True)
    assert kimi.normal == (0, 1) and kimi.tbo == (1, 61)
    assert kimi.lost([2, 30, 58]) == (2, 30, 58)
    dsv3 = split_layers(0, 61, 3, True)
    assert dsv3.lost([2, 30, 58]) == (30, 58)
    assert split_layers(0, 61, 3, False).tbo is None
    # a PP stage starting exactly at first_k_dense_replace runs everything in the normal loop
    assert split_layers(3, 30, 3, True).tbo is None
    later_stage = split_layers(30, 61, 3, True)
    assert later_stage.normal == (0, 0) and later_stage.tbo == (0, 61)


def test_unreachable_indices_give_reasons():
    bad = dict(unreachable_indices([0, 5, 61, -1], 61, embedding_capturable=False))
    assert set(bad) == {0, 61, -1}
    assert "embedding" in bad[0]
    assert unreachable_indices([0, 5], 61, embedding_capturable=True) == ()
    stage = dict(unreachable_indices([2, 40], 61, True, start_layer=30, end_layer=61))
    assert set(stage) == {2}


def test_a_rule_is_named_with_the_release_it_began_in_not_its_table_row():
    from eagle_probe.analysis.draft_rules import _rule_text
    from eagle_probe.versions import format_version, parse_version, rule_since, rules_for

    rules = rules_for(parse_version("0.5.23"))  # the row starts at 0.5.21; the +1 rule holds from 0.5.13
    assert format_version(rules.first) == "0.5.21"
    assert format_version(rule_since(rules, "capture_id_rule")) == "0.5.13"
    assert _rule_text(rules).startswith("SGLang 0.5.13+ adds 1 to every id only when the first id is 1")
    assert _rule_text(rules_for(parse_version("0.5.9"))).startswith("SGLang 0.5.8+ adds 1 to every id")
