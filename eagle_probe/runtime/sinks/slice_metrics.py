"""Prometheus series of acceptance by slice (runtime/parts/slices.py), made on the first flush that has counts, on
the sink's registry and with its rank labels. Every label but a custom label's value takes values from a fixed set
(analysis.slices): the dimension, its buckets, the draft position (the server's speculative steps) and the
per-request length buckets. Every series of those sets that the process counts is made at once, at zero
(Prometheus' advice for label values known in advance): a rate over a slice that saw nothing yet reads 0, not "no
data", and the sink's series stop changing after the first flush."""

from ...analysis.slices import DIMENSIONS, REQUEST_DIMENSIONS, REQUEST_LENGTH_BUCKETS
from . import catalogue as C
from .series import Series

FIXED_DIMENSIONS = {**DIMENSIONS, **REQUEST_DIMENSIONS}


class SliceSeries:
    def __init__(self, series: Series):
        self._series = series
        self._made = None  # (slice drafts, slice accepted per position, requests by length), made on first use
        self._fixed = (0, frozenset())  # (draft positions, dimensions) the series at zero were made for

    def make(self) -> tuple:
        if self._made is None:
            make = self._series.make
            self._made = (make(C.SLICE_DRAFTS), make(C.SLICE_ACCEPTED_PER_POS), make(C.REQUESTS_BY_ACCEPT_LENGTH))
        return self._made

    def add(self, slices: dict, request_lengths: dict) -> None:
        """Counts added since the last flush: slices {(dimension, bucket): (request-steps, [accepted per position])},
        request_lengths {bucket: requests}. Every series is resolved before any is increased (as
        MetricsSink.add_forwards)."""
        drafts, per_pos, requests = self.make()
        child = self._series.child
        positions = max((len(accepted) for _, accepted in slices.values()), default=0)
        made_positions, made_dimensions = self._fixed
        seen = {dimension for dimension, _ in slices}
        if positions > made_positions or not seen <= made_dimensions:
            self._make_fixed(max(positions, made_positions), seen | made_dimensions)
        adds = []
        for (dimension, bucket), (steps, accepted) in slices.items():
            adds.append((child(drafts, dimension, bucket), steps))
            adds += [(child(per_pos, dimension, bucket, str(k)), n) for k, n in enumerate(accepted)]
        adds += [(child(requests, bucket), n) for bucket, n in request_lengths.items()]
        for metric, amount in adds:
            if amount:
                metric.inc(amount)

    def _make_fixed(self, positions: int, dimensions: set) -> None:
        """Every bucket of each fixed dimension this process counts (the schedulers': analysis.slices.DIMENSIONS;
        SGLang's HTTP server process: the entry point) at zero; a custom label's values are made as they come."""
        drafts, per_pos, requests = self.make()
        child = self._series.child
        for dimension in dimensions:
            for bucket in FIXED_DIMENSIONS.get(dimension, ()):
                child(drafts, dimension, bucket)
                for k in range(positions):
                    child(per_pos, dimension, bucket, str(k))
        if dimensions & DIMENSIONS.keys():  # the schedulers, which also count finished requests by accept length
            for bucket in REQUEST_LENGTH_BUCKETS:
                child(requests, bucket)
        self._fixed = (positions, frozenset(dimensions))
