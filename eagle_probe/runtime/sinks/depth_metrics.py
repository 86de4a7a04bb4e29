"""Prometheus series of the draft depth each verify step ran at (adaptive depth changes it from step to step; a
tree's depth is its draft steps), made on the first flush that counts a step, on the sink's registry with its rank
labels. The depth label takes the few values the server's candidate steps allow."""

from ...observations import RANK_LABELS

_SERIES = "_depth_series"


def _series(sink):
    series = getattr(sink, _SERIES, None)
    if series is None:
        import prometheus_client as prom

        def metric(kind, name, doc, labels):
            made = kind(name, doc, labels + RANK_LABELS, **sink.registry_kw)
            sink._label_names[id(made)] = labels
            return made

        series = (
            metric(prom.Counter, "eagle_probe_spec_depth_verify_steps_total",
                   "Verify steps (batches) at each draft depth.", ("depth",)),
            metric(prom.Counter, "eagle_probe_spec_depth_drafts_total",
                   "Request-steps verified at each draft depth.", ("depth",)),
            metric(prom.Counter, "eagle_probe_spec_depth_accepted_tokens_total",
                   "Draft tokens accepted at each draft depth (bonus token excluded).", ("depth",)),
            metric(prom.Gauge, "eagle_probe_spec_draft_depth", "Draft depth of the last verify step counted.", ()),
        )
        setattr(sink, _SERIES, series)
    return series


def add_depth_counts(sink, per_depth: dict, last_depth) -> None:
    """per_depth: {depth: [verify steps, request-steps, accepted drafts]} added since the last flush
    (WindowSums.per_depth). Every series is resolved before any is increased (as MetricsSink._add)."""
    steps, drafts, accepted, gauge = _series(sink)
    adds = []
    for depth, counts in per_depth.items():
        label = str(depth)
        adds += zip((sink._child(steps, label), sink._child(drafts, label), sink._child(accepted, label)), counts)
    depth_gauge = sink._child(gauge) if last_depth is not None else None
    for child, amount in adds:
        if amount:
            child.inc(amount)
    if depth_gauge is not None:
        depth_gauge.set(last_depth)
