"""Acceptance by slice: the fixed buckets a verify step's request-steps are counted under, and the test that names a
slice worse than the rest beyond chance (acceptance_slice_low).

Each request-step of a verify step (one request's draft chain checked once) is counted once in every dimension:
- position: tokens in the sequence before the chain's first draft token (prompt + generated), log2 buckets;
- batch: requests in the verify step (the running batch), log2 buckets;
- cached_prefix: whether the request's prefill found a cached prefix (SGLang's Req.cached_tokens > 0);
- path: the verify forward ran as a CUDA graph or eagerly (SGLang's can_run_cuda_graph for that step);
- step: the request's first verify step after its prefill, or a later one;
- sampling: the request's sampling as the scheduler runs it: greedy (SGLang turns temperature 0 into top_k 1), else
  its temperature in buckets;
- thinking: whether the request asked for reasoning (SGLang's Req.require_reasoning, set by the chat handler when
  the template turns thinking on for a reasoning model): on or off.
So in each dimension the slices' counts add up to the totals. A slice keeps request-steps per accepted length
(0..positions), from which its per-position acceptance follows as in analysis.acceptance. All label sets are fixed.

The test (one-sided two-proportion z-test per dimension, slice, draft position: the slice's share of request-steps
that accepted that position against the rest of the same dimension): it is run only where both sides hold at least
MIN_REQUEST_STEPS, its p-value must be under ALPHA / (number of tests run) (Bonferroni), and the gap must be large
enough to matter (MIN_GAP absolute, slice at most MAX_RATIO of the rest). A handful of steps never fires it.
Request-steps of one request are not independent; the gap thresholds keep that from turning noise into a finding.
In the sampling dimension only the greedy slice is tested (against the sampled ones): sampled request-steps accept a
draft token with the target's probability of it, so they accept less than greedy ones, and less the higher the
temperature, with any wiring (analysis.sampled_traffic names that shortfall).
"""

import math
from collections.abc import Sequence

from .findings import ACCEPTANCE_SLICE_LOW, CODES, Finding
from .traffic import ENTRY, ENTRY_BUCKETS, LABEL_PREFIX, UNKNOWN, is_label_dimension

POSITION_FIRST = 64  # sequence positions below this share one bucket
POSITION_TOP = 1 << 16  # and from this on
BATCH_TOP = 256


POSITION_BUCKETS = (("0-63",) + tuple(f"{1 << b}-{(1 << (b + 1)) - 1}" for b in range(6, 16))
                    + (f"{POSITION_TOP}+", UNKNOWN))
BATCH_BUCKETS = ("1", "2-3", "4-7", "8-15", "16-31", "32-63", "64-127", "128-255", f"{BATCH_TOP}+")
CACHED_BUCKETS = ("yes", "no", UNKNOWN)
PATH_BUCKETS = ("graph", "eager", UNKNOWN)
STEP_BUCKETS = ("first", "later", UNKNOWN)
SAMPLING, GREEDY = "sampling", "greedy"
SAMPLING_BUCKETS = (GREEDY, "temp<=0.5", "temp<=1", "temp>1", UNKNOWN)
THINKING_BUCKETS = ("on", "off", UNKNOWN)
DIMENSIONS = {"position": POSITION_BUCKETS, "batch": BATCH_BUCKETS, "cached_prefix": CACHED_BUCKETS,
              "path": PATH_BUCKETS, "step": STEP_BUCKETS, SAMPLING: SAMPLING_BUCKETS, "thinking": THINKING_BUCKETS}

# Counted once per finished request in SGLang's HTTP server process (analysis.traffic), beside one dimension per
# allowed custom-label key (label:KEY, values bounded there).
REQUEST_DIMENSIONS = {ENTRY: ENTRY_BUCKETS}


def ordered(slices: dict[str, dict[str, dict]]) -> dict[str, dict[str, dict]]:
    """Dimensions and buckets in their fixed order; custom-label dimensions after them, by name, values by name."""
    fixed = {**DIMENSIONS, **REQUEST_DIMENSIONS}
    out = {d: {b: slices[d][b] for b in fixed[d] if b in slices[d]} for d in fixed if d in slices}
    for dimension in sorted(d for d in slices if d not in fixed):
        out[dimension] = {b: slices[dimension][b] for b in sorted(slices[dimension])}
    return out


# Accept length per request (1 + its accepted drafts / its verify steps), upper bounds of the histogram's buckets.
REQUEST_LENGTH_BOUNDS = (1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0, math.inf)
REQUEST_LENGTH_BUCKETS = tuple(f"<={b:g}" if b != math.inf else ">8" for b in REQUEST_LENGTH_BOUNDS)

MIN_REQUEST_STEPS = 64
ALPHA = 0.01
MIN_GAP = 0.10
MAX_RATIO = 0.75
TEST_NAME = (f"one-sided two-proportion z-test per dimension, slice and draft position against the rest of the "
             f"dimension; at least {MIN_REQUEST_STEPS} request-steps on each side; Bonferroni: p < {ALPHA} / tests "
             f"run; and a gap of at least {MIN_GAP} absolute with the slice at most {MAX_RATIO:.0%} of the rest")


def position_bucket(position: int) -> str:
    if position < POSITION_FIRST:
        return "0-63"
    if position >= POSITION_TOP:
        return f"{POSITION_TOP}+"
    low = 1 << (position.bit_length() - 1)
    return f"{low}-{2 * low - 1}"


_BATCH_BY_BITS = {bits: label for bits, label in enumerate(BATCH_BUCKETS, start=1)}


def batch_bucket(size: int) -> str:
    return _BATCH_BY_BITS.get(size.bit_length(), BATCH_BUCKETS[-1]) if size > 0 else BATCH_BUCKETS[0]


def path_bucket(graph: bool | None) -> str:
    """SGLang's can_run_cuda_graph: a bool; anything else is not known (and never evaluated: no device read)."""
    return "graph" if graph is True else ("eager" if graph is False else UNKNOWN)


def sampling_bucket(top_k, temperature) -> str:
    """From SGLang's sampling parameters after its normalisation (temperature 0 becomes top_k 1, temperature 1)."""
    if top_k == 1 and not isinstance(top_k, bool):
        return GREEDY
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature >= 0:
        return UNKNOWN
    return "temp<=0.5" if temperature <= 0.5 else ("temp<=1" if temperature <= 1 else "temp>1")


def thinking_bucket(require_reasoning) -> str:
    return "on" if require_reasoning is True else ("off" if require_reasoning is False else UNKNOWN)


def request_length_bucket(length: float) -> str:
    for bound, label in zip(REQUEST_LENGTH_BOUNDS, REQUEST_LENGTH_BUCKETS):
        if length <= bound:
            return label
    return REQUEST_LENGTH_BUCKETS[-1]


def per_position(lengths: dict, positions: int) -> list[int]:
    """Request-steps that accepted each 0-based draft position (accepted length > k); `lengths` is keyed by the
    accepted length or by (depth, accepted length)."""
    return [sum(n for key, n in lengths.items() if (key[1] if isinstance(key, tuple) else key) > k)
            for k in range(positions)]


def drafted_per_position(lengths: dict, positions: int) -> list[int]:
    """Request-steps whose draft reached each 0-based position (depth > k); `lengths` keyed by (depth, accepted)."""
    return [sum(n for key, n in lengths.items() if isinstance(key, tuple) and key[0] > k) for k in range(positions)]


def _p_lower(s1: int, n1: int, s2: int, n2: int) -> float:
    """One-sided p-value that the slice's rate s1/n1 is below the rest's s2/n2 by chance (pooled z-test)."""
    pooled = (s1 + s2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    if se == 0:
        return 1.0
    z = (s2 / n2 - s1 / n1) / se
    return 0.5 * math.erfc(z / math.sqrt(2))


def low_slices(slices: dict[str, dict[str, dict]], positions: int) -> list[dict]:
    """Slices worse than the rest beyond chance. `slices`: {dimension: {bucket: {"request_steps": n, "accepted":
    [request-steps that accepted position k]}}}. Each result names the dimension, bucket, position (0-based), both
    rates and sizes, p, the number of tests run and the test."""
    candidates, tests = [], 0
    for dimension, buckets in slices.items():
        buckets = {b: c for b, c in buckets.items() if _sane(c)}
        for k in range(positions):
            total_s = sum(_at(b.get("accepted"), k) for b in buckets.values())
            total_n = sum(_drafted(b, k) for b in buckets.values())
            for bucket, counts in buckets.items():
                if dimension == SAMPLING and bucket != GREEDY:
                    continue
                n1, s1 = _drafted(counts, k), _at(counts.get("accepted"), k)
                n2, s2 = total_n - n1, total_s - s1
                if n1 < MIN_REQUEST_STEPS or n2 < MIN_REQUEST_STEPS:
                    continue
                tests += 1
                r1, r2 = s1 / n1, s2 / n2
                if r2 - r1 >= MIN_GAP and r1 <= MAX_RATIO * r2:
                    candidates.append((dimension, bucket, k, r1, n1, r2, n2, _p_lower(s1, n1, s2, n2)))
    found = []
    for dimension, bucket, k, r1, n1, r2, n2, p in sorted(candidates, key=lambda c: c[-1]):
        if p < ALPHA / max(tests, 1):
            found.append({"dimension": dimension, "bucket": bucket, "position": k, "rate": round(r1, 4),
                          "request_steps": n1, "rest_rate": round(r2, 4), "rest_request_steps": n2,
                          "p_value": p, "tests": tests, "test": TEST_NAME})
    return found


def _drafted(counts: dict, k: int) -> int:
    """Request-steps of a slice that drafted position k: its `drafted` list where it has one (depth changes from step
    to step), else every request-step (a log of a fixed depth)."""
    drafted = counts.get("drafted")
    return _at(drafted, k) if drafted is not None else counts.get("request_steps", 0)


def _sane(counts: dict) -> bool:
    """Counts a probe could have written (a log read back may hold anything): 0 <= accepted <= request-steps."""
    n = counts.get("request_steps", 0)
    return isinstance(n, int) and n >= 0 and all(isinstance(a, int) and 0 <= a <= n for a in counts.get("accepted")
                                                 or ())


def _at(values: Sequence[int] | None, k: int) -> int:
    return values[k] if values and k < len(values) else 0


def worst_per_slice(found: Sequence[dict]) -> list[dict]:
    """One result per (dimension, bucket): its most significant position (found is sorted by p)."""
    seen, out = set(), []
    for item in found:
        key = (item["dimension"], item["bucket"])
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


_CAUSES = {
    "position": "acceptance falling with position points at a RoPE scaling or max_position_embeddings mismatch "
                "between the draft and its target (or a draft trained on shorter sequences)",
    "batch": "acceptance that depends on the batch size points at padded-batch or batch-indexing bugs",
    "cached_prefix": "low acceptance on cache hits points at stale draft state (hidden states, KV) for the cached "
                     "prefix",
    "path": "a gap between CUDA-graph and eager verify forwards points at state the graph captured once",
    "step": "a low first decode step points at what the draft is handed after prefill (its hidden states, "
            "its KV of the prompt)",
    SAMPLING: "greedy requests accepting less than sampled ones (which accept less with any wiring) point at a "
              "draft trained on sampled outputs rather than the target's greedy ones: train or evaluate the draft "
              "with the sampling it is served with",
    "thinking": "acceptance that differs with thinking on or off points at a draft trained on one mode only "
                "(thinking traces against direct answers): train it on both, or serve the mode it was trained on",
    ENTRY: "acceptance that differs by entry point points at prompts formatted unlike the draft's training "
           "data: chat requests get the server's chat template, completions and /generate send the prompt as "
           "it is; a draft trained on templated conversations accepts little on raw prompts, or the reverse",
    "dp_rank": "one data-parallel rank accepting less than the others points at that rank's own state (the aux "
               "states its attention group hands the draft, the draft group it runs in) or at traffic its requests "
               "alone carry; compare that rank's fingerprints and capture configuration with the others'",
}
DP_RANK = "dp_rank"  # a dimension of its own: acceptance of each data-parallel rank against the other ranks


def slice_low_finding(item: dict, positions: int):
    evidence = {k: item[k] for k in ("dimension", "bucket", "position", "rate", "request_steps", "rest_rate",
                                     "rest_request_steps", "tests", "test")}
    evidence["p_value"] = float(f"{item['p_value']:.3g}")
    evidence["positions"] = positions
    return Finding(
        ACCEPTANCE_SLICE_LOW, CODES[ACCEPTANCE_SLICE_LOW][0],
        f"acceptance at draft position {item['position']} (0-based) is {item['rate']:.1%} over {item['request_steps']} "
        f"request-steps with {item['dimension']} = {item['bucket']}, against {item['rest_rate']:.1%} over "
        f"{item['rest_request_steps']} in the rest (p = {item['p_value']:.2g}, {item['tests']} tests; {item['test']}). "
        f"{cause(item['dimension'])}.", tuple(sorted(evidence.items())))


def cause(dimension: str) -> str:
    """What a low slice of this dimension points at."""
    if is_label_dimension(dimension):
        return (f"acceptance low for one value of the custom label {dimension[len(LABEL_PREFIX):]!r} points at that "
                f"class of traffic (an application, a language, a domain) being unlike the draft's training data")
    known = _CAUSES.get(dimension)
    if known is None:  # a log from another release of the probe, or edited: reported, not a crash
        return (f"the dimension {dimension!r} is not one this eagle-probe knows (a log written by another release?); "
                f"compare that slice's traffic with the draft's training data")
    return known
