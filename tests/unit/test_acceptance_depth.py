"""Acceptance at each verify step's own depth (adaptive depth, trees): pure counting, figures worked out by hand."""

import pytest

from eagle_probe.analysis.acceptance import AcceptanceWindow, expected_mean_length_mixed
from eagle_probe.observations import VerifyStep
from tests.unit.test_acceptance import sample

# An adaptive server's steps: depth 1, then 3, then 0 (a width-1 verify, no draft), two requests each but the last.
STEPS = (VerifyStep((1, 0), 1), VerifyStep((3, 2), 3), VerifyStep((0,), 0))


def test_positions_are_rated_over_the_steps_that_drafted_them():
    window = AcceptanceWindow()
    for step in STEPS:
        window.add_step(step.accepted, step.positions)
    # position 0: drafted by 4 request-steps (depths 1, 1, 3, 3), accepted by 3; positions 1-2: drafted by 2
    assert window.drafted_per_position() == [4, 2, 2]
    assert window.per_position == [3, 2, 1]
    assert window.per_position_rate() == pytest.approx([3 / 4, 1.0, 0.5])
    # P(k accepted | k-1 accepted, k drafted): position 1 over the depth-3 steps that accepted position 0 (2 of 2)
    assert window.conditional_rate() == pytest.approx([3 / 4, 1.0, 0.5])
    # SGLang's: 1 + correct drafts / verify steps, every request-step counted (the depth-0 one too)
    assert window.mean_length() == pytest.approx(1 + 6 / 5)
    assert window.accept_rate() == pytest.approx(6 / (1 + 1 + 3 + 3))
    assert window.per_depth() == {
        "0": {"verify_steps": 1, "step_share": pytest.approx(1 / 3), "request_steps": 1, "accepted_tokens": 0,
              "mean_accept_length": 1.0},
        "1": {"verify_steps": 1, "step_share": pytest.approx(1 / 3), "request_steps": 2, "accepted_tokens": 1,
              "mean_accept_length": 1.5},
        "3": {"verify_steps": 1, "step_share": pytest.approx(1 / 3), "request_steps": 2, "accepted_tokens": 5,
              "mean_accept_length": 3.5}}
    assert window.as_fields()["accept_length_histogram"] == {"0": 2, "1": 1, "2": 1, "3": 1}



def test_one_pass_sums_are_the_figures_worked_out_above():
    window = AcceptanceWindow()
    for step in STEPS:
        window.add_step(step.accepted, step.positions)
    sums = window.sums()
    assert (sums.request_steps, sums.accepted_tokens) == (5, 6)
    assert (sums.per_position, sums.drafted_per_position) == ([3, 2, 1], [4, 2, 2])
    assert dict(sums.length_histogram) == {0: 2, 1: 1, 2: 1, 3: 1}
    assert sums.per_depth == {0: [1, 1, 0], 1: [1, 2, 1], 3: [1, 2, 5]}  # [verify steps, request-steps, accepted]


def test_a_tree_proposes_all_its_nodes():
    window = AcceptanceWindow()
    window.add_step((2, 0), 3, proposed=7)  # topk 4, 8 draft tokens: 7 nodes after the root, 3 deep
    assert (window.positions, window.draft_tokens, window.accepted_tokens) == (3, 14, 2)
    assert window.accept_rate() == pytest.approx(2 / 14)
    assert window.per_position_rate() == pytest.approx([0.5, 0.5, 0.0])


def test_expected_length_follows_the_depth_mix():
    # accuracy 0.5: depth 1 -> 1.5, depth 3 -> 1.875; two request-steps at each
    assert expected_mean_length_mixed((0.5,), {1: 2, 3: 2}) == pytest.approx((1.5 + 1.875) / 2)
    assert expected_mean_length_mixed((0.5,), {}) is None


def test_series_count_each_depth_and_what_drafted_each_position(make_recorder):
    recorder, _, registry, _ = make_recorder()
    for step in STEPS:
        recorder.verify_step(step)
    recorder.verify_step(VerifyStep((2,), 3, proposed=7))
    recorder.flush_metrics()
    assert sample(registry, "eagle_probe_spec_verify_steps_total") == 4
    assert sample(registry, "eagle_probe_spec_drafts_total") == 6
    assert sample(registry, "eagle_probe_spec_accepted_tokens_total") == 8
    assert sample(registry, "eagle_probe_spec_draft_tokens_total") == 1 + 1 + 3 + 3 + 7
    assert [sample(registry, "eagle_probe_spec_drafted_tokens_per_pos_total", position=str(k))
            for k in range(3)] == [5, 3, 3]
    assert [sample(registry, "eagle_probe_spec_accepted_tokens_per_pos_total", position=str(k))
            for k in range(3)] == [4, 3, 1]
    assert sample(registry, "eagle_probe_spec_depth_verify_steps_total", depth="3") == 2
    assert sample(registry, "eagle_probe_spec_depth_drafts_total", depth="3") == 3
    assert sample(registry, "eagle_probe_spec_depth_accepted_tokens_total", depth="3") == 7
    assert sample(registry, "eagle_probe_spec_depth_verify_steps_total", depth="0") == 1
    assert sample(registry, "eagle_probe_spec_draft_depth") == 3
    recorder.flush_metrics()  # nothing new: nothing added
    assert sample(registry, "eagle_probe_spec_depth_drafts_total", depth="3") == 3


def test_training_promise_follows_the_depths_served():
    from eagle_probe.analysis.training_gap import compare

    # a perfect draft served half at depth 1, half at depth 3: 1 + (1 + 3) / 2 = 3.0 tokens a step, all it can give
    served = compare((1.0,), 200, [1.0, 1.0, 1.0], 3.0, {1: 100, 3: 100}, [200, 100, 100])
    assert served["promised_mean_accept_length"] == pytest.approx(3.0) and not served["below"]
    # held against the deepest depth alone it would look a quarter short
    assert compare((1.0,), 200, [1.0, 1.0, 1.0], 3.0)["below"]
