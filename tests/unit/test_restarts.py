"""A server restarted with the same log directory, its scheduler under the same pid (a container repeats them):
summarize and advise read two runs, each counted once (logread.LogReader numbers the second run from its started
line), never one run whose last cumulative line replaced the other's."""

import json
import os

import pytest

from eagle_probe.commands.cli import main
from eagle_probe.commands.summarize.logread import LogReader
from tests.unit.test_advise import costs_line

REAL_LOG = os.path.join(os.path.dirname(__file__), "..", "data", "real-sglang-0.5.23-tp0.jsonl")


def _run(started_at: str, in_vocab: int, verified: int) -> list[str]:
    """One run of pid 10893: the real log's lines with the run's own start time, then a cumulative coverage line."""
    lines = []
    with open(REAL_LOG, encoding="utf-8") as handle:
        for line in handle:
            event = json.loads(line)
            # a run's lines are its own: a restart never writes the very same line again (its times differ)
            event["host"], event["timestamp"] = "h", started_at
            lines.append(json.dumps(event))
    coverage = {"event": "eagle_probe.draft.vocab_coverage", "pid": 10893, "host": "h", "tp_rank": 0, "pp_rank": 0,
                "dp_rank": None, "level": "info", "timestamp": started_at, "in_vocab": in_vocab,
                "verified_tokens": verified, "map": "d2t", "hot_vocab_size": 64, "draft_vocab_size": 64,
                "target_vocab_size": 128}
    return lines + [json.dumps(coverage)]


@pytest.fixture
def restarted(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    first, second = _run("2026-01-01T00:00:00Z", 90, 100), _run("2026-01-01T01:00:00Z", 30, 50)
    (logs / "eagle-probe-h-10893.jsonl").write_text("\n".join(first + second) + "\n")
    return logs


def test_the_second_start_under_a_pid_is_another_run(restarted):
    reader = LogReader().read_paths([str(restarted)])
    runs = [e.get("run") for e in reader.events]
    half = len(runs) // 2
    assert runs[:half] == [None] * half and runs[half:] == [2] * half
    assert reader.stats()["restarts"] == 1


def test_summarize_counts_each_run_once(restarted, capsys):
    assert main(["summarize", str(restarted), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(r["pid"], r["run"]) for r in report["ranks"]] == [(10893, None), (10893, 2)]
    coverage = report["draft_vocab_coverage"]
    assert (coverage["in_vocab"], coverage["verified_tokens"]) == (90 + 30, 100 + 50)  # each run's last line
    assert report["input"]["restarts"] == 1
    assert main(["summarize", str(restarted)]) == 0
    text = capsys.readouterr().out
    assert "pid=10893 run 2 (restarted under the same pid)" in text and "1 process(es) started again" in text


def test_advise_adds_the_runs_last_costs(tmp_path, capsys):
    logs = tmp_path / "logs"
    logs.mkdir()
    started = '{"event": "eagle_probe.started", "pid": 100, "host": "h", "tp_rank": 0, "timestamp": "%s"}'
    lines = [started % "2026-01-01T00:00:00Z", costs_line(steps=100, ts="2026-01-01T00:01:00Z"),
             started % "2026-01-01T02:00:00Z", costs_line(steps=200, ts="2026-01-01T02:01:00Z")]
    (logs / "eagle-probe-h-100.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["advise", str(logs), "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["runs"] == 2 and [p["run"] for p in result["processes"]] == [None, 2]
    assert next(b for b in result["buckets"] if b["bucket"] == "1")["steps"] == 300
