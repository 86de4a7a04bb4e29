"""The pure rule behind draft_config_ignored (analysis.draft_config_keys) and the draft directory's readers
(eagle_probe.draft_dir): which keys count, per release and class, and the clear errors and fallbacks."""

import argparse
import json
import pickle
import zipfile

import pytest

from eagle_probe import draft_dir as D
from eagle_probe.analysis import draft_config_keys as K
from eagle_probe.analysis.draft_ids import KIMI, LLAMA
from eagle_probe.analysis.findings import CODES, DRAFT_CONFIG_IGNORED, WARNING


def _ignored(config, release, model_class=LLAMA, applied=None):
    return {(i.written, i.reason) for i in K.ignored_keys(config, model_class, release, applied)}


@pytest.mark.parametrize("config, release, expected", [
    ({"norm_before_fc": True}, "0.5.16", {"norm_before_fc"}),
    ({"norm_before_fc": True}, "0.5.17", set()),
    ({"eagle_config": {"norm_before_fc": True}}, "0.5.17", set()),
    ({"eagle_config": {"norm_output": True}}, "0.5.23", {"eagle_config.norm_output"}),
    ({"fc_norm": True, "norm_output": True}, "0.5.11", {"fc_norm", "norm_output"}),
    ({"fc_norm": True, "norm_output": True}, "0.5.12", set()),
    ({"norm_before_residual": True}, "0.5.23", {"norm_before_residual"}),
    ({"num_aux_hidden_states": 4}, "0.5.8", {"num_aux_hidden_states"}),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0}}, "0.5.9", {"rope_parameters"}),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0}}, "0.5.10", set()),
])
def test_a_key_is_ignored_where_the_release_does_not_read_it(config, release, expected):
    assert {w for w, _ in _ignored(config, release)} == expected


@pytest.mark.parametrize("config", [
    {"norm_before_fc": False, "fc_norm": None, "norm_output": 0, "norm_before_residual": False},
    {"num_aux_hidden_states": 3},  # what a class that does not read it builds anyway
    {"hidden_size": 64, "target_hidden_size": 64},
    {"rope_scaling": {"rope_type": "default"}},
    {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}, "rope_theta": 10000.0},
])
def test_values_that_change_nothing_are_never_named(config):
    assert _ignored(config, "0.5.8") == set()


def test_the_kimi_draft_never_reads_norm_before_fc_and_reads_norms_from_0_5_13():
    config = {"norm_before_fc": True, "fc_norm": True}
    assert {w for w, _ in _ignored(config, "0.5.12", KIMI)} == {"norm_before_fc", "fc_norm"}
    assert {w for w, _ in _ignored(config, "0.5.23", KIMI)} == {"norm_before_fc"}


def test_a_key_read_but_not_applied_by_the_loaded_module_is_named():
    assert _ignored({"fc_norm": True}, "0.5.23", applied={"fc_norm": False}) == {("fc_norm", "loaded module")}
    assert _ignored({"fc_norm": True}, "0.5.23", applied={"fc_norm": True}) == set()


def test_the_finding_names_key_value_release_and_fix():
    items = K.ignored_keys({"norm_before_fc": True, "eagle_config": {"fc_norm": True}}, LLAMA, "0.5.16")
    finding = K.ignored_finding(items, LLAMA)
    assert finding.code == DRAFT_CONFIG_IGNORED and finding.severity == WARNING == CODES[DRAFT_CONFIG_IGNORED][0]
    assert "SGLang 0.5.16 ignores 2 key(s)" in finding.message
    assert "norm_before_fc = True" in finding.message and "serve with SGLang 0.5.17 or later" in finding.message
    assert "eagle_config.fc_norm = True" in finding.message and "move it to the top level" in finding.message
    assert finding.evidence_dict()["ignored"] == [
        {"key": "norm_before_fc", "value": True, "reason": "release table"},
        {"key": "eagle_config.fc_norm", "value": True, "reason": "release table"}]
    assert K.ignored_finding([], LLAMA) is None
    logged = [(i.written, json.dumps(i.value), i.reason) for i in items]
    assert K.from_observed(logged, "0.5.16") == items


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="not a release number"):
        K.reads_for(LLAMA, "latest")
    with pytest.raises(TypeError, match="must be a JSON object"):
        K.ignored_keys(["norm_before_fc"], LLAMA, "0.5.23")
    assert K.judged_release(None)[0] == "0.5.23" and "unknown" in K.judged_release(None)[1]
    assert K.judged_release("0.5.7")[0] == "0.5.8" and K.judged_release("0.6.0")[0] == "0.5.23"
    assert K.judged_release("0.5.12.post1") == ("0.5.12.post1", "")


# -- the draft directory ------------------------------------------------------------------------------------------


def _torch_like(path, obj, member="archive/data.pkl"):
    """A zip in torch.save's layout holding a pickle (no torch needed to write it here)."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(member, pickle.dumps(obj, protocol=2))


def test_specforge_max_length_is_read_without_running_the_pickle(tmp_path):
    path = str(tmp_path / D.STATE_FILE)
    _torch_like(path, {"epoch": 1, "args": argparse.Namespace(max_length=4096, lr=1e-4),
                       "state": {0: {"exp_avg": zipfile.ZipInfo("stand-in for a tensor object")}}})
    assert D.specforge_max_length(path) == 4096


class Boom:
    def __reduce__(self):
        import os
        return (os.system, ("echo pwned > /dev/null",))


@pytest.mark.parametrize("content, message", [
    (b"not a zip", "not a zip"),
    ({"epoch": 1}, "no 'args'"),
    ({"args": argparse.Namespace(max_length="2k")}, "args.max_length is '2k'"),
    ({"args": argparse.Namespace(lr=1)}, "args.max_length is None"),
    ([1, 2], "holds a list"),
])
def test_unreadable_training_state_is_named(tmp_path, content, message):
    path = str(tmp_path / D.STATE_FILE)
    if isinstance(content, bytes):
        (tmp_path / D.STATE_FILE).write_bytes(content)
    else:
        _torch_like(path, content)
    with pytest.raises(D.DraftDirError, match=message):
        D.specforge_max_length(path)


def test_a_pickle_naming_other_code_never_runs_it(tmp_path):
    path = str(tmp_path / D.STATE_FILE)
    _torch_like(path, {"args": argparse.Namespace(max_length=64), "trap": Boom()})
    assert D.specforge_max_length(path) == 64  # os.system came back as an opaque stand-in, never called


def test_trained_length_order_and_fallbacks(tmp_path):
    config = {"max_position_embeddings": 8192}
    assert D.trained_length(str(tmp_path), config, given=100) == D.TrainedLength(100, D.ENV_SOURCE)
    assert D.trained_length(str(tmp_path), config) == D.TrainedLength(8192, D.CONFIG_SOURCE)
    _torch_like(str(tmp_path / D.STATE_FILE), {"args": argparse.Namespace(max_length=2048)})
    assert D.trained_length(str(tmp_path), config) == D.TrainedLength(2048, D.SPECFORGE_SOURCE)
    (tmp_path / D.STATE_FILE).write_bytes(b"garbage")
    fallback = D.trained_length(str(tmp_path), config)
    assert (fallback.length, fallback.source) == (8192, D.CONFIG_SOURCE) and "falling back" in fallback.notes[0]
    unknown = D.trained_length(None, {})
    assert unknown.length is None and "not known" in unknown.notes[0]


def test_read_config_errors_name_the_file(tmp_path):
    with pytest.raises(D.DraftDirError, match="config.json: cannot be read"):
        D.read_config(str(tmp_path))
    (tmp_path / "config.json").write_text("{nope")
    with pytest.raises(D.DraftDirError, match="not valid JSON"):
        D.read_config(str(tmp_path))
    (tmp_path / "config.json").write_text("[1]")
    with pytest.raises(D.DraftDirError, match="not a JSON object"):
        D.read_config(str(tmp_path))
