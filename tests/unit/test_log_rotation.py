"""A process's log file bounded by rotation (runtime/sinks/rotation.py) and read back in order (summarize's reader)."""

import json
import os

import pytest

from eagle_probe import events
from eagle_probe.commands.summarize.logread import LogReader, log_files
from eagle_probe.config import ConfigError, load_config
from eagle_probe.runtime.sinks import rotation
from eagle_probe.runtime.sinks.logs import LogSink
from eagle_probe.runtime.sinks.rotation import Rotation

pytestmark = pytest.mark.unit

MAX_BYTES = 4000


def _write(log_dir, keep, summaries=200):
    sink = LogSink("info", str(log_dir), rotation=Rotation(MAX_BYTES, keep))
    sink.emit("info", events.STARTED, role="target")
    sink.emit("info", events.CAPTURE_CONFIGURED, layers_to_capture=[3, 4, 5])
    for i in range(summaries):
        sink.emit("info", events.SUMMARY, captures_lost=i, padding="x" * 40)
        if i == 50:
            sink.emit("warning", events.FINDING, code="layer_mismatch", message="late finding")
    return sink


def _lines(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read().splitlines()


def test_rotated_files_are_bounded_whole_lines_and_numbered_in_order(tmp_path):
    sink = _write(tmp_path, keep=2)
    names = sorted(os.listdir(tmp_path))
    newest = os.path.basename(sink.path)
    stem = newest[: -len(".jsonl")]
    assert names[-1] == newest and len(names) == 3  # two rotated kept, the newest last in name order
    numbers = [int(name[len(stem) + 1:-len(".jsonl")]) for name in names[:-1]]
    assert numbers == sorted(numbers) and numbers[-1] == sink._logger._logger._file.rotations
    biggest_line = max(len(line) + 1 for name in names for line in _lines(tmp_path / name))
    for name in names:
        lines = _lines(tmp_path / name)
        assert os.path.getsize(tmp_path / name) < MAX_BYTES + biggest_line
        records = [json.loads(line) for line in lines]  # every line whole
        assert [r["event"] for r in records[:2]] == [events.STARTED, events.CAPTURE_CONFIGURED]


def test_the_reader_reads_them_in_order_and_drops_the_repeated_lines(tmp_path):
    _write(tmp_path, keep=100)
    reader = LogReader().read_paths([str(tmp_path)])
    summaries = [e["captures_lost"] for e in reader.events if e["event"] == events.SUMMARY]
    assert summaries == list(range(200))  # nothing lost, in the order written
    kinds = [e["event"] for e in reader.events]
    assert kinds.count(events.STARTED) == kinds.count(events.CAPTURE_CONFIGURED) == kinds.count(events.FINDING) == 1
    files = len(list(log_files([str(tmp_path)])))
    assert files > 3 and reader.repeated >= 2 * (files - 1)  # each new file began with them again
    assert reader.stats()["skipped"] == 0 and reader.stats()["repeated"] == reader.repeated


def test_kept_files_still_hold_the_process_and_its_last_counts(tmp_path):
    _write(tmp_path, keep=1)
    reader = LogReader().read_paths([str(tmp_path)])
    kinds = {e["event"] for e in reader.events}
    assert {events.STARTED, events.CAPTURE_CONFIGURED, events.FINDING} <= kinds  # the late finding carried too
    summaries = [e["captures_lost"] for e in reader.events if e["event"] == events.SUMMARY]
    assert summaries[-1] == 199 and summaries == sorted(summaries)  # the cumulative last one is kept


def test_the_last_totals_survive_rotations_after_them(tmp_path):
    """An idle server writes no acceptance or summary line for a while, other lines rotate the file again and
    again: each new file begins with the latest of each periodic event, read once."""
    sink = _write(tmp_path, keep=1)
    sink.emit("info", events.ACCEPTANCE, drafts=7, total={"drafts": 70})
    for i in range(300):
        sink.emit("info", events.AUX_FINGERPRINTS, role="target", step=i, slots=[{"slot": 0, "rms": 1.0}])
    reader = LogReader().read_paths([str(tmp_path)])
    summaries = [e["captures_lost"] for e in reader.events if e["event"] == events.SUMMARY]
    acceptance = [e for e in reader.events if e["event"] == events.ACCEPTANCE]
    assert summaries == [199] and [e["total"]["drafts"] for e in acceptance] == [70]
    assert reader.repeated > 0


def test_keep_zero_leaves_the_newest_file_only(tmp_path):
    _write(tmp_path, keep=0)
    assert len(os.listdir(tmp_path)) == 1


def test_a_failed_rename_keeps_writing_the_current_file(tmp_path, monkeypatch):
    def refuse(*args):
        raise PermissionError("read-only")

    monkeypatch.setattr(rotation.os, "replace", refuse)
    sink = _write(tmp_path, keep=2, summaries=100)
    assert os.listdir(tmp_path) == [os.path.basename(sink.path)]
    assert len(_lines(sink.path)) == 103  # nothing lost, nothing raised


def test_the_settings_name_what_they_accept():
    config = load_config({"EAGLE_PROBE_LOG_MAX_MB": "0.5", "EAGLE_PROBE_LOG_KEEP": "0"})
    assert (config.log_max_mb, config.log_keep) == (0.5, 0)
    defaults = load_config({})
    assert (defaults.log_max_mb, defaults.log_keep) == (100.0, 4)
    for variable, value in (("EAGLE_PROBE_LOG_MAX_MB", "0"), ("EAGLE_PROBE_LOG_MAX_MB", "big"),
                            ("EAGLE_PROBE_LOG_KEEP", "-1"), ("EAGLE_PROBE_LOG_KEEP", "2.5")):
        with pytest.raises(ConfigError) as info:
            load_config({variable: value})
        assert variable in str(info.value)


def test_a_process_with_a_reused_pid_numbers_after_the_files_there(tmp_path):
    """A restarted server (a container's pids repeat) writes to the same name: its rotations never replace the
    earlier run's files, and keep counts them together (the oldest go first)."""
    first = _write(tmp_path, keep=100, summaries=100)
    before = sorted(os.listdir(tmp_path))
    first_rotations = first._logger._logger._file.rotations
    second = _write(tmp_path, keep=100, summaries=100)
    assert second.path == first.path
    after = sorted(os.listdir(tmp_path))
    assert set(before) - {os.path.basename(first.path)} <= set(after)  # the first run's rotated files are all there
    assert second._logger._logger._file.rotations > first_rotations
    reader = LogReader().read_paths([str(tmp_path)])
    lost = [e["captures_lost"] for e in reader.events if e["event"] == events.SUMMARY]
    assert lost == list(range(100)) * 2  # both runs, in order


def test_summarize_takes_the_running_total_where_early_windows_were_rotated_away(tmp_path, capsys):
    """The kept file holds the last two windows of a run whose first windows were in a removed file: the totals are
    the last event's running total (the whole run), not the kept windows' sum."""
    import json

    from eagle_probe.commands.cli import main

    def window(drafts, accepted, total_drafts, total_accepted, ts):
        return {"event": "eagle_probe.acceptance", "pid": 5, "host": "h", "tp_rank": 0, "pp_rank": 0,
                "dp_rank": None, "timestamp": ts, "role": "target", "steps": drafts, "drafts": drafts,
                "draft_tokens": 2 * drafts, "accepted_tokens": accepted, "per_position_accepted": [accepted, 0],
                "per_position_drafted": [drafts, drafts],
                "total": {"steps": total_drafts, "drafts": total_drafts, "draft_tokens": 2 * total_drafts,
                          "accepted_tokens": total_accepted, "per_position_accepted": [total_accepted, 0],
                          "per_position_drafted": [total_drafts, total_drafts],
                          "accept_length_histogram": {"1": total_accepted, "0": total_drafts - total_accepted}}}

    logs = tmp_path / "logs"
    logs.mkdir()
    kept = [window(10, 5, 90, 45, "2026-01-01T00:09:00Z"), window(10, 8, 100, 53, "2026-01-01T00:10:00Z")]
    (logs / "eagle-probe-h-5.jsonl").write_text("".join(json.dumps(e) + "\n" for e in kept))
    assert main(["summarize", str(logs), "--format", "json"]) == 0
    [rank] = json.loads(capsys.readouterr().out)["ranks"]
    acceptance = rank["acceptance"]
    assert acceptance["from_running_total"] and acceptance["windows"] == 2
    assert (acceptance["drafts"], acceptance["accepted_tokens"], acceptance["draft_tokens"]) == (100, 53, 200)
    assert acceptance["per_position_rate"] == [0.53, 0.0]
    assert acceptance["accept_length_histogram"] == {"0": 47, "1": 53}
    assert main(["summarize", str(logs)]) == 0
    assert "totals from the last window's running total" in capsys.readouterr().out
    # every window kept: the windows' sum, as before
    (logs / "eagle-probe-h-5.jsonl").write_text("".join(json.dumps(window(10, 5, 10, 5, "t")) + "\n"))
    assert main(["summarize", str(logs), "--format", "json"]) == 0
    [rank] = json.loads(capsys.readouterr().out)["ranks"]
    assert not rank["acceptance"]["from_running_total"] and rank["acceptance"]["drafts"] == 10
