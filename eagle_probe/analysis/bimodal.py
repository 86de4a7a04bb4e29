"""A bimodal per-request accept length (acceptance_bimodal): finished requests split into a group the draft serves
well and a group it fails, which a mean hides (a subset of traffic unlike the training data: raw prompts against a
chat-templated draft, thinking off against a thinking-trained one, another language or domain).

Input: the per-request accept-length histogram of the slices event (analysis.slices.REQUEST_LENGTH_BUCKETS: each
finished request's 1 + accepted drafts / verify steps, counted in fixed buckets). Named when all hold:
- at least MIN_REQUESTS finished requests;
- two peaks (the fullest bucket on each side of a valley) with a valley between them: a bucket or run of buckets
  whose fullest holds at most VALLEY of the smaller peak;
- each side of the valley holds at least MIN_SHARE of the requests, and the smaller peak at least MIN_PEAK requests;
- the peaks' buckets lie at least MIN_SPREAD tokens apart (their upper bounds).
A narrow, single-peaked distribution is never named, however low its mean.
"""

import math
from collections.abc import Sequence

from .findings import ACCEPTANCE_BIMODAL, CODES, Finding
from .slices import DIMENSIONS, REQUEST_LENGTH_BOUNDS, REQUEST_LENGTH_BUCKETS

MIN_REQUESTS = 20
VALLEY = 0.5
MIN_SHARE = 0.2
MIN_PEAK = 5
MIN_SPREAD = 0.75
RULE = (f"at least {MIN_REQUESTS} finished requests; two peaks separated by buckets holding at most {VALLEY:.0%} of "
        f"the smaller peak; at least {MIN_SHARE:.0%} of the requests on each side and {MIN_PEAK} in the smaller peak; "
        f"the peaks at least {MIN_SPREAD} tokens apart")


def _bound(label: str) -> float:
    return dict(zip(REQUEST_LENGTH_BUCKETS, REQUEST_LENGTH_BOUNDS)).get(label, math.inf)


def split(histogram: dict[str, int]) -> dict | None:
    """The two groups, or None when the histogram is not bimodal by the rule."""
    counts = [int(histogram.get(b, 0) or 0) if isinstance(histogram.get(b, 0), int) else 0
              for b in REQUEST_LENGTH_BUCKETS]
    total = sum(counts)
    if total < MIN_REQUESTS or any(c < 0 for c in counts):
        return None
    best: dict | None = None
    for cut_start in range(1, len(counts) - 1):  # the valley is counts[cut_start:cut_end]
        for cut_end in range(cut_start + 1, len(counts)):
            low, valley, high = counts[:cut_start], counts[cut_start:cut_end], counts[cut_end:]
            if not low or not high:
                continue
            low_peak, high_peak = max(low), max(high)
            smaller = min(low_peak, high_peak)
            if smaller < MIN_PEAK or max(valley) > VALLEY * smaller:
                continue
            if sum(low) < MIN_SHARE * total or sum(high) < MIN_SHARE * total:
                continue
            low_at, high_at = low.index(low_peak), cut_end + high.index(high_peak)
            spread = _bound(REQUEST_LENGTH_BUCKETS[high_at]) - _bound(REQUEST_LENGTH_BUCKETS[low_at])
            if spread < MIN_SPREAD:
                continue
            candidate: dict = {"requests": total, "low_requests": sum(low), "high_requests": sum(high),
                         "low_peak": REQUEST_LENGTH_BUCKETS[low_at], "high_peak": REQUEST_LENGTH_BUCKETS[high_at],
                         "valley": list(REQUEST_LENGTH_BUCKETS[cut_start:cut_end]), "valley_requests": sum(valley),
                         "rule": RULE}
            if best is None or candidate["valley_requests"] < best["valley_requests"]:
                best = candidate
    return best


def bimodal_finding(result: dict, histogram: dict[str, int], low_slices: Sequence[dict], where: str) -> Finding:
    """low_slices: the rank's acceptance_slice_low items (dimension, bucket, rate, rest_rate): one names the slice
    that explains the failing group; several are listed; none: the slices do not explain it."""
    shown = ", ".join(f"{b}: {histogram.get(b, 0)}" for b in REQUEST_LENGTH_BUCKETS if histogram.get(b))
    if len(low_slices) == 1:
        item = low_slices[0]
        explained = (f" One slice explains it: {item['dimension']} = {item['bucket']} accepts {item['rate']:.1%} at "
                     f"draft position {item['position']} against {item['rest_rate']:.1%} in the rest "
                     f"(acceptance_slice_low).")
    elif low_slices:
        explained = " Slices below the rest: " + ", ".join(
            f"{i['dimension']} = {i['bucket']}" for i in low_slices) + " (acceptance_slice_low)."
    else:
        explained = (f" No slice the probe counts explains it ({', '.join(DIMENSIONS)}): look at what the failing "
                     "requests share (entry point, chat template, language or domain) against the draft's training "
                     "data.")
    message = (f"{where}: the accept length of finished requests is bimodal: {result['low_requests']} of "
               f"{result['requests']} around {result['low_peak']} tokens per step, {result['high_requests']} around "
               f"{result['high_peak']}, and {result['valley_requests']} between ({shown}; rule: {result['rule']}). A "
               f"subset of the traffic fails while the rest is served well; the mean hides it.{explained}")
    evidence = dict(result, histogram={b: histogram.get(b, 0) for b in REQUEST_LENGTH_BUCKETS if histogram.get(b)},
                    slices=[{k: i[k] for k in ("dimension", "bucket", "position", "rate", "rest_rate")}
                            for i in low_slices])
    return Finding(ACCEPTANCE_BIMODAL, CODES[ACCEPTANCE_BIMODAL][0], message, tuple(sorted(evidence.items())))

