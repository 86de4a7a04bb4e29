"""Acceptance by slice through the real acceptance hook with SGLang's real Req, ScheduleBatch and
GenerationBatchResult: the step carries its own list of the live requests, the batch size and the path, and the
slices read only what SGLang set on the Req (its prompt, cached_tokens, sampling parameters, require_reasoning,
finished_reason)."""

from array import array

import eagle_probe
from eagle_probe.observations import Ranks
from eagle_probe.runtime.integrations import acceptance
from eagle_probe.runtime.state import STATE

RESOLVE = "SchedulerBatchResultProcessor._resolve_spec_v2_tokens"


def _step(reqs, counts, graph=False):
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.managers.utils import GenerationBatchResult

    result = GenerationBatchResult(can_run_cuda_graph=graph)
    result.num_correct_drafts_per_req_cpu = list(counts)
    result.speculative_num_draft_tokens = 3

    class Owner:  # the scheduler's server_args, as the hook reads them
        server_args = type("ServerArgs", (), {"speculative_num_steps": 2})()

    batch = ScheduleBatch(reqs=reqs)
    acceptance.wrapper_for(RESOLVE)(lambda *a, **k: None, Owner(), (result, batch), {})
    return batch


def test_the_hook_hands_the_slices_what_sglang_set(tmp_path):
    from sglang.srt.managers.schedule_batch import FINISH_LENGTH as finish
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    eagle_probe.uninstall()
    assert eagle_probe.install(env={"EAGLE_PROBE_LOG_DIR": str(tmp_path), "EAGLE_PROBE_FLUSH_INTERVAL_S": "0"})
    try:
        STATE.recorder._read_ranks = lambda: Ranks(tp_rank=0, tp_size=1, pp_rank=0)
        # temperature 0 is greedy once SGLang's SamplingParams normalised it (top_k 1); request 1 asks for reasoning
        reqs = [Req(f"r{i}", "", array("i", [1] * (70 * i + 5)), SamplingParams(max_new_tokens=8, temperature=t),
                    require_reasoning=i == 1) for i, t in enumerate((0.0, 0.7, 1.3))]
        reqs[2].cached_tokens = 64  # what SGLang's prefill sets on a radix-cache hit
        batch = _step(reqs, (2, 1, 0))
        batch.reqs.append(reqs[0])  # SGLang changing its list afterwards changes nothing the slices read
        reqs[1].finished_reason = finish(length=8)
        _step(reqs, (2, 2, 2), graph=True)  # request 1 rides one more step, discarded by SGLang: not counted
        slices = STATE.recorder.slices.snapshot()["slices"]
        # batch size before filtering
        assert slices["batch"] == {"2-3": {"request_steps": 5, "accepted": [4, 3], "drafted": [5, 5]}}
        assert slices["path"] == {"eager": {"request_steps": 3, "accepted": [2, 1], "drafted": [3, 3]},
                                  "graph": {"request_steps": 2, "accepted": [2, 2], "drafted": [2, 2]}}
        assert slices["step"] == {"first": {"request_steps": 3, "accepted": [2, 1], "drafted": [3, 3]},
                                  "later": {"request_steps": 2, "accepted": [2, 2], "drafted": [2, 2]}}
        assert slices["cached_prefix"]["yes"] == {"request_steps": 2, "accepted": [1, 1], "drafted": [2, 2]}
        # prompts of 5, 75, 145 tokens: first steps at 6, 76, 146; request 0 then at 6 + 2 + 1 = 9
        assert slices["position"] == {"0-63": {"request_steps": 2, "accepted": [2, 2], "drafted": [2, 2]},
                                      "64-127": {"request_steps": 1, "accepted": [1, 0], "drafted": [1, 1]},
                                      "128-255": {"request_steps": 2, "accepted": [1, 1], "drafted": [2, 2]}}
        assert slices["sampling"] == {"greedy": {"request_steps": 2, "accepted": [2, 2], "drafted": [2, 2]},
                                      "temp<=1": {"request_steps": 1, "accepted": [1, 0], "drafted": [1, 1]},
                                      "temp>1": {"request_steps": 2, "accepted": [1, 1], "drafted": [2, 2]}}
        assert slices["thinking"] == {"on": {"request_steps": 1, "accepted": [1, 0], "drafted": [1, 1]},
                                      "off": {"request_steps": 4, "accepted": [3, 3], "drafted": [4, 4]}}
    finally:
        eagle_probe.uninstall()


def test_the_v1_hook_reads_the_path_from_the_verify_return(tmp_path):
    """The v1 worker's verify (0.5.8 to 0.5.12) returns (..., can_run_cuda_graph) last (a contract claim per release);
    its batch is the verify's first argument. EAGLEWorker is not in 0.5.23: its wrapper is called directly."""
    from types import SimpleNamespace

    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
    from sglang.srt.sampling.sampling_params import SamplingParams

    from eagle_probe import versions

    target = "sglang.srt.speculative.eagle_worker.EAGLEWorker.verify"
    eagle_probe.uninstall()
    assert eagle_probe.install(env={"EAGLE_PROBE_LOG_DIR": str(tmp_path), "EAGLE_PROBE_FLUSH_INTERVAL_S": "0"})
    try:
        STATE.recorder._read_ranks = lambda: Ranks(tp_rank=0, tp_size=1, pp_rank=0)
        field = versions.acceptance_field(target, STATE.recorder.rules)
        reqs = [Req(f"v{i}", "", array("i", [1, 2]), SamplingParams(max_new_tokens=8)) for i in range(2)]
        output = (None, SimpleNamespace(**{field: [1, 0]}), None, True)
        worker = SimpleNamespace(speculative_num_steps=2)
        wrapper = acceptance._v1_wrapper(target, "acceptance.verify")
        assert wrapper(lambda *a, **k: output, worker, (ScheduleBatch(reqs=reqs), None), {}) is output
        slices = STATE.recorder.slices.snapshot()["slices"]
        assert slices["path"] == {"graph": {"request_steps": 2, "accepted": [1, 0], "drafted": [2, 2]}}
        assert slices["batch"] == {"2-3": {"request_steps": 2, "accepted": [1, 0], "drafted": [2, 2]}}
        assert slices["step"] == {"first": {"request_steps": 2, "accepted": [1, 0], "drafted": [2, 2]}}
        tally = STATE.recorder.acceptance.snapshot()  # the acceptance part as before
        assert (tally.steps, tally.counts) == (1, {(2, 0): 1, (2, 1): 1})
    finally:
        eagle_probe.uninstall()
