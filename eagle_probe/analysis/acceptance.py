"""Speculative acceptance statistics, with vLLM's definitions so figures compare across engines.

Per verify step and request: the step's draft depth `positions` (its speculative steps: fixed, or the adaptive
worker's current steps; a tree's depth along any path), `accepted` drafts along the accepted path (bonus token
excluded). Draft position k (0-based) is the depth k+1 along the accepted path: drafted iff depth > k, accepted
iff accepted > k; its rate is taken over the request-steps that drafted it. Mean acceptance length includes the
bonus token: 1 + accepted / request-steps (every verify step, depth 0 included, as SGLang's histograms count them).
The accept rate is SGLang's since #23530: accepted drafts over proposed drafts (a tree proposes every node after
its root, speculative_num_draft_tokens - 1, so a tree's rate is lower than its per-position rates).

Training accuracies (EAGLE_PROBE_DRAFT_ACCURACY, `--draft-accuracy`) are held in one form, a tuple of
per-position numbers a_1, ..., a_m (one per-token accuracy a is the tuple (a,)):
- per-position numbers a_1, ..., a_m, as SpecForge logs them per TTT step (acc_0, acc_1, ...). SpecForge measures
  step k with the ground-truth tokens as the draft's input, so a_k approximates P(draft token k right | tokens
  1..k-1 right): a *conditional* accuracy. Served drafts are verified left to right and a token counts only when
  all before it were accepted, so position k is accepted with probability a_1 * ... * a_k.
Positions past the last number given reuse the last one. Expected mean accept length (bonus included):
    E = 1 + sum_{k=1..n} prod_{j<=k} a_j
which for one number is 1 + a + a^2 + ... + a^n, as before.
"""

from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple, TypeVar

Accuracy = Sequence[float]  # per-position conditional accuracies; the last repeats past its end
K = TypeVar("K")  # a count's key: a length, a depth, (depth, accepted)


def subtract_counts(now: dict[K, int], before: dict[K, int]) -> dict[K, int]:
    """Per-length counts added since `before` (both cumulative)."""
    return {length: count - before.get(length, 0) for length, count in now.items() if count != before.get(length, 0)}


def conditional_accuracies(draft_accuracy: Accuracy, positions: int) -> list[float]:
    """The conditional accuracy at each of `positions` draft positions (the last number repeats past its end)."""
    values = [float(v) for v in draft_accuracy]
    if not values:
        raise ValueError("no draft accuracy given")
    return [values[min(k, len(values) - 1)] for k in range(positions)]


def expected_per_position_rate(draft_accuracy: Accuracy, positions: int) -> list[float]:
    """P(draft position k accepted) = a_1 * ... * a_k: comparable with AcceptanceWindow.per_position_rate."""
    rates, product = [], 1.0
    for accuracy in conditional_accuracies(draft_accuracy, positions):
        product *= accuracy
        rates.append(product)
    return rates


def expected_mean_length(draft_accuracy: Accuracy, positions: int) -> float:
    """Expected tokens per verify step (bonus included): 1 + sum over k of the product of the conditional
    accuracies up to k; for one per-token accuracy a, 1 + a + a^2 + ... + a^n."""
    return 1.0 + sum(expected_per_position_rate(draft_accuracy, positions))


def expected_mean_length_mixed(draft_accuracy: Accuracy, depth_mix: dict[int, int]) -> float | None:
    """Expected tokens per request-step when request-steps ran at several depths ({depth: request-steps}): each at
    its own depth, weighted by its share. For a tree (topk > 1) it is a lower bound: a chain accuracy says how often
    the top proposal is right, and a tree also accepts a lower-ranked one."""
    total = sum(depth_mix.values())
    if not total:
        return None
    return sum(expected_mean_length(draft_accuracy, depth) * n for depth, n in depth_mix.items()) / total


def describe_accuracy(draft_accuracy: Accuracy) -> str:
    """'a per-token draft accuracy of 0.75' or 'per-position training accuracies 0.75, 0.62, 0.55'."""
    if len(draft_accuracy) == 1:
        return f"a per-token draft accuracy of {draft_accuracy[0]:g}"
    return "per-position (conditional) training accuracies " + ", ".join(f"{v:g}" for v in draft_accuracy)


def accuracy_for_mean_length(expected: float, positions: int) -> float | None:
    """The one per-token accuracy whose expected mean length over `positions` is `expected` (bisection); None when
    no accuracy in (0, 1] gives it. Used when a log carries only expected_mean_accept_length."""
    if positions < 1 or not 1.0 < expected <= 1.0 + positions:
        return None
    low, high = 0.0, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        if expected_mean_length((middle,), positions) < expected:
            low = middle
        else:
            high = middle
    return round(high, 6)


class Tally(NamedTuple):
    """Cumulative verify-step counts as the running probe keeps them, keyed by each step's own draft depth:
    steps: verify steps (batches); counts: {(depth, accepted drafts clamped to [0, depth]): request-steps};
    depth_steps: {depth: verify steps}; proposed: draft tokens proposed (a tree's nodes after the root, per request-
    step)."""

    steps: int = 0
    counts: dict[tuple[int, int], int] = {}
    depth_steps: dict[int, int] = {}
    proposed: int = 0

    def minus(self, before: "Tally") -> "Tally":
        return Tally(self.steps - before.steps, subtract_counts(self.counts, before.counts),
                     subtract_counts(self.depth_steps, before.depth_steps), self.proposed - before.proposed)


def depth_counts(raw_lengths: dict[int, int], positions: int) -> dict[tuple[int, int], int]:
    """Requests per accepted length of steps that all drafted `positions` deep, keyed as Tally.counts."""
    out: dict[tuple[int, int], int] = {}
    for length, count in raw_lengths.items():
        key = (positions, min(max(int(length), 0), positions))
        out[key] = out.get(key, 0) + count
    return out


class WindowSums:
    """One pass over a window's counts (AcceptanceWindow.sums): request-steps, accepted drafts, request-steps that
    accepted / drafted each position, request-steps per accepted length, and per depth [verify steps, request-steps,
    accepted drafts]."""

    __slots__ = ("request_steps", "accepted_tokens", "per_position", "drafted_per_position", "length_histogram",
                 "per_depth")

    def __init__(self, request_steps, accepted_tokens, per_position, drafted_per_position, length_histogram,
                 per_depth):
        self.request_steps, self.accepted_tokens = request_steps, accepted_tokens
        self.per_position, self.drafted_per_position = per_position, drafted_per_position
        self.length_histogram, self.per_depth = length_histogram, per_depth


class AcceptanceWindow:
    """Counts over a window of verify steps, each at its own draft depth (adaptive depth changes it from step to
    step; a tree's depth is its number of draft steps). Position k (0-based) is drafted by the request-steps whose
    depth exceeds k and accepted by those that accepted more than k drafts: its rate is taken over the steps that
    drafted it. The accept rate is SGLang's (since #23530): accepted drafts over proposed drafts, where a tree
    proposes all its nodes after the root."""

    def __init__(self):
        self.steps = 0  # verify calls
        self.counts = Counter()  # (depth, accepted drafts) -> request-steps
        self.depth_steps = Counter()  # depth -> verify steps
        self.draft_tokens = 0  # proposed drafts

    @classmethod
    def from_tally(cls, tally: Tally) -> "AcceptanceWindow":
        window = cls()
        window.steps = tally.steps
        window.counts.update(tally.counts)
        window.depth_steps.update(tally.depth_steps)
        window.draft_tokens = tally.proposed
        return window

    @classmethod
    def from_counts(cls, steps: int, raw_lengths: dict[int, int], positions: int) -> "AcceptanceWindow":
        """A window of `steps` chain steps all `positions` deep, from requests per raw accepted length."""
        counts = depth_counts(raw_lengths, positions)
        requests = sum(counts.values())
        return cls.from_tally(Tally(steps, counts, {positions: steps} if steps else {}, requests * positions))

    def add_step(self, accepted_per_request: Sequence[int], positions: int, proposed: int = 0):
        """One step `positions` deep; `proposed` drafts per request (0: a chain, as many as positions)."""
        self.steps += 1
        self.depth_steps[positions] += 1
        for key, n in depth_counts(Counter(accepted_per_request), positions).items():
            self.counts[key] += n
        self.draft_tokens += len(accepted_per_request) * (proposed or positions)

    @property
    def positions(self) -> int:
        """The deepest draft verified in the window."""
        return max((depth for depth, _ in self.counts), default=0)

    @property
    def drafts(self) -> int:
        """Request-steps verified (at any depth, 0 included: SGLang counts them as verify steps too)."""
        return sum(self.counts.values())

    @property
    def accepted_tokens(self) -> int:
        return sum(accepted * n for (_, accepted), n in self.counts.items())

    @property
    def length_histogram(self) -> Counter:
        """Accepted drafts per request-step -> count (SGLang's spec_correct_drafts_histogram, summed)."""
        out: Counter[int] = Counter()
        for (_, accepted), n in self.counts.items():
            out[accepted] += n
        return out

    @property
    def per_position(self) -> list[int]:
        """Request-steps that accepted each position."""
        return [sum(n for (_, a), n in self.counts.items() if a > k) for k in range(self.positions)]

    def drafted_per_position(self) -> list[int]:
        """Request-steps whose draft reached each position."""
        return [sum(n for (d, _), n in self.counts.items() if d > k) for k in range(self.positions)]

    def mean_accepted_drafts(self) -> float | None:
        return self.accepted_tokens / self.drafts if self.drafts else None

    def mean_length(self) -> float | None:
        """Tokens per request-step including the bonus token."""
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts else None

    def accept_rate(self) -> float | None:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None

    def per_position_rate(self) -> list[float | None]:
        """P(position k accepted | position k drafted)."""
        return [a / d if d else None for a, d in zip(self.per_position, self.drafted_per_position())]

    def conditional_rate(self) -> list[float | None]:
        """P(position k accepted | positions before it accepted and k drafted); position 0 is unconditional."""
        out = []
        for k in range(self.positions):
            reached = sum(n for (d, a), n in self.counts.items() if d > k and a >= k)
            out.append(sum(n for (_, a), n in self.counts.items() if a > k) / reached if reached else None)
        return out

    def depth_mix(self) -> dict[int, int]:
        """Depth -> request-steps verified at it."""
        out: dict[int, int] = {}
        for (depth, _), n in self.counts.items():
            out[depth] = out.get(depth, 0) + n
        return dict(sorted(out.items()))

    def per_depth(self) -> dict[str, dict]:
        """Per draft depth: verify steps, their share of all verify steps, request-steps, accepted drafts, mean accept
        length (bonus included)."""
        out = {}
        for depth, requests in self.depth_mix().items():
            accepted = sum(a * n for (d, a), n in self.counts.items() if d == depth)
            steps = self.depth_steps.get(depth, 0)
            out[str(depth)] = {"verify_steps": steps, "step_share": steps / self.steps if self.steps else None,
                               "request_steps": requests, "accepted_tokens": accepted,
                               "mean_accept_length": 1.0 + accepted / requests if requests else None}
        return out

    def sums(self) -> "WindowSums":
        """Everything a flush adds to the series, in one pass over the counts (the flush thread runs it every
        second; the properties above each walk the counts again)."""
        positions = self.positions
        sums = WindowSums(0, 0, [0] * positions, [0] * positions, Counter(), {})
        per_pos, drafted, histogram = sums.per_position, sums.drafted_per_position, sums.length_histogram
        for (depth, accepted), n in self.counts.items():
            sums_depth = sums.per_depth.setdefault(depth, [self.depth_steps.get(depth, 0), 0, 0])
            sums_depth[1] += n
            sums_depth[2] += accepted * n
            histogram[accepted] += n
            for k in range(accepted):
                per_pos[k] += n
            for k in range(depth):
                drafted[k] += n
        sums.request_steps = sum(histogram.values())
        sums.accepted_tokens = sum(a * n for a, n in histogram.items())
        return sums

    def as_fields(self) -> dict:
        return {
            "steps": self.steps, "drafts": self.drafts, "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted_tokens, "positions": self.positions,
            "mean_accepted_drafts": self.mean_accepted_drafts(), "mean_accept_length": self.mean_length(),
            "accept_rate": self.accept_rate(), "per_position_rate": self.per_position_rate(),
            "conditional_rate": self.conditional_rate(),
            "per_position_accepted": self.per_position, "per_position_drafted": self.drafted_per_position(),
            "per_depth": self.per_depth(),
            "accept_length_histogram": {str(k): v for k, v in sorted(self.length_histogram.items())},
        }
