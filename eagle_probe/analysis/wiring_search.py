"""Which wiring (one HF hidden_states index per aux slot) a draft agrees with its target best under: the search and
its statistics, for `eagle-probe replay --search`.

Pure rules, no torch: the caller hands in a function that evaluates a batch of wirings (the torch draft in
eagle_probe/commands/replay) and gets back every evaluated candidate with its accuracy, Wilson interval, the
near-ties of the best and the choice among them that the installed SGLang release can reach.
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..versions import VersionRules
from .draft_rules import ids_for_capture

Wiring = tuple[int, ...]
# evaluate(wirings) -> [(correct, positions[, mean log-likelihood of the target's token])] in the same order
Evaluate = Callable[[list[Wiring]], list[tuple]]

EXHAUSTIVE_LIMIT = 512  # search every wiring when there are at most this many ((num indices) ** K)
MAX_ROUNDS = 50  # coordinate search: a guard; each round that improves raises the accuracy strictly
Z_95 = 1.959963984540054


def wilson_interval(correct: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (95 % by default); (0, 1) when n is 0."""
    if n <= 0:
        return 0.0, 1.0
    p = correct / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def count_wirings(num_indices: int, slots: int) -> int:
    return num_indices ** slots


@dataclass(frozen=True)
class Candidate:
    hf_indices: Wiring
    correct: int
    positions: int
    log_likelihood: float | None = None  # mean log p(target's token) under the draft; None when not measured

    @property
    def likelihood_key(self) -> float:
        """For ordering: higher is better; unmeasured or non-finite sorts last."""
        value = self.log_likelihood
        return value if value is not None and math.isfinite(value) else -math.inf

    @property
    def accuracy(self) -> float:
        return self.correct / self.positions if self.positions else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.correct, self.positions)

    def overlaps(self, other: "Candidate") -> bool:
        lo, hi = self.interval
        olo, ohi = other.interval
        return lo <= ohi and olo <= hi


@dataclass
class SearchResult:
    method: str  # "exhaustive" | "coordinate"
    candidates: dict[Wiring, Candidate]
    total_wirings: int
    rounds: int  # coordinate-search rounds (1 for exhaustive)
    start: Wiring

    def ranked(self, prefer: Wiring | None = None) -> list[Candidate]:
        """Best first: accuracy, then the likelihood, then `prefer` (the served wiring), then the lower indices."""
        return sorted(self.candidates.values(), key=lambda c: (-c.correct / max(c.positions, 1), -c.likelihood_key,
                                                               c.hf_indices != prefer, c.hf_indices))


def _evaluate_new(wirings: Sequence[Wiring], known: dict[Wiring, Candidate], evaluate: Evaluate) -> None:
    todo = [w for w in dict.fromkeys(tuple(w) for w in wirings) if w not in known]
    if todo:
        for wiring, score in zip(todo, evaluate(todo)):
            known[wiring] = Candidate(wiring, int(score[0]), int(score[1]), *score[2:])


def all_wirings(indices: Sequence[int], slots: int) -> list[Wiring]:
    out: list[Wiring] = [()]
    for _ in range(slots):
        out = [w + (i,) for w in out for i in indices]
    return out


def search(indices: Sequence[int], slots: int, start: Wiring, evaluate: Evaluate,
           exhaustive_limit: int = EXHAUSTIVE_LIMIT, batch: int | None = None) -> SearchResult:
    """Exhaustive when there are at most `exhaustive_limit` wirings, else a coordinate search from `start`: one slot
    at a time over every index (the others fixed), keeping a strictly better wiring, until a whole round over the
    slots improves nothing. `batch` caps how many wirings one evaluate call gets."""
    indices = sorted(dict.fromkeys(int(i) for i in indices))
    if not indices or slots < 1:
        raise ValueError("nothing to search: no layer indices or no slots")
    start = tuple(int(i) for i in start)
    if len(start) != slots or any(i not in indices for i in start):
        start = tuple(indices[min(k, len(indices) - 1)] for k in range(slots))
    total = count_wirings(len(indices), slots)
    known: dict[Wiring, Candidate] = {}

    def run(wirings):
        step = batch or len(wirings) or 1
        for at in range(0, len(wirings), step):
            _evaluate_new(wirings[at:at + step], known, evaluate)

    if total <= exhaustive_limit:
        run(all_wirings(indices, slots))
        return SearchResult("exhaustive", known, total, 1, start)
    current = start
    run([current])
    rounds = 0
    while rounds < MAX_ROUNDS:
        rounds += 1
        improved = False
        for slot in range(slots):
            options = [current[:slot] + (i,) + current[slot + 1:] for i in indices]
            run(options)
            best = max(options, key=lambda w: (known[w].correct, w == current))
            if known[best].correct > known[current].correct:
                current, improved = best, True
        if not improved:
            break
    return SearchResult("coordinate", known, total, rounds, start)


@dataclass
class Choice:
    """The search's verdict: the highest candidate, its near-ties, and the one to recommend."""

    top: Candidate
    near_ties: list[Candidate]  # candidates whose interval overlaps the top's (the top included), best first
    best: Candidate  # among the near-ties the release can reach, the likeliest (the top if none can)
    ids: tuple[int, ...] | None  # eagle_aux_hidden_state_layer_ids that capture `best` on the release
    unreachable: str | None  # why no ids capture `best` (None when ids were found)
    reachability: dict[Wiring, tuple[tuple[int, ...] | None, str]]  # per near-tie: (ids, why not)
    runner_up: Candidate | None = None  # the next likeliest reachable near-tie: what `best` was chosen over


def choose(result: SearchResult, num_layers: int, rules: VersionRules, served: Wiring | None = None,
           family=None) -> Choice:
    """Near-ties are statistically indistinguishable by accuracy; among those the release can reach, the one under
    which the draft gives the target's tokens the highest mean log-probability is recommended: a draft is trained to
    maximise exactly that on its wiring, and every position's probability moves it, not only the positions where an
    argmax flips. Without likelihoods, the first reachable one in rank order."""
    ranked = result.ranked(prefer=served)
    top = ranked[0]
    ties = [c for c in ranked if c.overlaps(top)]
    reach = {c.hf_indices: ids_for_capture(c.hf_indices, num_layers, rules, family) for c in ties}
    reachable = [c for c in ties if reach[c.hf_indices][0] is not None]
    by_likelihood = sorted(reachable, key=lambda c: -c.likelihood_key)  # stable: rank order among equals
    best = by_likelihood[0] if reachable else top
    ids, why = reach[best.hf_indices]
    return Choice(top, ties, best, ids, why or None, reach, by_likelihood[1] if len(by_likelihood) > 1 else None)
