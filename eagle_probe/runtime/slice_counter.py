"""Acceptance by slice as the running probe keeps it (analysis.slices names the dimensions and buckets).

The hot path only queues the verify step as it was observed (one append): its accepted counts, its own list of the
requests, the batch size and the path. Everything per request happens when the queue is counted (the flush thread,
an event tick), in step order, from a table of the requests still running. The table is what keeps what is read
later valid: a request's sequence position is its prompt length + 1 (the token its prefill produced) plus, per
counted step, its accepted drafts + the bonus token; its first counted step is its first verify step after
prefill; its cached prefix is read once, at first sight (SGLang sets Req.cached_tokens in prefill and never after).
Only immutable facts are read from the request objects: the prompt's length, cached_tokens, whether it finished.
"""

from collections import Counter, deque
from threading import Event, Lock, Thread

from ..analysis import slices as S

MAX_QUEUED = 4096  # verify steps held uncounted at most (the counting thread normally counts them every second)
BEHIND = 64  # verify steps queued before the hot path looks at the backlog (starts the counting thread once)
MAX_REQUESTS = 1 << 16  # running requests tracked at most; the oldest is retired past this


def _prompt_length(req):
    ids = getattr(req, "origin_input_ids", None)
    return None if ids is None else len(ids)


def _cached(req) -> str:
    cached = getattr(req, "cached_tokens", None)
    return S.UNKNOWN if not isinstance(cached, int) else ("yes" if cached > 0 else "no")


def _finished(req) -> bool:
    return getattr(req, "finished_reason", None) is not None


class SliceCounter:
    """background_s: count on a daemon thread of its own this often (the runtime: so the per-request work never
    waits for a summary tick on the hot path when no metrics flush thread runs); None: only when read (tests)."""

    def __init__(self, background_s=None, on_error=None):
        self.steps = 0
        self.positions = 0
        self.counts = {}  # (dimension, bucket) -> Counter {accepted drafts clamped to [0, positions]: request-steps}
        self.request_lengths = Counter()  # accept-length bucket -> finished requests
        self.retired = 0  # requests counted into request_lengths
        self._requests = {}  # id(req) -> [req, next position, verify steps, accepted drafts, cached bucket]
        self._finishing = []  # ids seen finished at the end of the last count
        self._queued = deque()
        self._counted = 0
        self._counting = Lock()
        self._background_s, self._on_error = background_s, on_error
        self._stop = None  # the counting thread's stop event, once started

    def add(self, step) -> None:
        self._queued.append(step)
        self.steps += 1  # after the append: a step in `steps` is on the queue or counted
        if self.steps - self._counted > BEHIND:
            self._behind()

    def _behind(self) -> None:
        if self._stop is None and self._background_s:
            self._stop = Event()
            Thread(target=self._count_every, args=(self._stop,), name="eagle-probe-slices", daemon=True).start()
        elif self.steps - self._counted > MAX_QUEUED:  # nothing has counted for long: count here
            self.count_queued()

    def _count_every(self, stop) -> None:
        while not stop.wait(self._background_s):
            try:
                self.count_queued()
            except Exception as exc:  # never into SGLang; counted as the probe's own error, and the thread ends
                if self._on_error is not None:
                    self._on_error(exc)
                return

    def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()

    def count_queued(self, final: bool = False) -> None:
        with self._counting:
            self._count_queued(final)

    def _count_queued(self, final: bool) -> None:
        # Requests seen finished before `steps` is read (now, or at the end of the last count): SGLang queued their
        # last step before it marked them finished, so that step is among those counted here; retired after.
        finished = self._finishing + [key for key, entry in self._requests.items() if _finished(entry[0])]
        steps, queued = self.steps, self._queued
        while self._counted < steps:
            self._count(queued.popleft())
            self._counted += 1
        self._retire(finished, final)

    def retiring(self) -> bool:
        """Whether requests seen finished at the last count wait to be retired at the next."""
        return bool(self._finishing)

    def _bucket(self, dimension, bucket) -> Counter:
        key = (dimension, bucket)
        found = self.counts.get(key)
        if found is None:
            found = self.counts[key] = Counter()
        return found

    def _count(self, step) -> None:
        accepted, positions = step.accepted, step.positions
        if not accepted:
            return
        self.positions = max(self.positions, positions)
        clamped = Counter(min(max(a, 0), positions) for a in accepted)
        self._bucket("batch", S.batch_bucket(step.batch_size or len(accepted))).update(clamped)
        self._bucket("path", S.path_bucket(step.graph)).update(clamped)
        reqs = step.reqs
        if len(reqs) != len(accepted):  # a step observed without its requests
            for dimension in ("position", "cached_prefix", "step"):
                self._bucket(dimension, S.UNKNOWN).update(clamped)
            return
        table, bucket = self._requests, self._bucket
        for value, req in zip(accepted, reqs):
            entry = table.get(id(req))
            first = entry is None or entry[0] is not req
            if first:
                prompt = _prompt_length(req)
                entry = table[id(req)] = [req, None if prompt is None else prompt + 1, 0, 0, _cached(req)]
            length = min(max(value, 0), positions)
            position = entry[1]
            bucket("position", S.UNKNOWN if position is None else S.position_bucket(position))[length] += 1
            bucket("cached_prefix", entry[4])[length] += 1
            bucket("step", "first" if first else "later")[length] += 1
            if position is not None:
                entry[1] = position + value + 1
            entry[2] += 1
            entry[3] += length

    def _retire(self, finished, final: bool) -> None:
        table = self._requests
        for key in finished:
            self._close(table.pop(key, None))
        if final:
            for entry in table.values():
                self._close(entry)
            table.clear()
        while len(table) > MAX_REQUESTS:
            self._close(table.pop(next(iter(table))))
        self._finishing = [key for key, entry in table.items() if _finished(entry[0])]  # first seen in this count

    def _close(self, entry) -> None:
        if entry is not None and entry[2]:
            self.retired += 1
            self.request_lengths[S.request_length_bucket(1 + entry[3] / entry[2])] += 1

    def snapshot(self, final: bool = False) -> dict:
        """Cumulative counts, as the event and summarize carry them."""
        with self._counting:
            self._count_queued(final)
            positions, slices = self.positions, {}
            for (dimension, bucket), lengths in self.counts.items():
                slices.setdefault(dimension, {})[bucket] = {"request_steps": sum(lengths.values()),
                                                            "accepted": S.per_position(lengths, positions)}
            lengths = dict(self.request_lengths)
        return {"positions": positions, "slices": {d: {b: slices[d][b] for b in S.DIMENSIONS[d] if b in slices[d]}
                                                       for d in S.DIMENSIONS if d in slices},
                "request_accept_length": {b: lengths[b] for b in S.REQUEST_LENGTH_BUCKETS if b in lengths},
                "requests": sum(lengths.values())}
