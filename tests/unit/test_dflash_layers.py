"""analysis/dflash_layers: SGLang's default target layers for a block draft (hand-computed values), where the ids
are read from and in which order, the capture rule read from ids and positions, and the findings' fixes."""

import ast
import importlib.util
import pathlib

import pytest

from eagle_probe.analysis import dflash_layers as B
from eagle_probe.analysis import findings as F


@pytest.mark.parametrize("n, k, expected", [
    (61, 3, (1, 30, 58)),  # 1 + i * 57 / 2: 1, 29.5 -> 30 (round half to even), 58
    (6, 2, (1, 3)),  # 1 + i * 2: 1, 3
    (6, 1, (3,)),  # one draft layer: n // 2
    (7, 1, (3,)),
    (36, 5, (1, 9, 17, 25, 33)),  # 1 + i * 32 / 4
    (28, 3, (1, 13, 25)),  # 1 + i * 24 / 2
    (4, 2, (1, 1)),  # n - 3 = 1: the smallest target SGLang takes for k > 1
    (3, 2, None),  # SGLang refuses: 'DFlash layer selection requires num_target_layers >= 4'
    (3, 1, (1,)),  # one draft layer needs no spread
    (0, 1, None),
    (6, 0, None),
])
def test_default_formula_hand_computed(n, k, expected):
    assert B.default_target_layer_ids(n, k) == expected


def _sglangs_build_target_layer_ids():
    """The installed SGLang's build_target_layer_ids, compiled from its source alone (importing dflash_utils pulls
    in torch and the kernels: seconds)."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("SGLang is not installed here")
    source = pathlib.Path(spec.submodule_search_locations[0], "srt", "speculative", "dflash_utils.py").read_text()
    [node] = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)
              and n.name == "build_target_layer_ids"]
    scope: dict = {"List": list}  # the annotation only
    exec(compile(ast.Module([node], []), "dflash_utils.py", "exec"), scope)
    return scope["build_target_layer_ids"]


def test_default_formula_matches_sglangs_own_function():
    build = _sglangs_build_target_layer_ids()
    for n in range(4, 80):
        for k in range(1, 9):
            assert B.default_target_layer_ids(n, k) == tuple(build(n, k)), (n, k)
    with pytest.raises(ValueError, match="requires num_target_layers >= 4"):
        build(3, 2)


def test_id_sources_in_sglangs_precedence():
    everything = {"dspark_target_layer_ids": [1], "dspark_config": {"target_layer_ids": [2]},
                  "dflash_config": {"target_layer_ids": [3]}, "target_layer_ids": [4], "num_hidden_layers": 1}
    order = [("dspark_target_layer_ids", B.SOURCE_DSPARK_TOP, (1,)),
             ("dspark_config", B.SOURCE_DSPARK_NESTED, (2,)),
             ("dflash_config", B.SOURCE_NESTED, (3,)),
             ("target_layer_ids", B.SOURCE_TOP, (4,))]
    config = dict(everything)
    for key, source, ids in order:
        read = B.read_block_draft_config(config)
        assert (read.source, read.target_layer_ids) == (source, ids)
        config.pop(key)
    read = B.read_block_draft_config(config)
    assert read.defaulted and read.target_layer_ids is None and read.source == B.SOURCE_DEFAULT


def test_the_rest_of_the_config_and_wrong_types():
    read = B.read_block_draft_config({
        "architectures": ["DFlashDraftModel"], "text_config": {"num_hidden_layers": 2}, "block_size": 8,
        "dflash_config": {"mask_token_id": 7, "num_target_layers": 36, "block_size": 16,
                          "target_layer_ids": [1, "3"]},
        "eagle_aux_hidden_state_layer_ids": [2, 4]})
    assert read.num_draft_layers == 2 and read.mask_token_id == 7 and read.trained_num_target_layers == 36
    assert read.block_size == 16  # dflash_config's wins over the top level, as in SGLang
    assert read.target_layer_ids is None and read.source == B.SOURCE_NESTED  # named, but not a list of integers
    assert read.aux_layer_ids == (2, 4)


@pytest.mark.parametrize("config, block", [
    ({"architectures": ["DFlashDraftModel"]}, True),
    ({"architectures": ["Qwen3DSparkModel"]}, True),
    ({"dflash_config": {}}, True),
    ({"dspark_target_layer_ids": [1]}, True),
    ({"architectures": ["LlamaForCausalLMEagle3"], "eagle_config": {}}, False),
    ({}, False),
])
def test_is_block_draft_config(config, block):
    assert B.is_block_draft_config(config) is block


def test_capture_rule_read_from_ids_and_positions():
    assert B.capture_rule([1, 3], [2, 4]) == B.CAPTURE_PLUS_ONE
    assert B.capture_rule([1, 3], [1, 3]) == B.CAPTURE_AS_GIVEN
    assert B.capture_rule([1, 3], [2, 5]) == B.CAPTURE_OTHER
    assert B.capture_rule(None, [2, 4]) == B.CAPTURE_OTHER
    assert B.ids_for_positions([4, 5]) == (3, 4)
    assert B.ids_for_positions([4, 5], B.CAPTURE_AS_GIVEN) == (4, 5)
    # under +1 the embedding output (0) is out of reach; the final layer's output (n) under either rule
    assert B.unreachable([0, 3, 6], 6) == (0, 6)
    assert B.unreachable([0, 3, 6], 6, B.CAPTURE_AS_GIVEN) == (6,)


def test_layer_mismatch_names_the_ids_to_pin_or_why_none():
    assert B.layer_mismatch_finding(captured=[4, 5], trained_hf=[4, 5], num_layers=6, ids=[3, 4],
                                    source=B.SOURCE_NESTED) is None
    f = B.layer_mismatch_finding(captured=[2, 4], trained_hf=[4, 5], num_layers=6, ids=[1, 3],
                                 source=B.SOURCE_NESTED)
    assert f.code == F.LAYER_MISMATCH and f.severity == F.ERROR and f.evidence_dict()["fix_ids"] == [3, 4]
    assert '"target_layer_ids": [3, 4]' in f.message
    f = B.layer_mismatch_finding(captured=[2, 4], trained_hf=[0, 4], num_layers=6, ids=None,
                                 source=B.SOURCE_DEFAULT)
    assert f.evidence_dict()["fix_ids"] is None and f.evidence_dict()["fix_impossible"] == [0]
    assert "SGLang's default" in f.message


def test_defaulted_and_disagreeing_findings():
    f = B.defaulted_finding(model_class="DFlashDraftModel", chosen_ids=[1, 3], captured=[2, 4], num_layers=6,
                            num_draft_layers=2)
    assert f.code == F.DFLASH_TARGET_LAYERS_DEFAULTED and f.severity == F.WARNING
    assert "[1, 3]" in f.message and "2 (output of layer 1), 4 (output of layer 3)" in f.message
    agree = B.read_block_draft_config({"dflash_config": {"target_layer_ids": [1, 3]},
                                       "eagle_aux_hidden_state_layer_ids": [2, 4]})
    assert B.aux_ids_disagree_finding(agree, "X") is None
    differ = B.read_block_draft_config({"dflash_config": {"target_layer_ids": [1, 3]},
                                        "eagle_aux_hidden_state_layer_ids": [1, 3]})
    f = B.aux_ids_disagree_finding(differ, "X")
    assert f.code == F.DFLASH_LAYER_IDS_DISAGREE and "([2, 4])" in f.message
