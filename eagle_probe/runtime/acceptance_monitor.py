"""Acceptance as the running probe keeps it: each verify step's per-request list is queued as it is (the hot path:
one append, whatever the batch), counted into cumulative plain counts keyed by the step's own draft depth when they
are read (a flush, an event); windows cut between acceptance events, and the collapse judgement on a window."""

from collections import deque
from collections.abc import Sequence
from threading import Lock

from ..analysis import findings as rules
from ..analysis.acceptance import AcceptanceWindow, Tally, expected_mean_length_mixed
from ..analysis.findings import Finding
from ..config import ProbeConfig

MAX_QUEUED = 4096  # verify steps held uncounted at most (a flush or an event normally counts them every second)


class AcceptanceMonitor:
    def __init__(self, config: ProbeConfig):
        self.config = config
        self.steps = 0
        self.counts = {}  # (depth, accepted drafts clamped to [0, depth]) -> request-steps, cumulative
        self.depth_steps = {}  # depth -> verify steps, cumulative
        self.proposed = 0  # draft tokens proposed, cumulative
        self.positions = 0  # the deepest draft seen
        self.depth = None  # the depth of the last step counted
        self.source = ""  # the SGLang function acceptance is read from
        self._window_start = Tally()  # at the last event
        self._judged_start = Tally()  # at the last collapse judgement
        self._queued = deque()  # [VerifyStep] not counted yet; deque: append/popleft atomic
        self._counted = 0  # steps taken off the queue
        self._counting = Lock()  # the flush thread and an exit flush may count at once

    def add(self, step) -> None:
        """One verify step (a VerifyStep): kept as it is, with the list SGLang made for it, counted later off the hot
        path. The recorder calls this directly for every verify step (parts/acceptance.py)."""
        self._queued.append(step)
        self.steps += 1  # after the append: a step in `steps` is always on the queue or counted
        self.source = step.source
        if self.steps - self._counted > MAX_QUEUED:  # nothing has read the counts for long: count here
            self._count_queued(self.steps)

    def _count_queued(self, steps: int) -> None:
        """Count the queued steps up to `steps` (read before), so that counts and `steps` always agree."""
        with self._counting:
            queued = self._queued
            while self._counted < steps:
                self._count(queued.popleft())
                self._counted += 1

    def _count(self, step) -> None:
        """One step's counts at its own depth: one count() in C per possible length (a handful)."""
        accepted, depth = step.accepted, step.positions
        counts = self.counts
        self.depth_steps[depth] = self.depth_steps.get(depth, 0) + 1
        self.depth = depth
        if depth > self.positions:
            self.positions = depth
        self.proposed += len(accepted) * (step.proposed or depth)
        counted = 0
        for k in range(depth + 1):
            found = accepted.count(k)
            if found:
                counts[(depth, k)] = counts.get((depth, k), 0) + found
                counted += found
        if counted != len(accepted):  # out-of-range values (never seen from SGLang): clamp them one by one
            for value in accepted:
                if not 0 <= value <= depth:
                    key = (depth, 0 if value < 0 else depth)
                    counts[key] = counts.get(key, 0) + 1

    def snapshot(self) -> Tally:
        """The cumulative counts so far; the flush of metrics diffs two of these."""
        steps = self.steps
        self._count_queued(steps)
        return Tally(steps, dict(self.counts), dict(self.depth_steps), self.proposed)

    def total(self) -> AcceptanceWindow:
        return AcceptanceWindow.from_tally(self.snapshot())

    def take_window(self) -> AcceptanceWindow | None:
        """The steps since the last window (None when no draft was verified since)."""
        now = self.snapshot()
        window = AcceptanceWindow.from_tally(now.minus(self._window_start))
        self._window_start = now
        return window if window.drafts else None

    def take_judged_window(self) -> AcceptanceWindow | None:
        """The steps since the last collapse judgement, once they hold collapse_min_drafts request-steps, else None.
        On a quiet server one summary interval may hold fewer: they are carried into the next, never dropped, so
        that low traffic is judged too (later, over a longer window)."""
        now = self.snapshot()
        window = AcceptanceWindow.from_tally(now.minus(self._judged_start))
        if window.drafts < self.config.collapse_min_drafts:
            return None
        self._judged_start = now
        return window

    def expected_length(self, window: AcceptanceWindow) -> float | None:
        if self.config.draft_accuracy is None:
            return None
        return expected_mean_length_mixed(self.config.draft_accuracy, window.depth_mix())

    def collapse(self, window: AcceptanceWindow, seen_codes: Sequence[str],
                 traffic: str = "unknown traffic") -> Finding | None:
        """acceptance_collapse when a large enough window stays far under the length the claimed accuracy implies."""
        expected = self.expected_length(window)
        if expected is None or window.drafts < self.config.collapse_min_drafts:
            return None
        if window.mean_length() / expected >= self.config.collapse_ratio:
            return None
        return rules.acceptance_collapse_finding(rules.CollapseEvidence(
            window.mean_length(), expected, self.config.draft_accuracy, window.positions, window.per_position_rate(),
            window.drafts, self.config.collapse_ratio, [c for c in seen_codes if c != rules.ACCEPTANCE_COLLAPSE],
            traffic))

    def sampled_instead(self, collapse: Finding, traffic: dict) -> Finding | None:
        """acceptance_sampled_traffic in place of a collapse when greedy traffic (enough of it) is served as expected
        and sampled traffic is below it; None when greedy traffic collapsed too (or too little of it was seen)."""
        greedy, sampled = traffic.get("greedy"), traffic.get("sampled")
        accuracy = self.config.draft_accuracy
        if not greedy or not sampled or accuracy is None or greedy["request_steps"] < self.config.collapse_min_drafts:
            return None
        evidence = collapse.evidence_dict()
        expected = evidence["expected"]  # at the window's depth mix
        if greedy["mean_accept_length"] / expected < self.config.collapse_ratio:
            return None
        if sampled["mean_accept_length"] >= greedy["mean_accept_length"]:
            return None
        return rules.sampled_traffic_finding(
            f"mean accept length {evidence['observed']:.2f} under the collapse threshold", greedy,
            sampled, f"{expected:.2f} expected from the training accuracy")
