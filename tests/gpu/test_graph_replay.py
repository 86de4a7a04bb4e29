"""What CUDA-graph replay does to the probe, on a real device (skipped without CUDA; torch only, no SGLang):

- a wrapt wrapper on a module class's `forward` runs while the graph is captured and never at replay (why the
  inner-forward wrappers go dark under SGLang's graphs);
- the worker-boundary reductions (values/boundary.py: fingerprint reductions into preallocated buffers, the dump's
  non-blocking host copies) on the replayed graph's output run under torch.cuda.set_sync_debug_mode("error"), and
  the values read once the events report done equal the CPU's for the same states.

Run on a GPU machine:  python -m pytest -q tests/gpu
Never run yet: no device was lent to the session that wrote it.
"""

import time

import pytest
import torch
import wrapt

from eagle_probe.runtime.values import boundary
from eagle_probe.runtime.values.dumps import DumpJob
from eagle_probe.runtime.values.fingerprint import Fingerprinter
from eagle_probe.runtime.values.sampler import FingerprintSampler

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

H, SLOTS, TOKENS = 256, 3, 64


class Inner(torch.nn.Module):
    """Stands for a target's inner model: (final hidden [T, H], packed aux [T, K*H])."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(H, H) for _ in range(4))

    def forward(self, x):
        aux = []
        for i, layer in enumerate(self.layers):
            if i in (1, 2, 3):
                aux.append(x)
            x = layer(x)
        return x, torch.cat(aux, dim=-1)


def test_a_class_wrapper_runs_at_capture_and_never_at_replay():
    calls = []

    def wrapper(wrapped, instance, args, kwargs):
        calls.append(torch.cuda.is_current_stream_capturing())
        return wrapped(*args, **kwargs)

    cls = type("Wrapped", (Inner,), {})
    wrapt.wrap_function_wrapper(cls, "forward", wrapper)
    model = cls().cuda()
    static_in = torch.randn(TOKENS, H, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        model(static_in)  # warm-up, eager
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = model(static_in)
    assert calls == [False, True]  # eager warm-up, then the capture
    for _ in range(3):
        static_in.copy_(torch.randn(TOKENS, H, device="cuda"))
        graph.replay()
    torch.cuda.synchronize()
    assert calls == [False, True]  # three replays, no Python of the model
    expected = cls.forward.__wrapped__(model, static_in)
    assert torch.allclose(static_out[1], expected[1])


def _wait(ready, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert time.monotonic() < deadline
        time.sleep(0.001)


def test_worker_boundary_reductions_on_a_replayed_output_never_sync():
    model = Inner().cuda()
    static_in = torch.randn(TOKENS, H, device="cuda")
    graph = torch.cuda.CUDAGraph()
    model(static_in)
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        _, aux = model(static_in)
    graph.replay()
    sampler = FingerprintSampler(0.001)
    sampler.inline = False  # read below, as the flush thread does
    logits = torch.randn(TOKENS, 50, device="cuda")
    handoff = boundary.Handoff("TARGET_VERIFY", aux, torch.arange(TOKENS, device="cuda"),
                               torch.arange(TOKENS, device="cuda"), TOKENS, (), None, None, (1, 2, 3), 4, "Inner",
                               logits)
    torch.cuda.set_sync_debug_mode("error")
    try:
        # the draft takes the same tensor: its view (3 aux slots, embedding width H) shares the target's reduction;
        # one that skips fc (the embedding width is the packed width) is reduced apart, as one slot
        boundary.sample(sampler, None, handoff, step=1, draft_view=(SLOTS, H))
        time.sleep(0.002)  # the next 1 ms sampling interval
        boundary.sample(sampler, None, handoff, step=2, draft_view=(SLOTS, SLOTS * H))
        # what a worker verify dump holds: the aux states, the tokens and the target's greedy ids (argmax on device)
        job = DumpJob({"aux_hidden_states": aux, "input_ids": handoff.input_ids,
                       "target_next_ids": torch.argmax(handoff.logits, -1)}, {"mode": "TARGET_VERIFY"})
    finally:
        torch.cuda.set_sync_debug_mode("default")
    _wait(lambda: len(sampler.pending) == 3 and all(p.ready() for p, _ in sampler.pending))
    [(context, values), (draft, draft_values), (skipped, one_slot), (target_2, _)] = sampler.take_ready()
    assert context.source == "worker" and context.capture_indices == (1, 2, 3) and context.tokens == TOKENS
    assert (draft.role, draft.step, draft.capture_indices, draft_values) == ("draft", 1, (None,) * SLOTS, values)
    assert (skipped.role, skipped.step, skipped.widths, len(one_slot)) == ("draft", 2, (SLOTS * H,), 1)
    assert (target_2.role, target_2.step) == ("target", 2)
    _wait(job.ready)
    assert torch.equal(job.tensors["aux_hidden_states"], aux.cpu())
    assert torch.equal(job.tensors["target_next_ids"], logits.cpu().argmax(-1))
    reference = Fingerprinter(SLOTS, H, torch.device("cpu")).queue(aux.cpu()).read()
    for got, want in zip(values, reference):
        assert got[0] == pytest.approx(want[0], rel=1e-4) and got[3] == want[3] == 0
