"""Histogram updates prometheus_client has no call for."""


def observe_many(histogram, value, count):
    """count observations of one value. prometheus_client has no such call; its histogram child keeps a sum
    and non-cumulative bucket values, so add to those directly, and fall back to observe() if that changes."""
    try:
        bounds, buckets, total = histogram._upper_bounds, histogram._buckets, histogram._sum
    except AttributeError:
        for _ in range(count):
            histogram.observe(value)
        return
    total.inc(value * count)
    for bound, bucket in zip(bounds, buckets):
        if value <= bound:
            bucket.inc(count)
            break
