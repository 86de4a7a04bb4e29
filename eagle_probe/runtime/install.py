"""Turning the probe on and off in one process: read the configuration, check the release, create the recorder,
patch every integration; uninstall restores SGLang exactly and drops every cache the wrappers keep."""

import atexit
import os
import sys
import threading
from typing import Optional

from .. import events, versions
from ..config import ConfigError, inner_forward_enabled, load_config
from .context import graph_capture, ranks
from .integrations import ALL
from .patcher import PATCHER
from .recorder import Recorder
from .sinks.logs import LogSink
from .state import STATE
from .values import sampler

_lock = threading.Lock()
_atexit_registered = False
_metrics = None


def off_summary(sglang_version: Optional[str]) -> Optional[str]:
    """What stays off for an installed release outside the range (None when it is supported)."""
    parsed = None if sglang_version is None else versions.parse_version(sglang_version)
    if parsed is not None and versions.is_supported(parsed):
        return None
    names = ", ".join(i.name for i in ALL)
    return f"all integrations ({names}): no SGLang function is wrapped, SGLang runs unchanged"


def install(env=None) -> bool:
    """Turn the probe on in this process. Idempotent; returns whether the probe is active.

    A bad EAGLE_PROBE_* value is logged as one error event and leaves the probe off; it never raises.
    """
    global _atexit_registered
    with _lock:
        if STATE.active:
            return True
        try:
            config = load_config(env)
        except ConfigError as exc:
            LogSink().emit("error", events.CONFIG_ERROR, variable=exc.variable, value=exc.value,
                           accepted=exc.accepted, message=f"eagle-probe stays off: {exc}")
            return False
        if not config.enabled:
            return False
        sglang_version = versions.installed_sglang_version()
        parsed = None if sglang_version is None else versions.parse_version(sglang_version)
        logs = LogSink(config.log_level, config.log_dir)
        if parsed is not None and not versions.is_supported(parsed):
            off = off_summary(sglang_version)
            logs.emit("warning", events.UNSUPPORTED_VERSION, sglang_version=sglang_version,
                      supported=versions.SUPPORTED_RANGE_TEXT, off=off,
                      message=f"SGLang {sglang_version} is outside the supported range "
                              f"{versions.SUPPORTED_RANGE_TEXT}; off: {off}")
            return False

        def make_metrics(rank_info):
            from .sinks.metrics import MetricsSink
            return _shared_metrics(rank_info, config.metrics_port,
                                   lambda ranks, port: MetricsSink(ranks, port, addr=config.metrics_addr))

        STATE.recorder = Recorder(config, versions.rules_for(parsed), sglang_version, logs,
                                  ranks.read_ranks, make_metrics)
        STATE.inner_forward = inner_forward_enabled(config, sys.argv)
        if config.inner_forward == "auto" and env is None:
            # Decided from the launch command; spawned schedulers see other argv, so pass it on.
            os.environ["EAGLE_PROBE_INNER_FORWARD"] = "on" if STATE.inner_forward else "off"
        STATE.active = True
        PATCHER.install(ALL)
        if not _atexit_registered:
            _atexit_registered = True
            atexit.register(_flush)
        return True


def _shared_metrics(rank_info, port, factory):
    # prometheus_client refuses to register a name twice in one process: reuse across reinstalls.
    global _metrics
    if _metrics is None:
        _metrics = factory(rank_info, port)
    return _metrics


def _flush(close: bool = False):
    if STATE.recorder is not None:
        try:
            STATE.recorder.close() if close else STATE.recorder.flush()
        except Exception:
            pass


def uninstall() -> None:
    """Restore every patched attribute to the exact original object, flush, drop the caches, turn the probe off."""
    with _lock:
        PATCHER.uninstall()
        _flush(close=True)
        STATE.active = False
        STATE.recorder = None
        for integration in ALL:
            if integration.reset is not None:
                integration.reset()
        graph_capture.reset()
        sampler.reset()


def patched_targets():
    return PATCHER.applied()
