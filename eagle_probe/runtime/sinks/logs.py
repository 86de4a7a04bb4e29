"""JSON log lines through structlog, without touching the global structlog or stdlib logging config.

One stable dotted event name per kind (docs/reference/events.md lists them). Output is stderr, or one file per
process under EAGLE_PROBE_LOG_DIR so that every rank's lines stay whole and separable, bounded by rotation
(rotation.py: EAGLE_PROBE_LOG_MAX_MB, EAGLE_PROBE_LOG_KEEP).
"""

import logging
import os
import socket
import sys

import structlog

from .rotation import RotatingFile, Rotation

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def log_file_path(log_dir: str) -> str:
    return os.path.join(log_dir, f"eagle-probe-{socket.gethostname()}-{os.getpid()}.jsonl")


def _host() -> str:
    try:
        return socket.gethostname()
    except Exception:
        return ""


class LogSink:
    def __init__(self, level: str = "info", log_dir: str | None = None, stream=None,
                 rotation: Rotation | None = None):
        self._level = level
        self._rotation = rotation if rotation is not None else Rotation(None, 0)
        self._log_dir = None if stream is not None else log_dir
        self._stream = stream
        self._context = {"logger": "eagle_probe", "host": _host()}  # every line names its host, ranks or not
        self._logger = None
        self.path = None

    def _open(self):
        # Opened on first use, so processes that observe nothing leave no file behind.
        stream = self._stream
        if stream is None and self._log_dir:
            os.makedirs(self._log_dir, exist_ok=True)
            self.path = log_file_path(self._log_dir)
            # whole lines, flushed by the logger after each; open for the process's life (closed at exit)
            stream = RotatingFile(self.path, self._rotation)
        self._logger = structlog.wrap_logger(
            structlog.PrintLogger(stream if stream is not None else sys.stderr),
            wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[self._level]),
            processors=[
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                structlog.processors.JSONRenderer(default=str, sort_keys=False),
            ],
            cache_logger_on_first_use=True,
            context_class=dict,
        )
        self._logger = self._logger.bind(pid=os.getpid(), **self._context)

    def bind(self, **fields):
        self._context.update(fields)
        if self._logger is not None:
            self._logger = self._logger.bind(**fields)

    def emit(self, level: str, event: str, **fields):
        if self._logger is None:
            self._open()
        getattr(self._logger, level)(event, **fields)
