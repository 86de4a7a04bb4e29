"""Loaded by Python at start-up when this directory is on PYTHONPATH (see `eagle-probe run`).

It first runs the sitecustomize it shadows (as ddtrace does), then installs the probe. SGLang starts
its schedulers with `spawn`; they inherit PYTHONPATH and so run this file too. Nothing here may stop
the interpreter from starting.
"""

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _run_shadowed_sitecustomize():
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the interpreter would only warn about its own sitecustomize too
        print(f"eagle-probe: the shadowed sitecustomize {spec.origin} failed: {exc!r}", file=sys.stderr)


def _install_probe():
    if importlib.util.find_spec("eagle_probe") is None:
        sys.path.append(os.path.dirname(os.path.dirname(_HERE)))  # a source checkout, not pip-installed
    try:
        import eagle_probe

        eagle_probe.install()
    except Exception as exc:
        print(f"eagle-probe: not started: {exc!r}", file=sys.stderr)


_run_shadowed_sitecustomize()
_install_probe()
