"""Speculative acceptance statistics, with vLLM's definitions so figures compare across engines.

Per verify step and request: `positions` draft tokens proposed along the chain (the number of speculative
steps), `accepted` of them accepted (bonus token excluded). Draft position k (0-based) counts as accepted
iff accepted > k. Mean acceptance length includes the bonus token: 1 + accepted / drafts.

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
from typing import Dict, List, Optional, Sequence, Tuple

Accuracy = Sequence[float]  # per-position conditional accuracies; the last repeats past its end


def clamped_counts(raw_lengths: Dict[int, int], positions: int) -> Tuple[Dict[int, int], List[int]]:
    """Requests per accepted length, as SGLang reported them (raw, possibly out of range), turned into
    (requests per accepted length in [0, positions], accepted count per draft position)."""
    lengths = {}  # a plain dict: a flush makes one every second, and a Counter costs microseconds to make
    for length, count in raw_lengths.items():
        clamped = min(max(int(length), 0), positions)
        lengths[clamped] = lengths.get(clamped, 0) + count
    per_position = [sum(count for length, count in lengths.items() if length > k) for k in range(positions)]
    return lengths, per_position


def step_counts(accepted_per_request: Sequence[int], positions: int) -> Tuple[Dict[int, int], List[int]]:
    """One verify step aggregated: (requests per accepted length, accepted count per draft position)."""
    return clamped_counts(Counter(accepted_per_request), positions)  # counted in C


def subtract_counts(now: Dict[int, int], before: Dict[int, int]) -> Dict[int, int]:
    """Per-length counts added since `before` (both cumulative)."""
    return {length: count - before.get(length, 0) for length, count in now.items() if count != before.get(length, 0)}


def conditional_accuracies(draft_accuracy: Accuracy, positions: int) -> List[float]:
    """The conditional accuracy at each of `positions` draft positions (the last number repeats past its end)."""
    values = [float(v) for v in draft_accuracy]
    if not values:
        raise ValueError("no draft accuracy given")
    return [values[min(k, len(values) - 1)] for k in range(positions)]


def expected_per_position_rate(draft_accuracy: Accuracy, positions: int) -> List[float]:
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


def describe_accuracy(draft_accuracy: Accuracy) -> str:
    """'a per-token draft accuracy of 0.75' or 'per-position training accuracies 0.75, 0.62, 0.55'."""
    if len(draft_accuracy) == 1:
        return f"a per-token draft accuracy of {draft_accuracy[0]:g}"
    return "per-position (conditional) training accuracies " + ", ".join(f"{v:g}" for v in draft_accuracy)


def accuracy_for_mean_length(expected: float, positions: int) -> Optional[float]:
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


class AcceptanceWindow:
    """Counts over a window of verify steps; cheap to update on every step."""

    def __init__(self):
        self.steps = 0  # verify calls
        self.drafts = 0  # request-steps that proposed drafts
        self.draft_tokens = 0
        self.accepted_tokens = 0
        self.per_position = Counter()
        self.length_histogram = Counter()  # accepted drafts per request-step -> count
        self.positions = 0

    @classmethod
    def from_counts(cls, steps: int, raw_lengths: Dict[int, int], positions: int) -> "AcceptanceWindow":
        """A window from a step count and requests per raw accepted length (what the monitor keeps)."""
        window = cls()
        lengths, per_position = clamped_counts(raw_lengths, positions)
        window.add_counts(lengths, per_position, positions)
        window.steps = steps
        return window

    def add_step(self, accepted_per_request: Sequence[int], positions: int):
        self.add_counts(*step_counts(accepted_per_request, positions), positions)

    def add_counts(self, lengths: Dict[int, int], per_position: Sequence[int], positions: int):
        """Add one step already aggregated by step_counts (cheap for large batches)."""
        self.steps += 1
        self.positions = max(self.positions, positions)
        requests = sum(lengths.values())
        self.drafts += requests
        self.draft_tokens += requests * positions
        self.accepted_tokens += sum(per_position)
        self.length_histogram.update(lengths)
        for k, count in enumerate(per_position):
            self.per_position[k] += count

    def mean_accepted_drafts(self) -> Optional[float]:
        return self.accepted_tokens / self.drafts if self.drafts else None

    def mean_length(self) -> Optional[float]:
        """Tokens per request-step including the bonus token."""
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts else None

    def per_position_rate(self) -> List[float]:
        return [self.per_position[k] / self.drafts if self.drafts else 0.0 for k in range(self.positions)]

    def conditional_rate(self) -> List[Optional[float]]:
        """P(accepted at k | accepted at k-1); position 0 is unconditional."""
        out = []
        for k in range(self.positions):
            previous = self.drafts if k == 0 else self.per_position[k - 1]
            out.append(self.per_position[k] / previous if previous else None)
        return out

    def as_fields(self) -> dict:
        return {
            "steps": self.steps, "drafts": self.drafts, "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted_tokens, "positions": self.positions,
            "mean_accepted_drafts": self.mean_accepted_drafts(), "mean_accept_length": self.mean_length(),
            "per_position_rate": self.per_position_rate(), "conditional_rate": self.conditional_rate(),
            "accept_length_histogram": {str(k): v for k, v in sorted(self.length_histogram.items())},
        }
