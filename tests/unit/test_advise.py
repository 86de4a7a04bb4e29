"""`eagle-probe advise` and summarize's "does speculation pay?" section: synthetic eagle_probe.spec.costs lines whose
speed-up follows from the formula by hand, and the real lines of an SGLang 0.5.23 CPU server (tests/data). The
written config is read back by SGLang's own parser."""

import json
import os

import pytest

from eagle_probe.analysis import speculation_cost
from eagle_probe.commands.cli import main

REAL_COSTS = os.path.join(os.path.dirname(__file__), "..", "data", "real-sglang-0.5.23-spec-costs.jsonl")

# Each forward-row layout's named sums of one forward of r requests, t tokens and y seconds: the row is built from
# the names speculation_cost.FIT_FIELDS lists, so these lines stay right for the layout the analysis reads.
SUMS = {"n": lambda r, t, y: 1, "sx": lambda r, t, y: t, "sxx": lambda r, t, y: t * t, "sy": lambda r, t, y: y,
        "syy": lambda r, t, y: y * y, "sxy": lambda r, t, y: t * y, "r": lambda r, t, y: r, "t": lambda r, t, y: t,
        "rr": lambda r, t, y: r * r, "rt": lambda r, t, y: r * t, "tt": lambda r, t, y: t * t,
        "y": lambda r, t, y: y, "yr": lambda r, t, y: y * r, "yt": lambda r, t, y: y * t,
        "yy": lambda r, t, y: y * y}

PLAIN_S = 0.010  # every width-1 target forward
FAST_PERIOD_S, SLOW_PERIOD_S = 0.018, 0.060
ACCEPTED, DRAFTED = [80, 60, 40], [100, 100, 100]  # tau(3) = 1 + 0.8 + 0.6 + 0.4
TAU = 1 + sum(a / d for a, d in zip(ACCEPTED, DRAFTED))


def forward_row(count: int, requests: int, tokens: int, seconds: float) -> list:
    return [count * SUMS[name](requests, tokens, seconds) for name in speculation_cost.FIT_FIELDS]


def step_row(steps: int, batch: int, period: float, draft: float = 0.006) -> list:
    values = {"steps": steps, "batch_sum": steps * batch, "draft_s": steps * draft, "verify_s": steps * 0.008,
              "extend_s": steps * 0.002, "step_s": steps * (period - 0.001), "periods": steps,
              "period_s": steps * period, "period_s2": steps * period * period}
    return [values[name] for name in speculation_cost.STEP_FIELDS]


def costs_line(pid=100, tp_rank=0, attn_tp_rank=0, attn_dp_rank=0, steps=100, ts="2026-01-01T00:01:00Z", **extra):
    """One process's cumulative costs: bucket 1 fast (speculation pays), 16-31 slow, 8-15 too few steps."""
    event = {"event": "eagle_probe.spec.costs", "pid": pid, "host": "h", "tp_rank": tp_rank, "pp_rank": 0,
             "dp_rank": None, "attn_tp_rank": attn_tp_rank, "attn_dp_rank": attn_dp_rank, "node_rank": 0,
             "role": "target", "source": "wall_clock", "topk": 1, "timestamp": ts, "level": "info",
             "steps": {"1": {"3": step_row(steps, 1, FAST_PERIOD_S)}, "8-15": {"3": step_row(5, 10, 0.03)},
                       "16-31": {"3": step_row(steps, 20, SLOW_PERIOD_S)}},
             "forwards": {"TARGET_VERIFY:1:1": forward_row(30, 1, 1, PLAIN_S),
                          "TARGET_VERIFY:1:16-31": forward_row(30, 20, 20, PLAIN_S)},
             "acceptance": {"all": {"accepted": [steps // 100 * a for a in ACCEPTED],
                                    "drafted": [steps // 100 * d for d in DRAFTED]}},
             "dropped": 0}
    event.update(extra)
    return json.dumps(event)


def log_dir(tmp_path, *files: list[str], name="logs"):
    d = tmp_path / name
    d.mkdir()
    for i, lines in enumerate(files):
        (d / f"eagle-probe-h-{i}.jsonl").write_text("\n".join(["SGLang's own line, not JSON", *lines]) + "\n")
    return d


def advise(capsys, *argv):
    rc = main(["advise", *map(str, argv)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


def advise_json(capsys, *argv):
    rc, out, err = advise(capsys, *argv, "--format", "json")
    return rc, json.loads(out), err


def bucket(result: dict, label: str) -> dict:
    return next(b for b in result["buckets"] if b["bucket"] == label)


def test_speedup_and_break_even_follow_the_formula(tmp_path, capsys):
    rc, result, _ = advise_json(capsys, log_dir(tmp_path, [costs_line()]))
    assert rc == 0 and result["runs"] == 1 and result["source"] == "wall_clock" and result["topk"] == 1
    fast = bucket(result, "1")
    assert fast["estimated"] and fast["batch_size"] == [1, 1] and fast["steps"] == 100 and fast["served_depth"] == 3
    assert fast["estimated_speedup"] == pytest.approx(TAU * PLAIN_S / FAST_PERIOD_S, abs=1e-3)  # 1.56
    assert fast["break_even_accept_length"] == pytest.approx(FAST_PERIOD_S / PLAIN_S, abs=1e-3)  # 1.8
    assert fast["plain_step_seconds"] == pytest.approx(PLAIN_S) and "width-1" in fast["plain_source"]
    assert fast["phase_seconds"]["period"] == pytest.approx(FAST_PERIOD_S)
    assert fast["phase_seconds"]["draft"] == pytest.approx(0.006)
    slow = bucket(result, "16-31")
    assert slow["batch_size"] == [16, 31]
    assert slow["estimated_speedup"] == pytest.approx(TAU * PLAIN_S / SLOW_PERIOD_S, abs=1e-3)  # 0.47
    # no depth pays at 16-31 (every one below 1x): no drafting there
    assert all(d["speedup"] < 1 for d in slow["classes"]["all"]["by_depth"].values())
    assert slow["recommended_num_steps"] == 0
    few = bucket(result, "8-15")
    assert few["estimated"] is False and few["why"] and few["estimated_speedup"] is None and few["steps"] == 5
    assert {f["code"] for f in result["findings"]} >= {"speculation_slower_than_plain"}
    assert any(f["evidence"]["batch_size"] == [16, 31] for f in result["findings"])
    assert result["adaptive_config"]["16"] == {"candidate_steps": [0]}


def test_json_is_the_estimate_of_the_same_costs(tmp_path, capsys):
    line = costs_line()
    rc, result, _ = advise_json(capsys, log_dir(tmp_path, [line]))
    report = speculation_cost.estimate(speculation_cost.merge([json.loads(line)]))
    assert [b["bucket"] for b in result["buckets"]] == [b["bucket"] for b in report["buckets"]] == ["1", "8-15",
                                                                                                    "16-31"]
    for got, want in zip(result["buckets"], report["buckets"]):
        assert {k: got[k] for k in want} == json.loads(json.dumps(want))
    assert result["adaptive_config"] == speculation_cost.adaptive_config(report)
    assert [f["message"] for f in result["findings"]] == [f.message for f in speculation_cost.findings(report)]


def test_every_bucket_has_the_documented_fields(tmp_path, capsys):
    _, result, _ = advise_json(capsys, log_dir(tmp_path, [costs_line()]))
    fields = {"batch_size", "estimated_speedup", "uncertainty", "break_even_accept_length", "recommended_num_steps",
              "recommended_extrapolated", "phase_seconds", "plain_step_seconds", "plain_source", "classes",
              "estimated", "why"}
    assert all(fields <= set(b) for b in result["buckets"])
    assert {"source", "runs", "buckets", "findings", "adaptive_config"} <= set(result)


def test_the_last_costs_line_of_each_process_is_read(tmp_path, capsys):
    early = costs_line(steps=100, ts="2026-01-01T00:00:00Z")
    late = costs_line(steps=200, ts="2026-01-01T00:05:00Z")
    _, result, _ = advise_json(capsys, log_dir(tmp_path, [late, early]))  # the later line first: by timestamp
    assert result["runs"] == 1 and bucket(result, "1")["steps"] == 200  # cumulative: not 300


def test_tp_ranks_above_zero_are_not_counted(tmp_path, capsys):
    rank0 = costs_line(pid=100)
    rank1 = costs_line(pid=101, tp_rank=1, attn_tp_rank=1, steps=300)
    _, alone, _ = advise_json(capsys, log_dir(tmp_path, [rank0], name="one"))
    _, both, _ = advise_json(capsys, log_dir(tmp_path, [rank0], [rank1], name="two"))
    assert both["runs"] == 1 and both["tp_ranks_left_out"] == 1 and [p["pid"] for p in both["processes"]] == [100]
    assert both["buckets"] == alone["buckets"]


def test_attention_dp_groups_are_added_up(tmp_path, capsys):
    """Attention DP: tp_rank 1 is attention-TP rank 0 of the second group, which serves other requests."""
    group0 = costs_line(pid=100)
    group1 = costs_line(pid=101, tp_rank=1, attn_tp_rank=0, attn_dp_rank=1)
    _, result, _ = advise_json(capsys, log_dir(tmp_path, [group0], [group1]))
    assert result["runs"] == 2 and bucket(result, "1")["steps"] == 200
    assert sorted(p["pid"] for p in result["processes"]) == [100, 101]


def test_tp_rank_counts_where_the_attention_rank_is_not_logged(tmp_path, capsys):
    lines = [costs_line(pid=100, attn_tp_rank=None), costs_line(pid=101, tp_rank=1, attn_tp_rank=None)]
    _, result, _ = advise_json(capsys, log_dir(tmp_path, lines))
    assert result["runs"] == 1 and result["processes"][0]["pid"] == 100


def test_text_names_each_bucket_its_costs_and_the_config(tmp_path, capsys):
    rc, out, _ = advise(capsys, log_dir(tmp_path, [costs_line()]))
    assert rc == 0
    line = next(x for x in out.splitlines() if x.startswith("batch size [1, 1]"))
    assert f"{TAU * PLAIN_S / FAST_PERIOD_S:.2f}x ±" in line
    assert f"break-even accept length {FAST_PERIOD_S / PLAIN_S:.2f}" in line
    assert "recommended num steps" in line and "period 0.018 s" in line and "draft 0.006 s" in line
    assert "plain step 0.01 s (width-1" in line
    assert "batch size [8, 15]: 5 steps served at depth 3: not estimated" in out
    assert "WARNING speculation_slower_than_plain: batch size 16-31" in out
    assert '"16": {"candidate_steps": [0]}' in out


def test_write_gives_a_config_sglang_reads(tmp_path, capsys):
    from sglang.srt.speculative.adaptive_spec_params import _load_adaptive_config

    target = tmp_path / "adaptive.json"
    rc, result, _ = advise_json(capsys, log_dir(tmp_path, [costs_line()]), "--write", target)
    assert rc == 0 and result["written"] == str(target)
    written = json.loads(target.read_text())
    assert written == result["adaptive_config"]
    assert all(key.isdigit() for key in written)
    assert all(isinstance(s, int) and s >= 0 for entry in written.values() for s in entry["candidate_steps"])
    _, entries = _load_adaptive_config(str(target))  # SGLang 0.5.23's own parser
    assert sorted(entries) == [1, 8, 16] and entries[16]["candidate_steps"] == [0]
    assert entries[8]["candidate_steps"] == [3]  # not estimated: kept at the depth it was served
    assert target.read_text().startswith('{\n  "1"')  # indent 2


def test_write_refuses_an_existing_file(tmp_path, capsys):
    target = tmp_path / "adaptive.json"
    target.write_text("mine")
    logs = log_dir(tmp_path, [costs_line()])
    rc, out, err = advise(capsys, logs, "--write", target)
    assert rc == 2 and str(target) in err and "--force" in err and target.read_text() == "mine"
    rc, _, _ = advise(capsys, logs, "--write", target, "--force")
    assert rc == 0 and json.loads(target.read_text())["16"] == {"candidate_steps": [0]}


def test_nothing_estimated_exits_1_and_writes_nothing(tmp_path, capsys):
    target = tmp_path / "adaptive.json"
    few = json.loads(costs_line())
    few["steps"] = {"1": {"3": step_row(5, 1, FAST_PERIOD_S)}}
    rc, out, err = advise(capsys, log_dir(tmp_path, [json.dumps(few)]), "--write", target)
    assert rc == 1 and not target.exists()
    assert "nothing written" in err and "batch size 1" in err


def test_no_costs_lines_exit_1_saying_why(tmp_path, capsys):
    other = json.dumps({"event": "eagle_probe.summary", "pid": 1, "tp_rank": 0})
    target = tmp_path / "adaptive.json"
    rc, out, err = advise(capsys, log_dir(tmp_path, [other]), "--write", target)
    assert rc == 1 and not target.exists() and "EAGLE_PROBE_PHASE_TIMING" in err


@pytest.mark.parametrize("make", [lambda p: p / "missing", lambda p: (p / "empty").mkdir() or p / "empty"],
                         ids=["missing", "no-probe-logs"])
def test_bad_log_dir_exits_2_naming_it(tmp_path, capsys, make):
    good = log_dir(tmp_path, [costs_line()])
    bad = make(tmp_path)
    rc, out, err = advise(capsys, good, bad)
    assert rc == 2 and str(bad) in err and out == ""


def test_real_costs_lines(tmp_path, capsys):
    """The lines a real SGLang 0.5.23 CPU server's probe wrote: the last one is read, its phase seconds shown."""
    with open(REAL_COSTS, encoding="utf-8") as handle:
        lines = [json.loads(x) for x in handle]
    last = max(lines, key=lambda e: e["timestamp"])
    rc, result, _ = advise_json(capsys, REAL_COSTS)
    assert result["runs"] == 1 and result["processes"][0]["timestamp"] == last["timestamp"]
    row = last["steps"]["4-7"]["2"]
    got = bucket(result, "4-7")
    assert got["steps"] == row[0] == 32 and got["served_depth"] == 2
    assert got["phase_seconds"]["period"] == pytest.approx(row[7] / row[6])
    # what the estimate gives for the same line, its forwards left out where they are another probe version's
    readable = all(len(r) == len(speculation_cost.FIT_FIELDS) for r in last["forwards"].values())
    report = speculation_cost.estimate(speculation_cost.merge([last if readable else {**last, "forwards": {}}]))
    assert [{k: b[k] for k in want} for b, want in zip(result["buckets"], report["buckets"])] == \
        json.loads(json.dumps(report["buckets"]))
    assert result["forwards_of_another_version"] == ([] if readable else [last["pid"]])
    assert rc == (0 if any(b["estimated"] for b in report["buckets"]) else 1)


def test_summarize_shows_the_same_estimate_and_its_findings(tmp_path, capsys):
    logs = log_dir(tmp_path, [costs_line()])
    _, advised, _ = advise_json(capsys, logs)
    assert main(["summarize", str(logs), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["speculation"] == {k: v for k, v in advised.items() if k != "exit_status"}
    codes = {f["code"] for f in report["findings"]}
    assert "speculation_slower_than_plain" in codes
    rank = next(r for r in report["ranks"] if r["pid"] == 100)
    assert "speculation_slower_than_plain" in {f["code"] for f in rank["findings"]}
    assert main(["summarize", str(logs)]) == 0
    text = capsys.readouterr().out
    section = text[text.index("Does speculation pay?"):]
    assert f"batch size 1: {TAU * PLAIN_S / FAST_PERIOD_S:.2f}x ±" in section
    assert "batch size 8-15: not estimated" in section


def test_summarize_without_costs_lines_has_no_section(tmp_path, capsys):
    logs = log_dir(tmp_path, [json.dumps({"event": "eagle_probe.summary", "pid": 1, "tp_rank": 0})])
    assert main(["summarize", str(logs), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["speculation"] is None
    assert main(["summarize", str(logs)]) == 0
    assert "Does speculation pay?" not in capsys.readouterr().out


def test_summarize_html_has_the_section(tmp_path, capsys):
    page = tmp_path / "report.html"
    assert main(["summarize", str(log_dir(tmp_path, [costs_line()])), "--html", str(page)]) == 0
    html = page.read_text()
    assert "<h2>Does speculation pay?</h2>" in html and '<table class="speculation">' in html


def test_a_costs_line_of_the_wrong_type_is_skipped_not_a_crash(tmp_path, capsys):
    bad = json.loads(costs_line())
    bad["steps"] = {"1": {"three": [1, 2]}}
    rc, out, err = advise(capsys, log_dir(tmp_path, [json.dumps(bad), costs_line(pid=7)]))
    assert rc == 0
    assert main(["summarize", str(tmp_path / "logs")]) == 0
    assert "wrong field type: 1" in capsys.readouterr().out


def test_notes_say_where_the_config_serves_batch_sizes_without_an_estimate(tmp_path, capsys):
    """A bucket served but not estimated keeps the depth it was served at (left out, SGLang would serve it by its
    neighbour's key); the note says so. Batch sizes below every key go to the lowest (none here: "1" is written)."""
    few = json.loads(costs_line())
    few["steps"]["1"] = {"3": step_row(5, 1, FAST_PERIOD_S)}
    _, result, _ = advise_json(capsys, log_dir(tmp_path, [json.dumps(few)]))
    assert sorted(result["adaptive_config"], key=int) == ["1", "8", "16"]
    assert result["adaptive_config"]["1"] == {"candidate_steps": [3]}
    assert any(note.startswith("batch size 1 (") and "kept at the depth it was served, 3" in note
               for note in result["notes"])
    assert result["launch_args"][-4:] == ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1"]


def test_notes_say_when_sglang_would_not_serve_the_config(tmp_path, capsys):
    line = costs_line(attn_dp_size=2, topk=4)
    _, result, _ = advise_json(capsys, log_dir(tmp_path, [line]))
    assert any("attention DP" in note for note in result["notes"])
    assert any("topk 4" in note for note in result["notes"])


def test_a_row_of_periods_without_counted_steps_is_left_out(tmp_path, capsys):
    """The timer drops a step when its queue is full, but still counts the period after it."""
    event = json.loads(costs_line())
    event["steps"]["1"]["2"] = [0, 0, 0.0, 0.0, 0.0, 0.0, 3, 0.05, 0.001]
    rc, result, _ = advise_json(capsys, log_dir(tmp_path, [json.dumps(event)]))
    assert rc == 0 and bucket(result, "1")["estimated"] and bucket(result, "1")["steps"] == 100
    assert any("no counted step" in note for note in result["notes"])


def plain_line(pid=200, period=0.008, steps=100, ts="2026-01-01T00:01:00Z", **extra):
    """A server without speculation: its decode steps (depth 0, no phases) at batch 1 and 16-31, none at 8-15."""
    event = {"event": "eagle_probe.spec.costs", "pid": pid, "host": "h", "tp_rank": 0, "pp_rank": 0, "dp_rank": None,
             "attn_tp_rank": 0, "attn_dp_rank": 0, "node_rank": 0, "role": "target", "source": "wall_clock",
             "timestamp": ts, "level": "info", "server": "plain", "steps": {},
             "plain_steps": {"1": step_row(steps, 1, period, draft=0.0),
                             "16-31": step_row(steps, 20, 4 * period, draft=0.0)},
             "forwards": {"DECODE:1:1": forward_row(30, 1, 1, 0.5)}, "first_calls": 2, "dropped": 0}
    event.update(extra)
    return json.dumps(event)


def test_a_plain_servers_steps_are_the_measured_plain_step(tmp_path, capsys):
    spec, plain = log_dir(tmp_path, [costs_line()], name="spec"), log_dir(tmp_path, [plain_line()], name="plain")
    rc, result, _ = advise_json(capsys, spec, plain)
    assert rc == 0 and (result["runs"], result["plain_runs"]) == (2, 1)
    assert result["source"] == "wall_clock" and result["topk"] == 1  # from the speculative server
    fast, slow = bucket(result, "1"), bucket(result, "16-31")
    assert fast["plain_step_seconds"] == pytest.approx(0.008) and fast["plain_source"].startswith("measured: 100")
    assert fast["estimated_speedup"] == pytest.approx(TAU * 0.008 / FAST_PERIOD_S, abs=1e-3)
    assert slow["plain_step_seconds"] == pytest.approx(0.032)
    assert slow["estimated_speedup"] == pytest.approx(TAU * 0.032 / SLOW_PERIOD_S, abs=1e-3)
    # the plain server's forwards (0.5 s DECODE forwards) are not the speculative server's: not in the fit
    assert result["fit"]["forwards"] == 60
    rc, text, _ = advise(capsys, spec, plain)
    assert "1 of them without speculation" in text and "measured: 100 decode steps" in text


def test_a_bucket_the_plain_server_barely_ran_is_estimated_and_said_so(tmp_path, capsys):
    plain = log_dir(tmp_path, [plain_line(steps=speculation_cost.MIN_STEPS - 1)], name="plain")
    rc, result, _ = advise_json(capsys, log_dir(tmp_path, [costs_line()], name="spec"), plain)
    assert rc == 0 and "width-1" in bucket(result, "1")["plain_source"]
    assert any(f"ran {speculation_cost.MIN_STEPS - 1} timed decode steps" in note and note.startswith("batch size 1:")
               for note in result["notes"])


def test_plain_logs_alone_say_a_speculative_servers_are_needed(tmp_path, capsys):
    rc, result, err = advise_json(capsys, log_dir(tmp_path, [plain_line()]))
    assert rc == 1 and result["buckets"] == [] and result["plain_runs"] == 1
    assert "all from servers without speculation" in err and "pass a speculative server's logs" in err



def test_since_counts_the_steps_after_it_only(tmp_path, capsys):
    lines = [costs_line(steps=100, ts="2026-01-01T00:01:00.000000Z"),  # the warm-up, written before --since
             costs_line(steps=300, ts="2026-01-01T00:05:00.000000Z",
                        forwards={"TARGET_VERIFY:1:1": forward_row(90, 1, 1, PLAIN_S),
                                  "TARGET_VERIFY:1:16-31": forward_row(90, 20, 20, PLAIN_S)})]
    rc, result, _ = advise_json(capsys, log_dir(tmp_path, lines), "--since", "2026-01-01T00:02:00+00:00")
    assert rc == 0 and result["since"] == "2026-01-01T00:02:00.000000Z"
    fast = bucket(result, "1")
    assert fast["steps"] == 200 and fast["phase_seconds"]["period"] == pytest.approx(FAST_PERIOD_S)
    assert fast["classes"]["all"]["request_steps"] == 200  # the acceptance counted since, too
    rc, result, _ = advise_json(capsys, tmp_path / "logs")  # without --since: everything
    assert bucket(result, "1")["steps"] == 300
    rc, _, err = advise(capsys, tmp_path / "logs", "--since", "2026-01-01T00:06:00")
    assert rc == 1 and "no costs line was written after --since 2026-01-01T00:06:00.000000Z" in err
    rc, _, err = advise(capsys, tmp_path / "logs", "--since", "yesterday")
    assert rc == 2 and "--since 'yesterday': not an ISO 8601 time" in err
