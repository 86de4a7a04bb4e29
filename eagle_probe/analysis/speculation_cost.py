"""Does speculation pay? From what the probe timed (runtime/parts/costs.py: the eagle_probe.spec.costs event, counts
since the process started) and the acceptance it counted, for each batch-size bucket and traffic class:

- tokens per step at depth k, tau(k) = 1 + sum over positions j < k of P(position j accepted), from the per-position
  survival curve; positions never drafted are extrapolated (the last conditional rate repeats) and said so;
- the plain step's time T_plain(B): measured where a server without speculation was timed too (its costs events,
  server "plain": its decode steps' period in the same bucket), else the target's width-1 forwards in that bucket
  where they ran (adaptive depth 0: a verify of one token per request, an upper bound of a plain decode), else a
  least-squares fit of the target's forward time on its requests and tokens (a + c x requests + b x tokens;
  decode, verify and short prefill forwards) read at B requests of one token, with its standard error;
- the speculative step's time: the period from one decode step's start to the next one's, back to back (what the
  server spends per step, its own scheduling included), else the worker's step alone;
- the speed-up S = tau x T_plain / T_step, the break-even accept length T_step / T_plain, and the depth that
  maximises S: T_step(k) = fixed + k x (draft time per draft step) + T_forward(B, B x (k + 1)), the fixed part read
  from the served depths.
S is uncertain through T_plain (the fit), the mean period and tau (binomial per position); `uncertainty` is its
standard error, and "beyond it" means by two of them.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from . import batch_buckets
from .findings import SPECULATION_DEPTH_OFF, SPECULATION_SLOWER_THAN_PLAIN, Finding, _finding

MIN_STEPS = 20  # timed decode steps a bucket needs before it is estimated
MIN_POSITION_DRAFTS = 20  # request-steps that drafted a position before its rate is read, not extrapolated
MIN_CLASS_STEPS = 50  # request-steps of a traffic class before it is estimated on its own
MAX_DEPTH = 7  # deepest chain considered (SGLang's default adaptive candidates reach 7)
DEPTH_MARGIN = 0.10  # the best depth must beat the served one by this share, beyond the uncertainty
CLASSES = ("all", "greedy", "sampled")

# The costs event's per-(bucket, depth) list, in order.
STEP_FIELDS = ("steps", "batch_sum", "draft_s", "verify_s", "extend_s", "step_s", "periods", "period_s", "period_s2")
# A forward key's sufficient statistics of r = requests, t = tokens, y = seconds (sums of each and of their products).
FIT_FIELDS = ("n", "r", "t", "rr", "rt", "tt", "y", "yr", "yt", "yy")


# -- tokens per step ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Survival:
    """Request-steps that accepted / drafted each 0-based draft position."""

    accepted: Sequence[int]
    drafted: Sequence[int]

    @property
    def request_steps(self) -> int:
        return int(self.drafted[0]) if self.drafted else 0

    def _rates(self) -> list[tuple[float, int]]:
        """(P(position j accepted), request-steps that drafted it) for the positions read from data."""
        out = []
        for accepted, drafted in zip(self.accepted, self.drafted):
            if drafted < MIN_POSITION_DRAFTS:
                break
            out.append((min(accepted / drafted, 1.0), int(drafted)))
        return out

    def tokens_per_step(self, depth: int) -> tuple[float, float, bool]:
        """(tau(depth), its standard error, whether positions were extrapolated)."""
        rates = self._rates()
        tau, variance, extrapolated = 1.0, 0.0, False
        last, ratio = 1.0, 1.0
        if len(rates) >= 2 and rates[-2][0] > 0:
            ratio = min(rates[-1][0] / rates[-2][0], 1.0)
        elif rates:
            ratio = rates[0][0]
        for j in range(depth):
            if j < len(rates):
                p, n = rates[j]
                variance += p * (1 - p) / n
            else:
                p, extrapolated = last * ratio, True
            tau += p
            last = p
        return tau, math.sqrt(variance), extrapolated


def survival_of(counts: Mapping | None) -> Survival | None:
    if not isinstance(counts, Mapping):
        return None
    accepted, drafted = counts.get("accepted") or [], counts.get("drafted") or []
    if not drafted:
        return None
    return Survival(tuple(int(a) for a in accepted), tuple(int(d) for d in drafted))


# -- the target's forward cost -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ForwardFit:
    """seconds = a + c x requests + b x tokens over the target's timed forwards (least squares), with what the
    standard error needs. Where the forwards' requests and tokens rise together (every forward of one width), the
    two cannot be told apart: the cost is put on the requests (`collinear`), so a plain step is taken as long as a
    forward of the same batch, an upper bound."""

    a: float
    c: float
    b: float
    n: int
    means: tuple[float, float]  # requests, tokens
    inverse: tuple[float, float, float]  # the centred normal matrix's inverse: (rr, rt, tt)
    residual: float  # standard deviation of one forward around the fit
    misfit: float  # RMS of the per-key means' distance from the fit (kinds of forward the fit misses)
    collinear: bool

    def seconds(self, requests: float, tokens: float) -> float:
        return max(self.a + self.c * requests + self.b * tokens, 0.0)

    def error(self, requests: float, tokens: float) -> float:
        """Standard error of the fit at (requests, tokens), the misfit of its keys added."""
        if self.n < 4 or not math.isfinite(self.residual):
            return math.inf
        dr, dt = requests - self.means[0], tokens - self.means[1]
        rr, rt, tt = self.inverse
        spread = dr * dr * rr + 2 * dr * dt * rt + dt * dt * tt
        return math.sqrt(self.residual ** 2 * (1 / self.n + spread) + self.misfit ** 2)


def _sums(rows: Sequence[Sequence[float]]) -> list[float]:
    total = [0.0] * len(FIT_FIELDS)
    for row in rows:
        for i, value in enumerate(row[:len(FIT_FIELDS)]):
            total[i] += float(value)
    return total


def fit_forwards(forwards: Mapping[str, Sequence[float]]) -> ForwardFit | None:
    n, r, t, rr, rt, tt, y, yr, yt, yy = _sums(list(forwards.values()))
    if n < 1:
        return None
    mr, mt, my = r / n, t / n, y / n
    srr, srt, stt = rr - r * mr, rt - r * mt, tt - t * mt
    sry, sty, syy = yr - r * my, yt - t * my, yy - y * my
    det = srr * stt - srt * srt
    collinear = not (srr > 1e-9 and stt > 1e-9 and det > 1e-6 * srr * stt)
    if not collinear:
        c, b = (sry * stt - sty * srt) / det, (sty * srr - sry * srt) / det
        inverse = (stt / det, -srt / det, srr / det)
    else:  # one kind of forward: the cost on the requests (an upper bound of a plain step)
        c, b = (sry / srr if srr > 1e-9 else 0.0), 0.0
        inverse = (1 / srr if srr > 1e-9 else 0.0, 0.0, 0.0)
    a = my - c * mr - b * mt
    sse = max(syy - c * sry - b * sty, 0.0)
    parameters = 3 if not collinear else 2
    residual = math.sqrt(sse / (n - parameters)) if n > parameters else math.inf
    fit = ForwardFit(a, c, b, int(n), (mr, mt), inverse, residual, 0.0, collinear)
    misses = [row[6] / row[0] - fit.seconds(row[1] / row[0], row[2] / row[0]) for row in forwards.values() if row[0]]
    misfit = math.sqrt(sum(m * m for m in misses) / len(misses)) if len(misses) > 3 else 0.0
    return ForwardFit(a, c, b, int(n), (mr, mt), inverse, residual, misfit, collinear)


def _width_one_seconds(forwards: Mapping[str, Sequence[float]], bucket: str) -> tuple[float, float, int] | None:
    """Mean seconds, standard error and count of the bucket's width-1 target forwards (keys MODE:WIDTH:BUCKET)."""
    rows = [row for key, row in forwards.items() if key.split(":")[1:] == ["1", bucket]]
    total = _sums(rows)
    n, y, yy = total[0], total[6], total[9]
    if n < MIN_STEPS:
        return None
    mean = y / n
    sd = math.sqrt(max(yy / n - mean ** 2, 0.0))
    return mean, sd / math.sqrt(n), int(n)


# -- per bucket --------------------------------------------------------------------------------------------------------

@dataclass
class DepthRow:
    depth: int
    steps: int
    batch_sum: int
    draft_s: float
    verify_s: float
    extend_s: float
    step_s: float
    periods: int
    period_s: float
    period_s2: float

    @classmethod
    def of(cls, depth: int, values: Sequence[float]) -> "DepthRow":
        v = [float(x) for x in values] + [0.0] * (len(STEP_FIELDS) - len(values))
        return cls(depth, steps=int(v[0]), batch_sum=int(v[1]), draft_s=v[2], verify_s=v[3], extend_s=v[4],
                   step_s=v[5], periods=int(v[6]), period_s=v[7], period_s2=v[8])

    def step_seconds(self) -> tuple[float, float, str]:
        """(mean seconds of one step, its standard error, what was measured)."""
        if self.periods >= MIN_STEPS:
            mean = self.period_s / self.periods
            sd = math.sqrt(max(self.period_s2 / self.periods - mean ** 2, 0.0))
            return mean, sd / math.sqrt(self.periods), "period"
        return self.step_s / self.steps, 0.0, "worker step"


@dataclass
class BucketCosts:
    label: str
    rows: dict[int, DepthRow] = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return sum(r.steps for r in self.rows.values())

    @property
    def mean_batch(self) -> float:
        return sum(r.batch_sum for r in self.rows.values()) / max(self.steps, 1)

    def phase_means(self) -> dict:
        steps = max(self.steps, 1)
        out = {name: round(sum(getattr(r, f"{name}_s") for r in self.rows.values()) / steps, 9)
               for name in ("draft", "verify", "extend", "step")}
        periods = sum(r.periods for r in self.rows.values())
        out["period"] = round(sum(r.period_s for r in self.rows.values()) / periods, 9) if periods else None
        return out


def buckets_of(steps: Mapping[str, Mapping[str, Sequence[float]]]) -> list[BucketCosts]:
    out = []
    for label in batch_buckets.LABELS:
        depths = steps.get(label) or {}
        rows = (DepthRow.of(int(d), v) for d, v in depths.items())
        # a row of periods alone (its steps were not timed) carries no step to divide by
        bucket = BucketCosts(label, {row.depth: row for row in rows if row.steps > 0})
        if bucket.steps:
            out.append(bucket)
    return out


@dataclass(frozen=True)
class Plain:
    seconds: float
    error: float
    source: str


def _plain_server_step(plain_steps: Mapping, bucket: BucketCosts) -> Plain | None:
    """The bucket's decode steps timed on a server without speculation (the costs events with server "plain"), where
    at least MIN_STEPS ran: measured, not estimated."""
    values = plain_steps.get(bucket.label)
    if not values:
        return None
    row = DepthRow.of(0, values)
    if row.steps < MIN_STEPS:
        return None
    seconds, error, what = row.step_seconds()
    return Plain(seconds, error, f"measured: {row.steps} decode steps of a server without speculation ({what}, mean "
                                 f"batch {row.batch_sum / row.steps:.3g} against {bucket.mean_batch:.3g} here)")


def plain_step(bucket: BucketCosts, costs: Mapping, fit: ForwardFit | None) -> Plain | str:
    """The plain step's time, or why there is none: measured on a plain server where its logs were given, else the
    width-1 target forwards, else the fit."""
    served = _plain_server_step(costs.get("plain_steps") or {}, bucket)
    if served is not None:
        return served
    measured = _width_one_seconds(costs.get("forwards") or {}, bucket.label)
    if measured is not None:
        return Plain(measured[0], measured[1], f"width-1 target forwards ({measured[2]}; an upper bound)")
    if fit is None:
        return "no timed target forward to estimate a plain step from"
    batch = bucket.mean_batch
    seconds = fit.seconds(batch, batch)
    if seconds <= 0:
        return (f"the fit of the target's forwards gives no positive time at {batch:.3g} requests (its forwards vary "
                f"too little, or too noisily)")
    how = "requests and tokens rose together: a plain forward taken as long as a forward of the same batch, an " \
        "upper bound" if fit.collinear else f"fit of seconds on requests and tokens over {fit.n} target forwards; " \
        "verify and prefill forwards, which can cost more than a plain decode forward: an upper bound"
    return Plain(seconds, fit.error(batch, batch), f"cost model ({how})")


@dataclass(frozen=True)
class StepModel:
    """T_step(k) = fixed + k x per_draft_step + T_forward(B x (k + 1)), read from the bucket's served depths."""

    fixed: float
    per_draft_step: float
    batch: float
    fit: ForwardFit | None

    def seconds(self, depth: int) -> float:
        forward = self.fit.seconds(self.batch, self.batch * (depth + 1)) if self.fit is not None else 0.0
        return self.fixed + depth * self.per_draft_step + forward


def step_model(bucket: BucketCosts, fit: ForwardFit | None) -> StepModel:
    batch = bucket.mean_batch
    fixed_sum = per_step_sum = weight = drafting = 0.0
    for row in bucket.rows.values():
        seconds, _, _ = row.step_seconds()
        draft = row.draft_s / row.steps
        forward = fit.seconds(batch, batch * (row.depth + 1)) if fit is not None else 0.0
        fixed_sum += row.steps * (seconds - draft - forward)
        weight += row.steps
        if row.depth > 0:
            per_step_sum += row.steps * draft / row.depth
            drafting += row.steps
    return StepModel(fixed_sum / weight, per_step_sum / drafting if drafting else 0.0, batch, fit)


# -- the estimate ------------------------------------------------------------------------------------------------------

def _relative(value: float, error: float) -> float:
    return error / value if value > 0 else math.inf


def _served(bucket: BucketCosts, survival: Survival) -> tuple[float, float, float]:
    """(tokens per step, seconds per step, relative error of their ratio) over the depths the bucket served."""
    tokens = seconds = 0.0
    tau_var = time_var = 0.0
    for row in bucket.rows.values():
        tau, tau_error, _ = survival.tokens_per_step(row.depth)
        step, step_error, _ = row.step_seconds()
        tokens += row.steps * tau
        seconds += row.steps * step
        tau_var += (row.steps * tau_error) ** 2
        time_var += (row.steps * step_error) ** 2
    rel = math.sqrt(tau_var / tokens ** 2 + time_var / seconds ** 2) if tokens and seconds else math.inf
    return tokens / bucket.steps, seconds / bucket.steps, rel


def _by_depth(bucket: BucketCosts, survival: Survival, plain: Plain, model: StepModel) -> dict[int, dict]:
    """Estimated speed-up at every depth 1..MAX_DEPTH (or the deepest served)."""
    deepest = max([MAX_DEPTH, *bucket.rows])
    out = {}
    for depth in range(1, deepest + 1):
        tau, _, tau_extrapolated = survival.tokens_per_step(depth)
        row = bucket.rows.get(depth)
        seconds = row.step_seconds()[0] if row is not None else model.seconds(depth)
        if seconds <= 0:
            continue
        out[depth] = {"speedup": round(tau * plain.seconds / seconds, 4), "tokens_per_step": round(tau, 4),
                      "step_seconds": round(seconds, 9), "served": row is not None,
                      "extrapolated": tau_extrapolated or row is None}
    return out


def class_estimate(bucket: BucketCosts, survival: Survival, plain: Plain, model: StepModel) -> dict:
    tau, seconds, rel = _served(bucket, survival)
    speedup = tau * plain.seconds / seconds
    error = speedup * math.sqrt(rel ** 2 + _relative(plain.seconds, plain.error) ** 2)
    depths = _by_depth(bucket, survival, plain, model)
    best = max(depths, key=lambda d: depths[d]["speedup"]) if depths else None
    recommended = best if best is not None and depths[best]["speedup"] > 1 else 0
    return {"request_steps": survival.request_steps, "tokens_per_step": round(tau, 4),
            "estimated_speedup": round(speedup, 4), "uncertainty": round(error, 4) if math.isfinite(error) else None,
            "break_even_accept_length": round(seconds / plain.seconds, 4), "recommended_num_steps": recommended,
            "recommended_extrapolated": bool(recommended and depths[recommended]["extrapolated"]),
            "by_depth": {str(d): v for d, v in depths.items()}}


def served_depth(bucket: BucketCosts) -> int:
    """The depth most of the bucket's steps ran at."""
    return max(bucket.rows.values(), key=lambda r: (r.steps, -r.depth)).depth


def bucket_estimate(bucket: BucketCosts, costs: Mapping, fit: ForwardFit | None) -> dict:
    lo, hi = batch_buckets.BOUNDS[batch_buckets.index_of(bucket.label)]
    out = {"batch_size": [lo, hi], "bucket": bucket.label, "steps": bucket.steps,
           "mean_batch_size": round(bucket.mean_batch, 3), "served_depth": served_depth(bucket),
           "served_depths": {str(d): r.steps for d, r in sorted(bucket.rows.items())},
           "phase_seconds": bucket.phase_means()}
    if bucket.steps < MIN_STEPS:
        return {**out, "estimated": False, "why": f"{bucket.steps} timed steps, fewer than {MIN_STEPS}"}
    plain = plain_step(bucket, costs, fit)
    if isinstance(plain, str):
        return {**out, "estimated": False, "why": plain}
    model = step_model(bucket, fit)
    classes = {}
    for name in CLASSES:
        survival = survival_of((costs.get("acceptance") or {}).get(name))
        if survival is None or survival.request_steps < (MIN_STEPS if name == "all" else MIN_CLASS_STEPS):
            continue
        classes[name] = class_estimate(bucket, survival, plain, model)
    if "all" not in classes:
        return {**out, "estimated": False, "why": "too few verified request-steps to read the acceptance"}
    top = classes["all"]
    return {**out, "estimated": True, "plain_step_seconds": round(plain.seconds, 9),
            "plain_step_error": round(plain.error, 9) if math.isfinite(plain.error) else None,
            "plain_source": plain.source, **{k: top[k] for k in (
                "estimated_speedup", "uncertainty", "break_even_accept_length", "recommended_num_steps",
                "recommended_extrapolated", "tokens_per_step")}, "classes": classes}


def estimate(costs: Mapping) -> dict:
    """The whole estimate from one costs event (or several merged): {"source", "topk", "fit", "buckets": [...]}."""
    forwards = costs.get("forwards") or {}
    fit = fit_forwards(forwards)
    buckets = [bucket_estimate(b, costs, fit) for b in buckets_of(costs.get("steps") or {})]
    out = {"source": costs.get("source"), "topk": costs.get("topk"), "buckets": buckets}
    if fit is not None:
        out["fit"] = {"seconds_per_forward": round(fit.a, 9), "seconds_per_request": round(fit.c, 12),
                      "seconds_per_token": round(fit.b, 12), "forwards": fit.n, "collinear": fit.collinear}
    return out


def merge(events: Sequence[Mapping]) -> dict:
    """Several processes' costs events summed (each is cumulative: pass the last of each process)."""
    steps: dict = {}
    plain_steps: dict = {}
    forwards: dict = {}
    acceptance: dict = {}
    for event in events:
        for label, depths in (event.get("steps") or {}).items():
            for depth, values in depths.items():
                _add(steps.setdefault(label, {}), depth, values)
        for label, values in (event.get("plain_steps") or {}).items():
            _add(plain_steps, label, values or [])
        if event.get("server") == "plain":
            continue  # its forwards are plain decodes, not the speculative server's; it has no acceptance
        for key, values in (event.get("forwards") or {}).items():
            _add(forwards, key, values)
        for name, counts in (event.get("acceptance") or {}).items():
            side = acceptance.setdefault(name, {"accepted": [], "drafted": []})
            for part in ("accepted", "drafted"):
                _add(side, part, counts.get(part) or [])
    speculative = [e for e in events if e.get("server") != "plain"]
    first = speculative[0] if speculative else {}
    sources = sorted({str(e.get("source")) for e in speculative})
    return {"source": sources[0] if len(sources) == 1 else "+".join(sources), "topk": first.get("topk"),
            "steps": steps, "plain_steps": plain_steps, "forwards": forwards, "acceptance": acceptance}


def since(later: Mapping, earlier: Mapping | None) -> dict:
    """One process's counts between two of its costs events (each counts since the process started): every count of
    `later` less the same count of `earlier`; `later` whole where there is no earlier one."""
    if earlier is None:
        return dict(later)
    out = dict(later)
    for key in ("steps", "plain_steps", "forwards", "acceptance"):
        out[key] = _less(later.get(key), earlier.get(key))
    return out


def _less(later, earlier):
    if isinstance(later, Mapping):
        earlier = earlier if isinstance(earlier, Mapping) else {}
        return {k: _less(v, earlier.get(k)) for k, v in later.items()}
    if isinstance(later, list):
        earlier = earlier if isinstance(earlier, list) else []
        return [_less(v, earlier[i] if i < len(earlier) else None) for i, v in enumerate(later)]
    if isinstance(later, (int, float)) and not isinstance(later, bool) and isinstance(earlier, (int, float)):
        return later - earlier
    return later


def _add(into: dict, key, values) -> None:
    have = into.setdefault(key, [])
    for i, value in enumerate(values):
        if i < len(have):
            have[i] += value
        else:
            have.append(value)


# -- findings and the adaptive config ----------------------------------------------------------------------------------

def _fix(bucket: dict, name: str, cls: dict) -> str:
    lo = bucket["batch_size"][0]
    best = cls["by_depth"].get(str(cls["recommended_num_steps"])) if cls["recommended_num_steps"] else None
    if best is not None:
        extrapolated = " (extrapolated: never served)" if best["extrapolated"] else ""
        return (f"serve {cls['recommended_num_steps']} draft steps at this batch size{extrapolated}, estimated "
                f"{best['speedup']:.2f}x: `eagle-probe advise --write` writes the adaptive config")
    if name != "all":
        return f"serve {name} traffic without speculation (another server, or route it there)"
    return (f"turn speculation off from batch size {lo}: --speculative-adaptive with candidate_steps [0] for "
            f"\"{lo}\" (`eagle-probe advise --write`), or serve without a draft")


def findings(report: Mapping) -> list[Finding]:
    out = []
    for bucket in report.get("buckets") or ():
        if not bucket.get("estimated"):
            continue
        everything = bucket["classes"]["all"]["request_steps"]
        for name, cls in bucket["classes"].items():
            if name != "all" and cls["request_steps"] == everything:
                continue  # all the traffic is of this class: the finding on all of it says it
            error = cls["uncertainty"]
            if error is not None and cls["estimated_speedup"] + 2 * error < 1:
                out.append(_slower(bucket, name, cls, report.get("source")))
        depth_off = _depth_off(bucket)
        if depth_off is not None:
            out.append(depth_off)
    return out


def _step_seconds(bucket: dict) -> float:
    phases = bucket["phase_seconds"]
    return phases["period"] or phases["step"]


def _slower(bucket: dict, name: str, cls: dict, source) -> Finding:
    traffic = "all traffic" if name == "all" else f"{name} traffic"
    return _finding(
        SPECULATION_SLOWER_THAN_PLAIN,
        f"batch size {bucket['bucket']}, {traffic}: speculation is estimated at {cls['estimated_speedup']:.2f}x "
        f"(+-{cls['uncertainty']:.2f}) of plain decoding: {cls['tokens_per_step']:.2f} tokens per step where "
        f"{cls['break_even_accept_length']:.2f} would break even (a step costs {_step_seconds(bucket):.4g} s, a plain "
        f"one {bucket['plain_step_seconds']:.4g} s, {bucket['plain_source']}). Fix: {_fix(bucket, name, cls)}.",
        batch_size=bucket["batch_size"], traffic=name, estimated_speedup=cls["estimated_speedup"],
        uncertainty=cls["uncertainty"], tokens_per_step=cls["tokens_per_step"],
        break_even_accept_length=cls["break_even_accept_length"], recommended_num_steps=cls["recommended_num_steps"],
        plain_step_seconds=bucket["plain_step_seconds"], phase_seconds=bucket["phase_seconds"], timing=source)


def _depth_off(bucket: dict) -> Finding | None:
    cls = bucket["classes"]["all"]
    served, best = bucket["served_depth"], cls["recommended_num_steps"]
    at = cls["by_depth"]
    if best == served or not best or str(served) not in at:
        return None
    gain = at[str(best)]["speedup"] / at[str(served)]["speedup"] - 1 if at[str(served)]["speedup"] else math.inf
    error = math.inf if cls["uncertainty"] is None else cls["uncertainty"]
    if gain < DEPTH_MARGIN or at[str(best)]["speedup"] - at[str(served)]["speedup"] < 2 * error:
        return None
    extrapolated = " (extrapolated: never served)" if at[str(best)]["extrapolated"] else ""
    return _finding(
        SPECULATION_DEPTH_OFF,
        f"batch size {bucket['bucket']}: served at {served} draft steps ({at[str(served)]['speedup']:.2f}x of plain "
        f"decoding); {best} steps would give {at[str(best)]['speedup']:.2f}x{extrapolated}. Fix: "
        f"--speculative-num-steps {best} (--speculative-num-draft-tokens {best + 1}) for this batch size, or the "
        f"adaptive config `eagle-probe advise --write` writes.",
        batch_size=bucket["batch_size"], served_num_steps=served, recommended_num_steps=best,
        served_speedup=at[str(served)]["speedup"], recommended_speedup=at[str(best)]["speedup"],
        extrapolated=bool(at[str(best)]["extrapolated"]))


def adaptive_config(report: Mapping) -> dict:
    """SGLang's --speculative-adaptive-config: for each bucket served, its lower bound as the key and one candidate:
    the recommended depth where estimated (0: no drafting there), else the depth it was served at (SGLang sends a
    batch size to the largest key at or below it, so a bucket left out would take its neighbour's advice). Empty
    when no bucket was estimated."""
    buckets = [b for b in report.get("buckets") or () if b.get("steps")]
    if not any(b.get("estimated") for b in buckets):
        return {}
    return {str(b["batch_size"][0]): {"candidate_steps": [int(b["recommended_num_steps"] if b.get("estimated")
                                                               else b["served_depth"])]} for b in buckets}


def launch_args(config: Mapping, path: str) -> list[str]:
    """What SGLang is launched with to serve `config` from `path`: adaptive on, and a start depth among the
    candidates (SGLang refuses a --speculative-num-steps outside them; it sets the draft tokens to steps + 1)."""
    first = config[min(config, key=int)]["candidate_steps"][0]
    return ["--speculative-adaptive", "--speculative-adaptive-config", path, "--speculative-num-steps", str(first),
            "--speculative-eagle-topk", "1"]
