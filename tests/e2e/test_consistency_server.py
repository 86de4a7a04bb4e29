"""`eagle-probe consistency` against a real speculative SGLang 0.5.23 server on the CPU (greedy chain, 2 steps), with
the probe dumping EXTEND and TARGET_VERIFY forwards (EAGLE_PROBE_DUMP_MODES=extend,target_verify).

The server runs under the replay emulation (sglang_cpu/replay_emulation.py, SGLANG_CPU_REPLAY_EMULATION=1): every
inner model forward is an instance attribute below every class wrapper, as under CUDA-graph replay, so the probe's
inner-forward wrappers never run and everything below comes from the EAGLE worker boundary; the verify-row fault is
computed inside that instance forward.

One server run, two phases (the "random" case: random-weight target and draft, so prefill and verify differ by real
float32 noise): first correctly wired, where consistency must exit 0 (no false alarm); then with a fault in the served
model, `sglang_cpu.verify_faults` (its flag file created while the server runs): the aux states of target verify
forwards shifted down by one row while prefill stays exact, where it must exit 1 with verify_prefill_mismatch naming
the slots and the rows (position, step) of the verify forwards served under the fault.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from eagle_probe.analysis.consistency import VERIFY_PREFILL_MISMATCH, tolerance
from eagle_probe.commands.consistency.rows import read_verify_rows
from eagle_probe.commands.dump_files import read_dump, wait_until_written
from eagle_probe.commands.sglang_server import server_release
from eagle_probe.versions import installed_sglang_version
from sglang_cpu.draft_models import build_case

from .conftest import (
    counts_delta,
    internal_errors,
    metric_samples,
    probe_events,
    settled_probe_counts,
    sglang_spec_counts,
    start_spec_server,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLEAN_PROMPTS = (([10, 11, 12, 13, 14, 15], 10), ([7, 3, 99, 120, 5, 6, 200, 31], 10))
FAULT_PROMPTS = (([40, 41, 42, 43], 8), ([90, 91, 92, 93, 94], 8))
SLOTS = 3
# The draft's capture ids (1, 3, 4) as SGLang 0.5.23 serves them on this DeepSeek-V3 target: hidden_states[2, 4, 5]
SERVED_HF = [2, 4, 5]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("consistency"))
    case = build_case(root, "random")
    flag = os.path.join(root, "shift-verify.flag")
    dumps = os.path.join(root, "dumps")
    env = {"EAGLE_PROBE_DUMP_DIR": dumps, "EAGLE_PROBE_DUMP_EVERY": "1",
           "EAGLE_PROBE_DUMP_MODES": "extend,target_verify", "SGLANG_CPU_SHIFT_VERIFY_AUX": flag,
           "SGLANG_CPU_REPLAY_EMULATION": "1", "EAGLE_PROBE_FINGERPRINT_INTERVAL_S": "0.2"}
    server = start_spec_server(root, "consistency", case, env=env)
    try:
        yield server, dumps, flag, root, case["target"]
    finally:
        server.stop()


def _serve(server, prompts):
    """The prompts at once (one batch, so verify forwards hold two requests); their meta_info."""
    with ThreadPoolExecutor(len(prompts)) as pool:
        return [out["meta_info"] for out in pool.map(lambda p: server.generate_raw(p[0], p[1]), prompts)]


def _consistency(dumps, server=None, target=None):
    """consistency against the server (its reference prefills) or the offline target; (exit status, report)."""
    reference = ["--server", server.base_url] if target is None else ["--target", target]
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "eagle_probe.commands.cli", "consistency", "--dump-dir", dumps,
                          *reference, "--format", "json", "--max-sequences", "64"],
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT), timeout=900)
    assert out.returncode in (0, 1), out.stderr
    report = json.loads(out.stdout)
    assert report["reference"] == ("server" if target is None else "target")
    # its own cost, measured: within the time the process took; with the server most of it its reference prefills
    cost = report["cost"]
    parts = cost["read_s"] + cost["load_s"] + cost["prefill_s"] + cost["compare_s"]
    assert 0 < parts <= cost["total_s"] + 0.01 and cost["total_s"] < time.monotonic() - started
    if target is None:
        assert 0 < cost["compare_s"] < cost["prefill_s"]
    else:
        assert cost["load_s"] > 0 and cost["prefill_s"] > 0
    assert cost["verify_forwards"] == len({rows.path for rows in read_verify_rows(dumps).rows})
    return out.returncode, report


def test_clean_server_no_false_alarm_then_shifted_verify_rows_named(served):
    server, dumps, flag, root, target = served
    before = settled_probe_counts(server)
    metas = _serve(server, CLEAN_PROMPTS)
    wait_until_written(dumps, quiet_s=3.0)
    # under the replay emulation: acceptance exact, every value from the worker boundary, no inner forward seen
    assert counts_delta(settled_probe_counts(server), before) == sglang_spec_counts(metas)
    log_dir = os.path.join(root, "probe-consistency")
    assert not probe_events(log_dir, "eagle_probe.target.forward")
    prints = probe_events(log_dir, "eagle_probe.aux.fingerprint")
    # the draft's input is the tensor the target handed over: role draft at the same steps with the same figures
    assert {(e["source"], e["role"]) for e in prints} == {("worker", "target"), ("worker", "draft")}
    target_figures = {(e["step"], e["slot"]): e["rms"] for e in prints if e["role"] == "target"}
    assert all(target_figures[e["step"], e["slot"]] == e["rms"] for e in prints if e["role"] == "draft")
    assert {e["mode"] for e in prints} == {"EXTEND", "TARGET_VERIFY"}
    metas_of_files = [read_dump(os.path.join(dumps, n)).meta for n in os.listdir(dumps) if n.endswith(".safetensors")]
    assert metas_of_files and all(m["source"] == "worker" and not m["final_hidden_state"] for m in metas_of_files)
    assert {m["mode"] for m in metas_of_files} == {"EXTEND", "TARGET_VERIFY"}
    assert internal_errors(server.metrics_text()) == {}
    # the start-up statement says what is not seen, and why; forward counts still come from the model runner
    [said] = probe_events(log_dir, "eagle_probe.observability")
    assert said["settings"]["inner_forward_replaced"] is True and said["settings"]["worker_boundary"] is True
    live = {o["what"].split(":")[0].split(",")[0]: o for o in said["observations"]}
    assert live["values"]["live"] and not live["all-layer dumps"]["live"]
    assert "replaced on the instance" in live["all-layer dumps"]["why"] and "all-layer dumps" in said["message"]
    assert metric_samples(server.metrics_text(), "eagle_probe_model_forwards_total")
    clean = read_verify_rows(dumps)
    assert clean.dumps >= 8 and clean.unknown == 0  # every dumped request's step was resolved and matched
    assert any(len(rows.positions) >= 1 and len(rows.tokens) > len(rows.positions) for rows in clean.rows)
    # the server answers as SGLang, of the release that wrote the dumps (consistency asks before sending anything)
    assert server_release(server.base_url) == installed_sglang_version() == clean.release
    code, report = _consistency(dumps, server)
    print("clean:", json.dumps({k: report[k] for k in ("rows_compared", "prefills", "slots", "tolerance", "cost")}))
    assert code == 0 and report["findings"] == [] and report["exit_status"] == 0
    assert report["rows_compared"] >= len(clean.rows) and len(report["slots"]) == SLOTS
    # real float32 noise between the two paths, well inside the tolerance (the README's measured figure)
    assert all(slot["largest_rel_diff"] <= tolerance("float32") for slot in report["slots"])

    # the fault, in the served model: verify forwards' aux states shifted by one row from now on
    kept = os.path.join(root, "clean-dumps")
    os.makedirs(kept)
    for name in os.listdir(dumps):
        shutil.move(os.path.join(dumps, name), kept)
    open(flag, "w").close()
    try:
        _serve(server, FAULT_PROMPTS)
        wait_until_written(dumps, quiet_s=3.0)
    finally:
        os.unlink(flag)
    faulty = read_verify_rows(dumps)
    code, report = _consistency(dumps, server)
    assert code == 1 and report["exit_status"] == 1
    found = report["findings"]
    assert [f["code"] for f in found] == [VERIFY_PREFILL_MISMATCH] * SLOTS
    assert [f["evidence"]["slot"] for f in found] == list(range(SLOTS))
    served_rows = {(p, rows.step) for rows in faulty.rows for p in rows.positions}
    for finding in found:
        named = {(r["position"], r["step"]) for r in finding["evidence"]["rows"]}
        assert named and named <= served_rows
        assert finding["evidence"]["largest_rel_diff"] > 100 * tolerance("float32")
        assert "TARGET_VERIFY" in finding["message"] and "position" in finding["message"]

    # the same two dump sets against the offline reference, the target checkpoint's prefill in transformers, once
    # the server is gone: silent on the clean rows, the same slots and rows named under the fault
    server.stop()
    code, report = _consistency(kept, target=target)
    print("clean, offline:", json.dumps({k: report[k] for k in ("rows_compared", "prefills", "slots", "cost")}))
    assert code == 0 and report["findings"] == [] and len(report["slots"]) == SLOTS
    assert all(slot["largest_rel_diff"] <= tolerance("float32") for slot in report["slots"])
    code, offline = _consistency(dumps, target=target)
    assert code == 1

    def named(finding):
        rows = {(r["position"], r["step"]) for r in finding["evidence"]["rows"]}
        return finding["code"], finding["evidence"]["slot"], rows

    assert [named(f) for f in offline["findings"]] == [named(f) for f in found]

    # parity reads the same worker dumps (no final hidden state under the emulation) against SpecForge-format samples
    # made by transformers from the target checkpoint at the layers the draft names: every slot matches
    data = _specforge_samples(os.path.join(root, "specforge"), target, CLEAN_PROMPTS, SERVED_HF)
    out = subprocess.run([sys.executable, "-m", "eagle_probe.commands.cli", "parity", "--data", data,
                          "--dump-dir", kept, "--format", "json"],
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT), timeout=600)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    print("parity:", json.dumps({k: report[k] for k in ("positions_matched", "requests_unmatched")}),
          [(s["served_hf_index"], s["rel_diff_max"]) for s in report["slots"]])
    # every prompt position at least once: a prefix-cache hit re-serves a prompt's tail as a second extend
    assert report["positions_matched"] >= sum(len(ids) for ids, _ in CLEAN_PROMPTS)
    assert [s["served_hf_index"] for s in report["slots"]] == SERVED_HF
    # parity's statistic is float32 arithmetic: one ulp of 1.0 (6e-8) is its floor; another layer gives 1e-2 and more
    assert all(s["matches"] and s["rel_diff_max"] < 1e-6 for s in report["slots"])

    # replay on the served wiring from the same dumps: no prefill dump holds the final hidden state here, so the
    # verify dumps' target ids label the rows; they are what SGLang committed: the accepted drafts, then the bonus
    # token, which the request's next step verifies as its row 0
    verify = [read_dump(os.path.join(kept, n)) for n in sorted(os.listdir(kept)) if n.endswith(".safetensors")]
    verify = [d for d in verify if d.meta["mode"] == "TARGET_VERIFY"]
    assert verify and all(d.meta["target_next_ids"] for d in verify)
    steps = {}  # (request, step) -> (row 0 token, target ids on the committed path)
    for dump in verify:
        per, ids, tokens = dump.meta["rows_per_request"], dump.tensors["target_next_ids"], dump.tensors["input_ids"]
        for chain, (req, accepted) in enumerate(zip(dump.meta["req_ids"], dump.tensors["accepted_drafts"].tolist())):
            start = chain * per
            assert accepted >= 0  # the outcome is known at a worker dump
            assert ids[start:start + accepted].tolist() == tokens[start + 1:start + 1 + accepted].tolist()
            steps[req, dump.meta["step"]] = (int(tokens[start]), ids[start:start + accepted + 1].tolist())
    bonus_checked = [(steps[req, step + 1][0], path[-1]) for (req, step), (_, path) in steps.items()
                     if (req, step + 1) in steps]
    assert len(bonus_checked) >= 4 and all(row0 == bonus for row0, bonus in bonus_checked), bonus_checked
    out = subprocess.run([sys.executable, "-m", "eagle_probe.commands.cli", "replay", "--draft",
                          os.path.join(os.path.dirname(target), "draft"), "--target", target, "--dump-dir", kept,
                          "--format", "json"], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT),
                         timeout=600)
    assert out.returncode == 0, out.stderr
    replayed = json.loads(out.stdout)
    print("replay:", json.dumps(replayed["dumps"]), replayed["notes"])
    assert replayed["dumps"]["positions"] == sum(len(d.meta["req_ids"]) * (d.meta["rows_per_request"] - 1)
                                                 for d in verify)
    assert any("target_next_ids" in note for note in replayed["notes"])


def _specforge_samples(root, target, prompts, hf_indices):
    """SpecForge's layout (rows_0-2000/data_I.ckpt): per prompt its ids, loss mask, final hidden state and the aux
    states at `hf_indices`, from transformers' forward of the target checkpoint (float32)."""
    import torch
    import transformers

    major = int(transformers.__version__.split(".")[0])
    dtype_arg = {"dtype": torch.float32} if major >= 5 else {"torch_dtype": torch.float32}
    model = transformers.AutoModelForCausalLM.from_pretrained(target, local_files_only=True, **dtype_arg).eval()
    rows = os.path.join(root, "rows_0-2000")
    os.makedirs(rows)
    for i, (ids, _) in enumerate(prompts):
        with torch.no_grad():
            states = model(torch.tensor([ids]), output_hidden_states=True).hidden_states
        sample = {"input_ids": torch.tensor(ids), "loss_mask": torch.ones(len(ids), dtype=torch.long),
                  "hidden_state": states[-1].clone(),
                  "aux_hidden_state": torch.cat([states[j] for j in hf_indices], -1).clone()}
        torch.save(sample, os.path.join(rows, f"data_{i}.ckpt"))
    return root
