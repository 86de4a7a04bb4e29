"""What the step timer counted since the process started: per (batch bucket, depth) the steps, their batch sizes,
phase seconds and periods (analysis.speculation_cost.STEP_FIELDS), and per target forward key (MODE:WIDTH:BUCKET)
the sums a least-squares fit of seconds on requests and tokens needs (FIT_FIELDS). Written from the timer's resolve
only (one thread at a time); read by copy, under the timer's lock (StepTimer.snapshot).

The first step of each (bucket, depth), the period after it and the first forward of each key are not counted: a
first call at a new shape runs once-only work (on the CPU the Triton interpreter's first launch of each kernel made
the seed pair's first decode step 1.2 s against 27 ms for the next ones), which a mean over a short run would carry.
`first_calls` counts what was left out."""

class CostCounts:
    def __init__(self):
        self.steps: dict[str, dict[int, list]] = {}
        self.forwards: dict[str, list] = {}
        self.first_calls = 0
        self.updates = 0  # steps counted, ever: a flush with none new since the last has nothing to send
        self._seen: set = set()  # (kind, key) whose first call was left out

    def _first(self, kind: str, key) -> bool:
        """Whether this is the first call of its kind and key (then left out)."""
        if (kind, key) in self._seen:
            return False
        self._seen.add((kind, key))
        self.first_calls += 1
        return True

    def _row(self, bucket: str, depth: int) -> list:
        depths = self.steps.get(bucket)
        if depths is None:
            depths = self.steps[bucket] = {}
        row = depths.get(depth)
        if row is None:
            row = depths[depth] = [0, 0, 0.0, 0.0, 0.0, 0.0, 0, 0.0, 0.0]
        return row

    def add_step(self, bucket: str, depth: int, batch_size: int, draft: float, verify: float, extend: float,
                 total: float) -> None:
        if self._first("step", (bucket, depth)):
            return
        row = self._row(bucket, depth)
        self.updates += 1
        row[0] += 1
        row[1] += batch_size
        row[2] += draft
        row[3] += verify
        row[4] += extend
        row[5] += total

    def add_period(self, key: tuple, seconds: float) -> None:
        if self._first("period", key):
            return
        row = self._row(*key)
        row[6] += 1
        row[7] += seconds
        row[8] += seconds * seconds

    def add_forward(self, key: str, requests: int, tokens: int, seconds: float) -> None:
        if self._first("forward", key):
            return
        row = self.forwards.get(key)
        if row is None:
            row = self.forwards[key] = [0] * 6 + [0.0] * 4
        for i, value in enumerate((1, requests, tokens, requests * requests, requests * tokens, tokens * tokens,
                                   seconds, seconds * requests, seconds * tokens, seconds * seconds)):
            row[i] += value

    def snapshot(self) -> dict:
        """{"steps": {bucket: {depth (str): [...]}}, "forwards": {key: [...]}}: a copy, as the costs event holds it."""
        steps = {bucket: {str(d): list(row) for d, row in dict(depths).items()} for bucket, depths in
                 dict(self.steps).items()}
        return {"steps": steps, "forwards": {k: list(v) for k, v in dict(self.forwards).items()},
                "first_calls": self.first_calls}
