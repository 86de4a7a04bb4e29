"""Verify dumps and `eagle-probe consistency`, without a server: the tolerance rule, the matching of a dumped verify
forward to its step's resolution (spec-v2 order, overlap, retraction, timeout), files written by the probe's real
writer read back by the command, and the command's bad inputs (exit 2)."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest
import torch

from eagle_probe.analysis import consistency as rule
from eagle_probe.commands.consistency.compare import Reference, compare_rows
from eagle_probe.commands.consistency.rows import read_verify_rows
from eagle_probe.commands.dump_files import DumpError, read_dump, read_dump_dir
from eagle_probe.dump_format import AUX, FINAL, INPUT_IDS, POSITIONS
from eagle_probe.runtime.values.dumps import DumpJob, DumpWriter
from eagle_probe.runtime.values.verify_dumps import V1, V2, VerifyDumpJob, note_step

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
H, K = 8, 3


def _row_diff(x, y):
    x, y = x.double(), y.double()
    return rule.rel_diff(float((x * y).sum()), float((x * x).sum()), float((y * y).sum()))


# ------------------------------------------------------------------ the rule


def test_rel_diff_is_zero_for_equal_rows_and_one_for_opposite():
    x = torch.randn(64)
    assert _row_diff(x, x) == 0.0
    assert _row_diff(x, -x) == pytest.approx(2.0)
    assert rule.rel_diff(0.0, 0.0, 0.0) == 0.0


def test_float32_rounding_noise_is_within_and_a_shifted_row_beyond_the_tolerance():
    torch.manual_seed(0)
    states = torch.randn(16, 64, dtype=torch.float64)
    noisy = states.float().double()  # float32 rounding of the same states: the noise of one more rounding
    worst_noise = max(_row_diff(states[i], noisy[i]) for i in range(16))
    shifted = min(_row_diff(states[i], states[i - 1]) for i in range(1, 16))
    assert worst_noise <= rule.tolerance("float32") < shifted
    bf16 = states.to(torch.bfloat16).double()
    assert max(_row_diff(states[i], bf16[i]) for i in range(16)) <= rule.tolerance("bfloat16") < shifted


def test_bfloat16_tolerance_names_a_shift_onto_a_close_neighbour():
    torch.manual_seed(1)
    a = torch.randn(256, dtype=torch.float64)
    b = 0.98 * a + (1 - 0.98 ** 2) ** 0.5 * torch.randn(256, dtype=torch.float64)  # cosine about 0.98
    assert _row_diff(a, b) > rule.tolerance("bfloat16")
    assert rule.tolerance("float32") <= rule.tolerance("bfloat16") <= rule.CAP


def test_findings_name_slot_mode_rows_and_size():
    rows = [rule.RowDiff(0, 2, "TARGET_VERIFY", 7, 40, 0, 0.0, 0.0),
            rule.RowDiff(1, 4, "TARGET_VERIFY", 7, 40, 0, 0.4, 1.5),
            rule.RowDiff(1, 4, "TARGET_VERIFY", 8, 41, 0, float("nan"), float("nan")),
            rule.RowDiff(2, 5, "TARGET_VERIFY", 7, 40, 0, 1e-14, 1e-7)]
    found = rule.findings(rows, "float32")
    assert [f.code for f in found] == [rule.VERIFY_PREFILL_MISMATCH]
    (f,) = found
    assert f.severity == "error"
    assert "slot 1 (hidden_states[4])" in f.message and "TARGET_VERIFY" in f.message
    assert "(position 7, step 40)" in f.message and "(position 8, step 41)" in f.message
    assert "0.4" in f.message
    evidence = f.evidence_dict()
    assert evidence["slot"] == 1 and evidence["compared"] == 2 and len(evidence["rows"]) == 2
    assert rule.findings(rows[:1] + rows[3:], "float32") == []


# ------------------------------------------------------------------ matching a verify dump to its step


class _Req:
    def __init__(self, rid, prompt, output):
        self.rid, self.origin_input_ids, self.output_ids = rid, prompt, output


def _verify_job(p0s, rows=3, wait_s=5.0):
    positions = torch.tensor([p + r for p in p0s for r in range(rows)])
    tensors = {AUX: torch.randn(len(positions), K * H), FINAL: torch.randn(len(positions), H),
               INPUT_IDS: torch.arange(len(positions)), POSITIONS: positions}
    return VerifyDumpJob(tensors, {"mode": "TARGET_VERIFY"}, [f"r{j}" for j in range(len(p0s))], rows, wait_s)


def test_spec_v2_resolution_matches_by_row0_position_and_skips_the_previous_step():
    job = _verify_job([5, 9])
    a = _Req("r0", [1, 2, 3], [4, 5])  # committed 5 tokens: the previous step's resolution (overlap), p0 = 4
    b = _Req("r1", [7, 7, 7, 7, 7, 7], [8, 9, 10, 11])  # 10 committed: this step's, p0 = 9
    waiting = [job]
    note_step(waiting, [a, b, _Req("other", [], [])], [1, 2, 0], V2)
    assert not job.ready()  # r0 not yet resolved for this forward
    a.output_ids.append(6)  # the previous step's tokens appended; this step resolved next
    note_step(waiting, [a, b], [2, 0], V2)
    assert job.ready()
    job.finish()
    assert job.done and job.metadata["accepted_known"] == 2
    assert job.tensors["accepted_drafts"].tolist() == [2, 2]
    assert job.tensors["committed_counts"].tolist() == [5, 9]
    assert job.tensors["committed_ids"].tolist() == [1, 2, 3, 4, 5] + [7, 7, 7, 7, 7, 7, 8, 9, 10]
    note_step(waiting, [a], [0], V2)
    assert waiting == []  # a finished job is dropped at the next step


def test_v1_resolution_counts_the_appended_tokens():
    job = _verify_job([4])
    req = _Req("r0", [1, 2, 3], [4, 5, 6, 7])  # after v1's verify: p0 + accepted(1) + 2 = 7 committed
    note_step([job], [req], [1], V1)
    assert job.ready()
    job.finish()
    assert job.tensors["accepted_drafts"].tolist() == [1] and job.tensors["committed_ids"].tolist() == [1, 2, 3, 4]


def test_unresolved_or_retracted_requests_are_unknown_after_the_wait():
    job = _verify_job([4, 6], wait_s=0.05)
    retracted = _Req("r1", [1, 2, 3], [4, 5, 6])
    note_step([job], [retracted], [0], V2)  # matches p0 = 6 ...
    retracted.output_ids.clear()  # ... but a retraction cleared its outputs before the writer read them
    assert not job.ready()
    time.sleep(0.06)
    assert job.ready()
    job.finish()
    assert job.tensors["accepted_drafts"].tolist() == [-1, -1]
    assert job.metadata["accepted_known"] == 0


# ------------------------------------------------------------------ files through the probe's real writer


def _write(directory, jobs):
    written = []
    writer = DumpWriter(str(directory), 1 << 30, lambda path, n: written.append(path), lambda *a: None)
    writer.prepare()
    for job in jobs:
        assert writer.submit(job)
        writer.drain()
    return written


def _meta(mode, **extra):
    meta = {"mode": mode, "tp_rank": 0, "num_layers": 6, "hf_indices": [2, 4, 5], "capture_indices": [2, 4, 5],
            "dtype": "float32", "step": 40, "dump_every": 1}
    meta.update(extra)
    return meta


def _sequence_states(tokens):
    g = torch.Generator().manual_seed(3)
    table = torch.randn(300, K * H, generator=g)
    return table[torch.tensor(tokens)] + 0.01 * torch.arange(len(tokens)).unsqueeze(1)  # depends on the position


SEQUENCE = [11, 12, 13, 14, 15, 16, 17]


def _served_files(tmp_path, shift=False, states=None, **meta):
    """An EXTEND dump of a 7-token sequence and a verify dump of its chain at positions 4..6 (2 drafts accepted);
    `states` [7, K*H]: the aux states served for it (default: made up from the tokens and positions)."""
    tokens = SEQUENCE
    states = _sequence_states(tokens) if states is None else states
    extend = DumpJob({AUX: states, FINAL: states[:, :H], INPUT_IDS: torch.tensor(tokens),
                      POSITIONS: torch.arange(7)}, _meta("EXTEND", **meta))
    aux = states[4:7].clone()
    if shift:
        aux = torch.roll(aux, 1, 0)
    verify = VerifyDumpJob({AUX: aux, FINAL: aux[:, :H], INPUT_IDS: torch.tensor(tokens[4:7]),
                            POSITIONS: torch.arange(4, 7)},
                           _meta("TARGET_VERIFY", rows_per_request=3, requests=1, **meta), ["r0"], 3)
    note_step([verify], [_Req("r0", tokens[:3], [tokens[3], tokens[4]])], [2], V2)
    return _write(tmp_path, [extend, verify]), tokens


def test_verify_rows_read_back_and_compare_equal_to_their_prefill(tmp_path):
    (extend_path, _), tokens = _served_files(tmp_path)
    found = read_verify_rows(str(tmp_path))
    (rows,) = found.rows
    assert rows.tokens == tuple(tokens) and rows.positions == (4, 5, 6) and rows.step == 40
    diffs = compare_rows(rows, Reference.of_dump(read_dump(extend_path, layers=False)))
    assert len(diffs) == 3 * K and max(d.rel_diff for d in diffs) == 0.0
    assert rule.findings(diffs, "float32") == []
    # replay and parity read EXTEND dumps only: the verify dump is left out
    assert [d.meta["mode"] for d in read_dump_dir(str(tmp_path)).dumps] == ["EXTEND"]


def test_a_shifted_verify_row_is_named(tmp_path):
    (extend_path, _), _ = _served_files(tmp_path, shift=True)
    (rows,) = read_verify_rows(str(tmp_path)).rows
    found = rule.findings(compare_rows(rows, Reference.of_dump(read_dump(extend_path, layers=False))), "float32")
    assert [f.evidence_dict()["slot"] for f in found] == [0, 1, 2]
    assert {(r["position"], r["step"]) for r in found[0].evidence_dict()["rows"]} == {(4, 40), (5, 40), (6, 40)}


# ------------------------------------------------------------------ bad inputs (exit 2)


def _cli(*args):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "eagle_probe.commands.cli", "consistency", *args],
                          capture_output=True, text=True, env=env, timeout=120)


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_missing_dump_directory(tmp_path):
    out = _cli("--dump-dir", str(tmp_path / "nope"), "--server", "http://127.0.0.1:1")
    assert out.returncode == 2 and "no such file or directory" in out.stderr and "target_verify" in out.stderr


def test_extend_dumps_only(tmp_path):
    tokens = [1, 2, 3]
    states = _sequence_states(tokens)
    _write(tmp_path, [DumpJob({AUX: states, FINAL: states[:, :H], INPUT_IDS: torch.tensor(tokens),
                               POSITIONS: torch.arange(3)}, _meta("EXTEND"))])
    out = _cli("--dump-dir", str(tmp_path), "--server", "http://127.0.0.1:1")
    assert out.returncode == 2 and "TARGET_VERIFY" in out.stderr and "EAGLE_PROBE_DUMP_MODES" in out.stderr


def test_unknown_acceptance_only(tmp_path):
    job = _verify_job([4], wait_s=0.0)
    job.metadata.update(_meta("TARGET_VERIFY", rows_per_request=3, requests=1))
    _write(tmp_path, [job])
    out = _cli("--dump-dir", str(tmp_path), "--server", "http://127.0.0.1:1")
    assert out.returncode == 2 and "no request's committed rows are known" in out.stderr


def test_server_unreachable(tmp_path):
    _served_files(tmp_path)
    out = _cli("--dump-dir", str(tmp_path), "--server", f"http://127.0.0.1:{_closed_port()}", "--format", "json")
    assert out.returncode == 2 and "unreachable" in out.stderr and out.stdout == ""


def test_a_verify_dump_without_its_request_tensors_is_a_clear_error(tmp_path):
    tokens = [1, 2, 3]
    states = _sequence_states(tokens)
    _write(tmp_path, [DumpJob({AUX: states, FINAL: states[:, :H], INPUT_IDS: torch.tensor(tokens),
                               POSITIONS: torch.arange(3)}, _meta("TARGET_VERIFY"))])
    with pytest.raises(DumpError, match="accepted_drafts"):
        read_verify_rows(str(tmp_path))


def test_dumps_of_two_servers_are_refused_and_left_in_place(tmp_path):
    """A directory holding the dumps of two releases (or two models) is no one server's: every dump command refuses
    it, naming each group, and moves nothing."""
    first, _ = _served_files(tmp_path, sglang_version="0.5.23", model_class="DeepseekV3ForCausalLM")
    other = tmp_path / "other"
    second, _ = _served_files(other, sglang_version="0.5.8", model_class="DeepseekV3ForCausalLM")
    for path in second:
        os.replace(path, tmp_path / ("b-" + os.path.basename(path)))
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(DumpError, match=r"mixes dumps of 2 servers \(SGLang 0\.5\.23, DeepseekV3ForCausalLM hidden 8"):
        read_dump_dir(str(tmp_path))  # replay and parity
    out = _cli("--dump-dir", str(tmp_path), "--server", "http://127.0.0.1:1")
    assert out.returncode == 2 and "SGLang 0.5.8" in out.stderr and "SGLang 0.5.23" in out.stderr
    assert "a directory of their own" in out.stderr and sorted(os.listdir(tmp_path)) == before
    assert read_verify_rows(first[1]).release == "0.5.23"  # one file named alone is one server's


@pytest.mark.parametrize("routes, said", [
    ({}, "404"),  # a web server that has none of SGLang's routes
    ({"/server_info": (200, "<html>hello</html>")}, "hello"),  # answers, but not JSON
    ({"/server_info": (200, json.dumps({"status": "ok"}))}, "status"),  # JSON without SGLang's version
])
def test_a_server_that_is_not_sglang_is_named_before_anything_is_sent(tmp_path, http_server, routes, said):
    url, served, seen = http_server
    served.update(routes)
    served["/flush_cache"] = (200, "")  # even a server that would accept the flush is refused first
    _served_files(tmp_path)
    before = sorted(os.listdir(tmp_path))
    out = _cli("--dump-dir", str(tmp_path), "--server", url)
    assert out.returncode == 2 and "not as an SGLang server" in out.stderr and said in out.stderr
    assert sorted(os.listdir(tmp_path)) == before and seen == [("GET", "/server_info")]


def test_a_server_of_another_release_than_the_dumps_is_refused(tmp_path, http_server):
    url, served, _ = http_server
    served["/server_info"] = (200, json.dumps({"version": "0.5.8", "model_path": "m"}))
    _served_files(tmp_path, sglang_version="0.5.23")
    out = _cli("--dump-dir", str(tmp_path), "--server", url, "--format", "json")
    assert out.returncode == 2 and out.stdout == ""
    assert "runs SGLang 0.5.8, but the dumps" in out.stderr and "served by SGLang 0.5.23" in out.stderr


# ------------------------------------------------------------------ the offline reference (--target)


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory):
    """A tiny transformers Llama checkpoint (hidden size H, 6 layers) and its prefill's hidden_states 2, 4 and 5 of
    SEQUENCE, as a served aux tensor [7, K*H]."""
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=300, hidden_size=H, intermediate_size=16, num_hidden_layers=6,
                                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(config).eval()
    path = str(tmp_path_factory.mktemp("llama"))
    model.save_pretrained(path)
    with torch.no_grad():
        states = model(input_ids=torch.tensor([SEQUENCE]), output_hidden_states=True).hidden_states
    return path, torch.cat([states[i][0] for i in (2, 4, 5)], -1)


def _offline(capsys, *args):
    from eagle_probe.commands.cli import main

    code = main(["consistency", *args, "--format", "json"])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, (json.loads(out) if out.strip() else None), err


def test_offline_target_agrees_with_its_own_states_and_names_shifted_rows(tmp_path, capsys, tiny_target):
    target, states = tiny_target
    _served_files(tmp_path / "clean", states=states)
    code, report, _ = _offline(capsys, "--dump-dir", str(tmp_path / "clean"), "--target", target)
    assert code == 0 and report["reference"] == "target" and report["server"] is None
    assert report["rows_compared"] == 3 and max(s["largest_rel_diff"] for s in report["slots"]) < 1e-12
    _served_files(tmp_path / "shifted", states=states, shift=True)
    code, report, _ = _offline(capsys, "--dump-dir", str(tmp_path / "shifted"), "--target", target)
    assert code == 1 and [f["evidence"]["slot"] for f in report["findings"]] == [0, 1, 2]
    assert report["cost"]["load_s"] > 0 and report["cost"]["prefill_s"] > 0


def test_offline_target_that_is_not_the_served_model(tmp_path, capsys, tiny_target):
    target, _ = tiny_target
    _served_files(tmp_path, hf_indices=[2, 4, 7], capture_indices=[2, 4, 7])  # a layer the model does not have
    code, report, err = _offline(capsys, "--dump-dir", str(tmp_path), "--target", target)
    assert code == 2 and report is None and "6 layers of hidden size 8" in err and "not the model" in err


def test_offline_target_bad_directories(tmp_path, capsys):
    _served_files(tmp_path / "dumps")
    dumps = str(tmp_path / "dumps")
    code, _, err = _offline(capsys, "--dump-dir", dumps, "--target", str(tmp_path / "nope"))
    assert code == 2 and "nope: not a directory" in err
    (tmp_path / "empty").mkdir()
    code, _, err = _offline(capsys, "--dump-dir", dumps, "--target", str(tmp_path / "empty"))
    assert code == 2 and "no config.json" in err
    (tmp_path / "empty" / "config.json").write_text(json.dumps({"architectures": ["NoSuchForCausalLM"]}))
    code, _, err = _offline(capsys, "--dump-dir", dumps, "--target", str(tmp_path / "empty"))
    assert code == 2 and "no weight files" in err
    (tmp_path / "empty" / "model.safetensors").write_bytes(b"not a checkpoint")
    code, _, err = _offline(capsys, "--dump-dir", dumps, "--target", str(tmp_path / "empty"))
    assert code == 2 and "cannot load it (NoSuchForCausalLM)" in err and "--server" in err


def test_offline_target_too_large_for_this_machine_is_refused_before_loading(tmp_path):
    from eagle_probe.commands.consistency.offline import TargetError, check_fits

    (tmp_path / "model.safetensors").write_bytes(b"x" * 4096)
    assert check_fits(str(tmp_path), available=1 << 20) == 4096
    with pytest.raises(TargetError, match=r"more than 80% of the 0\.0 GiB this machine has available: use --server"):
        check_fits(str(tmp_path), available=4096)


def test_server_or_target_exactly_one(tmp_path):
    _served_files(tmp_path)
    out = _cli("--dump-dir", str(tmp_path))
    assert out.returncode == 2 and "one of the arguments --server --target is required" in out.stderr
    out = _cli("--dump-dir", str(tmp_path), "--server", "http://127.0.0.1:1", "--target", str(tmp_path))
    assert out.returncode == 2 and "not allowed with argument" in out.stderr
