"""Where the phase times come from. A clock makes marks at the worker's phase boundaries and reads the seconds
between two marks once both are done; it never waits for the device.

- `WallClock`: time.perf_counter on the host (the CPU: the host runs the work as it is called).
- `DeviceTimerClock` (device_timer.py): SGLang's own forward timer, where SGLANG_ENABLE_METRICS_DEVICE_TIMER=1 runs it.
- `CudaEventClock`: CUDA events recorded on the current stream, from a pool; a mark's time is read only once its
  event's query() is true (the same way SGLang's own DeviceTimer reads its events), never after a synchronize. No mark
  is made while a CUDA graph is being captured (the event would be recorded into the graph).
Which one a process uses is stated in its start-up statement (the `timing` field) and on every costs event.
"""

import time
from collections import deque

WALL_CLOCK, CUDA_EVENTS, SGLANG_DEVICE_TIMER = "wall_clock", "cuda_events", "sglang_device_timer"
POOL_LIMIT = 1024  # events kept for reuse; a step takes at most 8 and the pending steps are bounded (steps.py)


class WallClock:
    source = WALL_CLOCK
    pooled = False  # release() has nothing to do

    @staticmethod
    def mark():
        return time.perf_counter()

    @staticmethod
    def ready(mark) -> bool:
        return True

    @staticmethod
    def seconds(start, end) -> float:
        return end - start

    @staticmethod
    def release(mark) -> None:
        pass


class CudaEventClock:
    """Marks are torch.cuda.Event(enable_timing=True) recorded on the current stream; None while capturing."""

    source = CUDA_EVENTS
    pooled = True

    def __init__(self, torch, is_capturing):
        self._event = lambda: torch.cuda.Event(enable_timing=True)
        self._is_capturing = is_capturing
        self._pool = deque()

    def mark(self):
        if self._is_capturing():
            return None
        event = self._pool.pop() if self._pool else self._event()
        event.record()
        return event

    @staticmethod
    def ready(mark) -> bool:
        return mark is None or mark.query()

    @staticmethod
    def seconds(start, end) -> float | None:
        if start is None or end is None:
            return None
        return start.elapsed_time(end) / 1000.0

    def release(self, mark) -> None:
        if mark is not None and len(self._pool) < POOL_LIMIT:
            self._pool.append(mark)


def choose_clock(device_is_cuda: bool, forward_timer=None):
    """The clock for a worker on a CUDA device or not (the worker's device, read once): SGLang's own forward timer
    where it runs and the probe numbers its intervals (device_timer.py), else CUDA events, else the wall clock."""
    if not device_is_cuda:
        return WallClock()
    from .device_timer import DeviceTimerClock, existing_log

    log = existing_log(forward_timer)
    if log is not None:
        return DeviceTimerClock(log)
    import torch

    from ..context import graph_capture

    return CudaEventClock(torch, graph_capture.is_capturing)
