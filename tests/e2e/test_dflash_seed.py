"""The seed's layer hazard one generation on, on real SGLang 0.5.23: the committed trained DFlash draft
(examples/seed/weights/dflash, block 4, trained on dflash_config.target_layer_ids [3, 4] = HF (4, 5); see
sglang_cpu/dflash_seed.py) served by `python -m sglang.launch_server --speculative-algorithm DFLASH` on the CPU, with
the probe and EAGLE_PROBE_TRAINED_LAYERS=hf:4,5, twice:

1. a copy whose config lost target_layer_ids (as a conversion that keeps only the standard keys would): SGLang
   silently uses build_target_layer_ids(6, 2) = [1, 3], HF (2, 4), and acceptance collapses. The probe must say which
   layers the target captures and why (the capture line: ids, their source "default", the HF indices), name
   dflash_target_layers_defaulted and layer_mismatch with the ids that reach the trained layers, report the draft's
   facts (block 4, 3 draft positions, fc 2 x 64 wide) and what each hand-off feeds it, with fingerprints taken at the
   worker;
2. a copy written with the finding's fix: no finding, every draft accepted (accept length 4, the training record's).

On both, the probe's acceptance counters (3 positions per block) equal SGLang's own per-request meta_info, SGLang's
figures are the plain-torch replay's of the training record (weights/dflash.json), and the output is the language's
continuation, one request at a time and (on the second) all at once: greedy verify keeps the target's tokens whatever
the draft proposes.
"""

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from eagle_probe.bootstrap import BOOTSTRAP_DIR
from eagle_probe.commands.cli import main as cli_main
from sglang_cpu import dflash_seed, seed
from sglang_cpu.census import read as read_census
from sglang_cpu.server import STARTUP_TIMEOUT_S

from .conftest import (
    counts_delta,
    internal_errors,
    metric_samples,
    probe_events,
    settled_probe_counts,
    sglang_spec_counts,
)

BUDGET_S = float(os.environ.get("SGLANG_CPU_DFLASH_SEED_BUDGET_S", "300"))
pytestmark = pytest.mark.timeout(BUDGET_S)

POSITIONS = dflash_seed.BLOCK_SIZE - 1
TRAINED_HF = (4, 5)
TRAINED_ENV = "hf:" + ",".join(map(str, TRAINED_HF))
SAMPLED_TEMPERATURE = 0.8
FALLBACK = "DFLASH non-greedy verification is unavailable"  # SGLang's warning where no sampling verify op exists


def _serve(root, name, draft, left, dumps=None, batched=False, sampled=False):
    census = os.path.join(root, f"census-{name}")  # the probe modules each server process loaded (sglang_cpu.census)
    os.makedirs(census)
    env = {"EAGLE_PROBE_LOG_DIR": os.path.join(root, f"probe-{name}"), "EAGLE_PROBE_TRAINED_LAYERS": TRAINED_ENV,
           "EAGLE_PROBE_SUMMARY_INTERVAL_S": "0.2", "SGLANG_CPU_MODULE_CENSUS_DIR": census}
    if dumps:
        env.update(EAGLE_PROBE_DUMP_DIR=dumps, EAGLE_PROBE_DUMP_EVERY="1", EAGLE_PROBE_DUMP_LAYERS="all")
    server = dflash_seed.dflash_server(draft, log_path=os.path.join(root, f"{name}.log"), env=env,
                                       pythonpath_prefix=[BOOTSTRAP_DIR], extra_args=["--enable-metrics"])
    server.start(timeout=min(STARTUP_TIMEOUT_S, left()))
    try:
        before = settled_probe_counts(server, POSITIONS)
        sliced_before = _sampling_slices(server.metrics_text())
        answers = [server.generate_raw(p, max_new_tokens=seed.MAX_NEW_TOKENS, timeout=left()) for p in seed.PROMPTS]
        if batched:  # the prompts again, all at once: verify forwards of several requests
            with ThreadPoolExecutor(len(seed.PROMPTS)) as pool:
                answers += list(pool.map(
                    lambda p: server.generate_raw(p, max_new_tokens=seed.MAX_NEW_TOKENS, timeout=left()),
                    seed.PROMPTS))
        sampled_answers = []
        if sampled:  # the prompts at temperature 0.8, all at once: SGLang's DFlash verify of sampled requests
            with ThreadPoolExecutor(len(seed.PROMPTS)) as pool:
                sampled_answers = list(pool.map(lambda p: server.generate_raw(
                    p, max_new_tokens=seed.MAX_NEW_TOKENS, sampling_params={"temperature": SAMPLED_TEMPERATURE},
                    timeout=left()), seed.PROMPTS))
        counts = counts_delta(settled_probe_counts(server, POSITIONS), before)
        text = server.metrics_text()
        errors = internal_errors(text)
        slices = {bucket: n - sliced_before.get(bucket, 0.0) for bucket, n in _sampling_slices(text).items()}
        log = server.log_text()
        while dumps and _dump_files(dumps) < len(seed.PROMPTS) + 1 and left() > 5:
            time.sleep(0.1)  # the writer thread: SGLang's warm-up and every prompt's prefill
    finally:
        server.stop(grace=2.0)
    return dict(answers=answers, acceptance=seed.acceptance(answers[:len(seed.PROMPTS)]), probe_counts=counts,
                errors=errors, draft=draft, dumps=dumps, log_dir=env["EAGLE_PROBE_LOG_DIR"], census=read_census(census),
                sampled=sampled_answers, sampling_slices=slices, server_log=log)



def _sampling_slices(text):
    """bucket -> request-steps of the probe's sampling slice in a /metrics text."""
    return {labels["bucket"]: value for labels, value in metric_samples(text, "eagle_probe_spec_slice_drafts_total")
            if labels.get("dimension") == "sampling"}


def _dump_files(directory):
    return len([n for n in os.listdir(directory) if n.endswith(".safetensors")]) if os.path.isdir(directory) else 0


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("dflash-seed"))
    deadline = time.monotonic() + BUDGET_S

    def left():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            pytest.fail(f"the DFlash seed servers ran past the module's budget of {BUDGET_S:.0f} s")
        return remaining

    default = dflash_seed.write_dflash_draft_copy(os.path.join(root, "draft-default"), None)
    runs = {"default": _serve(root, "default", default, left, dumps=os.path.join(root, "dumps-default"))}
    [mismatch] = [f for f in _findings(runs["default"]) if f["code"] == "layer_mismatch"]
    fixed = dflash_seed.write_dflash_draft_copy(os.path.join(root, "draft-fixed"), mismatch["evidence"]["fix_ids"])
    runs["fixed"] = _serve(root, "fixed", fixed, left, batched=True, sampled=True)
    return runs


def _findings(run):
    return probe_events(run["log_dir"], "eagle_probe.finding")


def _one(run, event):
    [line] = probe_events(run["log_dir"], event)
    return line


def test_the_default_copy_has_no_ids_and_sglang_picked_its_own(served):
    with open(os.path.join(served["default"]["draft"], "config.json")) as f:
        config = json.load(f)
    assert "target_layer_ids" not in config["dflash_config"] and "target_layer_ids" not in config
    capture = _one(served["default"], "eagle_probe.block_draft.capture")
    assert capture["algorithm"] == "DFLASH" and capture["model_class"] == "DeepseekV3ForCausalLM"
    assert capture["ids_source"] == "default" and capture["num_draft_layers"] == 2
    assert capture["requested_ids"] == capture["default_ids"] == list(dflash_seed.DEFAULT_TARGET_LAYER_IDS)
    # DeepSeek captures before layer id + 1: the output of layers 1 and 3, HF hidden_states 2 and 4
    assert capture["layers_to_capture"] == [2, 4] and [s["hf_index"] for s in capture["slots"]] == [2, 4]
    assert capture["rule"] == "plus_one"


def test_the_default_is_named_with_the_ids_that_reach_the_trained_layers(served):
    by_code = {f["code"]: f for f in _findings(served["default"])}
    assert {"dflash_target_layers_defaulted", "layer_mismatch"} <= set(by_code)
    defaulted = by_code["dflash_target_layers_defaulted"]
    assert defaulted["severity"] in ("warning", "error") and "target_layer_ids" in defaulted["message"]
    mismatch = by_code["layer_mismatch"]
    assert mismatch["evidence"]["fix_ids"] == list(dflash_seed.TRAINED_TARGET_LAYER_IDS)
    assert list(mismatch["evidence"]["trained_hf"]) == list(TRAINED_HF)


def test_the_fixed_copy_is_the_committed_draft_and_nothing_is_found(served):
    with open(os.path.join(dflash_seed.DFLASH_DRAFT_PATH, "config.json")) as f:
        committed = json.load(f)
    with open(os.path.join(served["fixed"]["draft"], "config.json")) as f:
        fixed = json.load(f)
    assert fixed["dflash_config"]["target_layer_ids"] == committed["dflash_config"]["target_layer_ids"] == [3, 4]
    capture = _one(served["fixed"], "eagle_probe.block_draft.capture")
    assert capture["ids_source"] != "default" and capture["layers_to_capture"] == [4, 5]
    assert _findings(served["fixed"]) == []


def test_draft_facts_and_what_each_hand_off_feeds(served):
    for name, run in served.items():
        loaded = _one(run, "eagle_probe.block_draft.loaded")
        assert loaded["block_size"] == dflash_seed.BLOCK_SIZE and loaded["draft_positions"] == POSITIONS, name
        assert loaded["fc_expected_in"] == 2 * 64, name
        fed = probe_events(run["log_dir"], "eagle_probe.block_draft.fed")
        assert {e["mode"] for e in fed} == {"EXTEND", "TARGET_VERIFY"}, name
        assert {e["width"] for e in fed} == {e["expected_width"] for e in fed} == {128}, name
        prints = probe_events(run["log_dir"], "eagle_probe.aux.fingerprint")
        assert prints and {e["source"] for e in prints} == {"worker"}, name
        assert run["errors"] == {}, name


def test_probe_counts_equal_sglangs_own(served):
    """Greedy on both servers; on the fixed one also the sampled requests (their counts in the same delta)."""
    for name, run in served.items():
        metas = [a["meta_info"] for a in run["answers"] + run["sampled"]]
        expected = sglang_spec_counts(metas, POSITIONS)
        assert expected["drafts"] > 0 and expected["draft_tokens"] == POSITIONS * expected["drafts"], name
        assert run["probe_counts"] == expected, name


def test_acceptance_collapses_on_the_default_and_is_whole_with_the_fix(served):
    default, fixed = served["default"]["acceptance"], served["fixed"]["acceptance"]
    record = dflash_seed.load_dflash_record()
    assert fixed["mean_accept_length"] == pytest.approx(record["trained"]["replayed_serving"]["mean_accept_length"])
    assert fixed["mean_accept_length"] == dflash_seed.BLOCK_SIZE
    # SGLang's own figures are the plain-torch replay's of training (weights/dflash.json), independent of SGLang: per
    # request where every draft is accepted; the collapse in the mean (a near-tie of the mis-fed draft's logits may
    # flip on another machine)
    trained_replay = record["trained"]["replayed_serving"]
    assert fixed["verify_ct"] == trained_replay["verify_ct"]
    assert fixed["num_correct_drafts"] == trained_replay["num_correct_drafts"]
    assert default["mean_accept_length"] == pytest.approx(record["default"]["replayed_serving"]["mean_accept_length"],
                                                          abs=0.15)
    assert default["mean_accept_length"] <= 1.5


def test_output_is_the_language_one_by_one_and_batched(served):
    for name, run in served.items():
        prompts = seed.PROMPTS * (len(run["answers"]) // len(seed.PROMPTS))
        assert len(prompts) == len(run["answers"]) >= len(seed.PROMPTS)
        for prompt, answer in zip(prompts, run["answers"]):
            assert answer["output_ids"] == seed.continuation(prompt), (name, prompt)
    assert len(served["fixed"]["answers"]) == 2 * len(seed.PROMPTS)


def test_summarize_tells_the_story(served, capsys):
    assert cli_main(["summarize", served["default"]["log_dir"]]) == 0
    text = capsys.readouterr().out
    assert "dflash_target_layers_defaulted" in text and "layer_mismatch" in text
    assert "[1, 3]" in text and "default" in text


def test_replay_search_on_the_default_servers_dumps_finds_the_trained_layers(served):
    import torch

    from eagle_probe.commands.replay.block_run import replay_block_draft

    torch.set_grad_enabled(False)
    default = served["default"]
    report = replay_block_draft(default["draft"], seed.TARGET_PATH, default["dumps"], do_search=True)
    assert report["dumps"]["files"] == len(seed.PROMPTS) + 1 and report["dumps"]["requests"] == len(seed.PROMPTS)
    assert tuple(report["served"]["hf_indices"]) == (2, 4) and report["served"]["accept_length"] < 1.5
    # HF 5 (the only state carrying the key) in the second slot is what matters; the first slot barely does, so
    # its candidates are near ties: the trained (4, 5) is among them, and the best is one of them
    ties = {tuple(c["hf_indices"]) for c in report["near_ties"]}
    assert TRAINED_HF in ties and all(t[1] == 5 for t in ties)
    best = report["best"]
    assert best["hf_indices"][1] == 5 and best["accept_length"] >= 2.5
    assert report["finding"]["code"] == "trained_layers_inferred"
    assert report["finding"]["evidence"]["ids_source"] == "default"


@pytest.mark.parametrize("name", ("default", "fixed"))
def test_no_command_module_is_loaded_in_a_dflash_server(served, name):
    """The block draft's hooks are runtime only: the scheduler that reported the draft loaded the block-draft
    integration, and no process of the server loaded a module of eagle_probe.commands (doctor, replay and parity
    read block drafts offline)."""
    census = served[name]["census"]
    [scheduler] = {e["pid"] for e in probe_events(served[name]["log_dir"], "eagle_probe.block_draft.loaded")}
    assert "eagle_probe.runtime.integrations.block_drafts" in census[scheduler], sorted(census)
    for pid, modules in census.items():
        assert not [m for m in modules if m.startswith("eagle_probe.commands")], (pid, modules)


def test_sampled_requests_are_sliced_apart_as_sglang_counted_them(served):
    """The fixed server's sampled requests: the probe's sampling slice holds their request-steps (temperature 0.8:
    bucket temp<=1) apart from the greedy ones, each equal to SGLang's own verify counts of those requests, whichever
    verify SGLang ran for them on this device (sampled, or its logged fallback to greedy argmax)."""
    run = served["fixed"]
    assert len(run["sampled"]) == len(seed.PROMPTS)
    greedy = sglang_spec_counts([a["meta_info"] for a in run["answers"]], POSITIONS)
    sampled = sglang_spec_counts([a["meta_info"] for a in run["sampled"]], POSITIONS)
    assert sampled["drafts"] > 0
    slices = {bucket: n for bucket, n in run["sampling_slices"].items() if n}
    assert slices == {"greedy": greedy["drafts"], "temp<=1": sampled["drafts"]}, run["sampling_slices"]
    if FALLBACK in run["server_log"]:  # greedy argmax verify: the target's own tokens, as for greedy requests
        assert [a["output_ids"] for a in run["sampled"]] == [seed.continuation(p) for p in seed.PROMPTS]
