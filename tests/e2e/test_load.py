"""Load, nothing lost: one real SGLang 0.5.23 EAGLE-3 speculative server with the probe under 64 requests at
concurrency 16 (varied prompt and output lengths), against SGLang's own per-request figures; the probe's state
does not grow with requests; the scheduler's memory stays close to the same server's without the probe; and a stop
the way SGLangServer.stop does it (SIGTERM to the process group) still writes the last counts to the log.

The "map" case of `sglang_cpu.draft_models` (greedy chain, 2 steps): every request's tokens and SGLang's counts are
known from the construction (`simulate_chain`), under batching too. `sglang_cpu.probe_state`
(SGLANG_CPU_PROBE_STATE_DIR, test-only) reports the len() of every container the probe keeps in the scheduler.
Two servers: the probe's and a plain one (no probe) for the memory baseline.
"""

import os
import random
import re
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from eagle_probe.analysis import batch_buckets
from eagle_probe.runtime.install import SIGTERM_FLUSH_TIMEOUT_S
from eagle_probe.runtime.parts.costs import PHASES
from sglang_cpu import probe_state
from sglang_cpu.draft_models import build_case, map_draft, map_target, simulate_chain
from sglang_cpu.server import STOP_GRACE_S

from .conftest import (
    SGLANG_WARMUP,
    construction_counts,
    counts_delta,
    internal_errors,
    probe_events,
    server_processes,
    settled_probe_counts,
    sglang_spec_counts,
    start_spec_server,
)

REQUESTS = 64
CONCURRENCY = 16
FIRST_WAVE = 16
RSS_MARGIN_MB = 64  # asserted bound on (with probe - without), scheduler RSS after the same load
NUM_STEPS = 2  # the chain's draft depth
BOUNDED_QUEUES = {"fingerprints.pending": 4}  # containers that may hold a few items in flight, never more
# containers keyed by what a verify step can be, filled as the traffic shows each: acceptance counts per
# (depth, accepted), accepted 0..NUM_STEPS at the one depth served; the phase-time series per batch-size bucket
# (batches of 1..CONCURRENCY requests) and phase (draft, verify, extend, the whole step)
_BUCKETS = batch_buckets.bucket_of(CONCURRENCY) + 1
BOUNDED_BY_SHAPE = {"acceptance.counts": NUM_STEPS + 1, "Costs._sent": _BUCKETS * (len(PHASES) + 1),
                    "Costs._sent_steps": _BUCKETS, "Costs._speedups": _BUCKETS}


def load_requests(seed=0):
    """REQUESTS (prompt, max_new_tokens): prompts of 2 to 24 tokens of the 256-token vocabulary, 2 to 10 new tokens."""
    rng = random.Random(seed)
    return [([rng.randrange(256) for _ in range(rng.randint(2, 24))], rng.randint(2, 10)) for _ in range(REQUESTS)]


def _run_load(server, requests):
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        return list(pool.map(lambda r: server.generate_raw(r[0], max_new_tokens=r[1], timeout=300), requests))


def _state_after(directory, pid, since, timeout_s=5.0):
    """The scheduler's probe-state report written after `since` (time.time())."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        report = probe_state.read(directory).get(pid) if os.path.isdir(directory) else None
        if report is not None and report["time"] > since:
            return report["sizes"]
        time.sleep(0.1)
    raise AssertionError(f"no probe-state report from pid {pid} after {since}")


def _rss_mb(server):
    return server_processes(server)["scheduler"].memory_info().rss / 2**20


def _stop_timed(server):
    """server.stop() (SIGTERM to the process group), timed: (seconds until the whole group ended, seconds until the
    scheduler ended). The first depends on which of SGLang's own shutdown paths its launcher takes (measured here
    from 2 to 7.6 s for the same plain server); the second is the part the probe's SIGTERM handler can lengthen."""
    import threading

    import psutil

    scheduler = server_processes(server)["scheduler"]
    ended = {}

    def watch():
        while True:
            try:
                if scheduler.status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.02)
        ended["scheduler"] = time.monotonic() - t_stop

    watcher = threading.Thread(target=watch, daemon=True)
    t_stop = time.monotonic()
    watcher.start()
    server.stop()
    total = time.monotonic() - t_stop
    watcher.join(5)
    return total, ended.get("scheduler", float("inf"))


@pytest.fixture(scope="module")
def load(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("load-e2e"))
    case = build_case(root, "map", num_steps=NUM_STEPS)
    requests = load_requests()
    out = {"requests": requests, "case": case}

    t0 = time.monotonic()
    plain = start_spec_server(root, "plain", case, probe=False)
    try:
        out["plain"] = _run_load(plain, requests)
        out["plain_rss_mb"] = _rss_mb(plain)
    finally:
        out["plain_stop_seconds"], out["plain_scheduler_stop_seconds"] = _stop_timed(plain)
    out["plain_seconds"] = time.monotonic() - t0
    out["plain_log"] = plain.log_text()

    t0 = time.monotonic()
    state_dir = os.path.join(root, "state")
    log_dir = os.path.join(root, "probe-probed")
    # no periodic summary or acceptance event during the run: the only ones are written by the stop
    env = {"SGLANG_CPU_PROBE_STATE_DIR": state_dir, "EAGLE_PROBE_SUMMARY_INTERVAL_S": "3600"}
    server = start_spec_server(root, "probed", case, env)
    try:
        scheduler_pid = server_processes(server)["scheduler"].pid
        out["before"] = settled_probe_counts(server)
        t_load = time.monotonic()
        first = _run_load(server, requests[:FIRST_WAVE])
        out["state_first"] = _state_after(state_dir, scheduler_pid, time.time())
        rest = _run_load(server, requests[FIRST_WAVE:])
        out["load_seconds"] = time.monotonic() - t_load
        out["state_all"] = _state_after(state_dir, scheduler_pid, time.time())
        out["probed"] = first + rest
        out["after"] = settled_probe_counts(server)
        out["metrics"] = server.metrics_text()
        out["probed_rss_mb"] = _rss_mb(server)
        out["scheduler_pid"] = scheduler_pid
        out["events_before_stop"] = probe_events(log_dir)
    finally:
        out["stop_seconds"], out["scheduler_stop_seconds"] = _stop_timed(server)
    out["events"] = probe_events(log_dir)
    out["log_dir"] = log_dir
    out["probed_log"] = server.log_text()
    out["probed_seconds"] = time.monotonic() - t0
    print(f"\nload: plain server {out['plain_seconds']:.0f} s, probed server {out['probed_seconds']:.0f} s "
          f"({REQUESTS} requests in {out['load_seconds']:.0f} s), stop {out['stop_seconds']:.1f} s, "
          f"scheduler {out['scheduler_stop_seconds']:.2f} s (plain {out['plain_stop_seconds']:.1f} s, "
          f"{out['plain_scheduler_stop_seconds']:.2f} s); scheduler RSS "
          f"{out['probed_rss_mb']:.0f} MB with the probe, {out['plain_rss_mb']:.0f} MB without "
          f"({out['probed_rss_mb'] - out['plain_rss_mb']:+.1f} MB)")
    return out


def test_every_request_matches_the_construction_with_and_without_probe(load):
    for (prompt, n), plain, probed in zip(load["requests"], load["plain"], load["probed"]):
        expected = simulate_chain(map_target, map_draft, prompt, n)
        assert plain["output_ids"] == probed["output_ids"] == expected["output_ids"], prompt
        for got in (plain, probed):
            meta = got["meta_info"]
            assert meta["spec_verify_ct"] == expected["verify_ct"], prompt
            assert meta["spec_num_correct_drafts"] == expected["num_correct_drafts"], prompt
            assert meta["spec_correct_drafts_histogram"] == expected["histogram"], prompt


def test_probe_totals_equal_sglang_sums_under_load(load):
    metas = [r["meta_info"] for r in load["probed"]]
    expected = sglang_spec_counts(metas)
    assert expected["drafts"] > REQUESTS  # many verify steps, batched (concurrency 16)
    assert expected == construction_counts(load["requests"])
    assert load["before"] == construction_counts([SGLANG_WARMUP])  # the warm-up, excluded by the delta
    assert counts_delta(load["after"], load["before"]) == expected
    assert not any(internal_errors(load["metrics"]).values())


def test_probe_state_does_not_grow_with_requests(load):
    first, full = load["state_first"], load["state_all"]
    assert set(first) == set(full) and len(full) > 20  # every container is reported
    for name, bound in {**BOUNDED_QUEUES, **BOUNDED_BY_SHAPE}.items():
        assert full.pop(name, 0) <= bound and first.pop(name, 0) <= bound, name
    assert full == first  # after 16 and after 64 requests: the same sizes, item for item


def test_scheduler_memory_within_margin_of_plain_server(load):
    assert load["probed_rss_mb"] - load["plain_rss_mb"] <= RSS_MARGIN_MB


def test_sigterm_stop_writes_the_last_counts(load):
    # SGLangServer.stop sends SIGTERM to the process group; the scheduler's default action would end it without
    # atexit. The probe's handler flushes first: the only acceptance and summary events are the ones it wrote.
    kinds_before = {e["event"] for e in load["events_before_stop"]}
    assert not {"eagle_probe.acceptance", "eagle_probe.summary"} & kinds_before
    [acceptance] = [e for e in load["events"] if e["event"] == "eagle_probe.acceptance"]
    [summary] = [e for e in load["events"] if e["event"] == "eagle_probe.summary"]
    assert acceptance["pid"] == summary["pid"] == load["scheduler_pid"]
    expected = sglang_spec_counts([r["meta_info"] for r in load["probed"]])
    before = load["before"]  # SGLang's warm-up, counted before the load
    total = acceptance["total"]
    assert total["drafts"] == before["drafts"] + expected["drafts"]
    assert total["accepted_tokens"] == before["accepted"] + expected["accepted"]
    assert summary["internal_errors"] == 0
    # then the signal went on to the default action and SGLang stopped as it does without the probe: its launcher,
    # which got the same SIGTERM, either saw a watched subprocess end by it first or drained first. The watchdog
    # names the first dead one it finds: the detokenizer when the scheduler is still flushing.
    ended = re.compile(r"Subprocess (scheduler|detokenizer)\S* \(pid=\d+\) crashed with exit code -15"
                       r"|Gracefully exiting")
    assert ended.search(load["plain_log"]) and ended.search(load["probed_log"])
    # The probe lengthens only the scheduler's end, by its flush, which it waits for at most
    # SIGTERM_FLUSH_TIMEOUT_S. The whole group's stop is SGLang's own: its launcher takes one of two paths (a
    # watchdog that polls every second, or a drain loop that sleeps 5 s), 2 to 7.6 s for the same plain server, so
    # it is bounded by SGLangServer.stop's grace (no SIGKILL needed), not compared with one plain sample.
    assert load["scheduler_stop_seconds"] < load["plain_scheduler_stop_seconds"] + SIGTERM_FLUSH_TIMEOUT_S + 1
    assert load["stop_seconds"] < STOP_GRACE_S and load["plain_stop_seconds"] < STOP_GRACE_S


def test_summarize_names_no_slice_under_batched_load(load, capsys):
    """The silent control of tests/e2e/test_slice_server.py under batching: a correct server, 64 requests of varied
    prompts at concurrency 16, where the slice test runs (a slice and the rest of its dimension with at least 64
    request-steps each) and must name nothing."""
    import json

    from eagle_probe.analysis.slices import MIN_REQUEST_STEPS
    from eagle_probe.commands.cli import main

    assert main(["summarize", load["log_dir"], "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    [rank] = report["acceptance_slices"]["ranks"]
    tested = [(dimension, bucket) for dimension, buckets in rank["slices"].items() for bucket, row in buckets.items()
              if MIN_REQUEST_STEPS <= row["request_steps"]
              <= sum(r["request_steps"] for r in buckets.values()) - MIN_REQUEST_STEPS]
    assert ("step", "first") in tested and any(d == "batch" for d, _ in tested), rank["slices"]
    assert rank["low"] == [] and not [f for f in report["findings"] if f["code"] == "acceptance_slice_low"]
    # the per-request accept lengths of this traffic are one group by construction (simulate_chain: 52 of
    # the 64 requests at <=2, none far from them), so acceptance_bimodal runs (20+ finished requests) and is silent.
    from eagle_probe.analysis import bimodal

    assert sum(rank["request_accept_length"].values()) >= bimodal.MIN_REQUESTS
    assert bimodal.split(_construction_lengths()) is None
    assert not [f for f in report["findings"] if f["code"] == "acceptance_bimodal"], rank["request_accept_length"]


def _construction_lengths():
    """The per-request accept-length histogram the construction gives this load (SGLang's warm-up left out)."""
    from eagle_probe.analysis.slices import request_length_bucket

    histogram = {}
    for prompt, new in load_requests():
        steps = simulate_chain(map_target, map_draft, prompt, new, NUM_STEPS)["per_step"]
        if steps:
            bucket = request_length_bucket(1 + sum(steps) / len(steps))
            histogram[bucket] = histogram.get(bucket, 0) + 1
    return histogram
