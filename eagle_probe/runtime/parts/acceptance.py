"""Per-step acceptance: counted per verify step (the hot path), sent to the series at a flush, written as one
eagle_probe.acceptance event per summary interval, and the collapse judgement on the steps since the last judgement once
they hold enough request-steps (a quiet interval is carried into the next)."""

from ...analysis import sampled_traffic
from ...analysis.acceptance import AcceptanceWindow, expected_per_position_rate
from ...analysis.slices import SAMPLING
from ...events import ACCEPTANCE
from ..acceptance_monitor import AcceptanceMonitor
from ..sinks.metrics import MetricsSink
from .base import Part

# The running counts each event carries as "total", named as in the window: a reader whose earliest windows were
# rotated away reads the whole run's totals from the last event it has.
RUNNING_TOTAL = ("steps", "drafts", "draft_tokens", "accepted_tokens", "mean_accept_length", "per_position_rate",
                 "per_position_accepted", "per_position_drafted", "per_depth", "accept_length_histogram")


class Acceptance(Part):
    kinds = ("verify_step",)

    def __init__(self, recorder):
        super().__init__(recorder)
        self.monitor = AcceptanceMonitor(self.config)
        self._flushed = self.monitor.snapshot()
        self.verify_step = self.monitor.add  # the router's handler for verify steps: one call per step

    def flush(self, metrics):
        monitor = self.monitor
        now = monitor.snapshot()
        added = AcceptanceWindow.from_tally(now.minus(self._flushed))
        if added.steps and not self.out.metric(MetricsSink.add_verify_counts, added, monitor.depth):
            return  # refused: sent again at the next flush
        self._flushed = now

    def tick(self, now: float, final: bool = False):
        monitor = self.monitor
        window = monitor.take_window()
        if window is None:
            return
        fields = window.as_fields()
        fields["read_at"] = monitor.source
        expected = monitor.expected_length(window)
        if expected is not None:
            accuracy = self.config.draft_accuracy
            fields.update(expected_mean_accept_length=expected, observed_over_expected=window.mean_length() / expected,
                          draft_accuracy=list(accuracy),
                          expected_per_position_rate=expected_per_position_rate(accuracy, window.positions))
        total = monitor.total().as_fields()
        fields["total"] = {k: total[k] for k in RUNNING_TOTAL if k in total}
        self.out.emit("info", ACCEPTANCE, role="target", **fields)
        judged = monitor.take_judged_window()
        if judged is None:
            return
        traffic = self._traffic()
        collapse = monitor.collapse(judged, self.out.seen_codes(), sampled_traffic.judged(traffic))
        if collapse is not None:
            self.out.finding(monitor.sampled_instead(collapse, traffic) or collapse, "target")

    def _traffic(self) -> dict:
        """Greedy and sampled traffic apart, from the slices' sampling dimension (counted so far)."""
        slices = getattr(self.recorder, "slices", None)
        if slices is None:
            return {}
        return sampled_traffic.split(slices.snapshot()["slices"].get(SAMPLING))
