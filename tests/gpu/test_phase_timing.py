"""The step timer's device clock on a real GPU (skipped without CUDA; torch only, no SGLang): CUDA events recorded
at the phase boundaries on the current stream, read only once query() says they are done, never after a
synchronize; none recorded while a CUDA graph is captured; events reused from the pool.

Run on a GPU machine:  python -m pytest -q tests/gpu
Never run yet: no device was lent to the session that wrote it.
"""

import time

import pytest
import torch

from eagle_probe.runtime.timing.clocks import CudaEventClock
from eagle_probe.runtime.timing.steps import PHASE_MARKS, StepTimer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _work(x, times):
    for _ in range(times):
        x = x @ x
        x = x / x.norm()
    return x


def _timed_step(timer, x, draft, verify, extend):
    step = timer.begin(4)
    for phase, times in (("draft", draft), ("verify", verify), ("extend", extend)):
        first, last = PHASE_MARKS[phase]
        timer.phase(first)
        x = _work(x, times)
        timer.phase(last)
    timer.end(step, 3)
    return x


def test_phases_are_timed_without_a_sync_and_read_once_done():
    clock = CudaEventClock(torch, torch.cuda.is_current_stream_capturing)
    timer = StepTimer(clock)
    x = torch.randn(2048, 2048, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # any synchronising call in the timer raises
    try:
        for _ in range(5):
            x = _timed_step(timer, x, draft=2, verify=40, extend=1)
        timer.resolve()  # the hot path's call: reads what is done, waits for nothing
    finally:
        torch.cuda.set_sync_debug_mode("default")
    deadline = time.time() + 30
    while time.time() < deadline and sum(r[0] for d in timer.snapshot()["steps"].values() for r in d.values()) < 5:
        time.sleep(0.01)  # the device finishes on its own; snapshot() resolves what is done
    row = timer.snapshot()["steps"]["4-7"]["3"]
    steps, _, draft, verify, extend, total = row[:6]
    assert steps == 5
    assert verify > 5 * draft and verify > 5 * extend  # 40 matmuls against 2 and 1
    assert total >= draft + verify + extend
    assert len(clock._pool) > 0  # the read events went back to the pool


def test_no_mark_while_a_graph_is_captured():
    clock = CudaEventClock(torch, torch.cuda.is_current_stream_capturing)
    timer = StepTimer(clock)
    x = torch.randn(256, 256, device="cuda")
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        _work(x, 1)  # warm-up outside the capture
        with torch.cuda.graph(graph):
            step = timer.begin(1)
            y = _work(x, 2)
            timer.end(step, 1)
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    torch.cuda.synchronize()
    assert step.marks[0] is None and step.marks[7] is None  # nothing recorded into the graph
    assert timer.snapshot()["steps"] == {}  # and nothing counted from a captured step
    assert torch.isfinite(y).all()
