"""How the probe makes a Prometheus series: from its Spec (sinks/catalogue.py), on the sink's registry, with the rank
labels added; and the labelled child of a series, kept once made (a flush resolves the same children every second).

prometheus_client is handed in by the sink, which imports it late (sinks/metrics.py says why)."""

from dataclasses import dataclass

from ...observations import RANK_LABELS, Ranks
from .multiprocess import GAUGE_MULTIPROCESS_MODE

COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"


@dataclass(frozen=True)
class Spec:
    """One series: its kind, name, help text and own labels (the rank labels are added to every one)."""

    kind: str
    name: str
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()  # a histogram's
    multiprocess_mode: str = GAUGE_MULTIPROCESS_MODE  # a gauge's (sinks/multiprocess.py)


class _Refused:
    """The child past a series' bound (sinks/cardinality.py): counts nothing."""

    def inc(self, *args, **kwargs):
        pass

    dec = set = observe = inc


REFUSED = _Refused()


class Series:
    def __init__(self, prom, ranks: Ranks, registry=None):
        self._prom = prom
        self._kw = {} if registry is None else {"registry": registry}
        self._rank = ranks.labels()
        self._label_names = {}  # id(metric) -> its own labels, in the order child() takes their values
        self._bounds = {}  # id(metric) -> (its name, the most children it may have)
        self._made = {}  # id(metric) -> children made
        self._children = {}
        self.refused = {}  # series name -> label sets refused past its bound

    def make(self, spec: Spec, extra_labels: tuple[str, ...] = ()):
        """The series of `spec`; extra_labels follow its own (the info series' group widths)."""
        prom, labels = self._prom, spec.labels + extra_labels
        if spec.kind == COUNTER:
            metric = prom.Counter(spec.name, spec.help, labels + RANK_LABELS, **self._kw)
        elif spec.kind == GAUGE:
            metric = prom.Gauge(spec.name, spec.help, labels + RANK_LABELS, multiprocess_mode=spec.multiprocess_mode,
                                **self._kw)
        else:
            metric = prom.Histogram(spec.name, spec.help, labels + RANK_LABELS, buckets=spec.buckets, **self._kw)
        from .cardinality import series_bound  # (it reads the catalogue, which imports this module)

        self._label_names[id(metric)] = labels
        self._bounds[id(metric)] = (spec.name, series_bound(spec))
        return metric

    def child(self, metric, *values):
        """The child of `metric` for these values of its own labels, this process's rank labels added."""
        key = (id(metric),) + values
        child = self._children.get(key)
        if child is None:
            name, bound = self._bounds[id(metric)]
            made = self._made.get(id(metric), 0)
            if made >= bound:
                self.refused[name] = self.refused.get(name, 0) + 1
                return REFUSED
            self._made[id(metric)] = made + 1
            labels = dict(zip(self._label_names[id(metric)], values))
            labels.update(self._rank)
            child = self._children[key] = metric.labels(**labels)
        return child
