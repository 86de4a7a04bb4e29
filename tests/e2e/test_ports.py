"""Real servers start while other processes take and release ports as fast as they can, and no port collides.

Three churners run the whole time: one binds port 0 and releases it in a loop (the kernel's ephemeral picks, as
the old free_port() did), one binds port 0 and holds each for half a second (sockets that live a while: gloo, ZMQ,
clients), one binds random ports in SGLang's own random range (its NCCL-port pick when --nccl-port is unset). Two
target-only servers start at once among them; the first one's HTTP port is taken by this test before it starts, so
it must log the bind error, fail that attempt within seconds and come up on a second block of ports."""

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from sglang_cpu.ports import BLOCK_SIZE, SGLANG_RANDOM_PORTS, ephemeral_range
from sglang_cpu.server import STARTUP_TIMEOUT_S, SGLangServer, bind_error_lines

from .conftest import AUX_ARGS, PROMPTS

CHURNER = textwrap.dedent("""
    import json, random, socket, sys, time
    kind, out, stop = sys.argv[1], sys.argv[2], sys.argv[3]
    seen, held = set(), []
    low, high = (int(v) for v in sys.argv[4:6])
    import os
    while not os.path.exists(stop):
        s = socket.socket()
        try:
            s.bind(("0.0.0.0", random.randint(low, high) if kind == "sglang-range" else 0))
        except OSError:
            s.close(); continue
        seen.add(s.getsockname()[1])
        if kind == "hold":
            s.listen(1); held.append((time.monotonic(), s))
            while held and time.monotonic() - held[0][0] > 0.5:
                held.pop(0)[1].close()
        else:
            s.close()
        time.sleep(0.001)
    json.dump(sorted(seen), open(out, "w"))
""")


@pytest.fixture(scope="module")
def churned(tiny_checkpoint, tmp_path_factory):
    checkpoint, _ = tiny_checkpoint
    root = str(tmp_path_factory.mktemp("ports"))
    stop = os.path.join(root, "stop")
    churners = {kind: subprocess.Popen([sys.executable, "-c", CHURNER, kind, os.path.join(root, f"{kind}.json"),
                                        stop, *map(str, SGLANG_RANDOM_PORTS)])
                for kind in ("release", "hold", "sglang-range")}
    servers = [SGLangServer(checkpoint, extra_args=AUX_ARGS, log_path=os.path.join(root, f"server-{i}.log"))
               for i in range(2)]
    taken = socket.socket()
    taken.bind(("127.0.0.1", servers[0].port))  # what a stranger holding the chosen port looks like
    taken.listen(1)
    first_port = servers[0].port
    errors, outputs = {}, {}

    def run(i):
        try:
            # twice the one-server timeout: two servers start at once here by design, the first one twice (in one
            # whole-suite run beside other work the first took over 239 s, the second 149 s)
            servers[i].start(timeout=2 * STARTUP_TIMEOUT_S)
            outputs[i] = [servers[i].generate(p) for p in PROMPTS]
        except Exception as exc:  # reported by the tests below
            errors[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    t0 = time.monotonic()
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.monotonic() - t0
        blocks = [(s.ports.base, s.ports.base + BLOCK_SIZE - 1) for s in servers]
        logs = [s.log_text() for s in servers]
        attempts = [s.start_attempts for s in servers]
    finally:
        open(stop, "w").close()
        for proc in churners.values():
            proc.wait(30)
        for s in servers:
            s.stop()
        taken.close()
    churn = {}
    for kind in churners:
        with open(os.path.join(root, f"{kind}.json")) as f:
            churn[kind] = json.load(f)
    return dict(errors=errors, outputs=outputs, blocks=blocks, logs=logs, attempts=attempts, churn=churn,
                first_port=first_port, seconds=seconds)


def test_both_servers_came_up_and_answered(churned):
    assert churned["errors"] == {}
    assert churned["outputs"][0] == churned["outputs"][1] and all(len(o) == 8 for o in churned["outputs"][0])
    print(f"two servers among the churners: {churned['seconds']:.1f} s")


def test_the_churners_really_churned(churned):
    low, high = ephemeral_range()
    release, hold, sglang_range = (churned["churn"][k] for k in ("release", "hold", "sglang-range"))
    assert len(release) > 500 and len(hold) > 500 and len(sglang_range) > 500
    assert all(low <= p <= high for p in release + hold)
    print({kind: len(seen) for kind, seen in churned["churn"].items()}, "distinct ports taken")


def test_no_port_any_churner_took_lies_in_a_servers_block(churned):
    taken = set().union(*churned["churn"].values())
    for low, high in churned["blocks"]:
        assert not [p for p in taken if low <= p <= high]


def test_only_the_port_held_on_purpose_collided_and_it_was_retried_on_new_ports(churned):
    assert churned["attempts"] == [2, 1]
    [collision] = bind_error_lines(churned["logs"][0])
    assert f"('127.0.0.1', {churned['first_port']})" in collision
    assert bind_error_lines(churned["logs"][1]) == []
    assert churned["blocks"][0][0] != churned["first_port"]
