"""Read the probe's JSON-lines logs back: files, directories of per-process files, or a stream.

Foreign lines (SGLang's own output on the same stderr) and a truncated last line are skipped.
"""

import json
import os
from typing import Iterable, Iterator


def iter_lines(paths: Iterable[str]) -> Iterator[str]:
    for path in paths:
        if os.path.isdir(path):
            names = sorted(n for n in os.listdir(path) if n.endswith((".jsonl", ".log")))
            yield from iter_lines(os.path.join(path, n) for n in names)
        else:
            with open(path, encoding="utf-8", errors="replace") as handle:
                yield from handle


def parse_events(lines: Iterable[str]) -> Iterator[dict]:
    for line in lines:
        start = line.find('{"')
        if start < 0:
            continue
        try:
            record = json.loads(line[start:])
        except ValueError:
            continue
        if isinstance(record, dict) and str(record.get("event", "")).startswith("eagle_probe."):
            yield record


def read_events(paths: Iterable[str]) -> list:
    return list(parse_events(iter_lines(paths)))
