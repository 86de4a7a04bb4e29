"""A real two-node SGLang launch on one machine, for the tests and benchmarks/two_node_stop.py (test-only support,
never part of the probe). See start_two_node_pair."""

import os


def start_two_node_pair(root, name, case, env=(None, None), probe=True, extra_args=()):
    """A real two-node EAGLE-3 launch on this machine: `--tp-size 2 --nnodes 2 --node-rank 0|1`, one
    `sglang.launch_server` per node, both meeting at node 0's `--dist-init-addr 127.0.0.1:{ports.dist_init}` (held by
    node 0's port block for both) with node 0's `--nccl-port`; node 1 has its own `--port` (SGLang's health server
    there). Each node binds its one rank to its own core (SGLANG_CPU_OMP_THREADS_BIND=<node rank>). The probe (unless
    probe=False) logs to root/probe-NAME-nodeR; `env` adds to each node's environment. Both start together (neither
    is healthy before the other joins). Returns [node0, node1] (SGLangServer) and [log dir 0, log dir 1]."""
    import threading

    from eagle_probe.bootstrap import BOOTSTRAP_DIR
    from sglang_cpu.server import SGLangServer
    from sglang_cpu.spec_shims import SPEC_ENV

    servers, log_dirs = [], []
    for node in (0, 1):
        log_dir = os.path.join(root, f"probe-{name}-node{node}")
        full_env = dict(SPEC_ENV, SGLANG_CPU_OMP_THREADS_BIND=str(node))
        if probe:
            full_env.update(EAGLE_PROBE_LOG_DIR=log_dir, EAGLE_PROBE_SUMMARY_INTERVAL_S="0.2")
        full_env.update(env[node] or {})
        server = SGLangServer(case["target"], pythonpath_prefix=[BOOTSTRAP_DIR] if probe else (), env=full_env,
                              log_path=os.path.join(root, f"{name}-node{node}.log"))
        servers.append(server)
        log_dirs.append(log_dir)
    first = servers[0].ports
    for node, server in enumerate(servers):
        server.extra_args = ["--tp-size", "2", "--nnodes", "2", "--node-rank", str(node),
                             "--dist-init-addr", f"127.0.0.1:{first.dist_init}", "--nccl-port", str(first.nccl),
                             *case["args"], "--enable-metrics", *extra_args]
    errors = []

    def start(server):
        try:
            server.start()
        except Exception as exc:  # noqa: BLE001 - reported below, after both have finished
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(s,)) for s in servers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        for server in servers:
            server.stop()
        raise errors[0]
    return servers, log_dirs


def stop_pair(servers, grace=None):
    """SIGTERM both nodes' process groups at once, as an orchestrator stopping the launch does; then SGLangServer.stop
    (SIGKILL what is left after its grace). Returns, per node, {"scheduler": seconds until its scheduler processes
    (where the probe runs) had ended, "group": seconds until its whole process group had ended}; None where it was
    still there after the grace and was killed."""
    import signal
    import time

    import psutil

    from sglang_cpu.server import STOP_GRACE_S, _pgid_alive

    grace = STOP_GRACE_S if grace is None else grace
    schedulers = [_schedulers(server.proc.pid) for server in servers]
    t0 = time.monotonic()
    for server in servers:
        try:
            os.killpg(server.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    ended = [{"scheduler": None, "group": None} for _ in servers]
    while time.monotonic() < t0 + grace and any(None in e.values() for e in ended):
        now = round(time.monotonic() - t0, 2)
        for i, server in enumerate(servers):
            if ended[i]["scheduler"] is None and not any(_running(p, psutil) for p in schedulers[i]):
                ended[i]["scheduler"] = now
            if ended[i]["group"] is None and server.proc.poll() is not None and not _pgid_alive(server.proc.pid):
                ended[i]["group"] = now
        time.sleep(0.05)
    for server in servers:
        server.stop(grace=0.5)
    return ended


def _schedulers(pid):
    import psutil

    out = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if child.name().startswith("sglang::schedul"):
                out.append(child)
        except psutil.Error:
            pass
    return out


def _running(process, psutil):
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
