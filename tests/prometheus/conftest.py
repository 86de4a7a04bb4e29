"""Real Prometheus (Debian's package) scraping real SGLang with eagle-probe, shared by this directory's tests.

Session set-up, in order (all real processes, nothing hand-written into the metrics):
1. rank workers (tests/prometheus/rank_worker.py): real probe processes at tp_rank 0 and 1 running SGLang's tiny
   DeepSeek-V3 in-process, sharing one PROMETHEUS_MULTIPROC_DIR as SGLang's ranks do; rank 1 loses captures to
   Two-Batch-Overlap and configures an unreachable layer (real findings); rank 0 has a NaN in one layer. A third
   process (tp_rank 2, node_rank 1) runs as under a launch without --enable-metrics (no PROMETHEUS_MULTIPROC_DIR)
   and serves its series through the probe's own exporter (EAGLE_PROBE_METRICS_PORT). The shared directory is served
   like SGLang's /metrics: prometheus_client's MultiProcessCollector. (Under --enable-metrics SGLang serves every
   node's directory itself, node 1's from its health server: the real two-node pair, tests/e2e/test_two_nodes.py.)
2. one real `python -m sglang.launch_server` on the CPU with --enable-metrics and the probe injected through
   PYTHONPATH: by default SGLang's EAGLE-3 speculative server with --tp-size 2 (sglang_cpu.draft_models "map"
   pair, known acceptance), whose rank 1 has aux slot 1 scaled by a test-only shim (a real divergence);
   EAGLE_PROBE_PROM_SERVER=aux uses the non-speculative aux-capture server instead, and the acceptance checks
   (marked `spec`) then skip.
3. Prometheus on loopback with a generated configuration (1 s scrapes, dashboards/prometheus/alerts.yml loaded),
   scraping the three endpoints; then requests, then a few more scrapes.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVER_KIND = os.environ.get("EAGLE_PROBE_PROM_SERVER", "spec")
AUX_ARGS = ("--speculative-algorithm", "EAGLE3", "--enable-return-aux-hidden-states",
            "--return-aux-hidden-state-layer-ids", "1", "3", "4")


def find_prometheus():
    """(prometheus, promtool) paths, installing Debian's package through scripts/system-deps.sh when root."""
    def which():
        return shutil.which("prometheus") or (
            "/usr/bin/prometheus" if os.path.exists("/usr/bin/prometheus") else None), \
            shutil.which("promtool") or ("/usr/bin/promtool" if os.path.exists("/usr/bin/promtool") else None)

    prom, tool = which()
    if (prom is None or tool is None) and os.geteuid() == 0:
        subprocess.run(["bash", os.path.join(ROOT, "scripts", "system-deps.sh")], check=False)
        prom, tool = which()
    if prom is None or tool is None:
        if os.geteuid() != 0:
            pytest.skip("Prometheus is not installed and this is not root: run `sudo bash scripts/system-deps.sh` "
                        "(Debian package `prometheus`)")
        pytest.fail("Prometheus is missing although scripts/system-deps.sh ran as root")
    return prom, tool


@pytest.fixture(scope="session")
def prom_bins():
    return find_prometheus()


def http_get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def wait_for(predicate, timeout, what, interval=0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


class RankWorkers:
    """The real probe processes of the multi-rank part, and the SGLang-style /metrics over their directory."""

    def __init__(self, root, exporter_base, collector_port):
        self.root = root
        self.mp_dir = os.path.join(root, "multiproc")
        self.node1_dir = os.path.join(root, "multiproc-node1")
        self.state = os.path.join(root, "state")
        self.logs = os.path.join(root, "probe-logs")
        for d in (self.mp_dir, self.node1_dir, self.state, self.logs):
            os.makedirs(d, exist_ok=True)
        self.procs = {}
        self.exporter_base = exporter_base
        self.collector_port = collector_port
        self._server = None

    def start(self, rank, *flags, mp_dir=None, node_rank=0, metrics_port=None, log_dir=None, multiprocess=True):
        env = dict(os.environ)
        env.update(PROMETHEUS_MULTIPROC_DIR=mp_dir or self.mp_dir, EAGLE_PROBE_LOG_DIR=log_dir or self.logs,
                   PYTHONPATH=os.pathsep.join([ROOT, env.get("PYTHONPATH", "")]), CUDA_VISIBLE_DEVICES="")
        if not multiprocess:  # as under a launch without --enable-metrics
            del env["PROMETHEUS_MULTIPROC_DIR"]
        if metrics_port is not None:
            env["EAGLE_PROBE_METRICS_PORT"] = str(metrics_port)
        log = open(os.path.join(self.root, f"rank{rank}.log"), "wb")  # noqa: SIM115  (the child's output)
        self.procs[rank] = subprocess.Popen(
            [sys.executable, os.path.join(ROOT, "tests", "prometheus", "rank_worker.py"), "--tp-rank", str(rank),
             "--tp-size", str(max(rank + 1, 2)), "--node-rank", str(node_rank), "--state-dir", self.state, *flags],
            env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def wait_ready(self, rank, timeout=900):
        def ready():
            proc = self.procs[rank]
            if proc.poll() is not None:
                raise AssertionError(f"rank {rank} worker exited {proc.returncode}:\n{self.log(rank)[-4000:]}")
            return os.path.exists(os.path.join(self.state, f"ready-{rank}"))
        wait_for(ready, timeout, f"rank worker {rank}")

    def log(self, rank):
        with open(os.path.join(self.root, f"rank{rank}.log"), errors="replace") as f:
            return f.read()

    def release(self, rank, timeout=120):
        open(os.path.join(self.state, f"exit-{rank}"), "w").close()
        return self.procs[rank].wait(timeout)

    def kill(self, rank):
        self.procs[rank].send_signal(signal.SIGKILL)
        return self.procs[rank].wait(60)

    def collector_text(self):
        """What SGLang's /metrics serves: a fresh registry with a MultiProcessCollector over the directory."""
        from prometheus_client import CollectorRegistry, generate_latest, multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=self.mp_dir)
        return generate_latest(registry).decode()

    def serve_collector(self):
        from wsgiref.simple_server import WSGIRequestHandler, make_server

        workers = self

        class Quiet(WSGIRequestHandler):
            def log_message(self, *args):
                pass

        def app(environ, start_response):
            body = workers.collector_text().encode()
            start_response("200 OK", [("Content-Type", "text/plain; version=0.0.4; charset=utf-8")])
            return [body]

        self._server = make_server("127.0.0.1", self.collector_port, app, handler_class=Quiet)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self):
        for rank in list(self.procs):
            open(os.path.join(self.state, f"exit-{rank}"), "w").close()
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        if self._server is not None:
            self._server.shutdown()


class Prometheus:
    def __init__(self, binary, root, jobs, port):
        self.root = root
        self.port = port
        self.url = f"http://127.0.0.1:{self.port}"
        self.config_path = os.path.join(root, "prometheus.yml")
        rules = os.path.join(ROOT, "dashboards", "prometheus", "alerts.yml")
        # SGLang's /metrics can take over a second on a busy CPU; a timed-out scrape marks every series of that
        # target stale, and instant queries (e.g. sglang:spec_accept_length) then return nothing.
        lines = ["global:", "  scrape_interval: 2s", "  scrape_timeout: 2s", "  evaluation_interval: 1s",
                 "rule_files:", f"  - {json.dumps(rules)}", "scrape_configs:"]
        for name, targets in jobs.items():
            lines += [f"  - job_name: {json.dumps(name)}", "    static_configs:",
                      f"      - targets: {json.dumps(targets)}"]
        with open(self.config_path, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.binary = binary
        self.proc = None

    def start(self):
        self.log = open(os.path.join(self.root, "prometheus.log"), "wb")  # noqa: SIM115  (closed at stop)
        self.proc = subprocess.Popen(
            [self.binary, f"--config.file={self.config_path}", f"--storage.tsdb.path={self.root}/tsdb",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1h"],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited {self.proc.returncode}: {self.log_text()[-3000:]}")
            try:
                return http_get(self.url + "/-/ready", timeout=2).strip() != ""
            except OSError:
                return False
        wait_for(ready, 60, "prometheus ready")

    def log_text(self):
        with open(os.path.join(self.root, "prometheus.log"), errors="replace") as f:
            return f.read()

    def api(self, path, **params):
        query = urllib.parse.urlencode(params, doseq=True)
        try:
            body = http_get(f"{self.url}/api/v1/{path}?{query}", timeout=30)
        except urllib.error.HTTPError as e:
            body = e.read().decode()
        return json.loads(body)

    def query(self, expr):
        return self.api("query", query=expr)

    def targets_up(self):
        active = self.api("targets")["data"]["activeTargets"]
        return active and all(t["health"] == "up" for t in active)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture(scope="session")
def stack(prom_bins, tmp_path_factory):
    """Everything running, scraped, with traffic; yields a dict the tests read."""
    from eagle_probe.bootstrap import BOOTSTRAP_DIR
    from sglang_cpu.ports import allocate_block
    from sglang_cpu.server import SGLangServer

    root = str(tmp_path_factory.mktemp("prometheus-e2e"))
    timings = {}
    t0 = time.monotonic()
    # The stack's own ports, from a block held until the end (sglang_cpu/ports.py); the server holds its own. The
    # node-1 exporter listens on exporter_base - 2 + its tp_rank 2.
    ports = allocate_block()
    exporter_base, collector_port, prometheus_port = ports.extra(2), ports.extra(3), ports.extra(4)
    workers = RankWorkers(root, exporter_base, collector_port)
    workers.start(0, "--nan-layer", "3")  # NaN from layer 3 on: aux slots 1 and 2 (indices 4, 5) non-finite
    workers.start(1, "--moe-tbo")
    # Rank 2's log directory cannot be created (its parent is a file): a real failure inside the probe, which it
    # counts as internal errors while its metrics carry on.
    blocker = os.path.join(root, "not-a-directory")
    open(blocker, "w").close()
    workers.start(2, "--unreachable", node_rank=1, metrics_port=workers.exporter_base - 2,
                  log_dir=os.path.join(blocker, "logs"), multiprocess=False)
    # exporter port = EAGLE_PROBE_METRICS_PORT + tp_rank
    workers.serve_collector()

    server_env = {"EAGLE_PROBE_LOG_DIR": os.path.join(root, "server-probe-logs")}
    if SERVER_KIND == "spec":
        from sglang_cpu.draft_models import build_case
        from sglang_cpu.spec_shims import SPEC_ENV

        case = build_case(os.path.join(root, "ckpt"), "map")
        server_env.update(SPEC_ENV)
        # Two TP ranks, and rank 1's aux slot 1 scaled by 1.5 (sglang_cpu.tp_shims, test-only): the divergence
        # alert must fire for that slot. Fingerprints every 0.25 s, so the short run is sampled many times.
        server_env.update(SGLANG_CPU_PERTURB_AUX="1:1:1.5", EAGLE_PROBE_FINGERPRINT_INTERVAL_S="0.25",
                          EAGLE_PROBE_SUMMARY_INTERVAL_S="0.5")
        checkpoint, args = case["target"], ["--enable-metrics", "--tp-size", "2", *case["args"]]
        prompts = [(p, n) for p, n in case["expected"]["prompts"].values()]
    else:
        from sglang_cpu.tiny_models import deepseek_v3_config, write_deepseek_v3_checkpoint

        checkpoint = os.path.join(root, "tiny-deepseek-v3")
        write_deepseek_v3_checkpoint(checkpoint, deepseek_v3_config(num_hidden_layers=6, first_k_dense_replace=2), 0)
        args = ["--enable-metrics", *AUX_ARGS]
        prompts = [([10, 11, 12, 13, 14], 8), ([7, 3, 99, 120, 5, 6, 200, 31], 8)]
    server = SGLangServer(checkpoint, extra_args=args, pythonpath_prefix=[BOOTSTRAP_DIR], env=server_env,
                          log_path=os.path.join(root, "server.log"))
    prometheus = None
    try:
        server.start()
        timings["server_start_s"] = server.startup_seconds
        for rank in (0, 1, 2):
            workers.wait_ready(rank)
        timings["workers_ready_s"] = time.monotonic() - t0
        server_target = f"127.0.0.1:{server.port}"
        collector_target = f"127.0.0.1:{workers.collector_port}"
        exporter_target = f"127.0.0.1:{workers.exporter_base}"
        prometheus = Prometheus(prom_bins[0], root, {
            "sglang": [server_target], "ranks-multiproc": [collector_target],
            "eagle-probe-exporter": [exporter_target]}, prometheus_port)
        prometheus.start()
        wait_for(prometheus.targets_up, 60, "all scrape targets up")
        time.sleep(5)  # a few scrapes before the traffic, so counter increases fall inside rate windows
        t1 = time.monotonic()
        outputs = [server.generate_raw(p, max_new_tokens=n) for p, n in prompts]
        if SERVER_KIND == "spec":  # the divergence alert compares the ranks' last samples if they are one forward
            from sglang_cpu.spec_counts import last_samples_are_one_forward

            for _ in range(4):
                if last_samples_are_one_forward([server.flushed_metrics_text()]):
                    break
                outputs.append(server.generate_raw(prompts[0][0], max_new_tokens=prompts[0][1]))
        timings["requests_s"] = time.monotonic() - t1
        time.sleep(6)
        yield dict(root=root, server=server, workers=workers, prometheus=prometheus, promtool=prom_bins[1],
                   outputs=outputs, server_kind=SERVER_KIND, timings=timings,
                   instances=dict(server=server_target, collector=collector_target, exporter=exporter_target))
    finally:
        if prometheus is not None:
            prometheus.stop()
        server.stop()
        workers.stop()
        ports.release()
