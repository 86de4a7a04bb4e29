"""Opt-in dumps (EAGLE_PROBE_DUMP_DIR): the planner that picks forwards, the writer thread, and their events. Dumps
stop for good in a process with one event; the server goes on."""

from ...events import DUMP_STOPPED, DUMP_WRITTEN
from ...versions import LAYER_CAPTURE_KWARG
from ..sinks.metrics import MetricsSink
from ..values import boundary
from ..values.dump_plan import DumpPlanner
from ..values.dumps import STOP_REASONS, DumpWriter
from ..values.verify_dumps import note_step
from .base import Part


class Dumps(Part):
    kinds = ()

    def __init__(self, recorder):
        super().__init__(recorder)
        config = self.config
        self.planner = self.writer = self.worker_planner = None
        self.waiting = []  # dumped verify forwards awaiting their step's resolution (values/verify_dumps.py)
        if config.dump_dir:
            kwarg = LAYER_CAPTURE_KWARG if self.rules.embedding_capturable else None
            self.planner = DumpPlanner(config.dump_every, config.dump_ranks, config.dump_layers == "all", kwarg,
                                       config.dump_modes)
            # The worker boundary's own count (values/boundary.py): aux dumps on every path; all-layer dumps need the
            # inner forward's layer taps, so with EAGLE_PROBE_DUMP_LAYERS=all the inner forward writes them (eager).
            if not self.planner.all_layers:
                self.worker_planner = DumpPlanner(config.dump_every, config.dump_ranks, False, None, config.dump_modes)
            self.writer = DumpWriter(config.dump_dir, int(config.dump_max_mb * 1024 * 1024), self.written,
                                     self.stopped, on_error=lambda exc: self.out.internal_error("dumps.write", exc))

    def inner_dumps(self) -> bool:
        """Whether the inner forward wrapper dumps (all-layer dumps, or values not taken at the worker)."""
        return self.planner is not None and (self.worker_planner is None or boundary.inner_values_on())

    def verify_resolved(self, reqs, counts, worker: str):
        """From a verify step's resolution while self.waiting (integrations/acceptance.py)."""
        note_step(self.waiting, reqs, counts, worker)

    def written(self, path: str, nbytes: int):
        """From the writer's thread: one file is complete."""
        self.out.emit("info", DUMP_WRITTEN, path=path, bytes=nbytes)
        self.out.metric(MetricsSink.dump_written, nbytes)

    def stopped(self, reason: str, error: str):
        """From the writer (or the planner): dumps stop for good in this process."""
        self.out.emit("warning", DUMP_STOPPED, reason=reason, error=error, directory=self.config.dump_dir,
                      message=f"dumps stopped: {STOP_REASONS.get(reason, reason)} ({error}); the server is not "
                              f"affected")
        self.out.metric(MetricsSink.dump_stopped, reason)

    def skipped(self, reason: str):
        self.out.metric(MetricsSink.dump_skipped, reason)

    def close(self):
        if self.writer is not None:
            self.writer.drain()
