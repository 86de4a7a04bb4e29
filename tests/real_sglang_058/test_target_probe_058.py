"""The probe against SGLang 0.5.8's real DeepSeek classes (run under .venv-0.5.8: scripts/test-0.5.8.sh)."""

import json
import os

import pytest

from eagle_probe import versions

if not (versions.installed_sglang_version() or "").startswith("0.5.8"):
    pytest.skip("SGLang 0.5.8 tier: run under .venv-0.5.8 (scripts/test-0.5.8.sh)", allow_module_level=True)

import torch  # noqa: E402

import eagle_probe  # noqa: E402
from sglang_cpu.tiny_models import deepseek_v3_config  # noqa: E402

TOKENS = [5, 9, 17, 33, 2, 71, 8]


@pytest.fixture(scope="module")
def dense():
    torch.set_num_threads(1)
    from sglang_cpu import runtime_058 as rt

    rt.init_runtime()
    config = deepseek_v3_config(num_hidden_layers=6, first_k_dense_replace=6)
    model = rt.build_deepseek(config, seed=1)
    return model, rt.TinyBatchRunner(model)


def events(log_dir, name):
    out = []
    for file in sorted(os.listdir(log_dir)):
        with open(os.path.join(log_dir, file)) as handle:
            out += [json.loads(line) for line in handle if line.strip()]
    return [e for e in out if e["event"] == name]


def test_058_plus_one_always_and_list_aux(dense, tmp_path):
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    model, runner = dense
    eagle_probe.uninstall()
    assert eagle_probe.install(env={"EAGLE_PROBE_LOG_DIR": str(tmp_path)})
    try:
        model.set_eagle3_layers_to_capture([1, 3, 4])  # the same ids as the 0.5.23 tier
        runner.reset()
        out = runner.extend([TOKENS], capture_hidden_mode=CaptureHiddenMode.FULL)
    finally:
        eagle_probe.uninstall()
    [cfg] = events(str(tmp_path), "eagle_probe.capture.configured")
    assert cfg["layers_to_capture"] == list(model.model.layers_to_capture) == [2, 4, 5]
    assert cfg["version_rule"] == versions.PLUS_ONE_ALWAYS and cfg["mapping"] == "plus_one"
    [forward] = events(str(tmp_path), "eagle_probe.target.forward")
    assert forward["aux_format"] == "list" and forward["aux_returned"] == 3  # 0.5.8 returns a list
    hf = model.hf_model(torch.tensor([TOKENS]), output_hidden_states=True).hidden_states
    hidden = model.config.hidden_size
    for slot in cfg["slots"]:
        got = out.hidden_states[:, slot["slot"] * hidden:(slot["slot"] + 1) * hidden]
        assert torch.allclose(got, hf[slot["hf_index"]][0], atol=1e-5)


def test_058_embedding_index_crashes_with_type_error(dense):
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    model, runner = dense
    model.set_eagle3_layers_to_capture([-1, 2, 3])  # -1 + 1 = index 0: hidden_states + None
    runner.reset()
    with pytest.raises(TypeError):
        runner.extend([TOKENS], capture_hidden_mode=CaptureHiddenMode.FULL)


def test_058_spec_v2_acceptance_path_with_real_batch_objects(dense, tmp_path):
    """0.5.8's SGLANG_ENABLE_SPEC_V2 path, down to single requests: SGLang's real
    SchedulerOutputProcessorMixin._resolve_spec_overlap_token_ids on real Req / ScheduleBatch / GenerationBatchResult
    objects, with the probe installed; a request that finished in the previous step (the overlap scheduler runs one
    more verify step for it and discards its tokens) is not counted. The mixin is instantiated bare with the two
    attributes this function reads from the Scheduler; tests/real_sglang_058/test_spec_server_058.py runs the whole
    server."""
    from types import SimpleNamespace

    from sglang.srt.managers.schedule_batch import FINISH_LENGTH, Req, ScheduleBatch
    from sglang.srt.managers.scheduler_output_processor_mixin import SchedulerOutputProcessorMixin
    from sglang.srt.managers.utils import GenerationBatchResult
    from sglang.srt.sampling.sampling_params import SamplingParams

    eagle_probe.uninstall()
    assert eagle_probe.install(env={"EAGLE_PROBE_LOG_DIR": str(tmp_path), "EAGLE_PROBE_SUMMARY_INTERVAL_S": "1e-9"})
    try:
        reqs = [Req(f"r{i}", "", [1, 2, 3], SamplingParams(max_new_tokens=16)) for i in range(4)]
        reqs[3].finished_reason = FINISH_LENGTH(length=16)  # finished one step ago
        batch = ScheduleBatch(reqs=reqs)
        # a real instance of SGLang's mixin, so the method is called bound, as the Scheduler calls it
        scheduler = SchedulerOutputProcessorMixin.__new__(SchedulerOutputProcessorMixin)
        scheduler.draft_worker = SimpleNamespace(speculative_num_draft_tokens=3)
        scheduler.server_args = SimpleNamespace(speculative_num_steps=2)
        # accept_lens include the bonus token (0.5.8 spec v2): 3 -> 2 drafts accepted, 1 -> none, 2 -> one
        result = GenerationBatchResult(next_token_ids=torch.arange(12), accept_lens=torch.tensor([3, 1, 2, 3]))
        tokens = scheduler._resolve_spec_overlap_token_ids(result, batch)
    finally:
        eagle_probe.uninstall()  # flushes the last acceptance window
    assert tokens == [[0, 1, 2], [3], [6, 7], [9, 10, 11]] and result.accept_length_per_req_cpu == [2, 0, 1, 2]
    [acceptance] = events(str(tmp_path), "eagle_probe.acceptance")
    assert acceptance["steps"] == 1 and acceptance["drafts"] == 3 and acceptance["positions"] == 2
    assert acceptance["accepted_tokens"] == 3  # bonus excluded, as the version table says
    assert acceptance["per_position_rate"] == [2 / 3, 1 / 3]


def test_058_graph_capture_forward_is_seen_through_its_capture_mode(dense, tmp_path):
    """0.5.8 keeps its capture flag in cuda_graph_runner (0.5.23 moved it): a forward inside 0.5.8's own
    model_capture_mode() (what CudaGraphRunner.__init__ wraps capture in) is a graph-capture forward to the probe."""
    from sglang.srt.model_executor.cuda_graph_runner import model_capture_mode
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    model, runner = dense
    eagle_probe.uninstall()
    assert eagle_probe.install(env={"EAGLE_PROBE_LOG_DIR": str(tmp_path)})
    try:
        model.set_eagle3_layers_to_capture([0, 2, 3])
        runner.reset()
        with model_capture_mode():
            runner.extend([TOKENS], capture_hidden_mode=CaptureHiddenMode.FULL)
        model.set_eagle3_layers_to_capture([1, 3, 4])
        runner.reset()
        runner.extend([TOKENS], capture_hidden_mode=CaptureHiddenMode.FULL)
    finally:
        eagle_probe.uninstall()
    paths = [(f["path"], f["capturing"], f["layers_to_capture"])
             for f in events(str(tmp_path), "eagle_probe.target.forward")]
    assert paths == [("graph_capture", True, [1, 3, 4]), ("eager", False, [2, 4, 5])]
    [mismatch] = events(str(tmp_path), "eagle_probe.finding")
    assert mismatch["code"] == "graph_eager_layer_mismatch"
    assert mismatch["evidence"]["graph_layers"] == [1, 3, 4] and mismatch["evidence"]["eager_layers"] == [2, 4, 5]


def test_058_outputs_bit_identical_with_and_without_the_probe(dense, tmp_path):
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    model, runner = dense

    def run_modes():
        model.set_eagle3_layers_to_capture([1, 3, 4])
        runner.reset()
        outs = [runner.extend([TOKENS], capture_hidden_mode=CaptureHiddenMode.FULL)]
        outs.append(runner.decode([11], capture_hidden_mode=CaptureHiddenMode.FULL))
        outs.append(runner.target_verify([[12, 40, 41]]))
        return [(o.next_token_logits.clone(), o.hidden_states.clone()) for o in outs]

    eagle_probe.uninstall()
    without = run_modes()
    assert eagle_probe.install(env={"EAGLE_PROBE_LOG_DIR": str(tmp_path)})
    try:
        with_probe = run_modes()
    finally:
        eagle_probe.uninstall()
    assert {f["mode"] for f in events(str(tmp_path), "eagle_probe.target.forward")} == {
        "EXTEND", "DECODE", "TARGET_VERIFY"}
    for (logits_a, aux_a), (logits_b, aux_b) in zip(without, with_probe):
        assert torch.equal(logits_a, logits_b) and torch.equal(aux_a, aux_b)
