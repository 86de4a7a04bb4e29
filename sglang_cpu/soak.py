"""A soak: two real speculative CPU servers of the "map" case (sglang_cpu.draft_models), one with the probe and one
without, both up at once and served the same mixed traffic for a while, sampled as they go. Used by
benchmarks/soak.py (30 minutes by default) and its short form, tests/e2e/test_soak.py.

The traffic, from seeded random numbers (the same requests to both servers): concurrency that rises from 1 to
MAX_CONCURRENCY and falls back, in a triangle of PERIOD_S; requests of these kinds:
- chat: a short prompt, 2 to 48 new tokens;
- one_token: max_new_tokens 1 (finished at prefill: no verify step);
- long_prompt: 120 to 180 prompt tokens of a KV pool of KV_POOL_TOKENS, so that the pool runs short and SGLang
  retracts running requests (counted from its log's warnings). At this machine's few requests a second the pool
  alone seldom runs short, so SGLang's own retraction test (SGLANG_TEST_RETRACT: the same retract_decode, every
  `retract_every` forwards while requests run) retracts as well unless retract_every is 0;
- sampled: a chat request at temperature 0.8;
- abort: streamed, aborted by the client after two chunks through /abort_request, read to its last chunk (SGLang's
  meta_info of the aborted request);
- disconnect: streamed, the client closes the connection after two chunks (SGLang aborts it; the client never sees
  its counts, so they bound the comparison instead of being in it);
and a /flush_cache every FLUSH_EVERY_S (SGLang flushes only when no request runs: new requests wait until the
running ones ended and the flush is done; counted, flushed or refused).

Sampled every `sample_s`: each scheduler's RSS, the probe's log bytes, its eagle_probe_ series, and the sizes of the
containers the probe keeps (sglang_cpu.probe_state). At the end: the probe's acceptance counts against the sum of
SGLang's meta_info over every request the client saw finish.
"""

from __future__ import annotations

import json
import os
import random
import re
import threading
import time
import urllib.request
from dataclasses import dataclass, field

from sglang_cpu import probe_state
from sglang_cpu.draft_models import build_case
from sglang_cpu.server import SGLangServer
from sglang_cpu.spec_counts import counts_delta, server_processes, settled_probe_counts, sglang_spec_counts

MAX_CONCURRENCY = 8
PERIOD_S = 120.0
FLUSH_EVERY_S = 45.0
KV_POOL_TOKENS = 256
NUM_STEPS = 2
KINDS = (("chat", 45), ("one_token", 15), ("long_prompt", 10), ("sampled", 10), ("abort", 15), ("disconnect", 5))
RETRACTED = re.compile(r"#retracted_reqs: (\d+)")  # SGLang's warning when a full KV pool retracts requests


@dataclass
class Tally:
    """What one server's clients saw."""

    metas: list = field(default_factory=list)  # meta_info of every request seen to its end (aborted ones included)
    by_kind: dict = field(default_factory=dict)
    disconnected_tokens: int = 0  # the most tokens the disconnected requests could have had
    errors: list = field(default_factory=list)
    flushes: dict = field(default_factory=lambda: {"flushed": 0, "refused": 0})
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, meta: dict | None = None, bound: int = 0) -> None:
        if meta is not None and "spec_verify_ct" not in meta:
            kind += " (no spec counts in meta_info)"
        with self.lock:
            self.by_kind[kind] = self.by_kind.get(kind, 0) + 1
            if meta is not None:
                self.metas.append(meta)
            self.disconnected_tokens += bound


def concurrency(elapsed: float) -> int:
    """1 .. MAX_CONCURRENCY .. 1 over each PERIOD_S."""
    phase = (elapsed % PERIOD_S) / PERIOD_S
    rise = 1 - abs(2 * phase - 1)
    return 1 + round((MAX_CONCURRENCY - 1) * rise)


def plan(rng: random.Random) -> tuple[str, list[int], int]:
    kind = rng.choices([k for k, _ in KINDS], [w for _, w in KINDS])[0]
    if kind == "long_prompt":
        return kind, [rng.randrange(256) for _ in range(rng.randint(120, 180))], 8
    prompt = [rng.randrange(256) for _ in range(rng.randint(2, 24))]
    return kind, prompt, 1 if kind == "one_token" else rng.randint(2, 48)


def _stream(server: SGLangServer, payload: dict, chunks_before: int, abort: bool) -> dict | None:
    """Stream a request; after `chunks_before` chunks abort it (then read on to its last chunk) or disconnect."""
    request = urllib.request.Request(server.base_url + "/generate", data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json"})
    last, seen = None, 0
    with urllib.request.urlopen(request, timeout=300) as response:
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            last, seen = json.loads(line[5:]), seen + 1
            if seen == chunks_before:
                if not abort:
                    return None  # the connection closes here
                server._request("/abort_request", {"rid": payload["rid"]})  # answers no JSON
    return last


def one_request(server: SGLangServer, tally: Tally, rng: random.Random, number: str) -> None:
    kind, prompt, new = plan(rng)
    params = {"temperature": 0.8 if kind == "sampled" else 0.0, "max_new_tokens": new, "ignore_eos": True}
    try:
        if kind in ("abort", "disconnect"):
            payload = {"input_ids": prompt, "sampling_params": params, "stream": True, "rid": f"soak-{number}"}
            answer = _stream(server, payload, 2, abort=kind == "abort")
            tally.add(kind, answer["meta_info"] if answer else None, 0 if answer else new)
        else:
            tally.add(kind, server.generate_raw(prompt, sampling_params=params, max_new_tokens=new,
                                                timeout=300)["meta_info"])
    except Exception as exc:  # noqa: BLE001  (reported, and the soak goes on)
        with tally.lock:
            tally.errors.append(f"{kind}: {exc!r}"[:300])


class Gate:
    """Lets the flusher hold new requests back until the running ones ended: SGLang flushes its cache only idle."""

    def __init__(self):
        self.open = threading.Event()
        self.open.set()
        self.idle = threading.Condition()
        self.running = 0

    def enter(self) -> None:
        self.open.wait()
        with self.idle:
            self.running += 1

    def leave(self) -> None:
        with self.idle:
            self.running -= 1
            self.idle.notify_all()

    def drained(self, timeout_s: float) -> bool:
        self.open.clear()
        with self.idle:
            return self.idle.wait_for(lambda: self.running == 0, timeout_s)


def flush_cache(server: SGLangServer, gate: Gate, tally: Tally) -> None:
    """Hold new requests, let the running ones end, POST /flush_cache (SGLang refuses while a request runs: a few
    tries), let the requests go on."""
    try:
        if gate.drained(120.0):
            for _ in range(5):
                try:
                    server._request("/flush_cache", {})
                    tally.flushes["flushed"] += 1
                    return
                except Exception:  # noqa: BLE001  (not idle yet inside SGLang)
                    time.sleep(0.5)
        tally.flushes["refused"] += 1
    finally:
        gate.open.set()


def drive(server: SGLangServer, tally: Tally, seconds: float, seed: int, tag: str) -> None:
    """The traffic for `seconds`, from MAX_CONCURRENCY worker threads and a /flush_cache thread."""
    started = time.monotonic()
    deadline = started + seconds
    gate = Gate()

    def worker(index: int):
        rng, n = random.Random(seed * 1000 + index), 0
        while time.monotonic() < deadline:
            if index >= concurrency(time.monotonic() - started):
                time.sleep(0.25)
                continue
            gate.enter()
            try:
                one_request(server, tally, rng, f"{tag}-{index}-{n}")
            finally:
                gate.leave()
            n += 1

    def flusher():
        while time.monotonic() + FLUSH_EVERY_S < deadline:
            time.sleep(FLUSH_EVERY_S)
            flush_cache(server, gate, tally)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(MAX_CONCURRENCY)]
    threads.append(threading.Thread(target=flusher, daemon=True))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _log_bytes(directory: str) -> int:
    if not os.path.isdir(directory):
        return 0
    return sum(os.path.getsize(os.path.join(directory, name)) for name in os.listdir(directory))


def log_bytes_by_event(directory: str) -> dict:
    """Bytes of the probe's log lines by event, over the files there (what each kind costs)."""
    out: dict = {}
    for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else ():
        with open(os.path.join(directory, name), encoding="utf-8", errors="replace") as handle:
            for line in handle:
                match = re.search(r'"event": "([^"]+)"', line)
                kind = match.group(1) if match else "other"
                out[kind] = out.get(kind, 0) + len(line)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _series(server: SGLangServer) -> int:
    return sum(1 for line in server.metrics_text().splitlines() if line.startswith("eagle_probe_"))


def sample(servers: dict, log_dir: str, state_dir: str, started: float) -> dict:
    """One row of the time series: RSS of each scheduler (MB), the probe's log bytes, series and state sizes."""
    row = {"t_s": round(time.monotonic() - started, 1)}
    for name, server in servers.items():
        row[f"{name}_rss_mb"] = round(server_processes(server)["scheduler"].memory_info().rss / 2**20, 2)
    row["log_bytes"] = _log_bytes(log_dir)
    row["series"] = _series(servers["probe"])
    reports = probe_state.read(state_dir) if os.path.isdir(state_dir) else {}
    scheduler = server_processes(servers["probe"])["scheduler"].pid
    row["state"] = (reports.get(scheduler) or {}).get("sizes", {})
    return row


def start_servers(root: str, summary_interval_s: float | None, retract_every: int,
                  extra_probe_env: dict | None = None) -> tuple[dict, str, str]:
    from eagle_probe.bootstrap import BOOTSTRAP_DIR
    from sglang_cpu.spec_shims import SPEC_ENV

    case = build_case(root, "map", num_steps=NUM_STEPS)
    log_dir, state_dir = os.path.join(root, "probe-logs"), os.path.join(root, "probe-state")
    args = [*case["args"], "--enable-metrics", "--max-total-tokens", str(KV_POOL_TOKENS)]
    env = dict(SPEC_ENV)
    if retract_every:
        env.update(SGLANG_TEST_RETRACT="1", SGLANG_TEST_RETRACT_INTERVAL=str(retract_every))
    probe_env = {**env, "EAGLE_PROBE_LOG_DIR": log_dir, probe_state.ENV: state_dir}
    if summary_interval_s is not None:
        probe_env["EAGLE_PROBE_SUMMARY_INTERVAL_S"] = str(summary_interval_s)
    probe_env.update(extra_probe_env or {})
    servers = {"probe": SGLangServer(case["target"], extra_args=args, pythonpath_prefix=[BOOTSTRAP_DIR],
                                     env=probe_env, log_path=os.path.join(root, "probe.log")),
               "plain": SGLangServer(case["target"], extra_args=args, env=env,
                                     log_path=os.path.join(root, "plain.log"))}
    return servers, log_dir, state_dir


def _drive_both(servers: dict, tallies: dict, seconds: float, seed: int) -> None:
    drivers = [threading.Thread(target=drive, args=(servers[name], tallies[name], seconds, seed, name), daemon=True)
               for name in servers]
    for driver in drivers:
        driver.start()
    for driver in drivers:
        driver.join()


def _idle(servers: dict, log_dir: str, state_dir: str, started: float) -> dict:
    """A sample once both servers are idle: the probe's flush and its state report have run after the last
    request."""
    time.sleep(max(2.0, 3 * probe_state.INTERVAL_S))
    return sample(servers, log_dir, state_dir, started)


def soak(root: str, seconds: float, sample_s: float = 10.0, warmup_s: float = 60.0,
         summary_interval_s: float | None = None, seed: int = 1, retract_every: int = 40,
         extra_probe_env: dict | None = None) -> dict:
    """Both servers the same traffic: `warmup_s`, a pause (the idle baseline), then `seconds`, a pause (the idle
    end); sampled every `sample_s` throughout. The figures: report()."""
    servers, log_dir, state_dir = start_servers(root, summary_interval_s, retract_every, extra_probe_env)
    with servers["probe"], servers["plain"]:
        before = settled_probe_counts(servers["probe"])
        tallies = {name: Tally() for name in servers}
        started, rows, done = time.monotonic(), [], threading.Event()

        def sampler():
            while not done.wait(sample_s):
                rows.append(sample(servers, log_dir, state_dir, started))

        thread = threading.Thread(target=sampler, daemon=True)
        thread.start()
        _drive_both(servers, tallies, warmup_s, seed)
        baseline = _idle(servers, log_dir, state_dir, started)
        _drive_both(servers, tallies, seconds, seed + 1)
        end = _idle(servers, log_dir, state_dir, started)
        done.set()
        thread.join()
        after = settled_probe_counts(servers["probe"])
        logs = {name: server.log_text() for name, server in servers.items()}
    result = report(rows, baseline, end, tallies, counts_delta(after, before), logs)
    result.update(log_dir=log_dir, probe_total=after, log_bytes_by_event=log_bytes_by_event(log_dir))
    return result


def report(rows: list, baseline: dict, end: dict, tallies: dict, probe_counts: dict, logs: dict) -> dict:
    """The end figures: growth from the idle baseline after warm-up to the idle end, of the schedulers' RSS, the
    probe's log, series and state; the probe's counts against SGLang's meta_info."""
    probe = tallies["probe"]
    hours = max(end["t_s"] - baseline["t_s"], 1.0) / 3600
    growth = {name: round(end[f"{name}_rss_mb"] - baseline[f"{name}_rss_mb"], 2) for name in tallies}
    first_state, last_state = baseline["state"], end["state"]
    return {
        "soak_s": round(end["t_s"] - baseline["t_s"], 1), "warmup_s": baseline["t_s"], "samples": len(rows),
        "requests": {name: dict(t.by_kind) for name, t in tallies.items()},
        "errors": {name: t.errors[:10] for name, t in tallies.items()},
        "flush_cache": {name: dict(t.flushes) for name, t in tallies.items()},
        "retracted_requests": {name: sum(int(n) for n in RETRACTED.findall(text)) for name, text in logs.items()},
        "rss_mb": {"baseline": {n: baseline[f"{n}_rss_mb"] for n in tallies}, "end": {n: end[f"{n}_rss_mb"]
                                                                                       for n in tallies}},
        "rss_growth_mb": growth, "probe_rss_growth_over_plain_mb": round(growth["probe"] - growth["plain"], 2),
        "log_bytes": {"baseline": baseline["log_bytes"], "end": end["log_bytes"],
                      "per_hour": round((end["log_bytes"] - baseline["log_bytes"]) / hours)},
        "series": {"baseline": baseline["series"], "end": end["series"],
                   "max": max([r["series"] for r in rows] + [end["series"]])},
        "state_baseline": first_state, "state_end": last_state,
        "state_grown": {k: [first_state.get(k, 0), v] for k, v in last_state.items() if v > first_state.get(k, 0)},
        "counts": {"probe": probe_counts, "sglang_meta_info": sglang_spec_counts(probe.metas),
                   "disconnected_tokens_bound": probe.disconnected_tokens},
        "rows": [{k: v for k, v in r.items() if k != "state"} for r in rows],
    }
