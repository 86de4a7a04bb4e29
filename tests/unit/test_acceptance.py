"""Acceptance statistics and their metrics, on plain numbers (pure logic; the wrap point is proven on a real server)."""

import json

import pytest

from eagle_probe.analysis.acceptance import AcceptanceWindow, expected_mean_length
from eagle_probe.analysis.draft_weights import unconsumed_weights
from eagle_probe.observations import VerifyStep


def test_window_follows_vllm_definitions():
    window = AcceptanceWindow()
    window.add_step([3, 1, 0], positions=3)
    window.add_step([2], positions=3)
    assert (window.steps, window.drafts, window.draft_tokens, window.accepted_tokens) == (2, 4, 12, 6)
    assert window.mean_length() == pytest.approx(1 + 6 / 4)
    assert window.per_position_rate() == pytest.approx([3 / 4, 2 / 4, 1 / 4])
    assert window.conditional_rate() == pytest.approx([3 / 4, 2 / 3, 1 / 2])
    assert window.as_fields()["accept_length_histogram"] == {"0": 1, "1": 1, "2": 1, "3": 1}


def test_expected_length_is_geometric():
    assert expected_mean_length((1.0,), 5) == 6.0
    assert expected_mean_length((0.5,), 2) == pytest.approx(1 + 0.5 + 0.25)


def sample(registry, name, **labels):
    return registry.get_sample_value(name, dict(tp_rank="0", pp_rank="0", dp_rank="", node_rank="", host="", **labels))


def test_metrics_match_the_steps_exactly(make_recorder):
    recorder, _, registry, _ = make_recorder()
    recorder.verify_step(VerifyStep((2, 0, 1), 2))
    recorder.flush_metrics()
    assert sample(registry, "eagle_probe_spec_accepted_tokens_total") == 3
    recorder.verify_step(VerifyStep((2,), 2))
    assert sample(registry, "eagle_probe_spec_accepted_tokens_total") == 3  # counted, not yet flushed
    recorder.verify_step(VerifyStep((), 2))  # every request finished: a step without drafts
    recorder.flush_metrics()
    recorder.flush_metrics()  # a flush with nothing new adds nothing
    assert sample(registry, "eagle_probe_spec_verify_steps_total") == 3
    assert sample(registry, "eagle_probe_spec_drafts_total") == 4
    assert sample(registry, "eagle_probe_spec_draft_tokens_total") == 8
    assert sample(registry, "eagle_probe_spec_accepted_tokens_total") == 5
    assert sample(registry, "eagle_probe_spec_accepted_tokens_per_pos_total", position="0") == 3
    assert sample(registry, "eagle_probe_spec_accepted_tokens_per_pos_total", position="1") == 2
    assert sample(registry, "eagle_probe_spec_accepted_length_bucket", le="0.0") == 1
    assert sample(registry, "eagle_probe_spec_accepted_length_bucket", le="1.0") == 2
    assert sample(registry, "eagle_probe_spec_accepted_length_count") == 4
    assert sample(registry, "eagle_probe_spec_accepted_length_sum") == 5


def test_periodic_event_and_collapse_finding_with_causes(make_recorder):
    recorder, stream, _, clock = make_recorder(summary_interval_s=10, draft_accuracy=(0.8,), collapse_min_drafts=4)
    recorder.finding(__import__("eagle_probe.analysis.findings", fromlist=["x"])._finding(
        "tbo_capture_lost", "slots lost", lost=[2]), "target")
    for _ in range(4):
        recorder.verify_step(VerifyStep((0, 1), 3))
    assert not [line for line in stream.getvalue().splitlines() if "eagle_probe.acceptance" in line]
    clock.now = 11
    recorder.verify_step(VerifyStep((0,), 3, "sglang.srt.speculative.eagle_worker.EAGLEWorker.verify"))
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    [acceptance] = [e for e in events if e["event"] == "eagle_probe.acceptance"]
    assert acceptance["drafts"] == 9 and acceptance["accepted_tokens"] == 4
    assert acceptance["read_at"] == "sglang.srt.speculative.eagle_worker.EAGLEWorker.verify"
    assert acceptance["expected_mean_accept_length"] == pytest.approx(1 + 0.8 + 0.64 + 0.512)
    [collapse] = [e for e in events if e["event"] == "eagle_probe.finding" and e["code"] == "acceptance_collapse"]
    assert collapse["evidence"]["likely_causes"] == ["tbo_capture_lost"]
    assert "tbo_capture_lost" in collapse["message"]


def test_quiet_intervals_are_carried_into_one_judged_window(make_recorder):
    """Three summary intervals of 3 request-steps each, under a minimum of 8: no interval alone can be judged; the
    third carries the first two and collapses over all 9 (on a quiet server every interval may hold too few)."""
    recorder, stream, _, clock = make_recorder(summary_interval_s=10, draft_accuracy=(0.9,), collapse_min_drafts=8)
    for interval in range(3):
        recorder.verify_step(VerifyStep((0, 0, 0), 3))
        clock.now = 11 * (interval + 1)
        recorder.periodic.tick_if_due()
        collapses = [json.loads(line) for line in stream.getvalue().splitlines() if "acceptance_collapse" in line]
        assert len(collapses) == (1 if interval == 2 else 0)
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [e["drafts"] for e in events if e["event"] == "eagle_probe.acceptance"] == [3, 3, 3]
    [collapse] = [e for e in events if e["event"] == "eagle_probe.finding"]
    assert collapse["evidence"]["drafts"] == 9


def test_no_collapse_when_acceptance_matches_training(make_recorder):
    recorder, stream, _, clock = make_recorder(summary_interval_s=1, draft_accuracy=(0.5,), collapse_min_drafts=1)
    recorder.verify_step(VerifyStep((1, 2, 0, 1), 2))
    clock.now = 2
    recorder.verify_step(VerifyStep((1,), 2))
    assert "acceptance_collapse" not in stream.getvalue()


def test_unconsumed_draft_weights():
    params = ["model.layers.0.self_attn.qkv_proj.weight", "model.layers.0.mlp.gate_up_proj.weight",
              "model.fc.weight", "model.norm.weight", "lm_head.weight", "model.embed_tokens.weight"]
    checkpoint = ["midlayer.self_attn.q_proj.weight", "midlayer.self_attn.k_proj.weight",
                  "midlayer.mlp.up_proj.weight", "fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d",
                  "fc_norm.0.weight", "input_norm.weight"]
    dropped, ignored = unconsumed_weights(checkpoint, params)
    assert dropped == ("fc_norm.0.weight", "input_norm.weight")
    assert ignored == ("t2d",)
