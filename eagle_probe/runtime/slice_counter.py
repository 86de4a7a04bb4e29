"""Acceptance by slice as the running probe keeps it (analysis.slices names the dimensions and buckets).

The hot path only queues the verify step as it was observed (one append): its accepted counts, its own list of the
requests, the batch size and the path. Everything per request happens when the queue is counted (its own counting
thread, a flush, an event tick), in step order, from a table of the running requests. The table is what keeps what
is read later valid: a request's sequence position is its prompt length + 1 (the token its prefill produced) plus,
per counted step, its accepted drafts + the bonus token; its first counted step is its first verify step after
prefill; its cached prefix is read once, at first sight (SGLang sets Req.cached_tokens in prefill and never after).
Only immutable facts are read from the request objects: the prompt's length, cached_tokens, its sampling
parameters and require_reasoning (at first sight), whether it finished.
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


def _position_label(position: int):
    """(bucket, the first position of the next bucket)."""
    label = S.position_bucket(position)
    if position < S.POSITION_FIRST:
        return label, S.POSITION_FIRST
    return label, (float("inf") if position >= S.POSITION_TOP else 1 << position.bit_length())


def _traffic(req) -> tuple:
    """(sampling bucket, thinking bucket): fixed for the request's life (SGLang normalised its sampling at arrival)."""
    params = getattr(req, "sampling_params", None)
    return (S.sampling_bucket(getattr(params, "top_k", None), getattr(params, "temperature", None)),
            S.thinking_bucket(getattr(req, "require_reasoning", None)))


def _track(req) -> list:
    """A request's row: [req, next position, verify steps, accepted drafts, cached bucket, position bucket, next
    bucket's first position, (sampling, thinking) buckets]; its position starts at its prompt + the token its prefill
    produced."""
    prompt = _prompt_length(req)
    if prompt is None:
        return [req, None, 0, 0, _cached(req), S.UNKNOWN, float("inf"), _traffic(req)]
    return [req, prompt + 1, 0, 0, _cached(req), *_position_label(prompt + 1), _traffic(req)]


class SliceCounter:
    """background_s: count on a daemon thread of its own this often (the runtime: so the per-request work never
    waits for a summary tick on the hot path when no metrics flush thread runs); None: only when read (tests)."""

    def __init__(self, background_s=None, on_error=None):
        self.steps = 0
        self.positions = 0
        self.counts = {}  # (dimension, bucket) -> Counter {(depth, accepted clamped to [0, depth]): request-steps}
        self.request_lengths = Counter()  # accept-length bucket -> finished requests
        self.retired = 0  # requests counted into request_lengths
        self.requests_classified = 0  # finished requests counted by their traffic classes (add_request)
        self._requests = {}  # id(req) -> its row (_track)
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

    def add_request(self, finished) -> None:
        """A finished request's verify steps into the slices of its traffic classes (SGLang's HTTP server process:
        once per request, never per step)."""
        with self._counting:
            if finished.positions > self.positions:
                self.positions = finished.positions
            counts = self.counts
            lengths = {(finished.positions, length): n for length, n in finished.lengths.items()}
            for key in finished.classes:
                found = counts.get(key)
                if found is None:
                    found = counts[key] = Counter()
                found.update(lengths)
            self.requests_classified += 1

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
        step_tally, request_tally = Counter(), Counter()
        while self._counted < steps:
            self._count(queued.popleft(), step_tally, request_tally)
            self._counted += 1
        self._fold(step_tally, request_tally)
        self._retire(finished, final)

    def retiring(self) -> bool:
        """Whether requests seen finished at the last count wait to be retired at the next."""
        return bool(self._finishing)

    def _fold(self, steps: Counter, requests: Counter) -> None:
        """One count's tallies into the per-slice counts: steps {(batch, path, (depth, length)): n} and requests
        {(position, cached prefix, first or later, sampling, thinking, (depth, length)): n}."""
        counts = self.counts
        for dimensions, tally in ((("batch", "path"), steps),
                                  (("position", "cached_prefix", "step", "sampling", "thinking"), requests)):
            for key, n in tally.items():
                length = key[-1]
                for dimension, bucket in zip(dimensions, key):
                    found = counts.get((dimension, bucket))
                    if found is None:
                        found = counts[(dimension, bucket)] = Counter()
                    found[length] += n

    def _count(self, step, steps: Counter, requests: Counter) -> None:
        """One step into the tallies: a dict increment per request (labels kept per request, see _track)."""
        accepted, positions = step.accepted, step.positions
        if not accepted:
            return
        if positions > self.positions:
            self.positions = positions
        batch, path = S.batch_bucket(step.batch_size or len(accepted)), S.path_bucket(step.graph)
        reqs = step.reqs
        known = len(reqs) == len(accepted)  # else a step observed without its requests: their labels unknown
        table = self._requests
        for value, n in Counter(accepted).items():  # counted in C
            length = value if 0 <= value <= positions else (0 if value < 0 else positions)
            steps[(batch, path, (positions, length))] += n
            if not known:
                requests[(S.UNKNOWN, S.UNKNOWN, S.UNKNOWN, S.UNKNOWN, S.UNKNOWN, (positions, length))] += n
        if not known:
            return
        for value, req in zip(accepted, reqs):
            length = value if 0 <= value <= positions else (0 if value < 0 else positions)
            entry = table.get(id(req))
            if entry is None or entry[0] is not req:
                entry = table[id(req)] = _track(req)
                requests[(entry[5], entry[4], "first", *entry[7], (positions, length))] += 1
            else:
                requests[(entry[5], entry[4], "later", *entry[7], (positions, length))] += 1
            entry[2] += 1
            entry[3] += length
            if entry[1] is not None:
                entry[1] += value + 1
                if entry[1] >= entry[6]:  # crossed into the next position bucket
                    entry[5], entry[6] = _position_label(entry[1])

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
                                                            "accepted": S.per_position(lengths, positions),
                                                            "drafted": S.drafted_per_position(lengths, positions)}
            lengths = dict(self.request_lengths)
        return {"positions": positions, "slices": S.ordered(slices),
                "request_accept_length": {b: lengths[b] for b in S.REQUEST_LENGTH_BUCKETS if b in lengths},
                "requests": sum(lengths.values()), "requests_classified": self.requests_classified}
