"""Faults inside the probe and around it, in real SGLang 0.5.23 EAGLE-3 speculative servers on the CPU: the server
never breaks and no count is lost.

Faults inside the probe are injected by the test-only shim `sglang_cpu.probe_faults` (SGLANG_CPU_PROBE_FAULTS,
applied in every server process by sglang_cpu/site/sitecustomize.py): each named probe function raises
RuntimeError("injected fault: SITE") on every call, or with ":N" on its first N calls only (the probe must then
recover). Faults of the world are made for real: a log directory that cannot be created, SGLang's
PROMETHEUS_MULTIPROC_DIR removed while the server runs, the probe's metrics port already taken, a dump directory
that fills up. Three servers, faults that would hide each other in different ones:

- A: fourteen probe functions failing at once, counted at fifteen sites (--enable-metrics, logs work), then
  PROMETHEUS_MULTIPROC_DIR removed;
- B: the log directory unusable (every log line fails) plus three more probe functions, and, once it is up, every
  server process put under a file size limit (RLIMIT_FSIZE, as `prlimit --fsize` sets it) that one all-layer dump
  exceeds, judged from /metrics;
- C: the metrics port taken (no --enable-metrics) and a dump directory capped at 8 KB, judged from the logs; stopped
  by SIGTERM to the launcher alone (as `docker stop` does), so the last counts come from the exit flush.

Every server is the "map" case of `sglang_cpu.draft_models` (greedy chain, 2 steps): tokens and SGLang's own
per-request counts must equal the construction (`simulate_chain`), and the probe's acceptance figures must equal
SGLang's per-request meta_info.
"""

import os
import re
import resource
import shutil
import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from sglang_cpu.draft_models import build_case, map_draft, map_target, simulate_chain

from .conftest import (
    SGLANG_WARMUP,
    construction_counts,
    counts_delta,
    internal_errors,
    metric_samples,
    probe_events,
    server_processes,
    settled_probe_counts,
    sglang_spec_counts,
    start_spec_server,
)

KEYS = ("into_fixed_point", "mixed")  # every acceptance pattern: full runs, one of two, none

# site (with ":N": its first N calls) -> {where it is counted: exact count, or None for "at least once"}
FAULTS_A = {
    "integrations.target_forward._after_forward:3": {"target.forward.after": 3},
    "integrations.targets._observe_capture_config": {"target.set_eagle3_layers_to_capture": None},
    "integrations.llama_eagle3._observe_draft_forward": {"llama_eagle3.forward": None},
    "integrations.draft_load._observe_loaded": {"llama_eagle3.load_weights": 1},
    # a speculative server takes the target's values and the draft's input at the EAGLE worker boundary
    # (values/boundary.py); the draft's inner forward samples nothing there
    "values.fingerprint.Fingerprinter.queue": {"worker.fingerprint": None},
    # its first call only: SGLang's warm-up; the test's two requests are often prefilled as one batch, the next call,
    # which must reach the fingerprint and the dump writer (their faults are counted from that first send)
    "integrations.eagle_worker._prefill_handoff:1": {"worker.prefill": 1},
    "integrations.eagle_worker._decode_handoff:2": {"worker.decode": 2},
    "integrations.runner_paths._count:2": {"model_runner.forward": 2},
    "values.dumps.DumpWriter._write": {"dumps.write": 1},
    "sinks.metrics.MetricsSink.forward_shapes": {"metrics.forward_shapes": None},
    "sinks.metrics.MetricsSink.add_forwards": {"metrics.add_forwards": None},
    "sinks.metrics.MetricsSink.add_verify_counts:2": {"metrics.add_verify_counts": 2},
    "recorder.Recorder.on_timer:2": {"flush": 2},
}
FAULTS_B = {
    "integrations.model_runner.register_model": {"model_runner.load_model": 2},  # the target's and the draft's
    "recorder.Recorder.target_forward:2": {"target.forward.after": 2},
    "integrations.acceptance._record:2": {"acceptance.resolve_spec_v2_tokens": 2},  # in SGLang's warm-up
}
DUMP_CAP_MB = 0.008  # 8388 bytes: the warm-up's 3-token dump (about 4 KB) fits, the next ones reach the cap
# Server B: RLIMIT_FSIZE set in every process after start-up (SGLang's start-up compiles kernels with g++, which a
# limit this low kills; its own log is about 32 KB); an all-layer dump of this target takes about 2.6 KB a token, so
# the case's prompts fit and the 300-token one does not
FILE_SIZE_LIMIT = 512 * 1024
LONG_PROMPT = ([(7 * i + 3) % 256 for i in range(300)], 2)


def _expected_wheres(faults):
    out = {}
    for wheres in faults.values():
        out.update(wheres)
    return out


def _send(server, case, keys=KEYS):
    """The case's prompts, concurrently (one batch): {key: generate_raw result}."""
    prompts = case["expected"]["prompts"]
    with ThreadPoolExecutor(len(keys)) as pool:
        futures = {k: pool.submit(server.generate_raw, prompts[k][0], max_new_tokens=prompts[k][1]) for k in keys}
        return {k: f.result() for k, f in futures.items()}


def _assert_construction(case, out):
    for key, got in out.items():
        expected = case["expected"]["runs"][key]
        assert got["output_ids"] == expected["output_ids"], key
        meta = got["meta_info"]
        assert meta["spec_verify_ct"] == expected["verify_ct"], key
        assert meta["spec_num_correct_drafts"] == expected["num_correct_drafts"], key
        assert meta["spec_correct_drafts_histogram"] == expected["histogram"], key


def _last_total(log_dir):
    """The running total of the newest eagle_probe.acceptance event (None before the first)."""
    events = probe_events(log_dir, "eagle_probe.acceptance")
    return events[-1]["total"] if events else None


def _settled_total(log_dir, wait_s=1.5, tries=6):
    """The newest acceptance total once it stops moving (the flush thread writes the window of an idle server)."""
    last = None
    for _ in range(tries):
        time.sleep(wait_s)
        current = _last_total(log_dir)
        if current is not None and current == last:
            return current
        last = current
    return last


def _multiproc_dir(process):
    """SGLang's PROMETHEUS_MULTIPROC_DIR, from the metric files (*.db) the scheduler holds open."""
    dirs = {os.path.dirname(f.path) for f in process.open_files() if f.path.endswith(".db")}
    assert len(dirs) == 1, dirs
    return dirs.pop()


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("faults-e2e"))


@pytest.fixture(scope="module")
def case(root):
    return build_case(root, "map", num_steps=2)


# ------------------------------------------------------- A: fourteen probe functions fail in one server


@pytest.fixture(scope="module")
def run_a(root, case):
    log_dir = os.path.join(root, "probe-a")
    dump_dir = os.path.join(root, "dumps-a")
    env = {"SGLANG_CPU_PROBE_FAULTS": ",".join(FAULTS_A), "EAGLE_PROBE_DUMP_DIR": dump_dir,
           "EAGLE_PROBE_DUMP_EVERY": "1"}
    t0 = time.monotonic()
    server = start_spec_server(root, "a", case, env)
    try:
        before = settled_probe_counts(server)
        out = _send(server, case)
        after = settled_probe_counts(server)
        metrics = server.metrics_text()
        # then the world: SGLang's multiprocess metrics directory disappears while the server runs
        multiproc_dir = _multiproc_dir(server_processes(server)["scheduler"])
        total_before_removal = _settled_total(log_dir)
        shutil.rmtree(multiproc_dir)
        out_removed = _send(server, case)
        total_after_removal = _settled_total(log_dir)
        metrics_removed = server.metrics_text()
        health = server._health_ok()
        log = server.log_text()
    finally:
        server.stop()
    return dict(out=out, before=before, after=after, metrics=metrics, out_removed=out_removed,
                total_before_removal=total_before_removal, total_after_removal=total_after_removal,
                metrics_removed=metrics_removed, health=health, log=log, log_dir=log_dir, dump_dir=dump_dir,
                seconds=time.monotonic() - t0)


def test_a_tokens_and_sglang_counts_match_construction(run_a, case):
    _assert_construction(case, run_a["out"])
    _assert_construction(case, run_a["out_removed"])


def test_a_each_fault_counted_under_its_own_where(run_a):
    errors = internal_errors(run_a["metrics"])
    expected = _expected_wheres(FAULTS_A)
    assert set(errors) == set(expected), errors
    for where, count in expected.items():
        if count is None:
            assert errors[where] >= 1, where
        else:
            assert errors[where] == count, (where, errors[where])


def test_a_each_fault_logged_once(run_a):
    """Once per process: the scheduler's every site; SGLang's HTTP server process (no TP rank) runs one of them, its
    own flush thread's."""
    [server] = {e["pid"] for e in probe_events(run_a["log_dir"], "eagle_probe.started")
                if e.get("role") == "http_server"}
    events = probe_events(run_a["log_dir"], "eagle_probe.internal_error")
    assert sorted(e["where"] for e in events if e["pid"] != server) == sorted(_expected_wheres(FAULTS_A))
    assert [e["where"] for e in events if e["pid"] == server] == ["flush"]
    for event in probe_events(run_a["log_dir"], "eagle_probe.internal_error"):
        assert event["error"].startswith("RuntimeError: injected fault: "), event


def test_a_acceptance_counters_equal_sglang_while_other_sites_fail(run_a):
    # the fingerprint path, the draft observer and the flush thread fail; the first two verify-count flushes (in
    # SGLang's warm-up) are refused by the sink and sent again: the warm-up is all there, nothing is lost
    metas = [r["meta_info"] for r in run_a["out"].values()]
    assert run_a["before"] == construction_counts([SGLANG_WARMUP])
    assert counts_delta(run_a["after"], run_a["before"]) == sglang_spec_counts(metas)


def test_a_other_sites_keep_reporting(run_a):
    events = probe_events(run_a["log_dir"])
    kinds = {e["event"] for e in events}
    # the target's observer recovered after its first six forwards failed (three before, three after)
    assert {"eagle_probe.started", "eagle_probe.target.forward", "eagle_probe.acceptance"} <= kinds
    assert not {"eagle_probe.draft.forward", "eagle_probe.draft.loaded", "eagle_probe.aux.fingerprint",
                "eagle_probe.capture.configured", "eagle_probe.dump.written"} & kinds  # their sites failed
    [stopped] = [e for e in events if e["event"] == "eagle_probe.dump.stopped"]
    assert stopped["reason"] == "error" and "injected fault" in stopped["error"]
    assert [v for _, v in metric_samples(run_a["metrics"], "eagle_probe_dumps_stopped_total")] == [1.0]
    assert not [n for n in os.listdir(run_a["dump_dir"]) if not n.startswith(".")]
    assert metric_samples(run_a["metrics"], "eagle_probe_spec_verify_steps_total")
    assert all(e.get("tp_rank") == 0 for e in events if e["event"] == "eagle_probe.acceptance")


def test_a_sglang_metrics_answer_and_nothing_escaped(run_a):
    assert re.search(r"^sglang:", run_a["metrics"], re.M)  # SGLang's own series, next to the probe's
    assert "Traceback" not in run_a["log"]
    assert "injected fault" not in run_a["log"]  # caught inside the probe, never printed by SGLang


def test_a_multiproc_dir_removed_while_running(run_a):
    # SGLang's /metrics still answers (its collector globs a directory that is gone: no series), the server serves,
    # and the probe's logs go on counting: the newest acceptance total moved by exactly SGLang's counts
    assert run_a["health"]
    assert "eagle_probe_" not in run_a["metrics_removed"]
    metas = [r["meta_info"] for r in run_a["out_removed"].values()]
    expected = sglang_spec_counts(metas)
    before, after = run_a["total_before_removal"], run_a["total_after_removal"]
    assert after["drafts"] - before["drafts"] == expected["drafts"]
    assert after["accepted_tokens"] - before["accepted_tokens"] == expected["accepted"]


# ------------------ B: the log directory cannot be created, three more sites, a file size limit once it is up


@pytest.fixture(scope="module")
def run_b(root, case):
    blocker = os.path.join(root, "not-a-directory")
    with open(blocker, "w", encoding="utf-8") as handle:
        handle.write("a file where the log directory's parent should be\n")
    log_dir = os.path.join(blocker, "probe")
    dump_dir = os.path.join(root, "dumps-b")
    env = {"SGLANG_CPU_PROBE_FAULTS": ",".join(FAULTS_B), "EAGLE_PROBE_LOG_DIR": log_dir,
           "EAGLE_PROBE_DUMP_DIR": dump_dir, "EAGLE_PROBE_DUMP_EVERY": "1", "EAGLE_PROBE_DUMP_LAYERS": "all"}
    t0 = time.monotonic()
    server = start_spec_server(root, "b", case, env)
    try:
        for process in [psutil.Process(server.proc.pid), *server_processes(server).values()]:
            resource.prlimit(process.pid, resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))
        before = settled_probe_counts(server)
        out = _send(server, case)
        after = settled_probe_counts(server)
        long = server.generate_raw(LONG_PROMPT[0], max_new_tokens=LONG_PROMPT[1])
        time.sleep(1.5)  # the writer thread, then the flush
        metrics = server.metrics_text()
        log = server.log_text()
    finally:
        server.stop()
    return dict(out=out, before=before, after=after, long=long, metrics=metrics, log=log, blocker=blocker,
                dump_dir=dump_dir, seconds=time.monotonic() - t0)


def test_b_tokens_and_sglang_counts_match_construction(run_b, case):
    _assert_construction(case, run_b["out"])
    expected = simulate_chain(map_target, map_draft, *LONG_PROMPT)
    assert run_b["long"]["output_ids"] == expected["output_ids"]
    assert run_b["long"]["meta_info"]["spec_verify_ct"] == expected["verify_ct"]


def test_b_file_size_limit_stops_dumps_before_a_partial_file(run_b):
    # the case's dumps were written; the long prompt's would pass RLIMIT_FSIZE: dumps stop, once, with that reason,
    # before a byte of it is written (a write past the limit fails with EFBIG in Python, which ignores SIGXFSZ)
    stopped = dict((labels["reason"], v) for labels, v in metric_samples(run_b["metrics"],
                                                                         "eagle_probe_dumps_stopped_total"))
    assert stopped == {"file_size_limit": 1.0}, stopped
    [(_, written)] = metric_samples(run_b["metrics"], "eagle_probe_dumps_written_total")
    files = sorted(os.listdir(run_b["dump_dir"]))
    assert written >= 2 and len(files) == written and not [f for f in files if not f.endswith(".safetensors")]
    assert max(os.path.getsize(os.path.join(run_b["dump_dir"], f)) for f in files) < FILE_SIZE_LIMIT


def test_b_unusable_log_dir_and_faults_counted(run_b):
    errors = internal_errors(run_b["metrics"])
    expected = _expected_wheres(FAULTS_B)
    assert set(errors) == set(expected) | {"logs.emit"}, errors
    assert errors["logs.emit"] >= 3  # every line fails: started, capture configured, draft loaded, ...
    for where, count in expected.items():
        assert errors[where] == count, (where, errors[where])
    with open(run_b["blocker"], encoding="utf-8") as handle:
        assert handle.read().startswith("a file")  # untouched


def test_b_metrics_keep_every_count(run_b):
    metas = [r["meta_info"] for r in run_b["out"].values()]
    # the two verify steps whose recording failed are the only ones missing (SGLang's warm-up's first two)
    assert run_b["before"] == construction_counts([SGLANG_WARMUP], skip_steps=2)
    assert counts_delta(run_b["after"], run_b["before"]) == sglang_spec_counts(metas)
    # roles still right without the registration (the class-name fallback), forwards still counted
    forwards = metric_samples(run_b["metrics"], "eagle_probe_target_forwards_total")
    assert forwards and {labels["role"] for labels, _ in forwards} == {"target"}
    assert metric_samples(run_b["metrics"], "eagle_probe_draft_forwards_total")
    assert "Traceback" not in run_b["log"] and "injected fault" not in run_b["log"]


# ------------------------------------- C: the metrics port is taken, the dump directory fills up (logs only)


@pytest.fixture(scope="module")
def run_c(root, case):
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    log_dir = os.path.join(root, "probe-c")
    dump_dir = os.path.join(root, "dumps-c")
    # no periodic summary or acceptance event: the only ones are written at the exit
    env = {"EAGLE_PROBE_METRICS_PORT": str(port), "EAGLE_PROBE_DUMP_DIR": dump_dir, "EAGLE_PROBE_DUMP_EVERY": "1",
           "EAGLE_PROBE_DUMP_MAX_MB": str(DUMP_CAP_MB), "EAGLE_PROBE_SUMMARY_INTERVAL_S": "3600"}
    t0 = time.monotonic()
    try:
        server = start_spec_server(root, "c", case, env, metrics=False)
        try:
            out = _send(server, case)
            health = server._health_ok()
            events_before_stop = probe_events(log_dir)
            # stopped as `docker stop` or Kubernetes stop a container: SIGTERM to the launcher (PID 1) alone
            t_stop = time.monotonic()
            os.kill(server.proc.pid, signal.SIGTERM)
            server.proc.wait(timeout=60)
            stop_seconds = time.monotonic() - t_stop
            log = server.log_text()
        finally:
            server.stop()
    finally:
        taken.close()
    return dict(out=out, health=health, log=log, events_before_stop=events_before_stop, stop_seconds=stop_seconds,
                log_dir=log_dir, dump_dir=dump_dir, port=port, seconds=time.monotonic() - t0)


def test_c_tokens_and_sglang_counts_match_construction(run_c, case):
    _assert_construction(case, run_c["out"])
    assert run_c["health"]


def test_c_metrics_port_taken_logged_once(run_c):
    [error] = probe_events(run_c["log_dir"], "eagle_probe.internal_error")
    assert error["where"] == "metrics.start" and "in use" in error["error"], error
    [started] = [e for e in probe_events(run_c["log_dir"], "eagle_probe.started") if e.get("role") != "http_server"]
    assert started["metrics_port"] is None
    [summary] = probe_events(run_c["log_dir"], "eagle_probe.summary")
    assert summary["internal_errors"] == 1
    assert "Traceback" not in run_c["log"]


def test_c_launcher_stop_writes_every_count_without_metrics(run_c):
    # SGLang's launcher drains, sends its schedulers a ShutdownReq and they exit normally: the probe's atexit flush
    # writes the one acceptance event, whose total is SGLang's warm-up plus the requests
    assert "Gracefully exiting" in run_c["log"] and "crashed with exit code" not in run_c["log"]
    assert not {"eagle_probe.acceptance", "eagle_probe.summary"} & {e["event"] for e in run_c["events_before_stop"]}
    [acceptance] = probe_events(run_c["log_dir"], "eagle_probe.acceptance")
    expected = sglang_spec_counts([r["meta_info"] for r in run_c["out"].values()])
    warmup = construction_counts([SGLANG_WARMUP])
    assert acceptance["total"]["drafts"] == warmup["drafts"] + expected["drafts"]
    assert acceptance["total"]["accepted_tokens"] == warmup["accepted"] + expected["accepted"]


def test_c_dump_directory_fills_up(run_c):
    written = probe_events(run_c["log_dir"], "eagle_probe.dump.written")
    [stopped] = probe_events(run_c["log_dir"], "eagle_probe.dump.stopped")
    assert written and stopped["reason"] == "cap", stopped
    files = [os.path.join(run_c["dump_dir"], n) for n in os.listdir(run_c["dump_dir"])]
    assert len(files) == len(written) and not [f for f in files if f.endswith(".tmp")]
    assert sum(os.path.getsize(f) for f in files) <= DUMP_CAP_MB * 1024 * 1024
