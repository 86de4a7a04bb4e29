"""A real `--enable-dp-attention --dp-size 2 --tp-size 2` SGLang 0.5.23 EAGLE-3 server on the CPU, probe injected.

Test-only support: `sglang_cpu.dp_shims` (SGLANG_CPU_DP_ATTENTION=1: DP attention's CPU branches) on top of the TP
settings. Under DP attention the EAGLE worker loads and runs its draft inside `spec_utils.draft_tp_context`, which
swaps in a size-1 attention-TP group (tp_rank 0, tp_size 1 on both schedulers); the probe must name each scheduler
by its own places: tp_rank 0 / 1 of 2, attention-DP rank 0 / 1 of 2, attention-TP rank 0 of 1. One server for the
module; the "map" case's construction gives the expected tokens. The same server then serves a control phase and
a fault on DP rank 1 only (sglang_cpu.tp_shims: the aux slot its draft reads negated on tp rank 1 once a flag file
exists): summarize names DP rank 1's acceptance below DP rank 0's (acceptance_slice_low, dimension dp_rank) and
says nothing of the kind over the control phase.
"""

import json
import os
import shutil
import time

import pytest

from eagle_probe.commands.cli import main
from sglang_cpu.dp_shims import dp_env
from sglang_cpu.draft_models import build_case

from .conftest import metric_samples, probe_events, start_tp2_server

KEYS = ("pos1_always_pos2_never", "into_fixed_point", "mixed")
SCHEDULER_EVENTS = ("eagle_probe.started", "eagle_probe.capture.configured", "eagle_probe.draft.loaded",
                    "eagle_probe.target.forward", "eagle_probe.draft.forward")


# The acceptance phases: the "into_fixed_point" prompt (every draft accepted: 3 tokens a verify step) sent several
# times in a row, so that the DP controller's round robin hands each DP rank the same requests. Control: 10 requests
# of about 16 request-steps, over 64 (the test's minimum) on each DP rank. Fault: one request each; DP rank 1's takes
# one token a step (about 45 request-steps accepting nothing), enough to be named against the cumulative counts.
LONG = ("into_fixed_point", 45)
CONTROL_REQUESTS, FAULT_REQUESTS = 10, 2
FAULT = "1:0:-1"  # tp rank 1 (= DP rank 1 here), aux slot 0 (the one the "map" draft reads), negated


def _phase(server, prompts, requests):
    prompt = prompts[LONG[0]][0]
    return [server.generate_raw(prompt, max_new_tokens=LONG[1]) for _ in range(requests)]


@pytest.fixture(scope="module")
def dp(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("dp-attention-e2e"))
    case = build_case(root, "map", num_steps=2)
    flag = os.path.join(root, "perturb-dp1")
    server, log_dir = start_tp2_server(root, "dp", case=case, extra_args=["--enable-dp-attention", "--dp-size", "2"],
                                       extra_env=dict(dp_env(), SGLANG_CPU_PERTURB_AUX=FAULT,
                                                      SGLANG_CPU_PERTURB_AUX_FLAG=flag))
    try:
        prompts = case["expected"]["prompts"]
        out = {k: server.generate_raw(prompts[k][0], max_new_tokens=prompts[k][1]) for k in KEYS}
        control = _phase(server, prompts, CONTROL_REQUESTS)
        metrics = server.flushed_metrics_text()
        time.sleep(0.5)  # the last cumulative acceptance_slices lines (every 0.2 s) are written
        control_dir = shutil.copytree(log_dir, os.path.join(root, "control"))
        open(flag, "w").close()
        fault = _phase(server, prompts, FAULT_REQUESTS)
        time.sleep(1.5)
        log = server.log_text()
    finally:
        server.stop()
    return dict(case=case, out=out, metrics=metrics, events=probe_events(control_dir), log=log, control=control,
                fault=fault, control_dir=control_dir, log_dir=log_dir, startup_seconds=server.startup_seconds)


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


def test_both_phases_keep_the_construction_tokens(dp):
    expected = dp["case"]["expected"]["runs"][LONG[0]]["output_ids"]
    for out in dp["control"] + dp["fault"]:
        assert out["output_ids"][:len(expected)] == expected


def _dp_findings(capsys, log_dir):
    assert main(["summarize", "--format", "json", log_dir]) == 0
    section = json.loads(capsys.readouterr().out)["acceptance_slices"]
    low = [(f["evidence"]["bucket"], f["evidence"]["position"], f["tp_rank"], f["dp_rank"])
           for f in section["findings"] if f["evidence"]["dimension"] == "dp_rank"]
    return section, low


def test_control_phase_compares_the_dp_ranks_and_stays_silent(dp, capsys):
    section, low = _dp_findings(capsys, dp["control_dir"])
    rows = section["dp_ranks"]["slices"]
    assert set(rows) == {"0", "1"} and min(r["request_steps"] for r in rows.values()) >= 64, rows  # tested
    assert low == []


def test_fault_on_one_dp_rank_is_named(dp, capsys):
    section, low = _dp_findings(capsys, dp["log_dir"])
    assert low and {(b, tp, d) for b, _, tp, d in low} == {("1", 1, 1)}, (low, section["dp_ranks"])
