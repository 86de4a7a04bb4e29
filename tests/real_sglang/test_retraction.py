"""A retracted request's verify step is left out of the counts, as SGLang leaves it out of its own: the probe learns of
retractions from SGLang's real Req.reset_for_retract (the one place is_retracted is set, proven per release by the
contract check) and checks the batch for them only once one happened."""

from array import array

import eagle_probe
from eagle_probe.observations import Ranks
from eagle_probe.runtime.integrations import acceptance
from eagle_probe.runtime.state import STATE

RESOLVE = "SchedulerBatchResultProcessor._resolve_spec_v2_tokens"


def _step(reqs, counts):
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.managers.utils import GenerationBatchResult

    result = GenerationBatchResult()
    result.num_correct_drafts_per_req_cpu = list(counts)
    result.speculative_num_draft_tokens = 3

    class Owner:  # the scheduler's server_args, as the hook reads them
        server_args = type("ServerArgs", (), {"speculative_num_steps": 2})()

    acceptance.wrapper_for(RESOLVE)(lambda *a, **k: None, Owner(), (result, ScheduleBatch(reqs=reqs)), {})


def test_a_request_retracted_through_sglang_is_not_counted(tmp_path):
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    eagle_probe.uninstall()
    assert eagle_probe.install(env={"EAGLE_PROBE_LOG_DIR": str(tmp_path), "EAGLE_PROBE_FLUSH_INTERVAL_S": "0"})
    try:
        STATE.recorder._read_ranks = lambda: Ranks(tp_rank=0, tp_size=1, pp_rank=0)
        reqs = [Req(f"r{i}", "", array("i", [1, 2, 3]), SamplingParams(max_new_tokens=8)) for i in range(3)]
        _step(reqs, (2, 1, 0))
        reqs[1].reset_for_retract()  # SGLang's own retraction (wrapped by the probe)
        assert reqs[1].is_retracted and acceptance._retractions[0] == 1
        _step(reqs, (2, 2, 2))
        tally = STATE.recorder.acceptance.snapshot()
        # the second step counts requests 0 and 2 only: 3 + 2 request-steps in all (depth 2, the server's steps)
        assert tally.steps == 2 and tally.counts == {(2, 0): 1, (2, 1): 1, (2, 2): 3}
    finally:
        eagle_probe.uninstall()
    assert acceptance._retractions[0] == 0  # uninstall forgets
