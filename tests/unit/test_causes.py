"""The causes users hit, as rules (analysis.field_prior, analysis.trained_length, analysis.bimodal) and as summarize
shows them on logs the real Recorder wrote for verify steps built here (plain records, no SGLang): acceptance_low
(no promise given), acceptance_past_trained_length, acceptance_bimodal, each silent on its control."""

import functools
import json
import random
from types import SimpleNamespace

import pytest

from eagle_probe import events as names
from eagle_probe.analysis import bimodal, field_prior
from eagle_probe.analysis import trained_length as TL
from eagle_probe.commands.cli import main
from eagle_probe.commands.summarize.report import build_report, render_text
from eagle_probe.observations import VerifyStep

# -- the rules ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rate, steps, low", [
    (0.39, 100, True),  # the rule's line: every first position under 0.4 over 100 or more is named
    (0.0, 100, True), (0.399, 10 ** 6, True),
    (0.39, 99, False),  # too few request-steps
    (0.41, 10 ** 6, False),  # weak but within the field's spread: not "far below"
    (0.6, 10 ** 6, False), (0.9, 500, False),
])
def test_first_position_against_the_prior(rate, steps, low):
    assert field_prior.judge(rate, steps)["low"] is low


def test_the_prior_rule_holds_beyond_chance_where_it_fires():
    # at the smallest count and the highest rate it names, the shortfall is still over Z standard errors
    assert field_prior.judge(0.3999, field_prior.MIN_STEPS)["z"] >= field_prior.Z
    assert field_prior.judge(None, 100) is None and field_prior.judge(0.5, 0) is None
    assert field_prior.judge(1.5, 100) is None


def _position(rows):
    return {b: {"request_steps": n, "accepted": acc} for b, (n, acc) in rows.items()}


def test_past_the_trained_length_names_both_rates_and_the_length():
    slices = _position({"0-63": (200, [150, 90]), "64-127": (200, [20, 5]), "128-255": (100, [10, 2])})
    result = TL.compare(slices, 64, 2)
    assert result["within"]["buckets"] == ["0-63"] and result["beyond"]["buckets"] == ["64-127", "128-255"]
    assert result["low"]["position"] == 0 and result["low"]["within_rate"] == 0.75
    assert result["low"]["beyond_rate"] == 0.1
    finding = TL.past_length_finding(result, "EAGLE_PROBE_DRAFT_MAX_LENGTH", "tp_rank 0")
    assert finding.code == "acceptance_past_trained_length" and finding.severity == "warning"
    assert "trained length 64 (EAGLE_PROBE_DRAFT_MAX_LENGTH)" in finding.message
    assert "10.0% over 300 request-steps" in finding.message and "75.0% over 200" in finding.message


def test_acceptance_that_holds_up_past_the_length_is_silent():
    slices = _position({"0-63": (200, [150, 90]), "64-127": (200, [148, 88])})
    assert TL.compare(slices, 64, 2)["low"] is None
    assert TL.compare(slices, 4096, 2) is None  # nothing beyond: no comparison at all


def test_a_bucket_straddling_the_length_is_left_out_and_said():
    slices = _position({"0-63": (200, [150, 90]), "64-127": (200, [20, 5]), "128-255": (200, [20, 5])})
    result = TL.compare(slices, 100, 2)
    assert result["straddling"] == ["64-127"] and result["beyond"]["buckets"] == ["128-255"]
    assert "straddling the length: 64-127" in TL.past_length_finding(result, "x", "w").message
    assert TL.bucket_range("unknown") is None and TL.bucket_range("65536+") == (65536, None)
    assert TL.bucket_range("bogus") is None


def test_too_few_request_steps_beyond_never_fire():
    slices = _position({"0-63": (200, [150, 90]), "64-127": (20, [0, 0])})
    assert TL.compare(slices, 64, 2)["low"] is None


@pytest.mark.parametrize("histogram, expected", [
    ({"<=1.25": 30, "<=3": 30}, ("<=1.25", "<=3")),
    ({"<=1.25": 12, "<=1.5": 3, "<=2.5": 2, "<=3": 20, "<=3.5": 5}, ("<=1.25", "<=3")),
    ({"<=2": 10, "<=2.5": 40, "<=3": 10}, None),  # one peak
    ({"<=1.25": 8, "<=3": 8}, None),  # too few requests
    ({"<=1.25": 50, "<=3": 5}, None),  # the second group too small a share
    ({"<=2": 25, "<=2.5": 2, "<=3": 25}, ("<=2", "<=3")),
    ({"<=1.25": 25, "<=1.5": 1, "<=1.75": 25}, None),  # peaks closer than MIN_SPREAD tokens
])
def test_bimodal_split(histogram, expected):
    result = bimodal.split(histogram)
    assert (None if result is None else (result["low_peak"], result["high_peak"])) == expected


# -- summarize, on the real Recorder's logs --------------------------------------------------------------------------


@pytest.fixture
def logs(make_recorder):
    """_logs on a new Recorder: logs(accept, requests=..., ...) -> its JSON lines."""
    return functools.partial(_logs, make_recorder)


def _logs(make_recorder, accept, requests=40, steps=6, prompt=lambda i: 10, positions=2, seed=0):
    """Verify steps of `requests` requests served one after another; accept(request index, position, rng) -> the
    drafts accepted. The Recorder's JSON lines, parsed."""
    recorder, stream, _, clock = make_recorder()
    rng = random.Random(seed)
    for i in range(requests):
        r = SimpleNamespace(origin_input_ids=[0] * prompt(i), cached_tokens=0, finished_reason=None)
        position = prompt(i) + 1
        for step in range(steps):
            accepted = accept(i, position, rng)
            if step == steps - 1:
                r.finished_reason = "stop"
            recorder.verify_step(VerifyStep([accepted], positions + 1, "t", [r], 1, False))
            position += accepted + 1
        clock.now += 1.0
        recorder.periodic.tick()
    clock.now += 100.0
    recorder.periodic.tick()
    recorder.flush_metrics()
    clock.now += 100.0
    recorder.periodic.tick()
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def _codes(report):
    return [g["code"] for g in report["findings"]]


def _chain(p):
    return lambda i, position, rng: (1 + (rng.random() < p)) if rng.random() < p else 0


def test_the_example_case_is_named_acceptance_low_with_checks_and_next_steps(logs):
    lines = logs(_chain(0.2))
    report = build_report(lines)
    [low] = [g for g in report["findings"] if g["code"] == "acceptance_low"]
    message = low["last_message"]
    rate = report["ranks"][0]["acceptance"]["per_position_rate"][0]
    assert rate < 0.3 and f"first-position acceptance {rate:.3f} over 240 request-steps" in message
    assert "vLLM PR #24243" in message
    assert "Not checked:" in message and "training accuracy (none given" in message
    assert "eagle-probe replay" in message and "--search" in message and "eagle-probe consistency" in message
    assert "findings: none" not in render_text(report)


def test_a_block_draft_is_told_the_prior_is_eagle3s(logs):
    lines = logs(_chain(0.2))
    report = build_report(lines)
    [low] = [g for g in report["findings"] if g["code"] == "acceptance_low"]
    assert "block-diffusion" not in low["last_message"]
    loaded = dict(lines[0], event="eagle_probe.block_draft.loaded", role="draft", block_size=4, draft_positions=3)
    [low] = [g for g in build_report(lines + [loaded])["findings"] if g["code"] == "acceptance_low"]
    assert "This is a block-diffusion draft (DFlash/DSpark): the figures are EAGLE-3 drafts'" in low["last_message"]


def test_a_well_trained_draft_stays_silent(logs):
    report = build_report(logs(_chain(0.7)))
    assert "acceptance_low" not in _codes(report)
    assert report["ranks"][0]["acceptance"]["per_position_rate"][0] >= 0.6


def test_a_promise_given_leaves_the_verdict_to_training(logs):
    report = build_report(logs(_chain(0.2)), draft_accuracy=(0.8,))
    assert "acceptance_low" not in _codes(report) and "acceptance_below_training" in _codes(report)


def _position_rule(length, far):
    def accept(i, position, rng):
        p = far if position >= length else 0.75
        return (1 + (rng.random() < p)) if rng.random() < p else 0
    return accept


def _loaded(length, source):
    return {"event": names.DRAFT_LOADED, "role": "draft", "tp_rank": 0, "pp_rank": 0, "dp_rank": None, "pid": 1,
            "model_class": "LlamaForCausalLMEagle3", "trained_length": length, "trained_length_source": source}


def test_past_the_trained_length_from_the_load_event_and_from_the_option(logs, capsys, tmp_path):
    lines = logs(_position_rule(64, 0.1), requests=40, steps=12, prompt=lambda i: 40)
    pid = next(e["pid"] for e in lines if e["event"] == names.ACCEPTANCE_SLICES)
    report = build_report(lines + [dict(_loaded(64, "SpecForge's training_state.pt (args.max_length)"), pid=pid)])
    [past] = [g for g in report["findings"] if g["code"] == "acceptance_past_trained_length"]
    assert "trained length 64 (SpecForge's training_state.pt" in past["last_message"]
    # the option overrides the logs; a length past every position seen names nothing
    assert "acceptance_past_trained_length" not in _codes(build_report(lines, draft_max_length=100000))
    log = tmp_path / "probe.jsonl"
    log.write_text("\n".join(json.dumps(e) for e in lines))
    assert main(["summarize", str(log), "--draft-max-length", "64", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [g["code"] for g in out["findings"] if g["code"] == "acceptance_past_trained_length"]
    with pytest.raises(SystemExit):
        main(["summarize", str(log), "--draft-max-length", "0"])
    assert "--draft-max-length: '0' is not valid" in capsys.readouterr().err


def test_acceptance_that_holds_up_past_the_length_names_nothing(logs):
    lines = logs(_position_rule(64, 0.75), requests=40, steps=12, prompt=lambda i: 40)
    assert "acceptance_past_trained_length" not in _codes(build_report(lines, draft_max_length=64))


def test_a_subset_of_requests_that_fails_is_named_bimodal(logs):
    lines = logs(lambda i, position, rng: 0 if i % 2 else 2, requests=40)
    [group] = [g for g in build_report(lines)["findings"] if g["code"] == "acceptance_bimodal"]
    assert "20 of 40 around <=1.25" in group["last_message"] and "20 around <=3" in group["last_message"]
    assert "No slice the probe counts explains it" in group["last_message"]
    uniform = logs(_chain(0.7), requests=40)
    assert "acceptance_bimodal" not in _codes(build_report(uniform))


def test_next_steps_follow_the_evidence():
    from eagle_probe.commands.summarize.causes import next_steps

    rows = [{"check": "layers", "status": "clean", "detail": ""}, {"check": "vocabulary map", "status": "clean",
                                                                   "detail": ""}]
    step_low = {"low": [{"dimension": "step", "bucket": "later", "position": 0, "rate": 0.1, "rest_rate": 0.7}]}
    position_low = {"low": [{"dimension": "position", "bucket": "64-127", "position": 0, "rate": 0.1,
                             "rest_rate": 0.7}]}
    plain = next_steps([], rows, {"low": []}, set())
    assert "replay" in plain[0] and "--search" in plain[0] and "dumps: run the server" in plain[0]
    assert "consistency" in plain[1] and "(if the layers are right)" in plain[1]
    decode = next_steps([], rows, step_low, set())
    assert "consistency" in decode[0] and "decode path is suspect: step = later" in decode[0]
    assert "replay" in decode[1] and "dumps" not in decode[1]
    traffic = next_steps([], rows, position_low, set())
    assert traffic[0].startswith("the slices: position=64-127")
    confirmed = next_steps([{"event": names.DUMP_WRITTEN, "path": "/d/x.safetensors"}], rows, {"low": []},
                           {"trained_layers_inferred"})
    assert not any("replay" in s for s in confirmed) and "--dump /d" in confirmed[0]
    unchecked = rows[:1] + [{"check": "vocabulary map", "status": "not checked", "detail": ""}]
    assert "eagle-probe doctor" in next_steps([], unchecked, None, set())[-1]
