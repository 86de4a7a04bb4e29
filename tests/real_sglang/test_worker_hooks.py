"""The EAGLE worker hand-off hooks against SGLang 0.5.23's real EagleDraftWorker: the signature check accepts the real
methods and skips a method of another shape with one event and a metric (never wrapping it); the contract claims
about the hand-off hold on the installed source and break when they name something else."""

import json

import pytest

from eagle_probe.commands.contract import SourceTree
from eagle_probe.commands.contract.rule_checks import passes_argument, reads_attribute
from eagle_probe.commands.contract.rules import _worker_boundary_claims
from eagle_probe.observations import Ranks
from eagle_probe.runtime.integrations import eagle_worker
from eagle_probe.runtime.patcher import Integration, Patcher, PatchTarget
from eagle_probe.runtime.state import STATE


@pytest.fixture(scope="module")
def worker_module(sglang_runtime):
    from sglang.srt.speculative import eagle_worker_v2

    return eagle_worker_v2


def test_the_real_methods_take_what_the_wrappers_read(worker_module):
    cls = worker_module.EagleDraftWorker
    assert eagle_worker.leading_params(cls._draft_extend_for_prefill, eagle_worker.PREFILL_PARAMS) is None
    assert eagle_worker.leading_params(cls._draft_extend_for_decode, eagle_worker.DECODE_PARAMS) is None
    problem = eagle_worker.leading_params(cls._draft_extend_for_decode, ("batch", "target_hidden_states"))
    assert problem == "takes (batch, batch_result) where the probe reads (batch, target_hidden_states)"


def test_a_method_of_another_signature_is_skipped_with_one_event_and_a_metric(worker_module, make_recorder,
                                                                              monkeypatch):
    ranks = Ranks(tp_rank=0, tp_size=1, pp_rank=0, dp_rank=None)
    recorder, stream, registry, _ = make_recorder(ranks=ranks)
    monkeypatch.setattr(STATE, "recorder", recorder)
    cls = worker_module.EagleDraftWorker
    before = vars(cls)["_draft_extend_for_prefill"]
    # the decode hook's wrapper pointed at the prefill method: its second parameter is not batch_result
    target = PatchTarget(eagle_worker.WORKER_MODULE, eagle_worker.PREFILL_HOOK, eagle_worker.decode_wrapper,
                         accepts=lambda f: eagle_worker.leading_params(f, eagle_worker.DECODE_PARAMS))
    patcher = Patcher()
    patcher.install([Integration("eagle_worker", (target,))])
    patcher.install([Integration("eagle_worker", (target,))])  # a second install: still one event
    try:
        assert vars(cls)["_draft_extend_for_prefill"] is before  # not wrapped
        recorder.ensure_ranks()
        skipped = [json.loads(line) for line in stream.getvalue().splitlines()
                   if json.loads(line)["event"] == "eagle_probe.integration.skipped"]
        assert len(skipped) == 1 and "another signature" in skipped[0]["reason"]
        assert "target_hidden_states" in skipped[0]["reason"] and skipped[0]["level"] == "warning"
        assert registry.get_sample_value("eagle_probe_integration_skipped_total", dict(
            integration="eagle_worker", target=f"{eagle_worker.WORKER_MODULE}.{eagle_worker.PREFILL_HOOK}",
            **ranks.labels())) == 1
    finally:
        patcher.uninstall()


def test_the_hand_off_claims_hold_and_can_break():
    src = SourceTree.installed()
    assert [(c.what, c.check(src)) for c in _worker_boundary_claims() if c.check(src) is not None] == []
    from eagle_probe.commands.contract.claims import body_check

    wrong = body_check(eagle_worker.WORKER_MODULE, "EAGLEWorkerV2._forward_prefill_batch", "x",
                       passes_argument("_draft_extend_for_prefill", 1, "batch_output.next_token_ids"))
    assert "passes ['batch_output.logits_output.hidden_states']" in wrong.check(src)
    missing = body_check(eagle_worker.WORKER_MODULE, eagle_worker.DECODE_HOOK, "x",
                         reads_attribute("batch_result.logits_output.next_token_logits"))
    assert missing.check(src) == "does not read batch_result.logits_output.next_token_logits"
