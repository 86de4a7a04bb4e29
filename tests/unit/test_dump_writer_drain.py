"""DumpWriter.drain waits for a job the writer thread has taken off its queue but not yet written: drain is what
uninstall, process exit and the tests rely on for every submitted dump to be on disk."""

import queue
import threading
import time

import torch

from eagle_probe.runtime.values.dumps import DumpJob, DumpWriter


class SlowHandOverQueue(queue.Queue):
    """The writer thread descheduled right after it took a job (the queue is empty, the job not yet written)."""

    def __init__(self, *args, taken: threading.Event, **kwargs):
        super().__init__(*args, **kwargs)
        self.taken = taken

    def get(self, *args, **kwargs):
        item = super().get(*args, **kwargs)
        self.taken.set()
        time.sleep(0.3)
        return item


def test_drain_waits_for_a_job_taken_off_the_queue_but_not_written(tmp_path):
    written = []
    writer = DumpWriter(str(tmp_path), 1 << 30, lambda path, n: written.append(path), lambda *a: None)
    taken = threading.Event()
    writer._queue = SlowHandOverQueue(maxsize=2, taken=taken)
    assert writer.usable()
    assert writer.submit(DumpJob({"aux_hidden_states": torch.zeros(2, 4)}, {"tp_rank": 0}))
    assert taken.wait(5) and writer._queue.empty()  # the job is in the writer's hands only
    writer.drain(timeout_s=5)
    assert len(written) == 1 and [p.name for p in tmp_path.iterdir()] == [written[0].rsplit("/", 1)[-1]]


def test_drain_returns_at_its_bound_when_a_job_never_becomes_ready(tmp_path):
    class NeverReady(DumpJob):
        def ready(self):
            return False

    writer = DumpWriter(str(tmp_path), 1 << 30, lambda path, n: None, lambda *a: None)
    assert writer.usable() and writer.submit(NeverReady({"x": torch.zeros(1)}, {}))
    started = time.monotonic()
    writer.drain(timeout_s=0.3)
    assert 0.25 < time.monotonic() - started < 3 and list(tmp_path.iterdir()) == []
