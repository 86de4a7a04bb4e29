"""Real SGLang 0.5.8 EAGLE-3 speculative servers on the CPU with the probe injected only through PYTHONPATH:
0.5.8's default v1 worker, and its SGLANG_ENABLE_SPEC_V2 overlap worker.

Test-only support (never part of the probe): `sglang_cpu.spec_shims` + `spec_shims_058` (chain stand-ins for
0.5.8's two CUDA-only speculative kernels, the tree build and the greedy verify; everything else is SGLang's own
code) and, for the v1 server, `shims_058.KERNEL_WARMUP_ENV`: SGLang's own ModelRunner._dummy_run at the point
where 0.5.8's CUDA branch runs it (kernel warm-up, before graph capture and before the configured capture ids are
set), because the CPU branch skips it. Expected acceptance comes from `draft_models.simulate_chain` (the maps the
checkpoints were built from), never from the server or the probe.
"""

import json
import os

import pytest

from eagle_probe import versions

if not (versions.installed_sglang_version() or "").startswith("0.5.8"):
    pytest.skip("SGLang 0.5.8 tier: run under .venv-0.5.8 (scripts/test-0.5.8.sh)", allow_module_level=True)

from eagle_probe.bootstrap import BOOTSTRAP_DIR  # noqa: E402
from eagle_probe.commands.summarize.logread import read_events  # noqa: E402
from sglang_cpu.draft_models import build_case  # noqa: E402
from sglang_cpu.server import SGLangServer  # noqa: E402
from sglang_cpu.shims_058 import KERNEL_WARMUP_ENV  # noqa: E402
from sglang_cpu.spec_shims import SPEC_ENV  # noqa: E402

NUM_STEPS = 2
KEYS = ["pos1_always_pos2_never", "into_fixed_point", "mixed"]
V1_HOOK = "sglang.srt.speculative.eagle_worker.EAGLEWorker.verify"
V2_HOOK = ("sglang.srt.managers.scheduler_output_processor_mixin.SchedulerOutputProcessorMixin"
           "._resolve_spec_overlap_token_ids")
PER_POS = "eagle_probe_spec_accepted_tokens_per_pos_total"
COUNTERS = ("eagle_probe_spec_verify_steps_total", "eagle_probe_spec_drafts_total",
            "eagle_probe_spec_draft_tokens_total", "eagle_probe_spec_accepted_tokens_total")


def _metric(text, name, label=""):
    for line in text.splitlines():
        if (line.startswith(name + "{") or line.startswith(name + " ")) and label in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _counters(text):
    values = {name: _metric(text, name) for name in COUNTERS}
    for k in range(NUM_STEPS):
        values[k] = _metric(text, PER_POS, f'position="{k}"')
    return values


def _run(root, name, case, env):
    log_dir = os.path.join(root, f"probe-{name}")
    server = SGLangServer(case["target"], extra_args=case["args"] + ["--enable-metrics"],
                          env=dict(SPEC_ENV, EAGLE_PROBE_LOG_DIR=log_dir, EAGLE_PROBE_SUMMARY_INTERVAL_S="0.2", **env),
                          pythonpath_prefix=[BOOTSTRAP_DIR], log_path=os.path.join(root, f"{name}.log"))
    server.start()
    try:
        out, deltas = {}, {}
        for key, (prompt, max_new) in case["expected"]["prompts"].items():
            before = _counters(server.flushed_metrics_text())
            out[key] = server.generate_raw(prompt, max_new_tokens=max_new)
            after = _counters(server.flushed_metrics_text())
            deltas[key] = {k: after[k] - before[k] for k in after}
    finally:
        server.stop()
    return dict(case=case, out=out, deltas=deltas, events=read_events([log_dir]))


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    case = build_case(str(tmp_path_factory.mktemp("spec-058")), "map", num_steps=NUM_STEPS)
    # a key this release ignores: norm_output, which LlamaForCausalLMEagle3 reads from 0.5.12 on; 0.5.8 never reads
    # it, so it changes nothing this server computes, and the probe must name it (draft_config_ignored).
    path = os.path.join(case["draft"], "config.json")
    with open(path, encoding="utf-8") as handle:
        config = json.load(handle)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(dict(config, norm_output=True), handle)
    return case


@pytest.fixture(scope="module")
def v1(case, tmp_path_factory):
    return _run(str(tmp_path_factory.mktemp("v1")), "v1", case, KERNEL_WARMUP_ENV)


@pytest.fixture(scope="module")
def v2(case, tmp_path_factory):
    return _run(str(tmp_path_factory.mktemp("v2")), "v2", case, {"SGLANG_ENABLE_SPEC_V2": "1"})


def _of(run, event):
    return [e for e in run["events"] if e["event"] == event]


def _findings(run, code):
    return [e for e in _of(run, "eagle_probe.finding") if e["code"] == code]


@pytest.fixture(params=["v1", "v2"])
def run(request):
    return request.getfixturevalue(request.param)


@pytest.mark.parametrize("key", KEYS)
def test_sglang_058_output_and_its_own_counts_match_the_construction(run, key):
    expected = run["case"]["expected"]["runs"][key]
    got = run["out"][key]
    meta = got["meta_info"]
    assert got["output_ids"] == expected["output_ids"]
    # 0.5.8's per-request names (0.5.23 renamed them spec_num_correct_drafts / spec_num_proposed_drafts)
    assert meta["spec_verify_ct"] == expected["verify_ct"]
    assert meta["spec_accept_token_num"] == expected["num_correct_drafts"]
    assert meta["spec_draft_token_num"] == expected["verify_ct"] * NUM_STEPS


@pytest.mark.parametrize("key", KEYS)
def test_probe_counts_per_request_match_the_construction(run, key):
    expected = run["case"]["expected"]["runs"][key]
    delta = run["deltas"][key]
    assert delta["eagle_probe_spec_verify_steps_total"] == expected["verify_ct"]
    assert delta["eagle_probe_spec_drafts_total"] == expected["verify_ct"]
    assert delta["eagle_probe_spec_draft_tokens_total"] == expected["verify_ct"] * NUM_STEPS
    assert delta["eagle_probe_spec_accepted_tokens_total"] == expected["num_correct_drafts"]
    assert [delta[k] for k in range(NUM_STEPS)] == expected["per_position"]


def test_acceptance_is_read_where_the_version_table_says(v1, v2):
    from eagle_probe.versions import parse_version, rules_for

    hooks = {hook.when: hook.target for hook in rules_for(parse_version("0.5.8")).acceptance}
    assert hooks["default"] == V1_HOOK and hooks["SGLANG_ENABLE_SPEC_V2=1"] == V2_HOOK
    for run, hook in ((v1, V1_HOOK), (v2, V2_HOOK)):
        acceptance = _of(run, "eagle_probe.acceptance")
        assert acceptance and {a["read_at"] for a in acceptance} == {hook}
        assert all(a["positions"] == NUM_STEPS for a in acceptance)


def test_capture_ids_and_aux_format_of_0_5_8(run):
    [configured] = [c for c in _of(run, "eagle_probe.capture.configured") if not c["during_graph_setup"]]
    # the draft's eagle_config ids [1, 3, 4] -> 0.5.8 adds one to every id
    assert configured["requested_ids"] == [1, 3, 4] and configured["layers_to_capture"] == [2, 4, 5]
    assert configured["caller"] == "sglang.srt.model_executor.model_runner.ModelRunner.initialize"
    eager = [f for f in _of(run, "eagle_probe.target.forward") if f["layers_to_capture"] == [2, 4, 5]]
    assert {f["mode"] for f in eager} == {"EXTEND", "TARGET_VERIFY"}
    for forward in eager:  # a list of per-layer tensors, where 0.5.23 packs one tensor
        assert forward["aux_format"] == "list" and forward["slot_widths"] == [64, 64, 64]
        assert forward["aux_shape"] is None and forward["aux_returned"] == 3


def test_draft_modes_of_each_worker(v1, v2):
    for run, extend_mode in ((v1, "DRAFT_EXTEND"), (v2, "DRAFT_EXTEND_V2")):
        drafts = {d["mode"]: d for d in _of(run, "eagle_probe.draft.forward")}
        assert set(drafts) == {"EXTEND", extend_mode, "DECODE"}
        for mode in ("EXTEND", extend_mode):  # target-fed: through fc
            assert drafts[mode]["fc_ran"] and drafts[mode]["aux_width"] == drafts[mode]["fc_in"] == 3 * 64
        assert not drafts["DECODE"]["fc_ran"]


def test_graph_setup_default_layers_call_is_reported(v1):
    """0.5.8's warm-up (ModelRunner._dummy_run, as kernel_warmup runs it before CUDA-graph capture) calls the
    setter with no ids, so graphs would capture SGLang's default layers; the configured ids come later."""
    [setup] = [c for c in _of(v1, "eagle_probe.capture.configured") if c["during_graph_setup"]]
    assert setup["caller"] == "sglang.srt.model_executor.model_runner.ModelRunner._dummy_run"
    assert setup["requested_ids"] is None and setup["mapping"] == "default_layers"
    # 0.5.8's defaults are [2, n // 2, n - 3]: [2, 3, 3] for this six-layer target
    assert setup["layers_to_capture"] == [2, 3, 3]
    [mismatch] = _findings(v1, "graph_eager_layer_mismatch")
    assert mismatch["evidence"]["graph_layers"] == [2, 3, 3]
    assert mismatch["evidence"]["eager_layers"] == [2, 4, 5]
    assert mismatch["severity"] == "error"
    # the warm-up's TARGET_VERIFY forward returned one aux state per distinct layer: 2 for 3 slots
    [warmup] = [f for f in _of(v1, "eagle_probe.target.forward") if f["layers_to_capture"] == [2, 3, 3]]
    assert warmup["mode"] == "TARGET_VERIFY" and warmup["aux_returned"] == 2 and warmup["aux_format"] == "list"
    [short] = _findings(v1, "aux_count_mismatch")
    assert short["evidence"]["duplicated"] == [3] and "listed more than once" in short["message"]


def test_no_graph_findings_without_the_warm_up_and_no_internal_errors(v1, v2):
    assert not [c for c in _of(v2, "eagle_probe.capture.configured") if c["during_graph_setup"]]
    assert not _findings(v2, "graph_eager_layer_mismatch")
    for run in (v1, v2):
        assert not _of(run, "eagle_probe.internal_error")
        started = _of(run, "eagle_probe.started")
        assert started and {s["sglang_version"] for s in started} == {"0.5.8"}


def test_targets_0_5_8_lacks_are_skipped_with_one_info_event_per_process(run):
    """0.5.8's scheduler has the overlap mixin but not 0.5.12's _resolve_spec_overlap_tokens: the version table
    says so, so its skip is info (nothing is lost: 0.5.8's own resolver is wrapped) and names the release."""
    missing = ("sglang.srt.managers.scheduler_output_processor_mixin.SchedulerOutputProcessorMixin"
               "._resolve_spec_overlap_tokens")
    # and the targets the table names for later releases (graph entries, the worker hand-off and phases, the HTTP
    # server's request hooks): absent in 0.5.8, or present with arguments of another shape, never wrapped here
    later = {f"{module}.{qualname}" for module, qualname, _ in versions.GRAPH_ENTRIES} | {
        f"{versions.WORKER_MODULE}.{hook}" for hook in versions.WORKER_HOOKS} | {
        f"{versions.TOKENIZER_MODULE}.{hook}" for hook in (versions.REQUEST_ARRIVAL_HOOK, versions.REQUEST_FINISH_HOOK)}
    skipped = _of(run, "eagle_probe.integration.skipped")
    targets = {s["target"] for s in skipped}
    assert missing in targets and targets - {missing} <= later, targets
    # once per process that imported the module
    assert len({(s["pid"], s["target"]) for s in skipped}) == len(skipped)
    for event in skipped:
        assert event["level"] == "info" and event["expected"] is False
        assert event["sglang_version"] == "0.5.8" and event["supported"] == versions.SUPPORTED_RANGE_TEXT
        assert "the version table says so" in event["reason"]
    assert {a["pid"] for a in _of(run, "eagle_probe.acceptance")} <= {s["pid"] for s in skipped}


# ------------------------------------------------- eagle-probe compat against what the servers did


@pytest.fixture(scope="module")
def compat():
    from sglang_cpu.server import compat_report

    return compat_report()


def test_compat_rules_are_what_the_servers_did(compat, v1, v2):
    from eagle_probe.analysis.layers import apply_capture_rule

    assert compat["sglang_version"] == "0.5.8" and compat["supported"] and compat["off"] is None
    assert compat["exit_status"] == 0
    rules = compat["rules"]
    [configured] = [c for c in _of(v1, "eagle_probe.capture.configured") if not c["during_graph_setup"]]
    predicted, _ = apply_capture_rule(rules["capture_id_rule"], configured["requested_ids"], 6)
    assert list(predicted) == configured["layers_to_capture"]
    assert {f["aux_format"] for f in _of(v1, "eagle_probe.target.forward")} == {rules["aux_format"]}
    assert rules["graph_setup_uses_default_layers"] is True
    assert "sglang.srt.model_executor.model_runner.ModelRunner._dummy_run" in rules["graph_setup_callers"]
    assert rules["embedding_capturable"] is False  # index 0 raised TypeError in test_target_probe_058


def test_compat_resolves_exactly_the_hooks_the_servers_used(compat, v1, v2):
    status = {t["target"]: t for t in compat["targets"]}
    used = {a["read_at"] for run in (v1, v2) for a in _of(run, "eagle_probe.acceptance")}
    assert used == {V1_HOOK, V2_HOOK}
    for hook in used:
        assert status[hook]["status"] == "resolved" and status[hook]["expected"]
    acceptance = [t for t in compat["targets"] if t["integration"] == "acceptance"]
    assert {t["target"] for t in acceptance if t["status"] == "resolved"} == used
    # every wrapper the servers logged from is resolved; the Kimi draft model does not exist in 0.5.8
    for name in ("model_runner", "llama_eagle3"):
        assert all(t["status"] == "resolved" for t in compat["targets"] if t["integration"] == name)
    found = {t["target"]: t["status"] for t in compat["targets"] if t["integration"] == "targets"}
    for target in ("sglang.srt.models.registry._ModelRegistry.resolve_model_cls",
                   "sglang.srt.models.deepseek_v2.DeepseekV2ForCausalLM.set_eagle3_layers_to_capture",
                   "sglang.srt.models.deepseek_v2.DeepseekV2Model.forward"):
        assert found[target] == "resolved"
    kimi = [t for t in compat["targets"] if t["integration"] == "kimi_k25_eagle3"]
    assert kimi and all(t["status"] == "skipped" and not t["expected"] and "version table says so" in t["reason"]
                        for t in kimi), kimi


def test_compat_names_a_missing_dependency_as_such():
    """Without the CPU stand-ins 0.5.8's modules cannot import sgl_kernel: compat says so instead of calling the
    module absent."""
    from sglang_cpu.server import compat_report

    report = compat_report(with_cpu_shims=False)
    [verify] = [t for t in report["targets"] if t["target"] == V1_HOOK]
    assert verify["status"] == "skipped" and "needs 'sgl_kernel', which is not installed" in verify["reason"]
    assert report["exit_status"] == 1  # a target the table expects did not resolve


def test_a_config_key_0_5_8_never_reads_is_named_for_this_release(run):
    [loaded] = _of(run, "eagle_probe.draft.loaded")
    assert loaded["sglang_release"].startswith("0.5.8") and loaded["config_source"].endswith("config.json")
    assert [list(i) for i in loaded["config_ignored"]] == [["norm_output", "true", "release table"]]
    [finding] = _findings(run, "draft_config_ignored")
    assert "norm_output = True" in finding["message"] and "serve with SGLang 0.5.12 or later" in finding["message"]
    with open(os.path.join(run["case"]["draft"], "config.json"), encoding="utf-8") as handle:
        max_positions = json.load(handle)["max_position_embeddings"]
    assert loaded["trained_length"] == max_positions and "max_position_embeddings" in loaded["trained_length_source"]
