"""Ports for test servers (sglang_cpu/ports.py): blocks outside the kernel's ephemeral range and SGLang's random
picks, held through locks that concurrent processes respect; and SGLangServer's fail-fast start-up (a launcher that
logs a bind error or exits fails within seconds, quoting its log; a collision is retried once on new ports)."""

import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from sglang_cpu import ports
from sglang_cpu.server import STARTUP_RECORD_ENV, PortCollision, ServerError, SGLangServer, bind_error_lines

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def private_locks(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLANG_CPU_PORT_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.delenv(STARTUP_RECORD_ENV, raising=False)  # the stand-in launcher's start-ups are not the suite's
    return tmp_path / "locks"


def _overlaps(base, low, high):
    return base <= high and low <= base + ports.BLOCK_SIZE - 1


def test_blocks_avoid_the_ephemeral_range_and_sglangs_random_picks():
    low, high = ports.ephemeral_range()
    bases = ports.block_bases()
    assert len(bases) >= 20
    for base in bases:
        assert base >= ports.LOWEST_PORT and base + ports.BLOCK_SIZE - 1 <= ports.HIGHEST_PORT
        assert not _overlaps(base, low, high) and not _overlaps(base, *ports.SGLANG_RANDOM_PORTS)
    assert len(set(bases)) == len(bases) and all(b - a >= ports.BLOCK_SIZE for a, b in zip(bases, bases[1:]))


def test_blocks_follow_another_ephemeral_range():
    # a machine whose ephemeral range starts at 15000 (and ends at 50000): blocks only below 15000 and above 50000
    bases = ports.block_bases([(15000, 50000), ports.SGLANG_RANDOM_PORTS])
    assert bases and all(b + ports.BLOCK_SIZE - 1 < 15000 or b > 50000 for b in bases)
    assert any(b > 50000 for b in bases) and any(b < 15000 for b in bases)


def test_the_ephemeral_range_is_read_from_proc_and_falls_back(tmp_path):
    path = tmp_path / "range"
    path.write_text("20000\t40000\n")
    assert ports.ephemeral_range(str(path)) == (20000, 40000)
    assert ports.ephemeral_range(str(tmp_path / "missing")) == ports.DEFAULT_EPHEMERAL


def test_named_ports_lie_in_the_block_and_the_extra_index_is_bounded():
    with ports.allocate_block() as block:
        named = [block.http, block.nccl, block.dist_init, block.extra(0), block.extra(ports.EXTRA_COUNT - 1)]
        assert len(set(named)) == len(named)
        assert all(block.base <= p < block.base + ports.BLOCK_SIZE for p in named)
        # SGLang's DP-attention ports (dist-init + 1..6, --port + 233..239) are not handed out as extras
        assert block.extra(ports.EXTRA_COUNT - 1) < block.http + 233 and block.extra(0) > block.dist_init + 6
        with pytest.raises(ValueError, match="extra port index 200"):
            block.extra(ports.EXTRA_COUNT)
    assert not block.held


HOLDER = textwrap.dedent("""
    import sys, time
    from sglang_cpu.ports import allocate_block
    block = allocate_block()
    print(block.base, flush=True)
    sys.stdin.readline()  # hold the block until told
""")


def _holders(n):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return [subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env=env) for _ in range(n)]


def test_concurrent_processes_get_distinct_blocks_and_a_dead_holders_block_is_free_again():
    procs = _holders(8)
    try:
        bases = [int(p.stdout.readline()) for p in procs]
        assert len(set(bases)) == 8
        # while they hold them, this process can lock none of those blocks
        for base in bases:
            assert ports._try_lock(base) is None
        with ports.allocate_block() as mine:
            assert mine.base not in bases
    finally:
        for p in procs:
            p.kill()
            p.wait()
    # the kernel dropped the dead holders' locks
    for base in bases:
        block = ports._try_lock(base)
        assert block is not None
        block.release()


class InOrder:
    def shuffle(self, items):
        pass


def _free_now(base):
    return all(ports._bindable(p) for p in range(base, base + ports.BLOCK_SIZE))


def test_a_block_with_a_port_in_use_is_skipped():
    # other test processes' servers may hold real blocks (their locks are not in this test's lock directory), so
    # the first two blocks free right now stand for "first" and "second"
    first, second = [base for base in ports.block_bases() if _free_now(base)][:2]
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", first + 100))
        busy.listen(1)
        with ports.allocate_block(rng=InOrder()) as block:
            assert block.base == second
    with ports.allocate_block(rng=InOrder()) as block:
        assert block.base == first


def test_bind_error_lines_are_sglangs_not_the_probes():
    log = "\n".join([
        "INFO:     Started server process [123]",
        "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 40647): address already in use",
        "RuntimeError: The server socket has failed to listen on any local network address. port: 25000, "
        "useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
        "zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:10003')",
        '{"event": "eagle_probe.internal_error", "error": "OSError: [Errno 98] Address already in use"}',
    ])
    lines = bind_error_lines(log)
    assert len(lines) == 3 and "40647" in lines[0] and "EADDRINUSE" in lines[1] and "ZMQError" in lines[2]
    assert bind_error_lines("INFO: The server is fired up and ready to roll!") == []


# A launcher stand-in for SGLangServer's own logic (pure launcher logic: which of its outcomes fails how fast).
# It reads --port from its arguments. Modes: "collide" logs uvicorn's bind error and hangs; "collide-once" does
# that on its first run only, then answers /health; "exit" exits 3.
LAUNCHER = textwrap.dedent("""
    import http.server, os, sys, time
    mode, state = os.environ["FAKE_MODE"], os.environ["FAKE_STATE"]
    port = int(sys.argv[sys.argv.index("--port") + 1])
    first = not os.path.exists(state)
    open(state, "a").write(f"{port} {' '.join(sys.argv)}\\n")
    if mode == "exit":
        print("Traceback: something broke", flush=True); sys.exit(3)
    if mode == "collide" or (mode == "collide-once" and first):
        print(f"ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', {port}): "
              "address already in use", flush=True)
        time.sleep(600)
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers()
        def log_message(self, *args):
            pass
    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
""")


def _fake_server(tmp_path, mode):
    script = tmp_path / "launcher.py"
    script.write_text(LAUNCHER)
    python = tmp_path / "python"  # SGLangServer runs `python -m sglang.launch_server ...`: this drops the -m part
    python.write_text(f"#!/bin/sh\nshift 2\nexec {sys.executable} {script} \"$@\"\n")
    python.chmod(0o755)
    state = tmp_path / "runs"
    server = SGLangServer("model", python=str(python), env={"FAKE_MODE": mode, "FAKE_STATE": str(state)},
                          log_path=str(tmp_path / "server.log"))
    return server, state


def _runs(state):
    return [line.split() for line in state.read_text().splitlines()]


def test_a_collision_is_retried_once_on_new_ports_and_then_fails_fast(tmp_path):
    server, state = _fake_server(tmp_path, "collide")
    t0 = time.monotonic()
    with pytest.raises(PortCollision) as error:
        server.start(timeout=120)
    assert time.monotonic() - t0 < 10
    assert server.start_attempts == 2 and not server.ports.held and not server.is_running()
    runs = _runs(state)
    assert len(runs) == 2 and runs[0][0] != runs[1][0]  # the retry ran on other ports
    message = str(error.value)
    assert "attempt 2" in message and f"('127.0.0.1', {runs[1][0]}): address already in use" in message


def test_a_collision_on_the_first_try_starts_on_the_second(tmp_path):
    server, state = _fake_server(tmp_path, "collide-once")
    try:
        server.start(timeout=60)
        runs = _runs(state)
        assert server.start_attempts == 2 and int(runs[1][0]) == server.port != int(runs[0][0])
        # SGLang is handed the block's NCCL port too, so it never picks one at random
        assert runs[1][runs[1].index("--nccl-port") + 1] == str(server.ports.nccl)
        assert server.ports.held
    finally:
        server.stop()
    assert not server.ports.held


def test_a_launcher_that_exits_fails_within_seconds_quoting_its_log(tmp_path):
    server, state = _fake_server(tmp_path, "exit")
    t0 = time.monotonic()
    with pytest.raises(ServerError) as error:
        server.start(timeout=120)
    assert time.monotonic() - t0 < 5
    assert not isinstance(error.value, PortCollision) and server.start_attempts == 1
    assert "exited with code 3" in str(error.value) and "Traceback: something broke" in str(error.value)
