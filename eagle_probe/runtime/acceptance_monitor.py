"""Acceptance as the running probe keeps it: each verify step's per-request list is queued as it is (the hot path:
one append, whatever the batch), counted into cumulative plain counts when they are read (a flush, an event);
windows cut between acceptance events, and the collapse judgement on a window."""

from collections import deque
from threading import Lock
from typing import Optional, Sequence, Tuple

from ..analysis import findings as rules
from ..analysis.acceptance import AcceptanceWindow, clamped_counts, expected_mean_length, subtract_counts
from ..analysis.findings import Finding
from ..config import ProbeConfig

MAX_QUEUED = 4096  # verify steps held uncounted at most (a flush or an event normally counts them every second)


class AcceptanceMonitor:
    def __init__(self, config: ProbeConfig):
        self.config = config
        self.steps = 0
        self.lengths = [0]  # [k] = request-steps that accepted k drafts (k clamped to [0, positions]), cumulative
        self.positions = 0
        self.source = ""  # the SGLang function acceptance is read from
        self._window_start: Tuple[int, dict] = (0, {})  # (steps, lengths) at the last event
        self._judged_start: Tuple[int, dict] = (0, {})  # (steps, lengths) at the last collapse judgement
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
                step = queued.popleft()
                self._count(step.accepted, step.positions)
                self._counted += 1

    def _count(self, accepted: Sequence[int], positions: int) -> None:
        """One step's counts: one count() in C per possible length (a handful)."""
        lengths = self.lengths
        if positions > self.positions:
            self.positions = positions
            lengths.extend([0] * (positions + 1 - len(lengths)))
        counted = 0
        for k in range(len(lengths)):
            found = accepted.count(k)
            lengths[k] += found
            counted += found
        if counted != len(accepted):  # out-of-range values (never seen from SGLang): clamp them one by one
            last = len(lengths) - 1
            for value in accepted:
                if not 0 <= value <= last:
                    lengths[0 if value < 0 else last] += 1

    def snapshot(self) -> Tuple[int, dict]:
        """(steps, {accepted length: request-steps}) so far; the flush of metrics diffs two of these."""
        steps = self.steps
        self._count_queued(steps)
        return steps, {k: count for k, count in enumerate(self.lengths) if count}

    def total(self) -> AcceptanceWindow:
        steps, lengths = self.snapshot()
        return AcceptanceWindow.from_counts(steps, lengths, self.positions)

    def take_window(self) -> Optional[AcceptanceWindow]:
        """The steps since the last window (None when no draft was verified since)."""
        steps, lengths = self.snapshot()
        start_steps, start_lengths = self._window_start
        self._window_start = (steps, lengths)
        window = AcceptanceWindow.from_counts(steps - start_steps, subtract_counts(lengths, start_lengths),
                                              self.positions)
        return window if window.drafts else None

    def take_judged_window(self) -> Optional[AcceptanceWindow]:
        """The steps since the last collapse judgement, once they hold collapse_min_drafts request-steps, else None.
        On a quiet server one summary interval may hold fewer: they are carried into the next, never dropped, so
        that low traffic is judged too (later, over a longer window)."""
        steps, lengths = self.snapshot()
        start_steps, start_lengths = self._judged_start
        window = AcceptanceWindow.from_counts(steps - start_steps, subtract_counts(lengths, start_lengths),
                                              self.positions)
        if window.drafts < self.config.collapse_min_drafts:
            return None
        self._judged_start = (steps, lengths)
        return window

    def expected_length(self, window: AcceptanceWindow) -> Optional[float]:
        if self.config.draft_accuracy is None:
            return None
        return expected_mean_length(self.config.draft_accuracy, window.positions)

    def collapse(self, window: AcceptanceWindow, seen_codes: Sequence[str]) -> Optional[Finding]:
        """acceptance_collapse when a large enough window stays far under the length the claimed accuracy implies."""
        expected = self.expected_length(window)
        if expected is None or window.drafts < self.config.collapse_min_drafts:
            return None
        if window.mean_length() / expected >= self.config.collapse_ratio:
            return None
        return rules.acceptance_collapse_finding(
            window.mean_length(), expected, self.config.draft_accuracy, window.positions, window.per_position_rate(),
            window.drafts, self.config.collapse_ratio, [c for c in seen_codes if c != rules.ACCEPTANCE_COLLAPSE])


def counts_since(now: Tuple[int, dict], before: Tuple[int, dict], positions: int):
    """(steps, requests per clamped length, accepted per position) added between two snapshots."""
    lengths, per_position = clamped_counts(subtract_counts(now[1], before[1]), positions)
    return now[0] - before[0], lengths, per_position
