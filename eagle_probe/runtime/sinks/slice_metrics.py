"""Prometheus series of acceptance by slice (runtime/parts/slices.py), made on the first flush that has counts, on
the sink's registry and with its rank labels. Every label but a custom label's value takes values from a fixed set
(analysis.slices): the dimension, its buckets, the draft position (the server's speculative steps) and the
per-request length buckets. Every series of those sets that the process counts is made at once, at zero
(Prometheus' advice for label values known in advance): a rate over a slice that saw nothing yet reads 0, not "no
data", and the sink's series stop changing after the first flush."""

from ...analysis.slices import DIMENSIONS, REQUEST_DIMENSIONS, REQUEST_LENGTH_BUCKETS
from .metrics import RANK_LABELS

_SERIES = "_slice_series"
_MADE = "_slice_series_made"  # (draft positions, dimensions) the series at zero were made for
FIXED_DIMENSIONS = {**DIMENSIONS, **REQUEST_DIMENSIONS}


def _series(sink):
    series = getattr(sink, _SERIES, None)
    if series is None:
        import prometheus_client as prom

        def counter(name, doc, labels):
            metric = prom.Counter(name, doc, labels + RANK_LABELS, **sink.registry_kw)
            sink._label_names[id(metric)] = labels
            return metric

        series = (
            counter("eagle_probe_spec_slice_drafts_total", "Draft sequences verified (request-steps) in each slice "
                    f"of a dimension ({', '.join(DIMENSIONS)}).", ("dimension", "bucket")),
            counter("eagle_probe_spec_slice_accepted_tokens_per_pos_total", "Draft tokens accepted at each 0-based "
                    "draft position, in each slice of a dimension.", ("dimension", "bucket", "position")),
            counter("eagle_probe_spec_requests_by_accept_length_total", "Finished requests by their accept length "
                    "(1 + accepted drafts per verify step, bonus included), in fixed buckets.", ("bucket",)),
        )
        setattr(sink, _SERIES, series)
    return series


def add_slice_counts(sink, slices: dict, request_lengths: dict) -> None:
    """Counts added since the last flush: slices {(dimension, bucket): (request-steps, [accepted per position])},
    request_lengths {bucket: requests}. Every series is resolved before any is increased (as MetricsSink._add)."""
    drafts, per_pos, requests = _series(sink)
    positions = max((len(accepted) for _, accepted in slices.values()), default=0)
    made_positions, made_dimensions = getattr(sink, _MADE, (0, frozenset()))
    seen = {dimension for dimension, _ in slices}
    if positions > made_positions or not seen <= made_dimensions:
        _make_fixed(sink, max(positions, made_positions), seen | made_dimensions)
    adds = []
    for (dimension, bucket), (steps, accepted) in slices.items():
        adds.append((sink._child(drafts, dimension, bucket), steps))
        adds += [(sink._child(per_pos, dimension, bucket, str(k)), n) for k, n in enumerate(accepted)]
    adds += [(sink._child(requests, bucket), n) for bucket, n in request_lengths.items()]
    for child, amount in adds:
        if amount:
            child.inc(amount)


def _make_fixed(sink, positions: int, dimensions: set) -> None:
    """Every bucket of each fixed dimension this process counts (the schedulers': analysis.slices.DIMENSIONS; SGLang's
    HTTP server process: the entry point) at zero; a custom label's values are made as they come."""
    drafts, per_pos, requests = _series(sink)
    for dimension in dimensions:
        for bucket in FIXED_DIMENSIONS.get(dimension, ()):
            sink._child(drafts, dimension, bucket)
            for k in range(positions):
                sink._child(per_pos, dimension, bucket, str(k))
    if dimensions & DIMENSIONS.keys():  # the schedulers, which also count finished requests by accept length
        for bucket in REQUEST_LENGTH_BUCKETS:
            sink._child(requests, bucket)
    setattr(sink, _MADE, (positions, frozenset(dimensions)))
