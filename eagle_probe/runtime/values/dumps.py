"""Opt-in dumps of what the draft is fed: one safetensors file per dumped target forward (EXTEND, and TARGET_VERIFY
with EAGLE_PROBE_DUMP_MODES; see verify_dumps.py).

Which forwards: every EAGLE_PROBE_DUMP_EVERY-th eager target forward of each dumped mode, counted the same way on
every rank (the first one, then every N-th), written by the ranks in EAGLE_PROBE_DUMP_RANKS. With
EAGLE_PROBE_DUMP_LAYERS=all every rank taps the decoder layers of that forward alone (each layer gets a collector
through the keyword SGLang hands its own capture collector in; SGLang's own is passed on untouched), so that
collectives stay matched across ranks; only the writing ranks keep what was tapped.
On the forward's path only device-side copies are queued (into pinned host memory, non_blocking, with an event);
a background thread waits for the event by polling query(), then writes the file (0600, in a 0700 directory,
through a temporary name). The directory's total stays under EAGLE_PROBE_DUMP_MAX_MB; a full disk, the cap or an
unwritable directory stops dumps with one event. The file layout is the "Dump files" contract of docs/values.md.
"""

import errno
import json
import os
import queue
import resource
import socket
import threading
import time

from ...dump_format import FORMAT_KEY, FORMAT_VERSION, META_KEY, SUFFIX

_POLL_S = 0.005


def _to_host(tensor, cuda: bool):
    import torch

    if not cuda:
        return tensor.detach().clone()
    host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
    host.copy_(tensor, non_blocking=True)
    return host


class DumpJob:
    """Host copies on their way (an event says when they are complete) and the file's metadata."""

    def __init__(self, tensors: dict, metadata: dict):
        import torch

        cuda = any(t.is_cuda for t in tensors.values())
        self.tensors = {name: _to_host(t, cuda) for name, t in tensors.items()}
        self.metadata = metadata
        self.event = None
        if cuda:
            self.event = torch.cuda.Event()
            self.event.record()

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())

    def ready(self) -> bool:
        return self.event is None or self.event.query()

    def finish(self):
        """On the writer thread, once ready: complete what waited for later facts (verify dumps)."""


def job_bytes(rows: int, width: int, slots: int, layers: int) -> int:
    """Bytes a dump of this forward takes on disk, about (aux, final hidden, layer inputs; ids are small)."""
    return rows * width * (slots + 1 + layers) * 4 + rows * 16


def file_size_limit():
    """The process's RLIMIT_FSIZE soft limit in bytes (None: unlimited). Python ignores SIGXFSZ, so a write past it
    fails with EFBIG instead of killing the process; the writer checks first so that no partial file is left."""
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else soft


# Why dumps stopped for good: the `reason` of eagle_probe.dump.stopped and eagle_probe_dumps_stopped_total.
STOP_REASONS = {"cap": "the directory reached EAGLE_PROBE_DUMP_MAX_MB", "full": "the filesystem is full",
                "file_size_limit": "a file would exceed the process's file size limit (RLIMIT_FSIZE)",
                "unwritable": "the directory cannot be written", "error": "an error inside the dump writer"}
_ERRNO_REASONS = {errno.ENOSPC: "full", errno.EDQUOT: "full", errno.EFBIG: "file_size_limit"}


def directory_bytes(path: str) -> int:
    total = 0
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.is_file(follow_symlinks=False):
                total += entry.stat(follow_symlinks=False).st_size
    return total


class DumpWriter:
    """The background thread that turns jobs into files. `on_stop(reason, error)` is called once if dumps stop;
    `on_error(exc)` when an exception inside the writer stopped them."""

    def __init__(self, directory: str, max_bytes: int, on_written, on_stop, max_queued: int = 2, on_error=None):
        self.directory = directory
        self.max_bytes = max_bytes
        self._on_written, self._on_stop, self._on_error = on_written, on_stop, on_error
        self._queue = queue.Queue(maxsize=max_queued)
        self.stopped = False
        self.prepared = False
        self._sequence = 0
        self._thread = None

    def prepare(self):
        """Create the directory (0700) before the first job; raises OSError when it cannot be used."""
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        if not os.path.isdir(self.directory) or not os.access(self.directory, os.W_OK | os.X_OK):
            raise PermissionError(f"{self.directory} is not a writable directory")
        self.prepared = True

    def usable(self) -> bool:
        """Whether jobs may be submitted: the directory is prepared on the first call, and a directory that cannot
        be used stops the writer with its reason instead of raising into the forward."""
        if not self.stopped and not self.prepared:
            try:
                self.prepare()
            except OSError as exc:
                self.stop("unwritable", f"{type(exc).__name__}: {exc}")
        return not self.stopped

    def submit(self, job: DumpJob) -> bool:
        if self.stopped:
            return False
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="eagle-probe-dump", daemon=True)
            self._thread.start()
        try:
            self._queue.put_nowait(job)
        except queue.Full:  # the writer is behind: skip this dump rather than hold the forward
            return False
        return True

    def stop(self, reason: str, error: str = ""):
        if not self.stopped:
            self.stopped = True
            self._on_stop(reason, error)

    def drain(self, timeout_s: float = 10.0):
        """Wait (bounded) until every submitted job is written or dropped: at uninstall and exit. The queue counts a
        job from its put to the writer's task_done, under its own lock: a job the writer has taken off the queue but
        not yet written still counts (an empty queue alone would not say so)."""
        deadline = time.monotonic() + timeout_s
        while self._queue.unfinished_tasks:
            if time.monotonic() > deadline:
                return
            time.sleep(_POLL_S)

    def _run(self):
        while True:
            job = self._queue.get()
            try:
                while not job.ready():
                    time.sleep(_POLL_S)  # polled: the device is never synchronised
                if not self.stopped:
                    job.finish()
                    self._write(job)
            except Exception as exc:  # a bug or an unexpected state: stop dumps, keep the server
                self.stop("error", f"{type(exc).__name__}: {exc}")
                if self._on_error is not None:
                    self._on_error(exc)
            finally:
                self._queue.task_done()

    def _write(self, job: DumpJob):
        from safetensors.torch import save

        payload = save(job.tensors, metadata={FORMAT_KEY: FORMAT_VERSION,
                                              META_KEY: json.dumps(job.metadata, sort_keys=True)})
        try:
            used = directory_bytes(self.directory)
        except OSError as exc:
            self.stop("unwritable", f"{type(exc).__name__}: {exc}")
            return
        if used + len(payload) > self.max_bytes:
            self.stop("cap", f"{used + len(payload)} bytes would exceed EAGLE_PROBE_DUMP_MAX_MB "
                             f"({self.max_bytes} bytes); {used} bytes already there")
            return
        limit = file_size_limit()
        if limit is not None and len(payload) > limit:
            self.stop("file_size_limit", f"a {len(payload)}-byte dump exceeds this process's file size limit "
                                         f"(RLIMIT_FSIZE, ulimit -f: {limit} bytes)")
            return
        self._sequence += 1
        meta = job.metadata
        name = (f"eagle-probe-dump-{socket.gethostname()}-tp{meta.get('tp_rank')}-{os.getpid()}-"
                f"{self._sequence:05d}{SUFFIX}")
        path = os.path.join(self.directory, name)
        tmp = path + ".tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(payload)
            os.replace(tmp, path)
        except OSError as exc:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            self.stop(_ERRNO_REASONS.get(exc.errno, "unwritable"), f"{type(exc).__name__}: {exc}")
            return
        self._on_written(path, len(payload))
