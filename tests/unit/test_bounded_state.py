"""What the probe keeps over a long run stays bounded: distinct findings remembered for their once-only rule."""

from eagle_probe.analysis.findings import Finding
from eagle_probe.runtime.outputs import SEEN_FINDINGS_MAX


def test_findings_with_new_numbers_each_time_are_remembered_up_to_the_bound(make_recorder):
    recorder, stream, _, _ = make_recorder()
    out = recorder.out
    for i in range(SEEN_FINDINGS_MAX + 500):  # a collapse judged every interval: new rates each time
        out.finding(Finding("acceptance_collapse", "warning", f"window {i}", {"rate": i / 10_000}), "target")
    assert len(out._seen_findings) == SEEN_FINDINGS_MAX
    assert out.findings_total == {"acceptance_collapse": SEEN_FINDINGS_MAX + 500}
    assert out.seen_codes() == ["acceptance_collapse"]
    # the very same finding again is still written once while it is remembered
    out.finding(Finding("acceptance_collapse", "warning", "again", {"rate": (SEEN_FINDINGS_MAX + 499) / 10_000}),
                "target")
    assert out.findings_total["acceptance_collapse"] == SEEN_FINDINGS_MAX + 500
    assert stream.getvalue().count('"code": "acceptance_collapse"') == SEEN_FINDINGS_MAX + 500


def test_every_label_of_every_series_has_a_bound():
    from eagle_probe.runtime.sinks import cardinality

    specs = cardinality.all_specs()
    assert len(specs) > 30
    for spec in specs:
        assert cardinality.series_bound(spec) >= 1, spec.name  # a label without a bound raises KeyError here
    assert cardinality.process_bound() == sum(cardinality.series_bound(s) for s in specs)


def test_a_series_makes_no_child_past_its_bound():
    import prometheus_client as prom

    from eagle_probe.observations import Ranks
    from eagle_probe.runtime.sinks import cardinality, catalogue
    from eagle_probe.runtime.sinks.metrics import MetricsSink

    registry = prom.CollectorRegistry()
    sink = MetricsSink(Ranks(tp_rank=0, pp_rank=0, dp_rank=0), registry=registry)
    bound = cardinality.series_bound(catalogue.INTERNAL_ERRORS)
    for i in range(bound + 10):  # error sites the bound does not foresee
        sink.internal_error(f"site.{i}")
    samples = [s for metric in registry.collect() if metric.name == "eagle_probe_internal_errors"
               for s in metric.samples if s.name.endswith("_total")]
    assert len(samples) == bound
    assert sink.series.refused == {catalogue.INTERNAL_ERRORS.name: 10}
    sink.internal_error("site.0")  # an existing series still counts
    value = registry.get_sample_value("eagle_probe_internal_errors_total",
                                      {"where": "site.0", **Ranks(tp_rank=0, pp_rank=0, dp_rank=0).labels()})
    assert value == 2
