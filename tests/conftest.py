"""The suite reports itself: the time of each tier (tests/<tier>/, setup and teardown included) and the start-up of
every real SGLang server against the start-up timeout. scripts/test.sh adds pytest's --durations and the total."""

import json
import os
import tempfile
from collections import defaultdict

_tier_seconds = defaultdict(float)
_tier_tests = defaultdict(set)


def _tier(nodeid):
    parts = nodeid.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else parts[0]


def pytest_configure(config):
    from sglang_cpu.server import STARTUP_RECORD_ENV

    if not os.environ.get(STARTUP_RECORD_ENV):
        handle, path = tempfile.mkstemp(prefix="sglang-startups-", suffix=".jsonl")
        os.close(handle)
        os.environ[STARTUP_RECORD_ENV] = path


def pytest_runtest_logreport(report):
    tier = _tier(report.nodeid)
    _tier_seconds[tier] += report.duration
    _tier_tests[tier].add(report.nodeid)


def _startups():
    from sglang_cpu.server import STARTUP_RECORD_ENV

    try:
        with open(os.environ[STARTUP_RECORD_ENV], encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]
    except (OSError, KeyError, ValueError):
        return []


def pytest_terminal_summary(terminalreporter):
    from sglang_cpu.server import STARTUP_TIMEOUT_S

    write = terminalreporter.write_line
    if _tier_seconds:
        terminalreporter.section("time per tier (setup, call and teardown)")
        for tier, seconds in sorted(_tier_seconds.items(), key=lambda item: -item[1]):
            write(f"{tier:<20} {seconds:8.1f} s  {len(_tier_tests[tier]):5d} tests")
        write(f"{'all':<20} {sum(_tier_seconds.values()):8.1f} s")
    startups = _startups()
    if startups:
        terminalreporter.section("real SGLang server start-ups")
        slowest = sorted(startups, key=lambda r: -r["seconds"])
        retried = [r for r in startups if r.get("attempts", 1) > 1]
        write(f"{len(startups)} servers; slowest {slowest[0]['seconds']:.1f} s against a start-up timeout of "
              f"{STARTUP_TIMEOUT_S:.0f} s; {len(retried)} retried after a port collision")
        for record in slowest[:5]:
            write(f"  {record['seconds']:6.1f} s  tp {record.get('tp_size', 1)}  "
                  f"{'EAGLE-3' if record.get('speculative') else 'target only'}  {record['log']}")
