"""A daemon thread that wakes every flush interval: it moves the recorder's plain counts into the Prometheus series
and writes the periodic events that are due, so a scrape lags the hot path by at most that interval and the last
acceptance window is written also when the server goes idle."""

import threading
import weakref


class PeriodicFlusher:
    def __init__(self, owner, interval_s: float):
        self._owner = weakref.ref(owner)  # the thread never keeps a dropped recorder alive
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="eagle-probe-flush", daemon=True)

    def start(self) -> "PeriodicFlusher":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self):
        while not self._stop.wait(self._interval):
            owner = self._owner()
            if owner is None:
                return
            try:
                owner.on_timer()
            except Exception as exc:  # counted; the thread goes on, so later counts still reach the series
                owner.internal_error("flush", exc)
            del owner
