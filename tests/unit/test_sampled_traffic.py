"""Greedy and sampled traffic apart: a collapse that sampled traffic alone explains is named as such, never blamed on
the layers; a collapse says which traffic it judged (pure logic on the real Recorder and its slice counter)."""

import json
from types import SimpleNamespace

import pytest

from eagle_probe.analysis import sampled_traffic
from eagle_probe.observations import VerifyStep


def request(top_k, temperature):
    params = SimpleNamespace(top_k=top_k, temperature=temperature)
    return SimpleNamespace(origin_input_ids=[0] * 10, cached_tokens=0, finished_reason=None, is_retracted=False,
                           require_reasoning=False, sampling_params=params)


def test_split_sums_the_sampled_buckets_and_leaves_unknown_out():
    sampling = {"greedy": {"request_steps": 10, "accepted": [9, 8], "drafted": [10, 10]},
                "temp<=1": {"request_steps": 6, "accepted": [3, 1], "drafted": [6, 6]},
                "temp>1": {"request_steps": 4, "accepted": [0, 0], "drafted": [2, 2]},
                "unknown": {"request_steps": 50, "accepted": [0, 0], "drafted": [50, 50]}}
    got = sampled_traffic.split(sampling)
    assert got["greedy"]["mean_accept_length"] == pytest.approx(1 + 17 / 10)
    assert got["sampled"]["request_steps"] == 10
    assert got["sampled"]["first_position_rate"] == pytest.approx(3 / 8)  # over the request-steps that drafted it
    assert sampled_traffic.judged(got) == "mixed traffic (50% of request-steps greedy)"
    assert sampled_traffic.judged({"sampled": got["sampled"]}) == "sampled traffic (temperature > 0)"


def _run(make_recorder, greedy_accepted, sampled_accepted):
    recorder, stream, _, clock = make_recorder(summary_interval_s=1, draft_accuracy=(0.9,), collapse_min_drafts=8,
                                               collapse_ratio=0.8)
    greedy, sampled = request(1, 1.0), request(-1, 1.0)
    for _ in range(10):
        recorder.verify_step(VerifyStep((greedy_accepted, sampled_accepted), 3, "t", [greedy, sampled], 2, False))
    clock.now = 2
    recorder.periodic.tick_if_due()
    return [json.loads(line) for line in stream.getvalue().splitlines() if '"eagle_probe.finding"' in line]


def test_a_shortfall_of_sampled_traffic_alone_is_named_as_such(make_recorder):
    # greedy accepts all 3 (4.0 against 3.44 expected), sampled none: 2.5 overall is 73 % of it, under 80 %
    [finding] = _run(make_recorder, 3, 0)
    assert finding["code"] == "acceptance_sampled_traffic"
    assert "sampled traffic accounts for the shortfall" in finding["message"]
    assert finding["evidence"]["greedy"]["mean_accept_length"] == 4.0


def test_a_collapse_of_greedy_traffic_too_stays_a_collapse_and_names_the_traffic(make_recorder):
    [finding] = _run(make_recorder, 0, 0)
    assert finding["code"] == "acceptance_collapse"
    assert finding["evidence"]["traffic"] == "mixed traffic (50% of request-steps greedy)"


def test_a_collapse_of_sampled_traffic_alone_says_the_layers_are_judged_on_greedy_requests(make_recorder):
    recorder, stream, _, clock = make_recorder(summary_interval_s=1, draft_accuracy=(0.9,), collapse_min_drafts=8,
                                               collapse_ratio=0.8)
    for _ in range(10):
        recorder.verify_step(VerifyStep((0, 0), 3, "t", [request(-1, 1.0), request(-1, 0.7)], 2, False))
    clock.now = 2
    recorder.periodic.tick_if_due()
    [finding] = [json.loads(line) for line in stream.getvalue().splitlines() if '"eagle_probe.finding"' in line]
    assert finding["code"] == "acceptance_collapse"
    assert finding["evidence"]["traffic"] == "sampled traffic (temperature > 0)"
    assert "judge the layers on greedy requests" in finding["message"]
