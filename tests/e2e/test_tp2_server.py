"""A real `--tp-size 2` SGLang 0.5.23 EAGLE-3 speculative server on the CPU, probe injected through PYTHONPATH.

Test-only support: `sglang_cpu.tp_shims` (pynccl off; SGLangServer sets SGLANG_CPU_TP=1 and
SGLANG_CPU_OMP_THREADS_BIND="0|1" for --tp-size 2) and `start_tp2_server` in conftest. The checkpoints are the
"map" case of `sglang_cpu.draft_models` (greedy chain, 2 steps, 3 draft tokens), so the expected tokens and
acceptance come from the construction (`simulate_chain`), never from a server. One server for the module.
"""

import pytest

from eagle_probe.commands.summarize.logread import read_events
from sglang_cpu.draft_models import build_case

from .conftest import start_tp2_server

NUM_STEPS = 2
KEYS = ("pos1_always_pos2_never", "into_fixed_point", "mixed")
VERIFY_STEPS = "eagle_probe_spec_verify_steps_total"


def _by_rank(metrics_text, name):
    """tp_rank label value -> sample of a probe series labelled only by rank."""
    out = {}
    for line in metrics_text.splitlines():
        if line.startswith(name + "{") and 'tp_rank="' in line:
            rank = line.split('tp_rank="', 1)[1].split('"', 1)[0]
            out[rank] = float(line.rsplit(" ", 1)[1])
    return out


@pytest.fixture(scope="module")
def tp2(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("tp2-e2e"))
    case = build_case(root, "map", num_steps=NUM_STEPS)
    # fingerprints sampled every 0.2 s and every sample logged (a new summary bucket each time), so the short run
    # gives many forwards sampled on both ranks
    server, log_dir = start_tp2_server(root, "tp2", case=case, extra_env={
        "EAGLE_PROBE_FINGERPRINT_INTERVAL_S": "0.2", "EAGLE_PROBE_SUMMARY_INTERVAL_S": "0.2"})
    try:
        before = _by_rank(server.flushed_metrics_text(), VERIFY_STEPS)
        prompts = case["expected"]["prompts"]
        out = {k: server.generate_raw(prompts[k][0], max_new_tokens=prompts[k][1]) for k in KEYS}
        metrics = server.flushed_metrics_text()
        server_pid = server.proc.pid
        log = server.log_text()
    finally:
        server.stop()
    return dict(case=case, out=out, before=before, metrics=metrics, events=read_events([log_dir]),
                server_pid=server_pid, log=log, startup_seconds=server.startup_seconds)


@pytest.mark.parametrize("key", KEYS)
def test_tp2_tokens_and_acceptance_match_construction(tp2, key):
    expected = tp2["case"]["expected"]["runs"][key]
    got = tp2["out"][key]
    assert got["output_ids"] == expected["output_ids"]
    meta = got["meta_info"]
    assert meta["spec_verify_ct"] == expected["verify_ct"]
    assert meta["spec_num_correct_drafts"] == expected["num_correct_drafts"]
    assert meta["spec_correct_drafts_histogram"] == expected["histogram"]


def test_tp2_both_schedulers_ran(tp2):
    assert "TP0]" in tp2["log"] and "TP1]" in tp2["log"]


def test_probe_target_forwards_come_from_two_ranks(tp2):
    forwards = [e for e in tp2["events"] if e["event"] == "eagle_probe.target.forward" and e["role"] == "target"]
    ranks = {}
    for event in forwards:
        ranks.setdefault(event["pid"], set()).add(event["tp_rank"])
        assert event["tp_size"] == 2 and event["aux_shape"][1] == 3 * 64
    assert len(ranks) == 2 and tp2["server_pid"] not in ranks, ranks
    assert sorted(tuple(r) for r in ranks.values()) == [(0,), (1,)]


def test_metrics_carry_probe_series_of_both_ranks(tp2):
    lines = [line for line in tp2["metrics"].splitlines() if line.startswith("eagle_probe_")]
    assert any('tp_rank="0"' in line for line in lines) and any('tp_rank="1"' in line for line in lines)
    # each rank verified every step of the three requests
    after = _by_rank(tp2["metrics"], VERIFY_STEPS)
    steps = sum(tp2["case"]["expected"]["runs"][k]["verify_ct"] for k in KEYS)
    assert {rank: after[rank] - tp2["before"].get(rank, 0.0) for rank in after} == {"0": steps, "1": steps}


def test_aux_perturbation_scales_one_block_on_one_rank():
    """sglang_cpu.tp_shims' test-only wrapper (SGLANG_CPU_PERTURB_AUX="1:1:1.5"), without a server."""
    import torch

    from sglang_cpu.tp_shims import parse_perturbation, perturbation_wrapper

    rank, slot, scale = parse_perturbation("1:1:1.5")
    hidden, aux = torch.ones(3, 4), torch.arange(36, dtype=torch.float32).reshape(3, 12)
    original = aux.clone()

    def forward():
        return hidden, aux

    for current, expect in ((0, original), (1, torch.cat([original[:, :4], original[:, 4:8] * 1.5,
                                                          original[:, 8:]], dim=1))):
        wrapper = perturbation_wrapper(rank, slot, scale, current_rank=lambda current=current: current)
        h, a = wrapper(forward, None, (), {})
        assert h is hidden and torch.equal(a, expect)
        assert torch.equal(aux, original)  # SGLang's tensor is never changed in place
    plain = torch.ones(3, 4)
    assert perturbation_wrapper(1, 1, 1.5, current_rank=lambda: 1)(lambda: plain, None, (), {}) is plain


def test_tp2_ranks_fingerprint_the_same_forwards_and_agree(tp2):
    """Plain tensor parallelism replicates the hidden states after each all-reduce: both ranks' fingerprints of the
    same sampled forward agree within the tolerance, for the target's aux slots and the draft's input."""
    from eagle_probe.analysis.fingerprints import rank_disagreement

    by_key = {}
    for e in tp2["events"]:
        if e["event"] == "eagle_probe.aux.fingerprint":
            by_key.setdefault((e["role"], e["step"], e["slot"], e["tokens"]), {})[e["tp_rank"]] = (
                e["rms"], e["signature"])
    pairs = {k: v for k, v in by_key.items() if set(v) == {0, 1}}
    assert len({k[1] for k in pairs if k[0] == "target"}) >= 3, sorted(by_key)  # several forwards on both ranks
    assert {k[0] for k in pairs} == {"target", "draft"}
    assert {k[2] for k in pairs if k[0] == "target"} == {0, 1, 2}
    assert [k for k, v in pairs.items() if rank_disagreement(v) is not None] == []
    exact = sum(v[0] == v[1] for v in pairs.values())
    print(f"{len(pairs)} (role, step, slot) pairs on both ranks, {exact} bit-identical (gloo all-reduce)")


def test_tp2_gauges_agree_across_ranks(tp2):
    for slot in ("0", "1", "2"):
        values = [float(line.rsplit(" ", 1)[1]) for line in tp2["metrics"].splitlines()
                  if line.startswith("eagle_probe_aux_rms{") and 'role="target"' in line and f'slot="{slot}"' in line]
        assert len(values) == 2 and max(values) - min(values) <= 1e-2 * max(values), (slot, values)


def test_tp2_summarize_compares_the_ranks_and_finds_them_agreeing(tp2, tmp_path):
    from eagle_probe.commands.summarize.html_report import render_html
    from eagle_probe.commands.summarize.report import build_report, render_text

    report = build_report(tp2["events"])
    values = report["values"]
    assert values["compared"] >= 10 and values["findings"] == []
    assert {(r["tp_rank"], r["role"]) for r in values["fingerprints"]} >= {(0, "target"), (1, "target"),
                                                                           (0, "draft"), (1, "draft")}
    assert "all compared ranks agree within the tolerance" in render_text(report)
    assert 'id="plot-values-rms"' in render_html(report)
