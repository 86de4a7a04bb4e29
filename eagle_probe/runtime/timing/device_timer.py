"""SGLang's own sync-free forward timer, read instead of adding events.

With SGLANG_ENABLE_METRICS_DEVICE_TIMER=1 SGLang times every forward of the target and the draft runners (one
`DeviceTimer`, categories decode, extend, target_verify, eagle_draft, eagle_draft_extend, idle): two device events
per forward, read once the end event's query() is true, each interval handed to its reporters in the order the
intervals started. The probe adds one reporter (releases with `add_reporter`, 0.5.12 on) and numbers the intervals
as they start (the wrapper of `DeviceTimer.wrap`, integrations/phase_timing.py). A mark is then the number of
intervals started so far, and the seconds between two marks are the device time of the intervals started between
them: the forwards of that phase. The host work between forwards is not in it (it is device time), and nothing is
recorded that SGLang does not record already.
"""

import threading
import weakref

from .clocks import SGLANG_DEVICE_TIMER

KEEP_INTERVALS = 4096  # durations kept for marks not read yet: a pending step spans a few forwards (steps.MAX_PENDING)


class IntervalLog:
    """The intervals of one DeviceTimer: numbered as they start, their seconds kept as they are reported."""

    def __init__(self):
        self.started = 0
        self.reported = 0
        self._seconds: dict[int, float] = {}
        self._oldest = 0

    def start(self) -> None:
        self.started += 1

    def report(self, t: float = 0.0, **_metadata) -> None:
        """SGLang's reporter call (t in seconds); in the order the intervals started."""
        self._seconds[self.reported] = float(t)
        self.reported += 1
        while len(self._seconds) > KEEP_INTERVALS:
            self._seconds.pop(self._oldest, None)
            self._oldest += 1

    def seconds(self, first: int, last: int) -> float | None:
        """The device seconds of intervals first..last-1; None where some were already let go."""
        if first < self._oldest:
            return None
        return sum(self._seconds.get(i, 0.0) for i in range(first, last))


_LOGS: "weakref.WeakKeyDictionary[object, IntervalLog | None]" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def takes_reporter(timer) -> bool:
    """Whether a DeviceTimer takes another reporter (add_reporter, 0.5.12 on); before, its one reporter is SGLang's."""
    return callable(getattr(timer, "add_reporter", None))


def log_for(timer) -> IntervalLog | None:
    """The log of a DeviceTimer, its reporter added on the first call (None where the release has no add_reporter:
    its one reporter is SGLang's). The probe wraps DeviceTimer.wrap from the process start, so the first call is the
    timer's first interval and every interval is numbered."""
    try:
        return _LOGS[timer]
    except KeyError:
        pass
    with _LOCK:
        if timer in _LOGS:
            return _LOGS[timer]
        log = IntervalLog() if takes_reporter(timer) else None
        if log is not None:
            timer.add_reporter(log.report)
        _LOGS[timer] = log
        return log


def existing_log(timer) -> IntervalLog | None:
    """The log of a timer whose intervals the probe has numbered from its first, else None (never adds one)."""
    if timer is None:
        return None
    try:
        return _LOGS.get(timer)
    except TypeError:  # not weak-referenceable: not a DeviceTimer
        return None


class DeviceTimerClock:
    """Marks are interval numbers of SGLang's forward timer; a mark is ready once every interval before it was
    reported (SGLang reads its events only after query() is true)."""

    source = SGLANG_DEVICE_TIMER
    pooled = False

    def __init__(self, log: IntervalLog):
        self.log = log

    def mark(self) -> int:
        return self.log.started

    def ready(self, mark) -> bool:
        return self.log.reported >= mark

    def seconds(self, start, end) -> float | None:
        return self.log.seconds(start, end)

    @staticmethod
    def release(mark) -> None:
        pass
