"""`eagle-probe summarize`: real logs from a real SGLang 0.5.23 CPU server (tests/data), synthetic acceptance lines."""

import io
import json
import os
import shutil

import pytest

from eagle_probe.commands.cli import main
from eagle_probe.commands.summarize.html_report import render_html
from eagle_probe.commands.summarize.logread import read_events
from eagle_probe.commands.summarize.report import build_report

REAL_LOG = os.path.join(os.path.dirname(__file__), "..", "data", "real-sglang-0.5.23-tp0.jsonl")


def acceptance_line(ts, rank=1, mean=2.5, rates=(0.8, 0.5, 0.2), hist=None):
    event = {"pid": 4242, "tp_rank": rank, "tp_size": 2, "pp_rank": 0, "dp_rank": None, "role": "target",
             "steps": 10, "drafts": 20, "draft_tokens": 60, "accepted_tokens": round((mean - 1) * 20), "positions": 3,
             "mean_accept_length": mean, "per_position_rate": list(rates), "conditional_rate": [0.8, 0.625, 0.4],
             "accept_length_histogram": hist or {"0": 4, "1": 6, "2": 6, "3": 4},
             "read_at": "sglang.srt.speculative.eagle_worker.EAGLEWorker.verify",
             "event": "eagle_probe.acceptance", "level": "info", "timestamp": ts}
    return json.dumps(event)


def finding_line(ts, rank=1, code="layer_mismatch"):
    return json.dumps({"pid": 4242, "tp_rank": rank, "pp_rank": 0, "dp_rank": None, "code": code, "severity": "error",
                       "role": "draft", "message": f"{code} at {ts}", "evidence": {}, "event": "eagle_probe.finding",
                       "level": "error", "timestamp": ts})


def make_dir(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    shutil.copy(REAL_LOG, d / "eagle-probe-host-10893.jsonl")
    lines = ["[2026-01-01 00:00:00] SGLang says hello, not JSON", "{\"not\": \"ours\"}",
             acceptance_line("2026-01-01T00:00:01Z"), finding_line("2026-01-01T00:00:01Z"),
             acceptance_line("2026-01-01T00:01:01Z", mean=1.5, rates=(0.4, 0.1, 0.0)),
             finding_line("2026-01-01T00:01:05Z"),
             acceptance_line("2026-01-01T00:02:01Z")[:57]]  # truncated last line
    (d / "eagle-probe-host-4242.jsonl").write_text("\n".join(lines))
    return d


def test_real_log_per_rank_text(tmp_path, capsys):
    d = make_dir(tmp_path)
    assert main(["summarize", str(d)]) == 0
    out = capsys.readouterr().out
    assert "== tp_rank=0 pp_rank=0 dp_rank=None pid=10893 sglang 0.5.23" in out
    assert "slot 0: capture index 2 = HF hidden_states[2] = output of layer 1" in out
    assert "shape=[3, 192] widths=[64, 64, 64]" in out
    assert "path mix (summary): target/DECODE/eager: 25, target/EXTEND/eager: 4" in out
    assert "FINDING layer_mismatch [error] x2 (2026-01-01T00:00:01Z .. 2026-01-01T00:01:05Z)" in out
    assert "acceptance over 2 window(s), 40 drafts: mean accept length 2.00" in out
    assert "per draft position: 0.600, 0.300, 0.100" in out
    assert "read at: sglang.srt.speculative.eagle_worker.EAGLEWorker.verify" in out


def test_json_format_is_one_document(tmp_path, capsys):
    d = make_dir(tmp_path)
    assert main(["summarize", "--format", "json", str(d)]) == 0
    doc = json.loads(capsys.readouterr().out)
    ranks = {r["pid"]: r for r in doc["ranks"]}
    assert ranks[10893]["capture"][0]["layers_to_capture"] == [2, 4, 5]
    assert ranks[10893]["path_totals"] == {"eager": 29}
    acc = ranks[4242]["acceptance"]
    assert acc["drafts"] == 40 and acc["accept_rate"] == pytest.approx((30 + 10) / 120)
    assert acc["accept_length_histogram"] == {"0": 8, "1": 12, "2": 12, "3": 8}
    assert [w["mean_accept_length"] for w in acc["over_time"]] == [2.5, 1.5]
    assert doc["findings"][0]["code"] == "layer_mismatch" and doc["findings"][0]["count"] == 2


def test_files_and_stdin(tmp_path, capsys, monkeypatch):
    assert main(["summarize", REAL_LOG]) == 0
    from_file = capsys.readouterr().out
    with open(REAL_LOG) as handle:
        monkeypatch.setattr("sys.stdin", io.StringIO(handle.read()))
    assert main(["summarize", "-"]) == 0
    assert capsys.readouterr().out == from_file


def test_bad_input_exits_2(tmp_path, capsys):
    assert main(["summarize", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl" in capsys.readouterr().err
    (tmp_path / "foreign.log").write_text("just some server output\n")
    assert main(["summarize", str(tmp_path)]) == 2
    assert "no eagle_probe events" in capsys.readouterr().err
    assert main(["summarize", REAL_LOG, "--html", str(tmp_path / "no-dir" / "r.html")]) == 2
    assert "--html" in capsys.readouterr().err


def test_html_is_self_contained_with_plots_and_tables(tmp_path, capsys):
    d = make_dir(tmp_path)
    out = tmp_path / "report.html"
    assert main(["summarize", str(d), "--html", str(out)]) == 0
    page = out.read_text()
    assert page.count('src="data:image/svg+xml;base64,') == 3
    for plot in ("plot-position", "plot-histogram", "plot-time"):
        assert f'id="{plot}"' in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in page
    assert "output of layer 1" in page and "layer_mismatch" in page and "default-src 'none'" in page
    assert "<th>read at</th>" in page and "EAGLEWorker.verify" in page


def test_html_without_acceptance_says_so():
    page = render_html(build_report(read_events([REAL_LOG])))
    assert "No <code>eagle_probe.acceptance</code> events" in page and "data:image" not in page
