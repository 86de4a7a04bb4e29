"""The no-sync rule where CUDA is present (skipped elsewhere; torch only, no SGLang): queuing a fingerprint and a dump
copy raises nothing under torch.cuda.set_sync_debug_mode("error"), and the values read once the event reports done
equal the CPU's.

Run on a GPU machine:  python -m pytest -q tests/gpu
"""

import time

import pytest
import torch

from eagle_probe.runtime.values.dumps import DumpJob
from eagle_probe.runtime.values.fingerprint import Fingerprinter

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def wait_ready(pending, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while not pending.ready():  # query(), polled: what the flush thread does
        assert time.monotonic() < deadline
        time.sleep(0.001)


@pytest.mark.parametrize("tokens", [8, 512])
def test_fingerprint_queues_and_reads_without_a_sync(tokens):
    states = torch.randn(tokens, 3 * 7168, device="cuda").to(torch.bfloat16)
    states[0, 7168 + 5] = float("nan")
    fingerprinter = Fingerprinter(3, 7168, states.device)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        pending = fingerprinter.queue(states)
        ready_at_once = pending.ready()
        wait_ready(pending)
        got = pending.read()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    reference = Fingerprinter(3, 7168, torch.device("cpu")).queue(states.cpu()).read()
    assert isinstance(ready_at_once, bool)
    for (rms, _, absmax, nonfinite, signature), (r_rms, _, r_absmax, r_nonfinite, r_sig) in zip(got, reference):
        assert nonfinite == r_nonfinite
        if nonfinite == 0:
            assert rms == pytest.approx(r_rms, rel=1e-3) and absmax == pytest.approx(r_absmax, rel=1e-3)
            assert signature == pytest.approx(r_sig, rel=1e-2, abs=1e-4)
    assert [fp[3] for fp in got] == [0, 1, 0]


def test_dump_copy_is_queued_without_a_sync():
    tensors = {"aux_hidden_states": torch.randn(64, 3 * 256, device="cuda"),
               "input_ids": torch.arange(64, device="cuda")}
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        job = DumpJob(tensors, {"tp_rank": 0})
        wait_ready(job)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert all(t.device.type == "cpu" and t.is_pinned() for t in job.tensors.values())
    assert torch.equal(job.tensors["input_ids"], torch.arange(64))


def test_fingerprint_under_cuda_graph_capture_is_never_taken():
    """The probe samples eager forwards only; its capture check is the stream flag torch sets while capturing."""
    from eagle_probe.runtime.context import graph_capture

    graph_capture.reset()
    seen = []
    graph = torch.cuda.CUDAGraph()
    x = torch.zeros(8, device="cuda")
    with torch.cuda.graph(graph):
        seen.append(graph_capture.is_capturing())
        x.add_(1)
    graph.replay()
    assert seen == [True] and not graph_capture.is_capturing()


def test_vocab_coverage_counts_device_tokens_without_a_sync():
    """The v1 worker's committed tokens stay on the device: the mask is built there from pinned memory, the count is
    queued and copied non-blocking, and read once the event reports done; it equals the CPU's count."""
    from eagle_probe.analysis.vocab_coverage import in_vocab_table
    from eagle_probe.runtime.values.coverage import VocabCoverage

    hot = tuple(range(0, 128256, 4))
    ids = torch.randint(-2, 128300, (4096,), device="cuda")
    cpu = VocabCoverage(1.0)
    cpu.set_vocabulary(hot, in_vocab_table(128256, hot))
    cpu.sample_device(0.0, ids.cpu())
    cpu.count()
    sampler = VocabCoverage(1.0)
    sampler.set_vocabulary(hot, in_vocab_table(128256, hot))
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):  # the first builds the device mask
            assert sampler.sample_device(0.0, ids)
        deadline = time.monotonic() + 10
        while sampler._pending:
            sampler.count()
            assert time.monotonic() < deadline
            time.sleep(0.001)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert (sampler.in_vocab, sampler.total) == (3 * cpu.in_vocab, 3 * cpu.total) and 0 < cpu.in_vocab < cpu.total
