"""A real `--enable-dp-attention --dp-size 2 --tp-size 2` SGLang 0.5.23 EAGLE-3 server on the CPU, probe injected.

Test-only support: `sglang_cpu.dp_shims` (SGLANG_CPU_DP_ATTENTION=1: DP attention's CPU branches) on top of the TP
settings. Under DP attention the EAGLE worker loads and runs its draft inside `spec_utils.draft_tp_context`, which
swaps in a size-1 attention-TP group (tp_rank 0, tp_size 1 on both schedulers); the probe must name each scheduler
by its own places: tp_rank 0 / 1 of 2, attention-DP rank 0 / 1 of 2, attention-TP rank 0 of 1. One server for the
module; the "map" case's construction gives the expected tokens.
"""

import pytest

from sglang_cpu.draft_models import build_case
from sglang_cpu.dp_shims import dp_env

from .conftest import metric_samples, probe_events, start_tp2_server

KEYS = ("pos1_always_pos2_never", "into_fixed_point", "mixed")
SCHEDULER_EVENTS = ("eagle_probe.started", "eagle_probe.capture.configured", "eagle_probe.draft.loaded",
                    "eagle_probe.target.forward", "eagle_probe.draft.forward")


@pytest.fixture(scope="module")
def dp(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("dp-attention-e2e"))
    case = build_case(root, "map", num_steps=2)
    server, log_dir = start_tp2_server(root, "dp", case=case, extra_env=dp_env(),
                                       extra_args=["--enable-dp-attention", "--dp-size", "2"])
    try:
        prompts = case["expected"]["prompts"]
        out = {k: server.generate_raw(prompts[k][0], max_new_tokens=prompts[k][1]) for k in KEYS}
        metrics = server.flushed_metrics_text()
        log = server.log_text()
    finally:
        server.stop()
    return dict(case=case, out=out, metrics=metrics, events=probe_events(log_dir), log=log,
                startup_seconds=server.startup_seconds)


def test_dp_attention_ran_two_schedulers(dp):
    assert "DP0 TP0]" in dp["log"] and "DP1 TP1]" in dp["log"], dp["log"][-3000:]


@pytest.mark.parametrize("key", KEYS)
def test_dp_attention_tokens_match_construction(dp, key):
    expected = dp["case"]["expected"]["runs"][key]
    assert dp["out"][key]["output_ids"] == expected["output_ids"]


def test_every_scheduler_event_carries_its_true_ranks(dp):
    by_pid = {}
    for event in dp["events"]:
        if event["event"] in SCHEDULER_EVENTS and event.get("tp_rank") is not None:
            by_pid.setdefault(event["pid"], []).append(event)
    assert len(by_pid) == 2, sorted(by_pid)
    places = set()
    for events in by_pid.values():
        kinds = {e["event"] for e in events}
        assert {"eagle_probe.started", "eagle_probe.draft.loaded", "eagle_probe.draft.forward"} <= kinds, kinds
        # draft events happen inside draft_tp_context (tp_size 1 there): they carry the scheduler's places too
        seen = {(e["tp_rank"], e["tp_size"], e["attn_dp_rank"], e["attn_dp_size"], e["attn_tp_rank"],
                 e["attn_tp_size"], e["node_rank"], e["nnodes"]) for e in events}
        assert len(seen) == 1, seen
        places |= seen
        assert all(e["host"] for e in events)
    assert places == {(0, 2, 0, 2, 0, 1, 0, 1), (1, 2, 1, 2, 0, 1, 0, 1)}


def test_series_carry_both_schedulers_ranks(dp):
    info = metric_samples(dp["metrics"], "eagle_probe_info")
    got = {(labels["tp_rank"], labels["tp_size"], labels["attn_dp_rank"], labels["attn_dp_size"],
            labels["attn_tp_size"], labels["node_rank"]) for labels, value in info if value == 1}
    assert got == {("0", "2", "0", "2", "1", "0"), ("1", "2", "1", "2", "1", "0")}
    draft = metric_samples(dp["metrics"], "eagle_probe_draft_forwards_total")
    assert {labels["tp_rank"] for labels, _ in draft} == {"0", "1"}
    # each DP rank verified its own requests: together, every step of the three requests once
    steps = {labels["tp_rank"]: value for labels, value in metric_samples(
        dp["metrics"], "eagle_probe_spec_verify_steps_total")}
    expected = sum(dp["case"]["expected"]["runs"][k]["verify_ct"] for k in KEYS)
    assert set(steps) == {"0", "1"} and sum(steps.values()) >= expected, steps
