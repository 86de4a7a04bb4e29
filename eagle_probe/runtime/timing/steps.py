"""One decode step of the EAGLE worker, timed at its phase boundaries, and the target's forwards, timed around
ModelRunner.forward; read once the clock says each mark is done (clocks.py), then counted (counts.py).

A step's marks: its start, each phase's start and end (draft, verify, draft extend), its end. A phase that did not
run (depth 0 drafts nothing; SGLang may skip the extend) keeps no marks and counts 0 s. The period, from one decode
step's start to the next one's when nothing else ran between them (no prefill), is read on the host clock: under
the overlap scheduler the host is held back by the device, so its mean period is the device's.

Nothing is read on the hot path: the flush thread counts what is done at each flush (`resolve`); the worker thread
only when RESOLVE_AT items wait, one at a time under a lock neither waits for.
"""

import threading
import time
from collections import deque

from ...analysis import batch_buckets
from .counts import CostCounts

START, END = 0, 7
PHASE_MARKS = {"draft": (1, 2), "verify": (3, 4), "extend": (5, 6)}
MAX_PENDING = 1024  # steps, periods and forwards not counted yet; more are dropped (counted)
RESOLVE_AT = 512  # the worker counts on its own thread only when this many wait (the flush thread counts each second)


class Step:
    __slots__ = ("bucket", "batch_size", "depth", "marks", "wall_start")

    def __init__(self, bucket: str, batch_size: int, wall_start: float):
        self.bucket = bucket
        self.batch_size = batch_size
        self.depth = None
        self.marks = [None] * 8
        self.wall_start = wall_start


class Forward:
    __slots__ = ("key", "requests", "tokens", "start", "end")

    def __init__(self, key: str, requests: int, tokens: int, start):
        self.key, self.requests, self.tokens, self.start, self.end = key, requests, tokens, start, None


class StepTimer:
    def __init__(self, clock, counts: CostCounts | None = None):
        self.clock = clock
        self.counts = counts if counts is not None else CostCounts()
        self.current: Step | None = None  # the decode step the worker is in (its thread)
        self._last = None  # (wall start, (bucket, depth)) of the last decode step, while nothing else has run since
        self._pending: deque = deque()
        self._lock = threading.Lock()
        self.dropped = 0

    # -- the worker's thread --------------------------------------------------------------------------------------

    def begin(self, batch_size: int) -> Step:
        now = time.perf_counter()
        if self._last is not None:
            self._queue(("period", self._last[1], now - self._last[0]))
        step = Step(batch_buckets.LABELS[batch_buckets.bucket_of(batch_size)], batch_size, now)
        step.marks[START] = self.clock.mark()
        self.current = step
        return step

    def phase(self, index: int) -> None:
        step = self.current
        if step is not None:
            step.marks[index] = self.clock.mark()

    def end(self, step: Step, depth: int) -> None:
        step.marks[END] = self.clock.mark()
        step.depth = depth
        self.current = None
        self._last = (step.wall_start, (step.bucket, depth))
        self._queue(step)
        if len(self._pending) >= RESOLVE_AT:
            self.resolve()

    def interrupt(self) -> None:
        """Another kind of forward ran (a prefill): the next decode step does not follow the last one."""
        self._last = None

    def forward_begin(self, mode: str, tokens: int, batch_size: int) -> Forward:
        """Keyed MODE:WIDTH:BUCKET; a prefill's width varies with its prompts, so prefills share one key a bucket."""
        width = "*" if mode == "EXTEND" else str(tokens // batch_size if batch_size else tokens)
        bucket = batch_buckets.LABELS[batch_buckets.bucket_of(batch_size)]
        return Forward(f"{mode}:{width}:{bucket}", batch_size, tokens, self.clock.mark())

    def forward_end(self, forward: Forward) -> None:
        forward.end = self.clock.mark()
        self._queue(forward)

    def _queue(self, item) -> None:
        if len(self._pending) >= MAX_PENDING:
            self.dropped += 1
            return
        self._pending.append(item)

    # -- either thread ----------------------------------------------------------------------------------------------

    def resolve(self) -> None:
        """Count every queued item, in order, whose marks are done; stop at the first that is not."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            pending, clock, counts = self._pending, self.clock, self.counts
            while pending:
                item = pending[0]
                if isinstance(item, Step):
                    if not clock.ready(item.marks[END]):
                        break
                    self._count_step(item)
                elif isinstance(item, Forward):
                    if not clock.ready(item.end):
                        break
                    seconds = clock.seconds(item.start, item.end)
                    if seconds is not None:
                        counts.add_forward(item.key, item.requests, item.tokens, seconds)
                    clock.release(item.start)
                    clock.release(item.end)
                else:
                    counts.add_period(*item[1:])
                pending.popleft()
        finally:
            self._lock.release()

    def snapshot(self) -> dict:
        """The counts so far (the flush thread's copy; the worker's resolve skips while it is taken)."""
        self.resolve()
        with self._lock:
            return self.counts.snapshot()

    def _count_step(self, step: Step) -> None:
        clock, marks = self.clock, step.marks
        phases = []
        for first, last in PHASE_MARKS.values():
            seconds = clock.seconds(marks[first], marks[last]) if marks[first] is not None else 0.0
            phases.append(seconds or 0.0)
        total = clock.seconds(marks[START], marks[END])
        if total is not None:
            self.counts.add_step(step.bucket, step.depth, step.batch_size, *phases, total)
        if clock.pooled:
            for mark in marks:
                clock.release(mark)
