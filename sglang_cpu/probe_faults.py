"""Test-only fault injection into the probe's own functions (never part of the probe).

``SGLANG_CPU_PROBE_FAULTS="SITE[:N],SITE[:N],..."``: each SITE is a dotted path under ``eagle_probe.runtime``
(a module, then a function or ``Class.method`` in it), e.g. ``integrations.target_forward._after_forward``,
``recorder.Recorder.on_timer``, ``sinks.logs.LogSink.emit``, ``values.dumps.DumpWriter._write``. The function is
wrapped (wrapt, in place: callers that look it up at call time, as the probe's own do, get the wrapper) so that
it raises ``RuntimeError("injected fault: SITE")`` instead of running: on every call, or with ``:N`` on its
first N calls only (then it runs normally again, to show that the probe recovers).

``apply()`` runs from ``sglang_cpu/site/sitecustomize.py`` in every SGLang process, before the probe's bootstrap
installs it (the bootstrap runs the sitecustomize it shadows first); the probe is importable by then and its
modules import nothing of SGLang at module level. Calls per site are counted in ``CALLS`` (faults raised).
"""

from __future__ import annotations

import importlib
import os
import threading

import wrapt

ENV = "SGLANG_CPU_PROBE_FAULTS"
PACKAGE = "eagle_probe.runtime"

CALLS: dict = {}  # site -> faults raised in this process
_lock = threading.Lock()
_applied = False


def parse(spec: str):
    """"a.b:3,c.d" -> [("a.b", 3), ("c.d", None)]"""
    faults = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        site, _, limit = item.partition(":")
        faults.append((site, int(limit) if limit else None))
    return faults


def resolve(site: str):
    """(owner, attribute name) of SITE: the longest importable module prefix, then attributes."""
    parts = site.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(f"{PACKAGE}.{'.'.join(parts[:cut])}")
        except ImportError:
            continue
        for name in parts[cut:-1]:
            owner = getattr(owner, name)
        getattr(owner, parts[-1])  # must exist: a misspelt site fails the server start, not silently
        return owner, parts[-1]
    raise ValueError(f"{ENV}: no module of {PACKAGE} in {site!r}")


def fault(site: str, limit):
    def wrapper(wrapped, instance, args, kwargs):
        with _lock:
            raised = CALLS.get(site, 0)
            fire = limit is None or raised < limit
            if fire:
                CALLS[site] = raised + 1
        if fire:
            raise RuntimeError(f"injected fault: {site}")
        return wrapped(*args, **kwargs)

    return wrapper


def apply(spec: str | None = None) -> list:
    """Wrap every site of ``spec`` (default: $SGLANG_CPU_PROBE_FAULTS); idempotent. Returns the sites wrapped."""
    global _applied
    spec = os.environ.get(ENV, "") if spec is None else spec
    if _applied or not spec:
        return []
    _applied = True
    sites = []
    for site, limit in parse(spec):
        owner, name = resolve(site)
        wrapt.wrap_function_wrapper(owner, name, fault(site, limit))
        sites.append(site)
    return sites
