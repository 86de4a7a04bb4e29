"""`eagle-probe parity` prints the ids to set by the rule of the target's family (synthetic SpecForge samples and
all-layer dumps; the comparison itself is proven on SGLang's real classes in tests/real_sglang/test_parity.py)."""

import json
import os
import shutil
import threading

import torch
from safetensors.torch import save_file

from eagle_probe.commands.cli import main

H, LAYERS, SEQ = 16, 8, 6
TRAINED = (3, 5, 6)  # HF indices the training data's slots hold
SERVED = (2, 4, 5)  # what the server captured


def write_inputs(tmp_path, model_class="LlamaForCausalLM"):
    g = torch.Generator().manual_seed(0)
    states = {i: torch.randn(SEQ, H, generator=g) for i in range(LAYERS + 1)}
    ids = torch.arange(10, 10 + SEQ)
    data = tmp_path / "data"
    data.mkdir()
    torch.save({"input_ids": ids, "loss_mask": torch.ones(SEQ), "hidden_state": states[LAYERS][None],
                "aux_hidden_state": torch.cat([states[i] for i in TRAINED], -1)[None]}, data / "s0.ckpt")
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    tensors = {"aux_hidden_states": torch.cat([states[i] for i in SERVED], -1),
               "final_hidden_state": states[LAYERS], "input_ids": ids, "positions": torch.arange(SEQ),
               "extend_seq_lens": torch.tensor([SEQ]), "extend_prefix_lens": torch.tensor([0]),
               **{f"hidden_states.{i}": states[i] for i in range(LAYERS)}}
    meta = {"format_version": 1, "hf_indices": list(SERVED), "capture_indices": list(SERVED), "num_layers": LAYERS,
            "hidden_size": H, "sglang_version": "0.5.23", "model_class": model_class, "step": 1, "tp_rank": 0,
            "dp_rank": 0, "pp_rank": 0}
    save_file(tensors, os.path.join(dumps, "eagle-probe-dump-host-tp0-1-a.safetensors"),
              metadata={"eagle_probe.format": "1", "eagle_probe.meta": json.dumps(meta)})
    return str(data), str(dumps)


def write_target(tmp_path, arch):
    d = tmp_path / "target"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"architectures": [arch], "num_hidden_layers": LAYERS}))
    return str(d)


def parity(capsys, *args):
    code = main(["parity", *args, "--format", "json"])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, (json.loads(out) if out.strip() else None), err


def test_ids_to_set_for_a_llama_target(tmp_path, capsys):
    data, dumps = write_inputs(tmp_path)
    code, report, _ = parity(capsys, "--data", data, "--dump-dir", dumps, "--target", write_target(tmp_path,
                                                                                               "LlamaForCausalLM"))
    assert code == 0
    assert [s["best_hf_index"] for s in report["slots"]] == list(TRAINED)
    fix = report["ids_to_set"]
    assert fix["trained_hf"] == list(TRAINED) and fix["ids"] == [2, 4, 5] and "[llama]" in fix["family"]


def test_family_from_the_dumps_and_text_output(tmp_path, capsys):
    data, dumps = write_inputs(tmp_path, model_class="DeepseekV3ForCausalLM")
    code, report, _ = parity(capsys, "--data", data, "--dump-dir", dumps)
    assert report["ids_to_set"]["ids"] == list(TRAINED)  # DeepSeek on 0.5.23: as given (the first is not 1)
    gpt_oss = write_target(tmp_path, "GptOssForCausalLM")
    assert main(["parity", "--data", data, "--dump-dir", dumps, "--target", gpt_oss]) == 0
    out = capsys.readouterr().out
    assert "target family: GPT-OSS" in out and "eagle_aux_hidden_state_layer_ids = [2, 4, 5]" in out


def test_unserved_target_and_bad_target(tmp_path, capsys):
    data, dumps = write_inputs(tmp_path)
    code, report, _ = parity(capsys, "--data", data, "--dump-dir", dumps, "--target", write_target(tmp_path,
                                                                                               "OPTForCausalLM"))
    assert report["ids_to_set"]["ids"] is None and "OPTForCausalLM" in report["ids_to_set"]["impossible"]
    code, _, err = parity(capsys, "--data", data, "--dump-dir", dumps, "--target", str(tmp_path / "missing"))
    assert code == 2 and "missing" in err


def test_server_that_is_not_sglang_gets_no_samples(tmp_path, capsys, http_server):
    url, served, seen = http_server
    served["/generate"] = (200, "{}")  # it would even take them
    data, dumps = write_inputs(tmp_path)
    code, report, err = parity(capsys, "--data", data, "--dump-dir", dumps, "--server", url)
    assert code == 2 and report is None
    assert f"--server {url}: answers, but not as an SGLang server (GET /server_info: 404" in err
    assert seen == [("GET", "/server_info")]


def test_samples_sent_to_an_sglang_server_then_compared(tmp_path, capsys, http_server):
    url, served, seen = http_server
    served["/server_info"] = (200, json.dumps({"version": "0.5.23"}))
    served["/generate"] = (200, json.dumps({"text": "x"}))
    data, dumps = write_inputs(tmp_path)
    code, report, _ = parity(capsys, "--data", data, "--dump-dir", dumps, "--server", url, "-n", "4")
    assert code == 0 and report["positions_matched"] == SEQ
    assert seen == [("GET", "/server_info"), ("POST", "/generate")]  # the one sample there is


def test_samples_sent_then_the_dump_written_after_the_answer_is_waited_for(tmp_path, capsys, http_server):
    # the probe's writer thread writes a dump after the forward that made it, so after SGLang answered: as it does,
    # the file appears (written as .tmp, then renamed) a while after /generate answered, and is read all the same
    url, served, seen = http_server
    data, dumps = write_inputs(tmp_path)
    [name] = os.listdir(dumps)
    held = str(tmp_path / name)
    shutil.move(os.path.join(dumps, name), held)

    def write_later():
        tmp = os.path.join(dumps, name + ".tmp")
        shutil.copy(held, tmp)
        threading.Timer(0.8, os.replace, (tmp, os.path.join(dumps, name))).start()

    def generated():
        threading.Timer(0.4, write_later).start()
        return 200, json.dumps({"text": "x"})

    served["/server_info"] = (200, json.dumps({"version": "0.5.23"}))
    served["/generate"] = generated
    code, report, err = parity(capsys, "--data", data, "--dump-dir", dumps, "--server", url)
    assert code == 0 and report["positions_matched"] == SEQ, err


def test_a_dump_still_being_written_is_waited_for_until_the_timeout(tmp_path):
    from eagle_probe.commands.dump_files import wait_until_written

    (tmp_path / "a.safetensors.tmp").write_bytes(b"x")
    assert not wait_until_written(str(tmp_path), quiet_s=0.2, timeout_s=1.0)
    os.remove(tmp_path / "a.safetensors.tmp")
    (tmp_path / "a.safetensors").write_bytes(b"x")
    assert wait_until_written(str(tmp_path), quiet_s=0.2, timeout_s=1.0)
