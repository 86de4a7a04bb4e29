"""Values at the EAGLE worker boundary equal the inner forward's, bit for bit, slot by slot.

One real speculative EAGLE-3 server on the CPU in eager mode (the "random" case: random weights, so every slot and
row differs), with the probe taking values at both sources (SGLANG_CPU_PROBE_BOTH_VALUES=1, test-only): the inner
model forward's wrapper and the wrapper of the EAGLE worker's hand-off to the draft. Every forward is sampled and
dumped in both modes. Each worker fingerprint must equal an inner forward's fingerprint of the same mode and tokens
exactly, and each worker dump's aux states, tokens, positions and final hidden state must equal the inner forward's
dump of the same forward, tensor for tensor; a worker verify dump's target ids are the target's lm_head argmax over
that final state.
"""

import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from safetensors import safe_open

from eagle_probe.commands.dump_files import read_dump, wait_until_written
from eagle_probe.dump_format import AUX, FINAL, INPUT_IDS, META_KEY, POSITIONS, TARGET_IDS
from sglang_cpu.draft_models import build_case

from .conftest import internal_errors, metric_samples, probe_events, start_spec_server

PROMPTS = (([10, 11, 12, 13, 14, 15], 8), ([7, 3, 99, 120, 5, 6, 200, 31], 8))
ALONE = ([40, 41, 42, 43, 44], 9)


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("boundary"))
    case = build_case(root, "random")
    dumps = os.path.join(root, "dumps")
    env = {"SGLANG_CPU_PROBE_BOTH_VALUES": "1", "EAGLE_PROBE_FINGERPRINT_INTERVAL_S": "0.001",
           "EAGLE_PROBE_SUMMARY_INTERVAL_S": "0.001", "EAGLE_PROBE_DUMP_DIR": dumps, "EAGLE_PROBE_DUMP_EVERY": "1",
           "EAGLE_PROBE_DUMP_MODES": "extend,target_verify"}
    server = start_spec_server(root, "both", case, env=env)
    try:
        with ThreadPoolExecutor(len(PROMPTS)) as pool:
            outs = list(pool.map(lambda p: server.generate_raw(p[0], max_new_tokens=p[1]), PROMPTS))
        assert wait_until_written(dumps)
        metrics = server.flushed_metrics_text()
        alone = server.generate_raw(*ALONE)  # one request alone: its forwards are SGLang's steps of it
        after = server.flushed_metrics_text()
    finally:
        server.stop()
    return dict(root=root, dumps=dumps, outs=outs, metrics=metrics, log_dir=os.path.join(root, "probe-both"),
                alone=alone["meta_info"], after=after, target=case["target"])


def _prints(log_dir, source):
    out = {}
    for e in probe_events(log_dir, "eagle_probe.aux.fingerprint"):
        if e.get("source") == source and e["role"] == "target":
            key = (e["mode"], e["tokens"], e["slot"], e["capture_index"])
            out.setdefault(key, []).append((e["rms"], e["mean"], e["absmax"], e["nonfinite"], tuple(e["signature"])))
    return out


def test_worker_fingerprints_equal_the_inner_forwards_bit_for_bit(both):
    worker, forward = _prints(both["log_dir"], "worker"), _prints(both["log_dir"], "forward")
    assert {mode for mode, *_ in worker} == {"EXTEND", "TARGET_VERIFY"}
    assert len({slot for _, _, slot, _ in worker}) == 3  # every slot, with its capture index
    matched = 0
    for key, values in worker.items():
        for value in values:
            assert value in forward.get(key, ()), (key, value)  # the same numbers, exactly, for this slot
            matched += 1
    assert matched >= 3 * 6
    print(f"{matched} worker slot fingerprints, each equal to an inner forward's; {sum(map(len, forward.values()))} "
          f"inner")
    # slot by slot: a slot's numbers never equal another slot's of the same forward (the comparison can fail)
    by_slot = {}
    for (mode, tokens, slot, _), values in worker.items():
        by_slot.setdefault((mode, tokens), {})[slot] = set(values)
    assert any(len(slots) == 3 and not (slots[0] & slots[1]) for slots in by_slot.values())


def _meta(path):
    with safe_open(path, "pt") as handle:
        return json.loads(handle.metadata()[META_KEY])


def _by_source(dumps):
    files = {"worker": [], "forward": []}
    for name in sorted(os.listdir(dumps)):
        if name.endswith(".safetensors"):
            path = os.path.join(dumps, name)
            files[_meta(path)["source"]].append(read_dump(path))
    return files


def _key(dump):
    return (dump.meta["mode"], dump.tensors[INPUT_IDS].to(torch.int64).numpy().tobytes(),
            dump.tensors[POSITIONS].to(torch.int64).numpy().tobytes())


def test_worker_dumps_equal_the_inner_forwards_tensor_for_tensor(both):
    files = _by_source(both["dumps"])
    assert files["worker"] and len(files["worker"]) == len(files["forward"])
    with safe_open(os.path.join(both["target"], "model.safetensors"), "pt") as handle:
        head = handle.get_tensor("lm_head.weight").float()
    forward = {_key(d): d for d in files["forward"]}
    modes = set()
    for dump in files["worker"]:
        twin = forward[_key(dump)]  # the same tokens at the same positions, in the same mode
        assert torch.equal(dump.tensors[AUX], twin.tensors[AUX])
        assert torch.equal(dump.tensors[FINAL], twin.tensors[FINAL])  # eager: the final state is attached
        assert dump.meta["final_hidden_state"] is True
        assert dump.hf_indices == twin.hf_indices and dump.hidden_size == twin.hidden_size
        assert dump.meta.get("req_ids") == twin.meta.get("req_ids")
        if dump.meta["mode"] == "TARGET_VERIFY":
            # the target's greedy ids the worker took from the verify logits: its lm_head over the final states
            assert torch.equal(dump.tensors[TARGET_IDS], (twin.tensors[FINAL].float() @ head.T).argmax(-1))
        else:
            assert TARGET_IDS not in dump.tensors
        modes.add(dump.meta["mode"])
    assert modes == {"EXTEND", "TARGET_VERIFY"}
    print(f"{len(files['worker'])} worker dumps equal to the inner forward's, tensor for tensor")
    # verify dumps are completed with the step's resolution, as the inner forward's are
    verify = [d for d in files["worker"] if d.meta["mode"] == "TARGET_VERIFY"]
    assert all(d.meta["accepted_known"] == len(d.meta["req_ids"]) for d in verify)


def test_no_internal_error(both):
    assert internal_errors(both["metrics"]) == {}


def _model_forwards(text):
    return {(labels["role"], labels["mode"], labels["path"], labels["graph"]): value
            for labels, value in metric_samples(text, "eagle_probe_model_forwards_total")}


def test_model_runner_forward_counts_equal_sglangs_steps(both):
    before, after = _model_forwards(both["metrics"]), _model_forwards(both["after"])
    added = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    # eager on the CPU, every one: one prefill, then one verify forward per verify step SGLang counted
    assert added[("target", "EXTEND", "eager", "none")] == 1
    assert added[("target", "TARGET_VERIFY", "eager", "none")] == both["alone"]["spec_verify_ct"]
    assert {path for _, _, path, _ in after} == {"eager"}
    # the draft's forwards run through its own model runner too: one extend per target forward
    drafted = sum(v for (role, mode, _, _), v in added.items() if role == "draft" and "EXTEND" in mode)
    assert drafted == 1 + both["alone"]["spec_verify_ct"]


def test_start_up_statement_says_everything_is_seen_in_eager_mode(both):
    [statement] = [e for e in probe_events(both["log_dir"], "eagle_probe.observability") if e.get("tp_rank") == 0]
    settings = statement["settings"]
    assert settings["decode_graph"] is None and settings["prefill_graph"] is None
    assert settings["worker_boundary"] is True and settings["inner_forward_replaced"] is False
    assert settings["overlap_schedule"] is False  # SGLang forces synchronous spec v2 on the CPU
    assert all(o["live"] for o in statement["observations"]), statement
    assert statement["observations"][0]["source"].startswith("EAGLE worker boundary")
