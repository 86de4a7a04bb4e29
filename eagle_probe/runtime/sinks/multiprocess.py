"""Prometheus multiprocess mode beside SGLang's: gauges of dead processes dropped, this process marked dead at exit.
Where the series are served: sinks/endpoint.py."""

import os
import re

# Gauges in multiprocess mode: the rank labels already make each series one rank's, so "most recent write"
# gives one value per rank (not one per pid, as "all" would); "live" drops a process's values once it is
# marked dead (at its exit, or by the next probe process that finds its files).
GAUGE_MULTIPROCESS_MODE = "livemostrecent"
_LIVE_GAUGE_FILE = re.compile(r"^gauge_live[a-z]+_(\d+)\.db$")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def remove_dead_process_gauges(path: str) -> list:
    """mark_process_dead for every pid that left live-gauge files in `path` and no longer runs (a process
    killed with SIGKILL never runs its exit hook). Counters and histograms of dead processes stay: Prometheus
    counters must not go back. Returns the pids cleaned."""
    from prometheus_client import multiprocess

    dead = set()
    for name in os.listdir(path):
        match = _LIVE_GAUGE_FILE.match(name)
        if match and int(match.group(1)) != os.getpid() and not _pid_alive(int(match.group(1))):
            dead.add(int(match.group(1)))
    for pid in sorted(dead):
        multiprocess.mark_process_dead(pid, path)
    return sorted(dead)


def mark_self_dead(path: str, pid: int):
    if os.getpid() != pid:  # a forked child inherits atexit hooks
        return
    try:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid, path)
    except Exception:
        pass
