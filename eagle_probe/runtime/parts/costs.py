"""The cost of speculation: the step timer (runtime/timing/) resolved on the flush thread, its phase seconds sent to
the series at a flush, and once per summary interval one eagle_probe.spec.costs event with everything counted since
the process started (so that a lost window loses nothing) and the estimate it gives (analysis.speculation_cost):
speed-up, break-even accept length and recommended depth per batch-size bucket, also set as gauges."""

from ...analysis import sampled_traffic, speculation_cost
from ...analysis.slices import SAMPLING
from ...events import SPEC_COSTS
from ..sinks.metrics import MetricsSink
from ..timing.clocks import choose_clock
from ..timing.steps import StepTimer
from .base import Part

PHASES = ("draft", "verify", "extend")


class Costs(Part):
    def __init__(self, recorder):
        super().__init__(recorder)
        self.enabled = self.config.phase_timing == "on"
        self.timer: StepTimer | None = None
        self.plain = False  # the timer times a server without speculation: its decode steps are plain steps
        self.topk = None
        self._sent: dict[tuple[str, str], float] = {}  # (bucket, phase) -> seconds already in the series
        self._sent_steps: dict[str, int] = {}
        self._speedups: dict[str, tuple[float, float | None]] = {}  # bucket -> (estimate, its upper bound)
        self._flushed_updates, self._speedups_new = -1, False

    def timer_for(self, worker) -> StepTimer | None:
        """The step timer, made on the EAGLE worker's first decode step (its device picks the clock)."""
        timer = self.timer
        if timer is None and self.enabled:
            timer = self.timer = StepTimer(_clock(worker, _forward_timer(worker)))
            topk = getattr(worker, "topk", None)
            self.topk = topk if isinstance(topk, int) else None
        return timer if not self.plain else None

    def plain_timer_for(self, worker) -> StepTimer | None:
        """The step timer of a server without speculation, made on the target worker's first plain decode step;
        None in a speculative server (its steps are the EAGLE worker's)."""
        timer = self.timer
        if timer is None and self.enabled:
            timer = self.timer = StepTimer(_clock(worker, getattr(getattr(worker, "model_runner", None),
                                                                  "device_timer", None)))
            self.plain = True
        return timer if self.plain else None

    @property
    def source(self) -> str | None:
        return self.timer.clock.source if self.timer is not None else None

    def drain(self):
        if self.timer is not None:
            self.timer.resolve()

    def flush(self, metrics):
        if self.timer is None or self.plain:
            return  # a plain server's steps are a reference for advise, not speculation's phases
        self.timer.resolve()
        if self.timer.counts.updates == self._flushed_updates and not self._speedups_new:
            return  # no step counted and no estimate made since the last flush: nothing to send
        counts = self.timer.snapshot()["steps"]
        seconds, steps = {}, {}
        for bucket, depths in counts.items():
            steps[bucket] = sum(int(row[0]) for row in depths.values()) - self._sent_steps.get(bucket, 0)
            for i, phase in enumerate(PHASES + ("step",)):
                total = sum(row[2 + i] for row in depths.values())
                seconds[(bucket, phase)] = total - self._sent.get((bucket, phase), 0.0)
        if not self.out.metric(MetricsSink.add_phase_seconds, seconds, steps, self._speedups):
            return  # refused: sent again at the next flush
        for key, value in seconds.items():
            self._sent[key] = self._sent.get(key, 0.0) + value
        for bucket, value in steps.items():
            self._sent_steps[bucket] = self._sent_steps.get(bucket, 0) + value
        self._flushed_updates, self._speedups_new = self.timer.counts.updates, False

    def tick(self, now: float, final: bool = False):
        if self.timer is None:
            return
        counts = self.timer.snapshot()
        if not counts["steps"]:
            return
        if self.plain:
            steps = counts.pop("steps")
            self.out.emit("info", SPEC_COSTS, role="target", source=self.source, server="plain", steps={},
                          plain_steps={bucket: depths.get("0") for bucket, depths in steps.items()}, **counts,
                          dropped=self.timer.dropped)
            return
        fields = {"source": self.source, "topk": self.topk, **counts, "acceptance": self._acceptance(),
                  "dropped": self.timer.dropped}
        report = speculation_cost.estimate(fields)
        self._speedups = {b["bucket"]: (b["estimated_speedup"], _upper(b)) for b in report["buckets"]
                          if b.get("estimated")}
        self._speedups_new = True
        fields["estimate"] = [_compact(b) for b in report["buckets"]]
        self.out.emit("info", SPEC_COSTS, role="target", **fields)

    def _acceptance(self) -> dict:
        """Accepted and drafted request-steps per draft position: all traffic, and greedy and sampled apart."""
        total = self.recorder.acceptance.total()
        out = {"all": {"accepted": total.per_position, "drafted": total.drafted_per_position()}}
        slices = getattr(self.recorder, "slices", None)
        if slices is not None:
            out.update(sampled_traffic.survival(slices.snapshot()["slices"].get(SAMPLING)))
        return out


def _clock(worker, forward_timer):
    device = str(getattr(worker, "device", "cpu"))
    return choose_clock(device.startswith("cuda"), forward_timer)


def _forward_timer(worker):
    """SGLang's forward DeviceTimer on the target's runner, where SGLang installed one (it puts the same one on the
    draft's runners), else None."""
    target = getattr(worker, "_target_worker", None) or getattr(worker, "target_worker", None)
    runner = getattr(target, "model_runner", None)
    return getattr(runner, "device_timer", None)


def _upper(bucket: dict) -> float | None:
    error = bucket.get("uncertainty")
    return None if error is None else round(bucket["estimated_speedup"] + 2 * error, 4)


def _compact(bucket: dict) -> dict:
    """What the log line says per bucket: the estimate, without the per-depth and per-class detail."""
    keys = ("bucket", "steps", "served_depth", "estimated", "why", "estimated_speedup", "uncertainty",
            "break_even_accept_length", "recommended_num_steps", "recommended_extrapolated", "plain_step_seconds",
            "plain_source", "phase_seconds")
    out = {k: bucket[k] for k in keys if k in bucket}
    classes = bucket.get("classes") or {}
    for name in ("greedy", "sampled"):
        if name in classes:
            out[f"{name}_speedup"] = classes[name]["estimated_speedup"]
    return out
