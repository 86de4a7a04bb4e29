"""The speed-up estimate (analysis/speculation_cost.py) on counts whose answer is worked out here by hand, and the
step timer (runtime/timing/) on a clock whose marks the test sets."""

import json
import math

import pytest

from eagle_probe.analysis import batch_buckets
from eagle_probe.analysis import speculation_cost as C
from eagle_probe.runtime.timing.steps import PHASE_MARKS, StepTimer


def test_buckets_are_powers_of_two_and_the_last_is_open():
    assert [batch_buckets.label(batch_buckets.bucket_of(n)) for n in (0, 1, 2, 3, 4, 7, 8, 255, 256, 10_000)] == [
        "1", "1", "2-3", "2-3", "4-7", "4-7", "8-15", "128-255", "256+", "256+"]
    assert batch_buckets.index_of("4-7") == 2
    with pytest.raises(ValueError, match="one of 1, 2-3"):
        batch_buckets.index_of("5")


def test_tokens_per_step_reads_the_survival_curve_then_extrapolates():
    survival = C.Survival(accepted=(80, 60), drafted=(100, 100))
    tau, error, extrapolated = survival.tokens_per_step(2)
    assert tau == pytest.approx(1 + 0.8 + 0.6) and not extrapolated
    assert error == pytest.approx(math.sqrt(0.8 * 0.2 / 100 + 0.6 * 0.4 / 100))
    # positions 2 and 3 were never drafted: the last conditional rate (0.6 / 0.8) repeats
    tau4, _, extrapolated = survival.tokens_per_step(4)
    assert extrapolated and tau4 == pytest.approx(2.4 + 0.6 * 0.75 + 0.6 * 0.75 ** 2)
    assert survival.tokens_per_step(0)[0] == 1.0
    # a position drafted by too few request-steps is not read
    thin = C.Survival(accepted=(80, 5), drafted=(100, C.MIN_POSITION_DRAFTS - 1))
    assert thin.tokens_per_step(2)[2] is True


def _fit_row(points):
    """FIT_FIELDS sums of (requests, tokens, seconds) points."""
    sums = [0.0] * len(C.FIT_FIELDS)
    for r, t, y in points:
        for i, value in enumerate((1, r, t, r * r, r * t, t * t, y, y * r, y * t, y * y)):
            sums[i] += value
    return sums


def test_the_forward_fit_tells_requests_from_tokens_with_its_error():
    # 1 ms a forward, 0.4 ms a request, 0.1 ms a token, +-0.05 ms of noise alternating; verify forwards (3 tokens a
    # request) and prefills (6 tokens a request) at batch 1 and 6
    def cost(i, r, t):
        return 0.001 + 0.0004 * r + 0.0001 * t + (0.00005 if i % 2 else -0.00005)

    shapes = {"TARGET_VERIFY:3:1": (1, 3), "TARGET_VERIFY:3:4-7": (6, 18), "EXTEND:*:1": (1, 6),
              "EXTEND:*:4-7": (6, 36)}
    fit = C.fit_forwards({key: _fit_row([(r, t, cost(i, r, t)) for i in range(40)]) for key, (r, t) in shapes.items()})
    assert not fit.collinear
    assert (fit.a, fit.c, fit.b) == pytest.approx((0.001, 0.0004, 0.0001), rel=1e-2, abs=1e-6)
    assert fit.seconds(6, 6) == pytest.approx(0.001 + 0.0024 + 0.0006, rel=1e-2)  # a plain step of 6 requests
    assert 0 < fit.error(6, 6) < 0.0001
    # verify forwards alone: requests and tokens rise together, so a plain step is taken as long as a verify of the
    # same batch (an upper bound)
    alone = C.fit_forwards({key: _fit_row([(r, t, cost(i, r, t)) for i in range(40)])
                            for key, (r, t) in shapes.items() if key.startswith("TARGET")})
    assert alone.collinear and alone.seconds(6, 6) == pytest.approx(0.001 + 0.0024 + 0.0018, rel=1e-2)
    one_size = C.fit_forwards({"TARGET_VERIFY:3:1": _fit_row([(1, 3, 0.004), (1, 3, 0.006)])})
    assert one_size.seconds(1, 1) == pytest.approx(0.005)


def _costs(period=0.010, periods=100, depth=2, batch=1, plain=None, accepted=(90, 80), drafted=(100, 100),
           draft_step=0.001):
    """A bucket of `periods` back-to-back steps of `period` seconds at `depth`, drafting at `draft_step` seconds a
    step; the target's forwards cost 1 ms + 0.5 ms a token (a request adds nothing)."""
    label = batch_buckets.LABELS[batch_buckets.bucket_of(batch)]
    steps = {label: {str(depth): [periods, periods * batch, draft_step * depth * periods, 0.005 * periods,
                                  0.001 * periods, 0.009 * periods, periods, period * periods,
                                  period * period * periods]}}
    tokens = batch * (depth + 1)
    forwards = {f"TARGET_VERIFY:{depth + 1}:{label}": _fit_row([(batch, tokens, 0.001 + 0.0005 * tokens)] * periods),
                "EXTEND:*:1": _fit_row([(1, 6, 0.001 + 0.0005 * 6)] * 5),
                "EXTEND:*:256+": _fit_row([(300, 300, 0.001 + 0.0005 * 300)] * 5)}
    if plain is not None:
        forwards[f"TARGET_VERIFY:1:{label}"] = _fit_row([(batch, batch, plain)] * periods)
    return {"source": "wall_clock", "topk": 1, "steps": steps, "forwards": forwards,
            "acceptance": {"all": {"accepted": list(accepted), "drafted": list(drafted)}}}


def test_speedup_and_break_even_from_the_period_and_the_plain_line():
    report = C.estimate(_costs())
    (bucket,) = report["buckets"]
    assert bucket["estimated"] and bucket["batch_size"] == [1, 1] and bucket["served_depth"] == 2
    plain = 0.001 + 0.0005 * 1  # the line at one token
    tau = 1 + 0.9 + 0.8
    assert bucket["plain_step_seconds"] == pytest.approx(plain)
    assert bucket["estimated_speedup"] == pytest.approx(tau * plain / 0.010, rel=1e-3)
    assert bucket["break_even_accept_length"] == pytest.approx(0.010 / plain, rel=1e-3)
    assert "cost model" in bucket["plain_source"]


def test_width_one_forwards_are_the_plain_step_where_they_ran():
    (bucket,) = C.estimate(_costs(plain=0.0042))["buckets"]
    assert bucket["plain_step_seconds"] == pytest.approx(0.0042) and "width-1" in bucket["plain_source"]


def test_slower_than_plain_names_the_bucket_and_turning_off():
    # 10 ms a step where a plain one takes 1.5 ms and 1.3 tokens come out of a step: 0.2x
    report = C.estimate(_costs(accepted=(20, 10), drafted=(100, 100)))
    codes = [f.code for f in C.findings(report)]
    assert codes == [C.SPECULATION_SLOWER_THAN_PLAIN]
    finding = C.findings(report)[0]
    assert "batch size 1" in finding.message and "candidate_steps [0]" in finding.message
    assert finding.evidence_dict()["estimated_speedup"] < 1
    assert C.adaptive_config(report) == {"1": {"candidate_steps": [0]}}


def test_a_fast_draft_at_depth_2_is_told_to_go_deeper():
    # every draft accepted: deeper chains pay as long as a draft step costs less than what a token saves
    # 4 ms a step at depth 2 (3 tokens: 1.1x); a draft step costs 0.2 ms where a verified token costs 0.5 ms
    report = C.estimate(_costs(period=0.004, accepted=(100, 100), drafted=(100, 100), draft_step=0.0002))
    (bucket,) = report["buckets"]
    assert bucket["recommended_num_steps"] > 2 and bucket["recommended_extrapolated"]
    assert [f.code for f in C.findings(report)] == [C.SPECULATION_DEPTH_OFF]
    assert C.adaptive_config(report) == {"1": {"candidate_steps": [bucket["recommended_num_steps"]]}}


def test_too_few_steps_or_no_forwards_say_why():
    (bucket,) = C.estimate(_costs(periods=C.MIN_STEPS - 1))["buckets"]
    assert not bucket["estimated"] and "fewer than" in bucket["why"]
    costs = _costs()
    costs["forwards"] = {}
    (bucket,) = C.estimate(costs)["buckets"]
    assert not bucket["estimated"] and "no timed target forward" in bucket["why"]


def test_merge_sums_processes():
    one, two = _costs(), _costs()
    merged = C.merge([one, two])
    row = merged["steps"]["1"]["2"]
    assert row[0] == 2 * one["steps"]["1"]["2"][0]
    assert merged["acceptance"]["all"]["drafted"] == [200, 200]
    assert C.estimate(merged)["buckets"][0]["estimated_speedup"] == pytest.approx(
        C.estimate(one)["buckets"][0]["estimated_speedup"])


def test_the_written_config_is_one_sglang_accepts(tmp_path):
    adaptive = pytest.importorskip("sglang.srt.speculative.adaptive_spec_params")
    path = tmp_path / "adaptive.json"
    path.write_text(json.dumps(C.adaptive_config(C.estimate(_costs(accepted=(20, 10), drafted=(100, 100))))))
    _, entries = adaptive._load_adaptive_config(str(path))
    assert entries == {1: {"candidate_steps": [0]}}


class SetClock:
    """Marks are the numbers the test sets; a mark is done once `done` reaches it (a device clock's query())."""

    source = "test"
    pooled = True

    def __init__(self):
        self.now, self.done, self.released = 0.0, float("inf"), []

    def mark(self):
        return self.now

    def ready(self, mark):
        return mark <= self.done

    def seconds(self, start, end):
        return end - start

    def release(self, mark):
        self.released.append(mark)


def _step(timer, clock, batch, draft, verify, extend, depth=2):
    step = timer.begin(batch)
    for phase, seconds in (("draft", draft), ("verify", verify), ("extend", extend)):
        first, last = PHASE_MARKS[phase]
        timer.phase(first)
        clock.now += seconds
        timer.phase(last)
    timer.end(step, depth)


def test_the_step_timer_counts_phases_periods_and_forwards():
    clock = SetClock()
    timer = StepTimer(clock)
    _step(timer, clock, 1, 1.0, 1.0, 1.0)  # the first step of its shape: once-only work, left out
    for _ in range(3):
        _step(timer, clock, 1, 0.002, 0.005, 0.001)
    timer.interrupt()  # a prefill: the next step does not follow
    for _ in range(2):
        _step(timer, clock, 6, 0.004, 0.010, 0.002, depth=0)
    for seconds in (0.5, 0.008):  # the first forward of its key is left out
        forward = timer.forward_begin("TARGET_VERIFY", 18, 6)
        clock.now += seconds
        timer.forward_end(forward)
    timer.resolve()
    counts = timer.snapshot()
    one = counts["steps"]["1"]["2"]
    assert one[:2] == [3, 3] and one[2:5] == pytest.approx([0.006, 0.015, 0.003])
    # periods: after the first step (left out with it), after the second and third; none after the prefill
    assert one[6] == 2 and one[7] > 0  # periods are read on the host clock
    six = counts["steps"]["4-7"]["0"]
    assert six[:2] == [1, 6] and six[6] == 0  # its first step and the period after it are left out
    assert counts["forwards"] == {"TARGET_VERIFY:3:4-7": pytest.approx(
        [1, 6, 18, 36, 108, 324, 0.008, 0.008 * 6, 0.008 * 18, 0.008 ** 2])}
    assert counts["first_calls"] == 5  # two steps, two periods, one forward


def test_nothing_is_read_before_its_mark_is_done():
    clock = SetClock()
    timer = StepTimer(clock)
    _step(timer, clock, 1, 0.002, 0.005, 0.001)  # the shape's first step, left out
    clock.done = clock.now - 1  # nothing from here on is done yet
    _step(timer, clock, 1, 0.002, 0.005, 0.001)
    assert timer.snapshot()["steps"] == {}
    clock.done = float("inf")
    assert timer.snapshot()["steps"]["1"]["2"][0] == 1
    assert clock.released  # the marks go back to the pool once read


def test_the_worker_counts_only_when_many_wait(monkeypatch):
    """The step's end queues it; the flush thread counts (resolve), the worker only at RESOLVE_AT waiting items."""
    from eagle_probe.runtime.timing import steps

    clock = SetClock()
    timer = StepTimer(clock)
    monkeypatch.setattr(steps, "RESOLVE_AT", 4)
    for _ in range(2):  # 2 steps and a period: 3 waiting
        _step(timer, clock, 1, 0.002, 0.005, 0.001)
    assert timer.counts.updates == 0 and len(timer._pending) == 3  # queued, not counted on the worker's thread
    _step(timer, clock, 1, 0.002, 0.005, 0.001)  # 5 waiting at its end: the worker counts them
    assert timer.counts.updates == 2 and not timer._pending  # (the shape's first step left out)
    _step(timer, clock, 1, 0.002, 0.005, 0.001)
    assert timer.counts.updates == 2 and len(timer._pending) == 2
    assert timer.snapshot()["steps"]["1"]["2"][0] == 3  # the flush thread's read counts it
