"""Per-position training accuracies: EAGLE_PROBE_DRAFT_ACCURACY, the expected accept length and per-position rates,
and the running probe's acceptance monitor fed the tuple unchanged."""

import json

import pytest

from eagle_probe.analysis.acceptance import (
    accuracy_for_mean_length,
    conditional_accuracies,
    expected_mean_length,
    expected_per_position_rate,
)
from eagle_probe.config import ConfigError, ProbeConfig, load_config
from eagle_probe.observations import VerifyStep


def test_one_number_keeps_its_meaning():
    assert load_config({"EAGLE_PROBE_DRAFT_ACCURACY": "0.75"}).draft_accuracy == (0.75,)  # one form: a tuple
    assert expected_mean_length((0.75,), 3) == pytest.approx(1 + 0.75 + 0.75 ** 2 + 0.75 ** 3)


def test_per_position_accuracies_are_conditional():
    config = load_config({"EAGLE_PROBE_DRAFT_ACCURACY": "0.75, 0.62,0.55"})
    assert config.draft_accuracy == (0.75, 0.62, 0.55)
    assert expected_per_position_rate(config.draft_accuracy, 3) == pytest.approx([0.75, 0.75 * 0.62,
                                                                                  0.75 * 0.62 * 0.55])
    assert expected_mean_length(config.draft_accuracy, 3) == pytest.approx(1 + 0.75 + 0.465 + 0.25575)
    # more positions served than given: the last accuracy repeats; fewer: the first ones are used
    assert conditional_accuracies((0.75, 0.62), 4) == [0.75, 0.62, 0.62, 0.62]
    assert expected_mean_length((0.75, 0.62, 0.55), 1) == pytest.approx(1.75)


def test_one_form_everywhere():
    """The variable, summarize's option and an old log's bare number all give per-position accuracies."""
    from eagle_probe.analysis.findings import CollapseEvidence, acceptance_collapse_finding
    from eagle_probe.commands.cli import build_parser
    from eagle_probe.commands.summarize.training import find_accuracy
    from eagle_probe.config import parse_accuracy

    assert parse_accuracy("0.75") == (0.75,) and parse_accuracy("0.75,0.5") == (0.75, 0.5)
    assert build_parser().parse_args(["summarize", "--draft-accuracy", "0.75"]).draft_accuracy == (0.75,)
    old_log = [{"event": "eagle_probe.acceptance", "draft_accuracy": 0.75}]  # a bare number, as older probes wrote
    assert find_accuracy(old_log, None)[0] == (0.75,)
    finding = acceptance_collapse_finding(CollapseEvidence(1.2, 2.0, (0.75,), 3, [0.1, 0.05, 0.0], 64, 0.6, []))
    assert finding.evidence_dict()["draft_accuracy"] == [0.75]
    assert "a per-token draft accuracy of 0.75" in finding.message


def test_to_env_round_trips():
    for value in ((0.75,), (0.75, 0.62, 0.55)):
        env = ProbeConfig(draft_accuracy=value).to_env()
        assert load_config(env).draft_accuracy == value
    assert ProbeConfig(draft_accuracy=(0.75, 0.5)).to_env()["EAGLE_PROBE_DRAFT_ACCURACY"] == "0.75,0.5"


@pytest.mark.parametrize("value, why", [
    ("0.75,", "position 1: '' is not a number"), ("0.75,,0.5", "position 1"), ("0.75,1.2", "position 1: 1.2 is not in"),
    ("0.75,0", "position 1: 0 is not in"), ("nan", "position 0"), ("0.75;0.62", "position 0"),
    (",".join(["0.5"] * 65), "65 positions; at most 64"), ("75%", "position 0"),
])
def test_bad_accuracies_name_the_variable_and_position(value, why):
    with pytest.raises(ConfigError) as info:
        load_config({"EAGLE_PROBE_DRAFT_ACCURACY": value})
    text = str(info.value)
    assert text.startswith(f"EAGLE_PROBE_DRAFT_ACCURACY={value!r} is not valid; accepted: ")
    assert "(0, 1]" in text and "0.75,0.62,0.55" in text and why in text


def test_accuracy_for_mean_length_inverts_the_formula():
    assert accuracy_for_mean_length(expected_mean_length((0.8,), 3), 3) == pytest.approx(0.8, abs=1e-6)
    assert accuracy_for_mean_length(1.0, 3) is None and accuracy_for_mean_length(4.5, 3) is None


@pytest.mark.parametrize("value, expect", [("extend", ("extend",)),
                                           ("extend,target_verify", ("extend", "target_verify")),
                                           ("TARGET_VERIFY, extend,extend", ("target_verify", "extend"))])
def test_dump_modes(value, expect):
    assert ProbeConfig().dump_modes == ("extend",)
    assert load_config({"EAGLE_PROBE_DUMP_MODES": value}).dump_modes == expect


@pytest.mark.parametrize("value", ["decode", "extend,", "extend;target_verify", " "])
def test_bad_dump_modes(value):
    with pytest.raises(ConfigError) as info:
        load_config({"EAGLE_PROBE_DUMP_MODES": value})
    assert "EAGLE_PROBE_DUMP_MODES" in str(info.value) and "extend, target_verify" in str(info.value)


def test_running_monitor_takes_the_tuple_unchanged(make_recorder):
    """runtime/acceptance_monitor.py passes config.draft_accuracy through: per-position accuracies work unedited."""
    recorder, stream, _, clock = make_recorder(summary_interval_s=10, draft_accuracy=(0.9, 0.8, 0.7),
                                               collapse_min_drafts=4)
    for _ in range(8):
        recorder.verify_step(VerifyStep((0, 0), 3))
    clock.now = 11
    recorder.verify_step(VerifyStep((0,), 3))
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    [acceptance] = [e for e in events if e["event"] == "eagle_probe.acceptance"]
    assert acceptance["expected_mean_accept_length"] == pytest.approx(1 + 0.9 + 0.72 + 0.504)
    [collapse] = [e for e in events if e["event"] == "eagle_probe.finding" and e["code"] == "acceptance_collapse"]
    assert collapse["evidence"]["draft_accuracy"] == [0.9, 0.8, 0.7]
    assert "per-position (conditional) training accuracies 0.9, 0.8, 0.7" in collapse["message"]
