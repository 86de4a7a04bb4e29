"""summarize: a data-parallel rank whose acceptance is below the other DP ranks' beyond chance is named by
acceptance_slice_low with dimension dp_rank (the slices' test, across DP ranks); equal ranks stay silent; a DP
rank's TP ranks (which verify the same steps) are counted once. The events are the probe's own lines."""

from eagle_probe.commands.summarize.report import build_report, render_text


def _slices_event(pid, tp_rank, attn_dp_rank, steps, accepted, dp_rank=None):
    """One process's last acceptance_slices event: `steps` request-steps, accepted per position, split over the
    step dimension's buckets (first / later) as the runtime counts them."""
    first = {"request_steps": steps // 4, "accepted": [a // 4 for a in accepted]}
    later = {"request_steps": steps - first["request_steps"],
             "accepted": [a - f for a, f in zip(accepted, first["accepted"])]}
    return {"event": "eagle_probe.acceptance_slices", "timestamp": "2026-12-03T10:00:00Z", "pid": pid,
            "tp_rank": tp_rank, "pp_rank": 0, "dp_rank": dp_rank, "attn_dp_rank": attn_dp_rank, "attn_dp_size": 2,
            "positions": 2, "slices": {"step": {"first": first, "later": later}}}



def test_a_dp_rank_below_the_others_is_named():
    events = [_slices_event(10, 0, 0, 200, [160, 120]), _slices_event(11, 1, 1, 200, [40, 10])]
    report = build_report(events)
    findings = report["acceptance_slices"]["findings"]
    assert [(f["evidence"]["dimension"], f["evidence"]["bucket"], f["tp_rank"], f["pid"]) for f in findings] == [
        ("dp_rank", "1", 1, 11)]
    assert "with dp_rank = 1" in findings[0]["message"] and "data-parallel rank" in findings[0]["message"]
    text = render_text(report)
    assert "by data-parallel rank: 0: 0.80/0.60 (n=200); 1: 0.20/0.05 (n=200)" in text
    assert "LOW dp_rank=1 at position 0" in text


def test_equal_dp_ranks_stay_silent_and_tp_ranks_of_one_dp_rank_count_once():
    events = [_slices_event(10, 0, 0, 200, [160, 120]), _slices_event(11, 1, 0, 200, [160, 120]),  # DP 0: 2 TP
              _slices_event(12, 2, 1, 200, [150, 118])]
    report = build_report(events)
    assert report["acceptance_slices"]["findings"] == []
    assert {b: r["request_steps"] for b, r in report["acceptance_slices"]["dp_ranks"]["slices"].items()} == {
        "0": 200, "1": 200}


def test_the_controllers_dp_rank_is_used_where_there_is_one_and_one_rank_is_not_compared():
    events = [_slices_event(10, 0, None, 200, [160, 120], dp_rank=3)]
    assert "dp_ranks" not in build_report(events)["acceptance_slices"]
    events.append(_slices_event(11, 0, None, 200, [20, 5], dp_rank=4))
    findings = build_report(events)["acceptance_slices"]["findings"]
    assert [f["evidence"]["bucket"] for f in findings] == ["4"]
