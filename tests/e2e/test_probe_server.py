"""A real `python -m sglang.launch_server` on the CPU with the probe injected only through PYTHONPATH."""

import json
import os
import re
import time

import pytest

from eagle_probe.bootstrap import BOOTSTRAP_DIR
from eagle_probe.commands.summarize.logread import read_events
from sglang_cpu.census import read as read_census

from .conftest import AUX_ARGS, PROMPTS, start_server

DUMP_CAP_MB = 0.03  # holds the first prompt's forwards (two chunks, 16 KB); the next one (22 KB) stops dumps


@pytest.fixture(scope="module")
def runs(tiny_checkpoint, tmp_path_factory):
    """Greedy outputs of the same prompts from a plain server and a probed one, plus the probed one's traces."""
    checkpoint, config = tiny_checkpoint
    root = str(tmp_path_factory.mktemp("probe-e2e"))
    log_dir = os.path.join(root, "probe-logs")
    census_dir = os.path.join(root, "census")
    os.makedirs(census_dir)
    dump_dir = os.path.join(root, "dumps")
    plain = start_server(checkpoint, root, "plain", AUX_ARGS)
    try:
        plain_out = [plain.generate(p, max_new_tokens=8) for p in PROMPTS]
    finally:
        plain.stop()
    probed = start_server(checkpoint, root, "probed", ("--enable-metrics",) + AUX_ARGS,
                          pythonpath_prefix=[BOOTSTRAP_DIR],
                          env={"EAGLE_PROBE_LOG_DIR": log_dir, "EAGLE_PROBE_SUMMARY_INTERVAL_S": "0.5",
                               "SGLANG_CPU_MODULE_CENSUS_DIR": census_dir,
                               # every EXTEND forward, every layer, under a cap that the third one reaches
                               "EAGLE_PROBE_DUMP_DIR": dump_dir, "EAGLE_PROBE_DUMP_EVERY": "1",
                               "EAGLE_PROBE_DUMP_LAYERS": "all", "EAGLE_PROBE_DUMP_MAX_MB": str(DUMP_CAP_MB)})
    try:
        probed_out = [probed.generate(p, max_new_tokens=8) for p in PROMPTS]
        time.sleep(1.0)
        last = probed.generate_raw(PROMPTS[0], max_new_tokens=4)  # after the summary interval
        probed_out.append(list(last["output_ids"]))
        request_ids = [last["meta_info"]["id"]]
        metrics = probed.flushed_metrics_text()
        server_pid = probed.proc.pid
        server_log = probed.log_text()
    finally:
        probed.stop()
    stopped = not probed.is_running() and not plain.is_running()
    return dict(stopped=stopped, plain=plain_out, probed=probed_out, metrics=metrics, events=read_events([log_dir]),
                server_pid=server_pid, config=config, server_log=server_log, log_dir=log_dir,
                census=read_census(census_dir), dump_dir=dump_dir, request_ids=request_ids)


def test_no_command_module_is_loaded_in_any_server_process(runs):
    """The serving side holds only the probe: the scheduler (which observed forwards) and every other process of
    the server loaded eagle_probe.runtime, and none loaded a module of eagle_probe.commands."""
    census = runs["census"]
    scheduler_pids = {e["pid"] for e in runs["events"] if e["event"] == "eagle_probe.target.forward"}
    assert scheduler_pids and scheduler_pids <= set(census), (scheduler_pids, sorted(census))
    for pid in scheduler_pids:
        assert {"eagle_probe.runtime.recorder", "eagle_probe.runtime.integrations.target_forward"} <= set(census[pid])
    for pid, modules in census.items():
        assert not [m for m in modules if m.startswith("eagle_probe.commands")], (pid, modules)


def test_servers_stop_cleanly(runs):
    assert runs["stopped"]


def test_outputs_identical_with_and_without_probe(runs):
    assert runs["probed"][:2] == runs["plain"]
    assert all(len(out) == 8 for out in runs["plain"])


def test_events_come_from_the_scheduler_process(runs):
    events = runs["events"]
    assert events, runs["server_log"][-3000:]
    pids = {e["pid"] for e in events if e["event"] != "eagle_probe.integration.skipped"}
    assert runs["server_pid"] not in pids  # the HTTP main process observes nothing
    assert {e["tp_rank"] for e in events if e["event"] == "eagle_probe.target.forward"} == {0}
    assert not [e for e in events if e["event"] in ("eagle_probe.internal_error", "eagle_probe.config_error")]


def test_capture_configuration_in_the_real_server(runs):
    [cfg] = [e for e in runs["events"] if e["event"] == "eagle_probe.capture.configured"]
    assert cfg["requested_ids"] == [1, 3, 4] and cfg["layers_to_capture"] == [2, 4, 5]
    assert cfg["mapping"] == "plus_one" and cfg["num_layers"] == 6 and cfg["first_k_dense_replace"] == 2
    assert cfg["caller"].endswith("configure_aux_hidden_state_capture")
    assert cfg["during_graph_setup"] is False and cfg["role"] == "target"
    assert [s["label"] for s in cfg["slots"]] == ["output of layer 1", "output of layer 3", "output of layer 4"]


def test_forward_events_and_summary(runs):
    hidden = runs["config"].hidden_size
    forwards = [e for e in runs["events"] if e["event"] == "eagle_probe.target.forward"]
    modes = {f["mode"] for f in forwards}
    assert {"EXTEND", "DECODE"} <= modes
    for f in forwards:
        assert f["path"] == "eager" and f["layers_to_capture"] == [2, 4, 5] and f["can_run_tbo"] is False
        assert f["aux_returned"] == 3 and f["aux_shape"][-1] == 3 * hidden and f["slot_widths"] == [hidden] * 3
    assert len(forwards) < 10  # logged on change, not per forward
    summaries = [e for e in runs["events"] if e["event"] == "eagle_probe.summary"]
    assert summaries and sum(f["count"] for f in summaries[-1]["forwards"]) > len(forwards)
    assert not [e for e in runs["events"] if e["event"] == "eagle_probe.finding"]


def sample(metrics, name, **labels):
    for line in metrics.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_metrics_in_sglangs_own_endpoint(runs):
    metrics = runs["metrics"]
    assert re.search(r"^sglang:", metrics, re.M)  # SGLang's own series still there
    decodes = sample(metrics, "eagle_probe_target_forwards_total", role="target", mode="DECODE", path="eager",
                     tbo="false", tp_rank="0")
    extends = sample(metrics, "eagle_probe_target_forwards_total", mode="EXTEND", tp_rank="0")
    assert decodes is not None and decodes >= 7 * len(PROMPTS)  # 8 new tokens: 1 from prefill, 7 decodes each
    assert extends is not None and extends >= len(PROMPTS)
    assert sample(metrics, "eagle_probe_capture_layer_info", slot="0", capture_index="2", hf_index="2",
                  label="output of layer 1", tp_rank="0") == 1
    assert sample(metrics, "eagle_probe_aux_width", role="target", tp_rank="0") == 3 * runs["config"].hidden_size
    assert sample(metrics, "eagle_probe_info", tp_rank="0") == 1


def test_dumps_from_a_real_server_hold_what_the_readme_says(runs, tiny_checkpoint):
    """Files load with safetensors, respect the cap and the permissions, carry the README's tensors and metadata, and
    every layer equals transformers' hidden_states for the same input ids."""
    import json as json_module

    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    dump_dir = runs["dump_dir"]
    files = sorted(os.path.join(dump_dir, f) for f in os.listdir(dump_dir))
    assert files and all(f.endswith(".safetensors") for f in files)
    assert oct(os.stat(dump_dir).st_mode & 0o777) == "0o700"
    assert all(oct(os.stat(f).st_mode & 0o777) == "0o600" for f in files)
    assert sum(os.path.getsize(f) for f in files) <= DUMP_CAP_MB * 1024 * 1024
    [stopped] = [e for e in runs["events"] if e["event"] == "eagle_probe.dump.stopped"]
    assert stopped["reason"] == "cap" and stopped["level"] == "warning"
    written = [e["path"] for e in runs["events"] if e["event"] == "eagle_probe.dump.written"]
    assert sorted(written) == files
    checkpoint, config = tiny_checkpoint
    hf = AutoModelForCausalLM.from_pretrained(checkpoint, torch_dtype=torch.float32).eval()
    compared = 0
    for path in files:
        with safe_open(path, "pt") as handle:
            meta = json_module.loads(handle.metadata()["eagle_probe.meta"])
            tensors = {k: handle.get_tensor(k) for k in handle.keys()}  # noqa: SIM118  (safe_open)
        assert meta["capture_indices"] == [2, 4, 5] and meta["layer_indices"] == list(range(6))
        assert meta["tp_rank"] == 0 and meta["sglang_version"] == "0.5.23" and meta["all_layers"] is True
        start = 0
        for n, prefix in zip(tensors["extend_seq_lens"].tolist(), tensors["extend_prefix_lens"].tolist()):
            ids = tensors["input_ids"][start:start + n].tolist()
            prompt = next((q for q in PROMPTS if q[prefix:prefix + n] == ids), None)  # a chunk starts after `prefix`
            if prompt is not None:
                with torch.no_grad():
                    reference = hf(torch.tensor([prompt]), output_hidden_states=True).hidden_states
                for index in range(6):
                    served = tensors[f"hidden_states.{index}"][start:start + n]
                    expected = reference[index][0][prefix:prefix + n]
                    assert torch.allclose(served, expected, atol=1e-4, rtol=1e-3), (path, index)
                aux = tensors["aux_hidden_states"][start:start + n]
                hidden = config.hidden_size
                assert torch.equal(aux[:, :hidden], tensors["hidden_states.2"][start:start + n])
                compared += 1
            start += n
    assert compared >= 2  # the first prompt, prefilled in two chunks


def _runs_of(ids, n=3):
    return {tuple(ids[i:i + n]) for i in range(len(ids) - n + 1)}


def _int_lists(value):
    """Every list of integers anywhere in a decoded JSON value."""
    if isinstance(value, list):
        if value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            yield value
        for v in value:
            yield from _int_lists(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _int_lists(v)


def test_no_token_ids_or_request_ids_in_probe_logs_or_metrics(runs):
    """No probe log line and no metric carries the prompts' token ids (any three in a row) or SGLang's request ids
    (this server also writes dumps, which do hold token ids: as files, opt-in; their events carry paths only). The
    server runs with --skip-tokenizer-init, so there is no prompt text to look for beyond the ids."""
    prompt_runs = set().union(*(_runs_of(list(p)) for p in PROMPTS))
    assert runs["events"]
    for event in runs["events"]:
        for ints in _int_lists(event):
            assert not (_runs_of(ints) & prompt_runs), (event["event"], ints)
        text = json.dumps(event)
        assert not [rid for rid in runs["request_ids"] if rid in text], event["event"]
    probe_lines = [line for line in runs["metrics"].splitlines() if "eagle_probe_" in line]
    assert probe_lines
    for rid in runs["request_ids"]:
        assert rid not in "\n".join(probe_lines)
    for line in probe_lines:  # labels are bounded: no label value carries a token sequence
        assert not any(",".join(map(str, r)) in line for r in prompt_runs)
