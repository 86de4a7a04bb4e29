"""Test-only report of the probe's own state size in an SGLang process (never part of the probe).

``SGLANG_CPU_PROBE_STATE_DIR=DIR``: a daemon thread in every SGLang process writes, every 0.25 s once the probe's
recorder there knows its ranks (a scheduler), ``DIR/state-PID.json``: ``{"pid", "time", "sizes"}`` where
``sizes`` maps each container the probe keeps between observations (the recorder's dicts, lists and sets, its
parts', acceptance monitor, fingerprint sampler, metrics sink, and the integrations' module caches) to its
``len()``. A test compares two reports to show that the probe's state does not grow with requests. Applied from
``sglang_cpu/site/sitecustomize.py``; off unless the variable is set.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import weakref

ENV = "SGLANG_CPU_PROBE_STATE_DIR"
INTERVAL_S = 0.25
_CONTAINERS = (dict, list, set, frozenset, weakref.WeakKeyDictionary, weakref.WeakValueDictionary)
# module-level caches of the serving side: module name -> attribute names
MODULE_CACHES = {
    "eagle_probe.runtime.integrations.target_forward": ("_statics", "_dtype_names", "INNER_ROWS"),
    "eagle_probe.runtime.integrations.targets": ("_seen",),
    "eagle_probe.runtime.integrations.llama_eagle3": ("_statics",),
    "eagle_probe.runtime.integrations.acceptance": ("_fields", "_positions"),
    "eagle_probe.runtime.values.sampler": ("_members",),
    "eagle_probe.runtime.context.roles": ("_roles",),
}
_started = False


def _add(sizes: dict, prefix: str, obj) -> None:
    for name, value in list(vars(obj).items()):
        if isinstance(value, _CONTAINERS):
            sizes[f"{prefix}.{name}"] = len(value)


def sizes() -> dict:
    """{container: len} of the probe's state in this process ({} before the recorder knows its ranks)."""
    from eagle_probe.runtime.state import STATE

    recorder = STATE.recorder
    if recorder is None or recorder.ranks is None:
        return {}
    out: dict = {}
    _add(out, "recorder", recorder)
    _add(out, "outputs", recorder.out)
    for part in recorder.parts:
        _add(out, type(part).__name__, part)
    for name in ("acceptance", "fingerprints", "coverage", "metrics"):
        if getattr(recorder, name, None) is not None:
            _add(out, name, getattr(recorder, name))
    for module_name, attrs in MODULE_CACHES.items():
        module = sys.modules.get(module_name)
        for attr in attrs if module is not None else ():
            value = getattr(module, attr, None)
            if isinstance(value, _CONTAINERS):
                out[f"{module_name.rsplit('.', 1)[-1]}.{attr}"] = len(value)
    for short in ("target_forward", "llama_eagle3"):
        module_name = f"eagle_probe.runtime.integrations.{short}"
        module = sys.modules.get(module_name)
        statics = list(getattr(module, "_statics", {}).values()) if module is not None else []
        out[f"{short}._statics.last"] = sum(len(s.last) for s in statics)
    return out


def _run(directory: str):
    path = os.path.join(directory, f"state-{os.getpid()}.json")
    while True:
        time.sleep(INTERVAL_S)
        try:
            current = sizes()
            if not current:
                continue
            tmp = path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as handle:
                json.dump({"pid": os.getpid(), "time": time.time(), "sizes": current}, handle)
            os.replace(tmp, path)
        except Exception as exc:  # a report that fails must not touch the server
            print(f"sglang_cpu.probe_state: {exc!r}", file=sys.stderr)
            time.sleep(1.0)


def start(directory: str | None = None) -> bool:
    global _started
    directory = os.environ.get(ENV, "") if directory is None else directory
    if _started or not directory:
        return False
    _started = True
    os.makedirs(directory, exist_ok=True)
    threading.Thread(target=_run, args=(directory,), name="sglang-cpu-probe-state", daemon=True).start()
    return True


def read(directory: str) -> dict:
    """pid -> the last report of every process that wrote one."""
    reports = {}
    for name in os.listdir(directory):
        if name.startswith("state-") and name.endswith(".json"):
            with open(os.path.join(directory, name), encoding="utf-8") as handle:
                report = json.load(handle)
            reports[report["pid"]] = report
    return reports
