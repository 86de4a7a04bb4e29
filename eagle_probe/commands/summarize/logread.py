"""Read the probe's JSON-lines logs back: files, directories of per-process files, or a stream.

Every line is either a probe event or skipped and counted with its reason: other output (SGLang's own
lines on the same stderr), a truncated or otherwise invalid JSON line, bytes that are not UTF-8 text, a line
too long, or a probe line with a field of the wrong type (fields.py). The first skipped lines other than
other output are listed with file:line, so that a damaged log can be found.
"""

import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator

from ...events import AUX_FINGERPRINT, AUX_FINGERPRINTS, CARRIED_ON_ROTATION, STARTED
from .fields import field_problem

SUFFIXES = (".jsonl", ".log")
MAX_LINE_BYTES = 8 * 1024 * 1024  # the probe's lines are kilobytes; a longer one is not read into memory
MAX_DEPTH = 64  # the probe nests a few levels; far deeper JSON would overflow the renderers' recursion
LISTED = 20  # skipped lines listed with file:line (all are counted)

OTHER = "not a probe event"  # other output: SGLang's own lines on the same stream
BAD_JSON = "invalid JSON"
BINARY = "binary data"
TOO_LONG = "line too long"
BAD_FIELD = "wrong field type"
BAD_SLOT = "fingerprint slot of a wrong field type"  # one slot of a line left out, the line's others read

_DECODER = json.JSONDecoder()


def log_files(paths: Iterable[str]) -> Iterator[str]:
    """Each path given, and for a directory its *.jsonl / *.log files (subdirectories are not read), sorted by name:
    a process's rotated files (`...-PID.00001.jsonl`, ...) come in the order written, before its newest."""
    for path in paths:
        if not os.path.isdir(path):
            yield path
            continue
        for name in sorted(os.listdir(path)):
            full = os.path.join(path, name)
            # a directory or device is no log; a broken link or a link loop is opened, and named when it fails
            if name.endswith(SUFFIXES) and not (os.path.exists(full) and not os.path.isfile(full)):
                yield full


def _lines(handle) -> Iterator[bytes | None]:
    """The stream's lines (bytes, or str from a text stream); None for a line over MAX_LINE_BYTES."""
    while True:
        line = handle.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        newline = b"\n" if isinstance(line, bytes) else "\n"
        if len(line) <= MAX_LINE_BYTES or line.endswith(newline):
            yield line
            continue
        while line and not line.endswith(newline):  # drop the rest of the long line, a chunk at a time
            line = handle.readline(MAX_LINE_BYTES)
        yield None


def _too_deep(line: str, record) -> bool:
    if line.count("[") + line.count("{") <= MAX_DEPTH:  # cheap: most lines cannot be that deep
        return False
    stack = [(record, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        if children and depth > MAX_DEPTH:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def parse_line(line) -> tuple:
    """(event, None, None) for a probe event, else (None, reason, detail)."""
    if line is None:
        return None, TOO_LONG, f"over {MAX_LINE_BYTES} bytes"
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            return None, BINARY, f"byte 0x{line[exc.start]:02x} at column {exc.start + 1} is not UTF-8"
    if "\x00" in line:
        return None, BINARY, "NUL bytes"
    line = line.rstrip("\r\n")  # so that an error's column counts within the line
    start = line.find('{"')
    if start < 0:
        return None, OTHER, ""
    try:
        record, end = _DECODER.raw_decode(line, start)  # SGLang's own lines may hold a JSON object mid-line
    except json.JSONDecodeError as exc:
        return None, BAD_JSON, f"{exc.msg}: column {exc.colno} (a truncated line?)"
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        return None, BAD_JSON, str(exc).split(":")[0]
    except RecursionError:
        return None, BAD_JSON, "nested too deeply"
    if not isinstance(record, dict) or not str(record.get("event", "")).startswith("eagle_probe."):
        return None, OTHER, ""
    if line[end:].strip():
        return None, BAD_JSON, f"more text after the event at column {end + 1} (two lines run together?)"
    if _too_deep(line, record):
        return None, BAD_JSON, f"nested deeper than {MAX_DEPTH} levels"
    problem = field_problem(record)
    if problem:
        return None, BAD_FIELD, problem
    return record, None, None


def fingerprint_slots(line: dict) -> list[dict]:
    """A sampled forward's one line, as one AUX_FINGERPRINT event per slot (the forward's fields, the line's rank
    fields and the slot's own): the form summarize reads, and earlier builds of the probe wrote."""
    shared = {k: v for k, v in line.items() if k != "slots"}
    shared["event"] = AUX_FINGERPRINT
    out = []
    for slot in line.get("slots") or ():
        event = {**shared, **slot, "event": AUX_FINGERPRINT}
        event["hf_index"] = event.get("capture_index")
        out.append(event)
    return out


class LogReader:
    """Events from log files or streams; every other line counted by reason, the first ones listed."""

    def __init__(self):
        self.events = []
        self.files = 0
        self.lines = 0
        self.probe_lines = 0  # lines that held a probe event (a fingerprints line holds several)
        self.skipped = Counter()
        self.listed = []
        self.repeated = 0  # lines a rotated log's new file began with again (the very same line: once-only, latest)
        self.restarts = 0  # processes that started again under a pid already read (a restart in a container)
        self._once: set = set()
        self._runs: dict[tuple, int] = {}  # (host, pid) -> its runs so far

    def read_paths(self, paths: Iterable[str]) -> "LogReader":
        """Raises OSError (with its filename) for a path or a directory's file that cannot be read."""
        for path in log_files(paths):
            with open(path, "rb") as handle:
                self.read_stream(handle, path)
        return self

    def read_stream(self, handle, name: str) -> "LogReader":
        self.files += 1
        for number, line in enumerate(_lines(handle), 1):
            self.lines += 1
            event, reason, detail = parse_line(line)
            if event is not None and event["event"] in CARRIED_ON_ROTATION:
                if line in self._once:
                    self.repeated += 1
                    continue
                self._once.add(line)
            if event is not None and event["event"] == AUX_FINGERPRINTS:
                self._add_slots(event, name, number)
            elif event is not None:
                self.probe_lines += 1
                self._mark_run(event)
                self.events.append(event)
            else:
                self._skip(name, number, reason, detail)
        return self

    def _add_slots(self, line: dict, name: str, number: int) -> None:
        """Each slot of a fingerprints line as its own event; a slot of the wrong type is skipped, the others kept."""
        self.probe_lines += 1
        for event in fingerprint_slots(line):
            problem = field_problem(event)
            if problem:
                self._skip(name, number, BAD_SLOT, f"slot {event.get('slot')!r}: {problem}")
                continue
            self._mark_run(event)
            self.events.append(event)

    def _mark_run(self, event: dict) -> None:
        """A process's started event comes first; another one under the same host and pid is a new process (the
        server restarted and the pid came again): it and what follows are its run ("run": 2, 3, ...), kept apart
        from the earlier run's, whose cumulative counts would otherwise be replaced by its own."""
        key = (event.get("host"), event.get("pid"))
        if event["event"] == STARTED:
            runs = self._runs[key] = self._runs.get(key, 0) + 1
            self.restarts += runs > 1
        run = self._runs.get(key, 1)
        event.pop("run", None)  # the reader's field, never the probe's
        if run > 1:
            event["run"] = run

    def _skip(self, name: str, number: int, reason: str, detail: str):
        self.skipped[reason] += 1
        if reason != OTHER and len(self.listed) < LISTED:
            shown = name.encode("utf-8", "backslashreplace").decode("utf-8")  # a file name need not be UTF-8
            self.listed.append({"file": shown, "line": number, "reason": f"{reason}: {detail}"})

    def stats(self) -> dict:
        """How much was read and skipped, and why: the report's 'input' section."""
        skipped = sum(self.skipped.values())
        return {"files": self.files, "lines": self.lines, "probe_lines": self.probe_lines,
                "events": len(self.events), "repeated": self.repeated,
                "restarts": self.restarts, "skipped": skipped,
                "skipped_by_reason": dict(self.skipped.most_common()), "skipped_lines": list(self.listed),
                "skipped_not_listed": skipped - self.skipped[OTHER] - len(self.listed)}


def read_events(paths: Iterable[str]) -> list:
    return LogReader().read_paths(paths).events
