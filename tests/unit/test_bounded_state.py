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
