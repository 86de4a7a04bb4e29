"""Train/serve parity on SGLang 0.5.23's real classes: SpecForge-format files written from real SGLang captures (as
SpecForge captures: prefill, one sequence at a time, no CUDA graph) with one wiring, the same tiny target served
with another wiring and dumped by the probe; `parity` names the mismatching slots and their best served matches,
`reference` + EAGLE_PROBE_REFERENCE names them in the running probe, and bad inputs are named, never a traceback."""

import gzip
import io
import json
import os

import pytest
import torch

import eagle_probe
from eagle_probe.commands import parity, reference
from eagle_probe.commands.dump_files import read_dump_dir
from eagle_probe.commands.specforge_data import read_samples
from eagle_probe.runtime.state import STATE
from sglang_cpu.runtime import TinyBatchRunner, build_deepseek, init_runtime
from sglang_cpu.tiny_models import deepseek_v3_config

SEQUENCES = [[5, 9, 17, 33, 2, 71, 8, 40, 41], [3, 4, 5, 6, 200, 31, 77]]
TRAINED_IDS, TRAINED = [1, 3, 4], [2, 4, 5]  # 0.5.23: +1 when the first id is 1
SERVED_IDS, SERVED = [0, 2, 3], [0, 2, 3]  # ids as given


def full():
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
    return CaptureHiddenMode.FULL


@pytest.fixture(scope="module")
def target(sglang_runtime):
    init_runtime()
    return build_deepseek(deepseek_v3_config(num_hidden_layers=6, first_k_dense_replace=6), seed=7)


@pytest.fixture(scope="module")
def training_data(target, tmp_path_factory):
    """SpecForge's layout: rows_0-2000/data_{i}.ckpt (and .ckpt.gz), a dict per sample, captured through SGLang."""
    root = tmp_path_factory.mktemp("specforge")
    rows = root / "rows_0-2000"
    rows.mkdir()
    eagle_probe.uninstall()
    target.set_eagle3_layers_to_capture(TRAINED_IDS)
    runner = TinyBatchRunner(target)
    for i, ids in enumerate(SEQUENCES):
        runner.reset()
        aux = runner.extend([ids], capture_hidden_mode=full()).hidden_states
        with torch.no_grad():
            final = target.hf_model(torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0]
        sample = {"input_ids": torch.tensor(ids), "loss_mask": torch.ones(len(ids), dtype=torch.long),
                  "hidden_state": final.unsqueeze(0).clone(), "aux_hidden_state": aux.unsqueeze(0).clone()}
        buffer = io.BytesIO()
        torch.save(sample, buffer)
        if i == 0:
            (rows / f"data_{i}.ckpt").write_bytes(buffer.getvalue())
        else:
            (rows / f"data_{i}.ckpt.gz").write_bytes(gzip.compress(buffer.getvalue()))
    return str(root)


def serve_and_dump(target, ids, tmp_path, **env):
    """Both training sequences in one EXTEND forward with capture ids `ids`, the probe dumping all layers."""
    dumps = tmp_path / "dumps"
    eagle_probe.uninstall()
    target.set_eagle3_layers_to_capture(ids)
    assert eagle_probe.install(env={"EAGLE_PROBE_LOG_DIR": str(tmp_path / "logs"), "EAGLE_PROBE_DUMP_DIR": str(dumps),
                                    "EAGLE_PROBE_DUMP_EVERY": "1", "EAGLE_PROBE_DUMP_LAYERS": "all",
                                    "EAGLE_PROBE_FINGERPRINT_INTERVAL_S": "1e-9", **env})
    try:
        TinyBatchRunner(target).extend(SEQUENCES, capture_hidden_mode=full())
        STATE.recorder.dump_writer.drain()
    finally:
        eagle_probe.uninstall()
    return str(dumps), str(tmp_path / "logs")


def report_for(data_dir, dump_dir):
    return parity.compare(read_samples(data_dir).samples, read_dump_dir(dump_dir).dumps)


def test_other_wiring_is_named_slot_by_slot_with_the_trained_layers(target, training_data, tmp_path):
    dumps, _ = serve_and_dump(target, SERVED_IDS, tmp_path)
    report = report_for(training_data, dumps)
    assert report["positions_matched"] == sum(map(len, SEQUENCES)) and report["requests_unmatched"] == 0
    assert [s["matches"] for s in report["slots"]] == [False, False, False]
    assert [s["served_hf_index"] for s in report["slots"]] == SERVED
    assert [s["best_hf_index"] for s in report["slots"]] == TRAINED  # the layers the draft was trained on
    assert all(s["best_rel_diff"] < 1e-9 and s["rel_diff"] > 1e-2 for s in report["slots"])
    found = parity.findings(report, 6)
    assert [f.code for f in found] == ["aux_value_mismatch"] * 3
    assert "hidden_states[2]" in found[0].message and "output of layer 1" in found[0].message


def test_the_trained_wiring_matches(target, training_data, tmp_path):
    dumps, _ = serve_and_dump(target, TRAINED_IDS, tmp_path)
    report = report_for(training_data, dumps)
    assert [s["matches"] for s in report["slots"]] == [True, True, True]
    assert max(s["rel_diff_max"] for s in report["slots"]) < 1e-9 and not parity.findings(report, 6)


def test_cli_json_keys(target, training_data, tmp_path, capsys):
    from eagle_probe.commands.cli import main

    dumps, _ = serve_and_dump(target, SERVED_IDS, tmp_path)
    assert main(["parity", "--data", training_data, "--dump-dir", dumps, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["positions_matched"] == 16
    assert {"slot", "matches", "cosine", "rel_diff", "best_hf_index"} <= set(out["slots"][0])
    assert [f["code"] for f in out["findings"]] == ["aux_value_mismatch"] * 3


def test_reference_makes_the_running_probe_name_a_slot_fed_other_values(target, training_data, tmp_path):
    ref = tmp_path / "ref.json"
    reference.run(type("Args", (), {"data": training_data, "output": str(ref)})())
    written = json.loads(ref.read_text())
    assert written["tokens"] == 16 and len(written["slots"]) == 3 and len(written["slots"][0]["signature"]) == 32
    _, logs = serve_and_dump(target, TRAINED_IDS, tmp_path / "trained", EAGLE_PROBE_REFERENCE=str(ref))
    assert not [e for e in _events(logs) if e["event"] == "eagle_probe.finding"]
    _, logs = serve_and_dump(target, SERVED_IDS, tmp_path / "served", EAGLE_PROBE_REFERENCE=str(ref))
    found = [e for e in _events(logs) if e["event"] == "eagle_probe.finding" and e["code"] == "aux_value_mismatch"]
    assert sorted(f["evidence"]["slot"] for f in found) == [0, 1, 2]


def _events(log_dir):
    out = []
    for name in sorted(os.listdir(log_dir)):
        with open(os.path.join(log_dir, name)) as handle:
            out += [json.loads(line) for line in handle if line.strip()]
    return out


def test_bad_inputs_are_named_not_raised(training_data, tmp_path, capsys):
    from eagle_probe.commands.cli import main

    not_a_dict = tmp_path / "data" / "data_0.ckpt"
    not_a_dict.parent.mkdir()
    torch.save([1, 2, 3], str(not_a_dict))
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    (dumps / "broken.safetensors").write_bytes(b"\x00\x01 not safetensors")
    assert main(["parity", "--data", str(not_a_dict.parent), "--dump-dir", str(dumps)]) == 2
    err = capsys.readouterr().err
    assert "data_0.ckpt" in err and "not SpecForge's dict" in err and "Traceback" not in err
    assert main(["parity", "--data", training_data, "--dump-dir", str(dumps)]) == 2
    err = capsys.readouterr().err
    assert "broken.safetensors" in err and "not a readable safetensors file" in err
    assert main(["reference", "--data", str(tmp_path / "missing"), "-o", str(tmp_path / "r.json")]) == 2
    assert "not a directory" in capsys.readouterr().err
