"""Turning the probe on and off in one process: read the configuration, check the release, create the recorder,
patch every integration; uninstall restores SGLang exactly and drops every cache the wrappers keep.

Exit: at a normal exit atexit flushes the recorder. SGLang's schedulers are usually stopped by SIGTERM, whose
default action skips atexit: once a process serves (its first forward or verify step, after SGLang's own start-up
set its handlers), the main thread gets a SIGTERM handler that flushes and then hands the signal on exactly as
before (to the Python handler it replaced, or to the default action). SIGKILL cannot be caught.
"""

import atexit
import os
import signal
import sys
import threading

from .. import events, versions
from ..config import ConfigError, inner_forward_enabled, load_config
from .context import graph_capture, launch, ranks
from .integrations import ALL
from .patcher import PATCHER
from .recorder import ProcessHooks, Recorder
from .sinks.logs import LogSink
from .sinks.rotation import Rotation
from .state import STATE
from .values import sampler

_lock = threading.Lock()
_atexit_registered = False
_metrics = None
_sigterm = None  # (our handler, the one it replaced) while installed
SIGTERM_FLUSH_TIMEOUT_S = 2.0


def off_summary(sglang_version: str | None) -> str | None:
    """What stays off for an installed release the probe does not run on (None when it runs): outside the range,
    a pre-release outside it, or a version it cannot read (versions.resolve_release)."""
    if _runs_on(versions.resolve_release(sglang_version)):
        return None
    names = ", ".join(i.name for i in ALL)
    return f"all integrations ({names}): no SGLang function is wrapped, SGLang runs unchanged"


def _runs_on(resolved: versions.ResolvedSGLang) -> bool:
    # No SGLang installed: nothing is there to wrap, the probe stays on with the newest rules (its hooks wait).
    return resolved.supported or resolved.text is None


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
        resolved = versions.resolve_sglang()
        sglang_version = resolved.text
        logs = LogSink(config.log_level, config.log_dir,
                       rotation=Rotation(int(config.log_max_mb * 1024 * 1024), config.log_keep))
        if not _runs_on(resolved):
            off = off_summary(sglang_version)
            logs.emit("warning", events.UNSUPPORTED_VERSION, sglang_version=sglang_version,
                      supported=versions.SUPPORTED_RANGE_TEXT, off=off, message=_off_message(resolved, off))
            return False

        rules = resolved.rules

        def make_metrics(rank_info, exporter=True):
            from .sinks.endpoint import sglang_serves_node
            from .sinks.metrics import MetricsSink
            served = sglang_serves_node(rank_info.node_rank, rules.other_nodes_serve_metrics)
            port = config.metrics_port if exporter else None
            return _shared_metrics(rank_info, port, lambda ranks, port: MetricsSink(
                ranks, port, addr=config.metrics_addr, node_served=served))

        hooks = ProcessHooks(ranks.read_ranks, make_metrics, on_serving=install_sigterm_flush,
                             read_launch=launch.read_launch)
        STATE.recorder = Recorder(config, rules, sglang_version, logs, hooks)
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


def _off_message(resolved: versions.ResolvedSGLang, off: str | None) -> str:
    release = versions.parse_release(resolved.text or "")
    if release is None:
        why = f"is not a release number the probe can read (supported: {versions.SUPPORTED_RANGE_TEXT})"
    else:
        kind = "" if release.final else "a pre-release "
        why = f"is {kind}outside the supported range {versions.SUPPORTED_RANGE_TEXT}"
    return f"SGLang {resolved.text} {why}; off: {off}"


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
        except Exception as exc:
            STATE.report_error("flush.exit", exc)


def install_sigterm_flush() -> bool:
    """Flush the recorder on SIGTERM, then hand the signal on as before. Only in the main thread (False: ask again
    from there), only over the default action or a Python handler (SIG_IGN and handlers set outside Python stay as
    they are). True once decided."""
    global _sigterm
    if threading.current_thread() is not threading.main_thread():
        return False
    if _sigterm is not None:
        return True
    previous = signal.getsignal(signal.SIGTERM)
    if previous is not signal.SIG_DFL and not callable(previous):
        return True

    def on_sigterm(signum, frame):
        _flush_before_exit()
        if callable(previous):
            previous(signum, frame)
        else:  # the default action: the process ends by SIGTERM, as it would have
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, on_sigterm)
    _sigterm = (on_sigterm, previous)
    return True


def _flush_before_exit(timeout_s: float = SIGTERM_FLUSH_TIMEOUT_S):
    """The flush on a helper thread, waited for at most timeout_s: the signal may have interrupted this thread
    inside the probe (holding a lock the flush needs); the process must stop all the same."""
    try:
        worker = threading.Thread(target=_flush, name="eagle-probe-sigterm-flush", daemon=True)
        worker.start()
        worker.join(timeout_s)
    except Exception as exc:
        STATE.report_error("sigterm.flush", exc)


def _remove_sigterm_flush():
    global _sigterm
    if _sigterm is None or threading.current_thread() is not threading.main_thread():
        return
    ours, previous = _sigterm
    if signal.getsignal(signal.SIGTERM) is ours:  # someone else's since: leave theirs in place
        signal.signal(signal.SIGTERM, previous)
    _sigterm = None


def uninstall() -> None:
    """Restore every patched attribute to the exact original object, flush, drop the caches, turn the probe off."""
    with _lock:
        PATCHER.uninstall()
        _remove_sigterm_flush()
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
