"""A process's log file, bounded: past `max_bytes` it is renamed with the next number and a new one begins.

`eagle-probe-HOST-PID.jsonl` is always the newest; rotated files are `eagle-probe-HOST-PID.00001.jsonl`,
`.00002.jsonl`, ... in the order written, which `ls` and the readers' sorted listing put before the newest file
('0' sorts before 'j'). Only whole lines are written to a file, and a new file begins with the process's once-only
lines (events.ONCE_PER_PROCESS, up to STICKY_LIMIT bytes) so that what the first file said of the process is
still there when it is gone, then the latest line of each periodic event whose counts run since the start
(events.LATEST_PER_PROCESS), so that the files kept hold the last totals even when the server has been idle since
a rotation; readers drop the repeated lines. At most `keep` rotated files stay (the oldest go).
A failed rename or open leaves the current file in use: the log never raises into the server.
"""

import os

from ... import events

STICKY_LIMIT = 256 * 1024  # bytes of once-only lines carried into every new file
_ONCE_MARKS = tuple(f'"event": "{name}"' for name in events.ONCE_PER_PROCESS)
_LATEST_MARKS = {f'"event": "{name}"': name for name in events.LATEST_PER_PROCESS}


class Rotation:
    """The bound: rotate past max_bytes (None: never), keep this many rotated files."""

    def __init__(self, max_bytes: int | None, keep: int):
        self.max_bytes = max_bytes
        self.keep = keep


def rotated_path(path: str, number: int) -> str:
    stem, ext = os.path.splitext(path)
    return f"{stem}.{number:05d}{ext}"


def _last_number(path: str) -> int:
    """The highest number of the rotated files of `path` already there, else 0."""
    directory, name = os.path.split(path)
    stem, ext = os.path.splitext(name)
    numbers = []
    try:
        names = os.listdir(directory or ".")
    except OSError:
        return 0
    for other in names:
        middle = other[len(stem) + 1:-len(ext)] if other.startswith(stem + ".") and other.endswith(ext) else ""
        if middle.isdigit():
            numbers.append(int(middle))
    return max(numbers, default=0)


class RotatingFile:
    """A text file for structlog's PrintLogger (write and flush; its lock makes the calls of one line contiguous)."""

    def __init__(self, path: str, rotation: Rotation):
        self.path = path
        self.rotation = rotation
        self.rotations = _last_number(path)  # a restarted server may get the same pid: number after its files
        self.sticky_dropped = 0
        self._sticky: list[str] = []
        self._sticky_bytes = 0
        self._latest: dict[str, str] = {}  # periodic event -> its last line
        self._pending: list[str] = []
        self._handle = open(path, "a", encoding="utf-8")  # noqa: SIM115  (open for the process's life)
        self._size = self._handle.tell()

    def write(self, text: str) -> int:
        self._pending.append(text)
        if text.endswith("\n"):
            line, self._pending = "".join(self._pending), []
            self._write_line(line)
        return len(text)

    def flush(self) -> None:
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()

    def _write_line(self, line: str) -> None:
        self._handle.write(line)
        self._size += len(line)  # the renderer writes ASCII: characters are bytes
        if any(mark in line for mark in _ONCE_MARKS):
            self._keep_sticky(line)
        else:
            for mark, name in _LATEST_MARKS.items():
                if mark in line:
                    self._latest[name] = line
                    break
        limit = self.rotation.max_bytes
        if limit is not None and self._size >= limit:
            self._rotate()

    def _keep_sticky(self, line: str) -> None:
        if self._sticky_bytes + len(line) > STICKY_LIMIT:
            self.sticky_dropped += 1
            return
        self._sticky.append(line)
        self._sticky_bytes += len(line)

    def _rotate(self) -> None:
        self._handle.flush()
        number = self.rotations + 1
        try:
            os.replace(self.path, rotated_path(self.path, number))
            handle = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        except OSError:
            return  # the current file stays in use (it may pass the bound)
        self._handle.close()
        self._handle, self._size, self.rotations = handle, 0, number
        for old in range(number - self.rotation.keep, 0, -1):
            try:
                os.remove(rotated_path(self.path, old))
            except FileNotFoundError:
                break  # removed at an earlier rotation, and so are the ones before it
            except OSError:
                pass
        for line in [*self._sticky, *self._latest.values()]:
            self._handle.write(line)
            self._size += len(line)
        self._handle.flush()
