"""Every test carries its tier as a marker, the name of its folder (tests/<tier>/, registered in setup.cfg): `pytest
-m unit tests` runs the pure tests alone, and a selection by tiers alone (`-m "unit or contract"`) does not even
import the other folders. The suite reports itself: the time of each tier (setup and teardown included) and the
start-up of every real SGLang server against the start-up timeout. scripts/test.sh adds pytest's --durations and the
total."""

import io
import json
import os
import re
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

import pytest

TESTS = Path(__file__).resolve().parent
TIERS = ("unit", "contract", "real_sglang", "real_sglang_058", "e2e", "prometheus", "browser", "gpu")

_tier_seconds = defaultdict(float)
_tier_tests = defaultdict(set)


def _tier(nodeid):
    parts = nodeid.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else parts[0]


def _folder_tier(path):
    """The tier of a file or folder under tests/ (None outside a tier's folder)."""
    try:
        top = Path(path).resolve().relative_to(TESTS).parts[:1]
    except ValueError:
        return None
    return top[0] if top and top[0] in TIERS else None


def _selected_tiers(config):
    """The tiers a `-m` made only of tier names joined by `or` selects; None for any other expression (then every
    folder is collected and pytest deselects by marker)."""
    names = re.split(r"\s+or\s+", (config.option.markexpr or "").strip())
    return set(names) if all(name in TIERS for name in names) else None


def pytest_ignore_collect(collection_path, config):
    tiers = _selected_tiers(config)
    tier = _folder_tier(collection_path)
    if tiers is not None and tier is not None and tier not in tiers:
        return True
    return None


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m selection reads the markers
def pytest_collection_modifyitems(items):
    for item in items:
        tier = _folder_tier(item.path)
        if tier is not None:
            item.add_marker(getattr(pytest.mark, tier))


class Clock:
    """A clock the test moves: clock.now += 60."""

    def __init__(self, now=0.0):
        self.now = now

    def __call__(self):
        return self.now


class Probe(NamedTuple):
    recorder: object  # eagle_probe.runtime.recorder.Recorder
    stream: io.StringIO  # its JSON log lines
    registry: object  # its metrics' prometheus_client.CollectorRegistry
    clock: Clock


def build_recorder(rules="0.5.23", ranks=None, **config):
    """The real Recorder on plain sinks: JSON lines into a StringIO, metrics into a registry of their own (served on
    config's metrics_port and metrics_addr when a port is given), a Clock the test moves. rules: the SGLang release
    whose rules apply; ranks: what the process reads as its ranks (tp rank 0 of 1, pp rank 0 unless given); config:
    ProbeConfig fields (flush_interval_s 0 unless given: metrics are flushed on every step)."""
    import prometheus_client

    from eagle_probe.config import ProbeConfig
    from eagle_probe.observations import Ranks
    from eagle_probe.runtime.recorder import ProcessHooks, Recorder
    from eagle_probe.runtime.sinks.logs import LogSink
    from eagle_probe.runtime.sinks.metrics import MetricsSink
    from eagle_probe.versions import parse_version, rules_for

    probe_config = ProbeConfig(**{"flush_interval_s": 0, **config})
    ranks = Ranks(tp_rank=0, tp_size=1, pp_rank=0) if ranks is None else ranks
    stream, registry, clock = io.StringIO(), prometheus_client.CollectorRegistry(), Clock()

    def make_metrics(ranks, exporter=True):
        return MetricsSink(ranks, probe_config.metrics_port, registry=registry, addr=probe_config.metrics_addr)

    recorder = Recorder(probe_config, rules_for(parse_version(rules)), "0.5.23", LogSink(stream=stream),
                        ProcessHooks(lambda: ranks, make_metrics, clock=clock))
    return Probe(recorder, stream, registry, clock)


@pytest.fixture
def make_recorder():
    """build_recorder: make_recorder(rules=..., ranks=..., **ProbeConfig fields) -> (recorder, stream, registry,
    clock), a new one on every call."""
    return build_recorder


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
                  f"{(record.get('algorithm') or 'EAGLE-3') if record.get('speculative') else 'target only'}  "
                  f"{record['log']}")
