"""Launch a real ``python -m sglang.launch_server`` on the CPU (tests and example only).

The server runs unchanged; the CPU shims reach every SGLang process (including the spawned
scheduler) through ``sglang_cpu/site/sitecustomize.py`` on ``PYTHONPATH``. Callers that need
their own bootstrap (for example the probe's ``sitecustomize.py``, which chains to the one it
shadows) pass its directory in ``pythonpath_prefix`` so that it comes first.

    with SGLangServer(model_path, extra_args=["--enable-metrics"]) as server:  # starts it
        ids = server.generate([10, 11, 12], max_new_tokens=8)
        text = server.metrics_text()
"""

import atexit
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from sglang_cpu.ports import allocate_block

STOP_GRACE_S = 15.0  # SGLangServer.stop: seconds between SIGTERM to the process group and SIGKILL of what is left
# SGLangServer.start's health-check timeout: the longest start-up measured on this machine class (2 cores, 2026-12-03:
# a target-only server started beside another among three port-churning processes while three pip installs ran;
# the whole test command's 33 servers, run beside four other agents' work, took at most 81.8 s), plus half of it
# again as the margin. SGLANG_CPU_START_TIMEOUT overrides it.
LONGEST_STARTUP_MEASURED_S = 159.1
STARTUP_MARGIN_S = 0.5 * LONGEST_STARTUP_MEASURED_S
STARTUP_TIMEOUT_S = float(os.environ.get("SGLANG_CPU_START_TIMEOUT") or LONGEST_STARTUP_MEASURED_S + STARTUP_MARGIN_S)
# Where start() appends one JSON line per start-up (name, seconds, attempts), for the test suite's report.
STARTUP_RECORD_ENV = "SGLANG_CPU_STARTUP_RECORD"
# A launcher line that says a socket could not bind: the server cannot come up, whatever it does next. The probe's
# own JSON lines (e.g. its exporter on a taken port, a fault the tests inject) are not SGLang's and never match.
BIND_ERROR = re.compile(r"address already in use|EADDRINUSE|errno 98\b", re.IGNORECASE)
SITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "site")

BASE_ARGS = (
    "--device", "cpu",
    "--attention-backend", "torch_native",
    "--disable-cuda-graph",
    "--dtype", "float32",
    "--skip-tokenizer-init",
    "--mem-fraction-static", "0.05",
    "--max-total-tokens", "2048",
)


class ServerError(RuntimeError):
    """The server died, did not come up in time, or answered with an error."""


class PortCollision(ServerError):
    """The server logged that one of its ports was taken."""


def bind_error_lines(text):
    """The lines of a server log that report a failed bind (never the probe's JSON lines)."""
    return [line for line in text.splitlines() if BIND_ERROR.search(line) and not line.lstrip().startswith("{")]


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _pgid_alive(pgid):
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class SGLangServer:
    def __init__(
        self,
        model_path,
        *,
        extra_args=(),
        pythonpath_prefix=(),
        env=None,
        port=None,
        host="127.0.0.1",
        log_path=None,
        python=None,
        command_prefix=(),
        tokenizer=False,
    ):
        self.model_path = str(model_path)
        # e.g. ["eagle-probe", "run", "--log-dir", D, "--"]: a launcher that execs the server command
        self.command_prefix = [str(a) for a in command_prefix]
        self.extra_args = [str(a) for a in extra_args]
        # True: the checkpoint has tokenizer files (sglang_cpu.word_tokenizer) and the server loads them
        self.tokenizer = tokenizer
        self.pythonpath_prefix = [str(p) for p in pythonpath_prefix]
        self.extra_env = dict(env or {})
        self.host = host
        # Without a port of the caller's, the server holds a block of ports that nothing else takes (see
        # sglang_cpu/ports.py) and hands SGLang every port it would otherwise pick itself.
        self.ports = None
        if port is None:
            self.ports = allocate_block()
            port = self.ports.http
        self.port = int(port)
        self.start_attempts = 0
        self.python = python or sys.executable
        self._own_log_dir = None
        if log_path is None:
            self._own_log_dir = tempfile.mkdtemp(prefix="sglang-server-")
            log_path = os.path.join(self._own_log_dir, "server.log")
        self.log_path = str(log_path)
        self.proc = None
        self._log_file = None
        self.startup_seconds = None

    # ----------------------------------------------------------------- set-up

    @property
    def base_url(self):
        return f"http://{self.host}:{self.port}"

    def command(self):
        return [
            *self.command_prefix,
            self.python, "-m", "sglang.launch_server",
            "--model-path", self.model_path,
            *(a for a in BASE_ARGS if not (self.tokenizer and a == "--skip-tokenizer-init")),
            "--host", self.host,
            "--port", str(self.port),
            *self._chosen_port_args(),
            *self.extra_args,
        ]

    def _chosen_port_args(self):
        if self.ports is None or any(a == "--nccl-port" or a.startswith("--nccl-port=") for a in self.extra_args):
            return []
        return ["--nccl-port", str(self.ports.nccl)]

    def environment(self):
        env = dict(os.environ)
        env.update(self.extra_env)
        parts = [*self.pythonpath_prefix, SITE_DIR]
        existing = env.get("PYTHONPATH", "")
        parts += [p for p in existing.split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join(parts)
        env.setdefault("PYTHONUNBUFFERED", "1")
        # No GPU here; keep CUDA from being probed in surprising ways.
        env.setdefault("CUDA_VISIBLE_DEVICES", "")
        # By default every /health call on an idle server runs a 1-token generation (input_ids
        # [0]); start() polls /health, so switch that off to keep the traffic a probe sees down to
        # SGLang's own warm-up request (input_ids [10, 11, 12], 8 new tokens).
        env.setdefault("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "0")
        # --tp-size N > 1: pynccl off (sglang_cpu.tp_shims) and one core per rank (SGLANG_CPU_OMP_THREADS_BIND
        # "0|1"); a caller's own values win.
        tp_size = self.tp_size()
        if tp_size > 1:
            from sglang_cpu.tp_shims import tp_env

            for key, value in tp_env(tp_size).items():
                env.setdefault(key, value)
        return env

    def tp_size(self):
        """The --tp-size (or --tp) among the extra args; 1 without one."""
        args = self.extra_args
        for i, arg in enumerate(args):
            for flag in ("--tp-size", "--tp"):
                if arg == flag and i + 1 < len(args):
                    return int(args[i + 1])
                if arg.startswith(flag + "="):
                    return int(arg.split("=", 1)[1])
        return 1

    def speculative_algorithm(self):
        """The --speculative-algorithm among the extra args (e.g. "EAGLE3", "DFLASH"); None without one."""
        args = self.extra_args
        for i, arg in enumerate(args):
            if arg == "--speculative-algorithm" and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith("--speculative-algorithm="):
                return arg.split("=", 1)[1]
        return None

    def start(self, timeout=None):
        """Start the server and wait until ``/health`` answers 200 (after SGLang's warm-up).

        Fails within a second or two when the launcher exits or logs a bind error, quoting the log. A port
        collision is retried once on a fresh block of ports (only when this server chose its own)."""
        if self.is_running():
            raise ServerError("server already started")
        timeout = STARTUP_TIMEOUT_S if timeout is None else float(timeout)
        t0 = time.monotonic()
        if self.ports is not None and not self.ports.held:  # started again after stop()
            self._take_new_ports()
        self.start_attempts = 1
        try:
            try:
                self._launch_and_wait(t0, timeout)
            except PortCollision:
                if self.ports is None:
                    raise
                self._take_new_ports()
                self.start_attempts = 2
                self._launch_and_wait(t0, timeout)
        except ServerError:
            if self.ports is not None:
                self.ports.release()
            raise
        self.startup_seconds = time.monotonic() - t0
        self._record_startup()
        return self

    def _take_new_ports(self):
        old = self.ports
        self.ports = allocate_block()
        old.release()
        self.port = self.ports.http

    def _launch_and_wait(self, t0, timeout):
        os.makedirs(os.path.dirname(os.path.abspath(self.log_path)), exist_ok=True)
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115  (the server's output, closed at stop)
        log_start = self._log_file.tell()
        self.proc = subprocess.Popen(
            self.command(),
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.environment(),
            start_new_session=True,  # own process group: stop() kills scheduler and detokenizer too
        )
        atexit.register(self.stop)  # never leave a server behind if the caller forgets
        while True:
            code = self.proc.poll()
            collisions = bind_error_lines(self._log_since(log_start))
            if collisions:
                self.stop(release_ports=False)
                raise PortCollision(
                    f"sglang server could not bind a port (attempt {self.start_attempts}, port {self.port}); "
                    f"log {self.log_path}:\n" + "\n".join(collisions[:5]))
            if code is not None:
                self.stop(release_ports=False)
                raise ServerError(
                    f"sglang server exited with code {code} during start-up; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            if self._health_ok():
                return
            if time.monotonic() > t0 + timeout:
                self.stop(release_ports=False)
                raise ServerError(
                    f"sglang server not healthy after {timeout:.0f} s (the start-up timeout; "
                    f"SGLANG_CPU_START_TIMEOUT overrides it); log {self.log_path}:\n"
                    f"{self.log_tail()}"
                )
            time.sleep(0.5)

    def _log_since(self, offset):
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def _record_startup(self):
        path = os.environ.get(STARTUP_RECORD_ENV)
        if not path:
            return
        record = {"log": self.log_path, "seconds": round(self.startup_seconds, 2), "attempts": self.start_attempts,
                  "tp_size": self.tp_size(), "speculative": "--speculative-draft-model-path" in self.extra_args,
                  "algorithm": self.speculative_algorithm()}
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
        except OSError:
            pass

    def _health_ok(self):
        # /health answers 503 while the server is Starting and 200 once SGLang's own warm-up
        # request has gone through (server status Up).
        try:
            with urllib.request.urlopen(self.base_url + "/health", timeout=5) as r:
                return r.status == 200
        except (urllib.error.URLError, ConnectionError, OSError):
            return False

    # --------------------------------------------------------------- requests

    def _request(self, path, payload=None, timeout=120.0, headers=None):
        data = None
        headers = dict(headers or {})
        if payload is not None:
            data = json.dumps(payload).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.base_url + path, data=data, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.read()
        except urllib.error.HTTPError as e:
            body = e.read().decode(errors="replace")
            raise ServerError(f"{path} answered {e.code}: {body}") from e

    def generate_raw(self, input_ids, max_new_tokens=8, sampling_params=None, timeout=120.0, **fields):
        """POST /generate; returns the decoded JSON (``output_ids`` and ``meta_info``)."""
        params = {"temperature": 0.0, "max_new_tokens": int(max_new_tokens), "ignore_eos": True}
        params.update(sampling_params or {})
        payload = {"input_ids": [int(t) for t in input_ids], "sampling_params": params, **fields}
        return json.loads(self._request("/generate", payload, timeout=timeout))

    def post_json(self, path, payload, headers=None, timeout=120.0):
        """POST a JSON body (e.g. /v1/chat/completions) with extra headers; returns the decoded JSON."""
        return json.loads(self._request(path, payload, timeout=timeout, headers=headers))

    def generate(self, input_ids, max_new_tokens=8, sampling_params=None, timeout=120.0):
        """Greedy generation; returns the new token ids (``--skip-tokenizer-init`` output)."""
        out = self.generate_raw(input_ids, max_new_tokens, sampling_params, timeout)
        return list(out["output_ids"])

    def metrics_text(self, timeout=30.0):
        return self._request("/metrics", timeout=timeout).decode()

    def flushed_metrics_text(self, flush_interval_s=1.0, timeout=30.0):
        """/metrics once everything counted so far has been flushed: the probe moves its counts into the series
        every flush interval (EAGLE_PROBE_FLUSH_INTERVAL_S, default 1 s), so wait a little longer than one."""
        time.sleep(flush_interval_s * 1.5)
        return self.metrics_text(timeout=timeout)

    def get_json(self, path, timeout=30.0):
        return json.loads(self._request(path, timeout=timeout))

    # ---------------------------------------------------------------- teardown

    def log_tail(self, lines=60):
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - 64 * 1024))
                text = f.read().decode(errors="replace")
        except OSError:
            return "<no log>"
        return "\n".join(text.splitlines()[-lines:])

    def log_text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def is_running(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace=STOP_GRACE_S, release_ports=True):
        """SIGTERM the whole process group, then SIGKILL what is left, and give up the ports. Safe to call twice."""
        proc = self.proc
        if proc is not None:
            pgid = proc.pid  # start_new_session: the group id is the leader's pid
            if _pgid_alive(pgid):
                try:
                    os.killpg(pgid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                deadline = time.monotonic() + grace
                while time.monotonic() < deadline:
                    if proc.poll() is not None and not _pgid_alive(pgid):
                        break
                    time.sleep(0.1)
                if _pgid_alive(pgid):
                    try:
                        os.killpg(pgid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            # Reaped leader: wait a little for SIGKILLed children to disappear.
            deadline = time.monotonic() + 5
            while _pgid_alive(pgid) and time.monotonic() < deadline:
                time.sleep(0.1)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if release_ports and self.ports is not None:
            self.ports.release()
        atexit.unregister(self.stop)

    def __enter__(self):
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


def compat_report(python=None, with_cpu_shims=True, pythonpath_prefix=(), with_text=False) -> dict:
    """`eagle-probe compat --format json` for the SGLang that `python` imports, run in a fresh process that
    sees what a CPU server process sees (the CPU shims on PYTHONPATH) unless with_cpu_shims is False.
    Adds `exit_status`, and with with_text `text` (the report as `compat` prints it for people, rendered from
    the same JSON)."""
    env = dict(os.environ)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != SITE_DIR]
    env["PYTHONPATH"] = os.pathsep.join([*pythonpath_prefix, *([SITE_DIR] if with_cpu_shims else []), *parts])
    env.setdefault("CUDA_VISIBLE_DEVICES", "")
    done = subprocess.run([python or sys.executable, "-m", "eagle_probe", "compat", "--format", "json"], env=env,
                          capture_output=True, text=True, timeout=300)
    if done.returncode not in (0, 1):  # 1: an expected target did not resolve (the report says which)
        raise RuntimeError(f"eagle-probe compat exited {done.returncode}: {done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    report["exit_status"] = done.returncode
    if with_text:
        from eagle_probe.commands.compat import render

        report["text"] = render(report)
    return report
