"""The periodic work of the recorder: the flush of every part's counts into the Prometheus series (a daemon thread
every flush interval) and the periodic events (once per summary interval, by whichever comes first: the hot path
or the flush thread), and the final flush at exit."""

import threading
import time

from .flusher import PeriodicFlusher


class Periodic:
    def __init__(self, out, summary_interval_s: float, clock=time.monotonic):
        self.out = out
        self.clock = clock
        self.interval = summary_interval_s
        self.next_tick = clock() + summary_interval_s
        self.hot_ticks = True  # the hot path checks the clock unless a flush thread ticks at least as often
        self.parts = ()
        self._flush_lock = threading.Lock()
        self._tick_lock = threading.Lock()
        self._flusher = None

    def start_thread(self, owner, flush_interval_s: float):
        if flush_interval_s > 0:
            self._flusher = PeriodicFlusher(owner, flush_interval_s).start()
            self.hot_ticks = flush_interval_s > self.interval
            for part in self.parts:
                part.flush_thread_started()

    def drain(self):
        """What the hot path left for the flush thread (e.g. fingerprints to read), done now."""
        for part in self.parts:
            part.drain()

    def flush_metrics(self):
        """Every part's counts since its last flush into the series (thread-safe)."""
        metrics = self.out.metrics
        if metrics is None:
            return
        with self._flush_lock:
            for part in self.parts:
                part.flush(metrics)

    def tick(self):
        """Due at most once per summary interval. Called on the hot path and by the flush thread."""
        if not self._tick_lock.acquire(blocking=False):
            return
        try:
            now = self.clock()
            if now < self.next_tick:
                return
            self.next_tick = now + self.interval
            self.drain()
            self.flush_metrics()
            for part in self.parts:
                part.tick(now)
        finally:
            self._tick_lock.release()

    def tick_if_due(self):
        """After an observation off the per-forward path (the hot paths inline this: the target wrapper, the forward
        counts and the settled verify step in integrations/acceptance.py)."""
        if self.hot_ticks and self.clock() >= self.next_tick:
            self.tick()

    def on_timer(self):
        self.drain()
        self.flush_metrics()
        if self.clock() >= self.next_tick:
            self.tick()

    def flush(self):
        """Everything out: metrics and the final periodic events (at uninstall or process exit)."""
        self.drain()
        self.flush_metrics()
        with self._tick_lock:
            now = self.clock()
            for part in self.parts:
                part.tick(now, final=True)

    def close(self):
        for part in self.parts:
            part.close()
        if self._flusher is not None:
            self._flusher.stop()
            self._flusher = None
            self.hot_ticks = True
        self.flush()
