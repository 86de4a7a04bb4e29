"""Test-only: which of the probe's modules a process has loaded, written where a test can read it.

With SGLANG_CPU_MODULE_CENSUS_DIR set, every process that loads the tests' bootstrap writes
`{dir}/{pid}.json` (its argv and the sorted names of loaded `eagle_probe` modules) twice a second from a
daemon thread, so the file is current even when SGLang ends the process without running exit hooks.
"""

import json
import os
import sys
import threading

ENV = "SGLANG_CPU_MODULE_CENSUS_DIR"


def _write(path: str):
    names = sorted(name for name in list(sys.modules) if name == "eagle_probe" or name.startswith("eagle_probe."))
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump({"pid": os.getpid(), "argv": sys.argv, "modules": names}, handle)
    os.replace(tmp, path)


def start():
    directory = os.environ.get(ENV)
    if not directory:
        return
    path = os.path.join(directory, f"{os.getpid()}.json")
    stop = threading.Event()

    def loop():
        while True:
            try:
                _write(path)
            except Exception:
                pass
            if stop.wait(0.5):
                return

    threading.Thread(target=loop, name="sglang-cpu-census", daemon=True).start()


def read(directory: str) -> dict:
    """pid -> the probe modules that process had loaded, from the files start() wrote under `directory`."""
    out = {}
    for name in os.listdir(directory):
        if name.endswith(".json"):
            with open(os.path.join(directory, name), encoding="utf-8") as handle:
                entry = json.load(handle)
            out[entry["pid"]] = entry["modules"]
    return out
