"""Prometheus series of the draft depth each verify step ran at (adaptive depth changes it from step to step; a
tree's depth is its draft steps), made on the first flush that counts a step, on the sink's registry with its rank
labels. The depth label takes the few values the server's candidate steps allow."""

from . import catalogue as C
from .series import Series


class DepthSeries:
    def __init__(self, series: Series):
        self._series = series
        self._made = None  # (verify steps, request-steps, accepted drafts, depth gauge), made on first use

    def make(self) -> tuple:
        if self._made is None:
            make = self._series.make
            self._made = (make(C.DEPTH_VERIFY_STEPS), make(C.DEPTH_DRAFTS), make(C.DEPTH_ACCEPTED),
                          make(C.DRAFT_DEPTH))
        return self._made

    def add(self, per_depth: dict, last_depth) -> None:
        """per_depth: {depth: [verify steps, request-steps, accepted drafts]} added since the last flush
        (WindowSums.per_depth). Every series is resolved before any is increased (as MetricsSink.add_forwards)."""
        steps, drafts, accepted, gauge = self.make()
        child = self._series.child
        adds = []
        for depth, counts in per_depth.items():
            label = str(depth)
            adds += zip((child(steps, label), child(drafts, label), child(accepted, label)), counts)
        depth_gauge = child(gauge) if last_depth is not None else None
        for metric, amount in adds:
            if amount:
                metric.inc(amount)
        if depth_gauge is not None:
            depth_gauge.set(last_depth)
