"""Acceptance by slice (analysis.slices): each verify step is queued on the hot path (one append) and bucketed off it
(runtime.slice_counter); the counts go to the series at a flush, and into one eagle_probe.acceptance_slices event per
summary interval, with acceptance_slice_low for a slice worse than the rest beyond chance."""

from ...analysis import slices as S
from ...analysis.traffic import HTTP_SERVER
from ...events import ACCEPTANCE_SLICES
from ..sinks.metrics import MetricsSink
from ..slice_counter import SliceCounter
from .base import Part


class Slices(Part):
    kinds = ("verify_step", "request_finished")

    def __init__(self, recorder):
        super().__init__(recorder)
        interval = self.config.flush_interval_s if self.config.flush_interval_s > 0 else 1.0
        self.counter = SliceCounter(interval, lambda exc: self.out.internal_error("slices.count", exc))
        self._flushed = ({}, {})  # (slices, request lengths) sent to the series so far
        self._flushed_steps = (0, 0)  # (verify steps, requests retired) when they were sent
        self._named = set()  # (dimension, bucket) already named low
        self._logged_steps = 0  # verify steps counted into the last event
        self.verify_step = self.counter.add  # the router's handler for verify steps: one call per step
        self.request_finished = self.counter.add_request  # the HTTP server process: one call per finished request

    def flush(self, metrics):
        try:
            self._flush()
        except Exception as exc:  # refused: sent again at the next flush
            self.out.internal_error("metrics.add_slice_counts", exc)

    def _flush(self):
        steps, retired = self._progress(), self.counter.retired
        if (steps, retired) == self._flushed_steps and not self.counter.retiring():
            return  # nothing to count or retire since the last flush (an event's count may retire: sent here)
        now = self.counter.snapshot()
        slices = {(d, b): (c["request_steps"], c["accepted"]) for d, buckets in now["slices"].items()
                  for b, c in buckets.items()}
        sent_slices, sent_lengths = self._flushed
        delta = {}
        for key, (count, accepted) in slices.items():
            before_count, before = sent_slices.get(key, (0, []))
            if count != before_count:
                delta[key] = (count - before_count, [n - (before[k] if k < len(before) else 0)
                                                     for k, n in enumerate(accepted)])
        lengths = now["request_accept_length"]
        lengths_delta = {b: n - sent_lengths.get(b, 0) for b, n in lengths.items() if n != sent_lengths.get(b, 0)}
        if (delta or lengths_delta) and not self.out.metric(MetricsSink.add_slice_counts, delta, lengths_delta):
            return  # refused (counted under metrics.add_slice_counts): sent again at the next flush
        self._flushed = (slices, lengths)
        self._flushed_steps = (steps, retired)

    def _progress(self) -> int:
        """Verify steps and classified requests counted so far: what a flush or an event has to catch up on."""
        return self.counter.steps + self.counter.requests_classified

    def tick(self, now: float, final: bool = False):
        steps = self._progress()
        snapshot = self.counter.snapshot(final)
        if not snapshot["slices"] or (steps == self._logged_steps and not final):
            return
        self._logged_steps = steps
        # SGLang's HTTP server process counts finished requests only (integrations/request_classes.py)
        role = HTTP_SERVER if not self.counter.steps and self.counter.requests_classified else "target"
        low = S.worst_per_slice(S.low_slices(snapshot["slices"], snapshot["positions"]))
        self.out.emit("info", ACCEPTANCE_SLICES, role=role, **snapshot, low=low, test=S.TEST_NAME)
        for item in low:
            key = (item["dimension"], item["bucket"])
            if key not in self._named:
                self._named.add(key)
                self.out.finding(S.slice_low_finding(item, snapshot["positions"]), role)

    def close(self):
        self.counter.stop()

    def forget(self):
        self._named.clear()
