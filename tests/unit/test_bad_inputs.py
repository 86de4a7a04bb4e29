"""Bad input for every command, from the corpus in tests/unit/bad_inputs/ and from inputs built here (the huge, the
special: a 10 000-file directory, link loops, unreadable files, non-UTF-8 names). Each gives a message that names the
file (and the key or line) and what was wrong, with exit status 2; log lines are skipped, counted and listed instead.
Never a traceback. Property-based tests: the log reader and the configuration parser on arbitrary input."""

import io
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eagle_probe.analysis import batch_buckets
from eagle_probe.commands.cli import main
from eagle_probe.commands.summarize import fields, logread
from eagle_probe.commands.summarize.html_report import render_html
from eagle_probe.commands.summarize.logread import BAD_SLOT, LogReader
from eagle_probe.commands.summarize.report import build_report, render_text
from eagle_probe.config import SETTINGS, ConfigError, ProbeConfig, load_config

CORPUS = Path(__file__).parent / "bad_inputs"
REAL_LOG = Path(__file__).parent.parent / "data" / "real-sglang-0.5.23-tp0.jsonl"
AS_ROOT = os.geteuid() == 0

GOOD_TARGET = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "num_hidden_layers": 61,
               "hidden_size": 7168, "first_k_dense_replace": 3}
GOOD_DRAFT = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 7168, "target_hidden_size": 7168,
              "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58], "use_aux_hidden_state": True}}


def cli(capsys, *argv):
    """main(argv) -> (exit status, stdout, stderr); argparse's own errors exit 2 through SystemExit."""
    try:
        rc = main(list(argv))
    except SystemExit as exc:
        rc = exc.code
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


def count_lines(data: bytes) -> int:
    """Lines as the log reader splits them: at b"\\n" only."""
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def write_json(path: Path, data) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return str(path)


# -- doctor: the committed corpus --------------------------------------------------------------------------------

# Each file of bad_inputs/doctor/, with what the message must say; target-* files are given as --target (with a
# good draft), draft-* files as --draft (with a good target).
DOCTOR = {
    "target-missing-num_hidden_layers.json": ["missing required key 'num_hidden_layers'"],
    "target-missing-hidden_size.json": ["missing required key 'hidden_size'"],
    "target-null-hidden_size.json": ["missing required key 'hidden_size'"],
    "target-nested-missing-hidden_size.json": ["missing required key 'text_config.hidden_size'"],
    "target-layers-string.json": ["key 'num_hidden_layers' must be an integer >= 1", 'got "61"'],
    "target-layers-list.json": ["key 'num_hidden_layers' must be an integer", "got [61]"],
    "target-layers-float.json": ["key 'num_hidden_layers' must be an integer", "got 61.0"],
    "target-layers-bool.json": ["key 'num_hidden_layers' must be an integer", "got true"],
    "target-layers-zero.json": ["key 'num_hidden_layers' must be an integer >= 1", "got 0"],
    "target-layers-object.json": ["key 'num_hidden_layers' must be an integer", 'got {"value": 61}'],
    "target-layers-nan.json": ["key 'num_hidden_layers' must be an integer", "got NaN"],
    "target-layers-infinity.json": ["key 'num_hidden_layers' must be an integer", "got Infinity"],
    "target-layers-5000-digits.json": ["not valid JSON", "4300 digits"],
    "target-hidden_size-string.json": ["key 'hidden_size' must be an integer", 'got "7168"'],
    "target-first_k_dense_replace-negative.json": ["key 'first_k_dense_replace' must be an integer >= 0", "got -1"],
    "target-first_k_dense_replace-string.json": ["key 'first_k_dense_replace' must be an integer", 'got "3"'],
    "target-text_config-list.json": ["key 'text_config' must be an object", "got [61, 7168]"],
    "target-architectures-string.json": ["key 'architectures' must be a list of class names"],
    "target-architectures-numbers.json": ["key 'architectures' must be a list of class names", "got [1, 2]"],
    "target-duplicate-key.json": ["key 'num_hidden_layers' is given twice with different values (61 and 30)"],
    "target-top-level-list.json": ["expected a JSON object at the top level", "got [{"],
    "target-top-level-string.json": ["expected a JSON object at the top level", 'got "config"'],
    "target-top-level-null.json": ["expected a JSON object at the top level", "got null"],
    "target-invalid-json.json": ["not valid JSON", "line 1 column 2"],
    "target-truncated.json": ["not valid JSON", "Unterminated string"],
    "target-trailing-comma.json": ["not valid JSON", "line 1 column 47"],
    "target-single-quotes.json": ["not valid JSON", "double quotes"],
    "target-python-true.json": ["not valid JSON", "line 1 column 71"],
    "target-comments.json": ["not valid JSON", "line 1 column 1"],
    "target-empty.json": ["empty file"],
    "target-whitespace.json": ["empty file"],
    "target-latin1.json": ["not UTF-8 text: byte 0xe9 at offset 63"],
    "target-utf16.json": ["not UTF-8 text: byte 0xff at offset 0"],
    "target-binary.json": ["not UTF-8 text: byte 0x80 at offset 128"],
    "target-nul-bytes.json": ["not valid JSON", "line 1 column 26"],
    "draft-missing-hidden_size.json": ["missing required key 'hidden_size'"],
    "draft-not-eagle3.json": ["not an EAGLE-3 draft", "key 'architectures'"],
    "draft-ids-string.json": ["key 'eagle_config.eagle_aux_hidden_state_layer_ids' must be a list of integers",
                              'got "2,30,58"'],
    "draft-ids-floats.json": ["'eagle_config.eagle_aux_hidden_state_layer_ids' must be a list of integers",
                              "got [2.0, 30, 58]"],
    "draft-ids-bools.json": ["'eagle_config.eagle_aux_hidden_state_layer_ids' must be a list of integers"],
    "draft-ids-nested.json": ["'eagle_config.eagle_aux_hidden_state_layer_ids' must be a list of integers"],
    "draft-ids-strings.json": ["'eagle_config.eagle_aux_hidden_state_layer_ids' must be a list of integers"],
    "draft-ids-int.json": ["'eagle_config.eagle_aux_hidden_state_layer_ids' must be a list of integers", "got 2"],
    "draft-ids-empty.json": ["'eagle_config.eagle_aux_hidden_state_layer_ids' is empty"],
    "draft-top-level-ids-string.json": ["key 'eagle_aux_hidden_state_layer_ids' must be a list of integers"],
    "draft-ids-disagree.json": ["'eagle_config.eagle_aux_hidden_state_layer_ids' [2, 30, 58] and "
                                "'eagle_aux_hidden_state_layer_ids' [1, 29, 57] disagree"],
    "draft-duplicate-ids.json": ["key 'eagle_aux_hidden_state_layer_ids' is given twice with different values"],
    "draft-eagle_config-list.json": ["key 'eagle_config' must be an object"],
    "draft-eagle_config-string.json": ["key 'eagle_config' must be an object", 'got "eagle3"'],
    "draft-use_aux_hidden_state-string.json": ["key 'eagle_config.use_aux_hidden_state' must be true or false"],
    "draft-norm_before_fc-int.json": ["key 'norm_before_fc' must be true or false", "got 1"],
    "draft-fc_norm-string.json": ["key 'fc_norm' must be true or false", 'got "false"'],
    "draft-target_hidden_size-string.json": ["key 'target_hidden_size' must be an integer"],
    "draft-num_aux_hidden_states-negative.json": ["key 'num_aux_hidden_states' must be an integer >= 1", "got -3"],
    "draft-hidden_size-list.json": ["key 'hidden_size' must be an integer", "got [7168]"],
    "draft-architectures-object.json": ["key 'architectures' must be a list of class names"],
}


def test_doctor_corpus_has_an_expectation_per_file():
    assert sorted(p.name for p in (CORPUS / "doctor").iterdir()) == sorted(DOCTOR)


def doctor(capsys, target, draft, *extra):
    return cli(capsys, "doctor", "--target", str(target), "--draft", str(draft), "--sglang-version", "0.5.23", *extra)


@pytest.mark.parametrize("name", sorted(DOCTOR))
def test_doctor_corpus(tmp_path, capsys, name):
    bad = CORPUS / "doctor" / name
    role = name.split("-")[0]
    target = bad if role == "target" else write_json(tmp_path / "t" / "config.json", GOOD_TARGET)
    draft = bad if role == "draft" else write_json(tmp_path / "d" / "config.json", GOOD_DRAFT)
    rc, out, err = doctor(capsys, target, draft)
    assert rc == 2 and out == ""
    assert err.startswith(f"eagle-probe doctor: {role} config {bad}: "), err  # names the file
    for text in DOCTOR[name]:
        assert text in err, (text, err)
    assert err.count("\n") == 1 and len(err) < 400  # one short line, even for a 5000-digit number


def test_doctor_good_configs_pass(tmp_path, capsys):
    """The corpus' baseline: the same configs without the fault are accepted."""
    rc, _, _ = doctor(capsys, write_json(tmp_path / "t" / "config.json", GOOD_TARGET),
                      write_json(tmp_path / "d" / "config.json", GOOD_DRAFT))
    assert rc == 0
    bom = tmp_path / "bom.json"  # a byte-order mark is harmless
    bom.write_bytes(b"\xef\xbb\xbf" + json.dumps(GOOD_TARGET).encode())
    rc, _, _ = doctor(capsys, bom, tmp_path / "d")
    assert rc == 0


# -- doctor: inputs built here ---------------------------------------------------------------------------------

def huge_file(tmp):
    path = tmp / "huge.json"
    with open(path, "wb") as handle:  # sparse: 11 MB on paper, nothing on disk
        handle.truncate(11 * 1024 * 1024)
    return path, ["11534336 bytes, over the 10485760 byte limit", "not read"]


def deeply_nested(tmp):
    path = tmp / "nested.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    return path, ["not valid JSON: nested too deeply"]


def directory_without_config(tmp):
    (tmp / "model").mkdir()
    (tmp / "model" / "tokenizer.json").write_text("{}")
    return tmp / "model", ["no config.json in this directory"]


def config_json_is_a_directory(tmp):
    (tmp / "model" / "config.json").mkdir(parents=True)
    return tmp / "model", ["config.json: is a directory"]


def symlink_loop(tmp):
    os.symlink(tmp / "b", tmp / "a")
    os.symlink(tmp / "a", tmp / "b")
    return tmp / "a", ["cannot read: Too many levels of symbolic links"]


def symlink_loop_in_directory(tmp):
    (tmp / "model").mkdir()
    os.symlink(tmp / "model" / "config.json", tmp / "model" / "config.json")
    return tmp / "model", ["config.json: cannot read: Too many levels of symbolic links"]


def broken_symlink(tmp):
    os.symlink(tmp / "gone.json", tmp / "link.json")
    return tmp / "link.json", ["cannot read: No such file or directory"]


def missing_path(tmp):
    return tmp / "no-such-model", ["no such file or directory"]


def device(tmp):
    return Path("/dev/null"), ["not a regular file"]


def unreadable(tmp):
    path = Path(write_json(tmp / "config.json", GOOD_TARGET))
    path.chmod(0)
    return path, ["cannot read: Permission denied"]


@pytest.mark.parametrize("make", [huge_file, deeply_nested, directory_without_config, config_json_is_a_directory,
                                  symlink_loop, symlink_loop_in_directory, broken_symlink, missing_path, device,
                                  unreadable])
@pytest.mark.parametrize("role", ["target", "draft"])
def test_doctor_special_files(tmp_path, capsys, make, role):
    if make is unreadable and AS_ROOT:
        pytest.skip("running as root: chmod 000 does not stop root from reading (the link and directory cases "
                    "cover open() failing)")
    bad, expected = make(tmp_path)
    target = bad if role == "target" else write_json(tmp_path / "good-t" / "config.json", GOOD_TARGET)
    draft = bad if role == "draft" else write_json(tmp_path / "good-d" / "config.json", GOOD_DRAFT)
    start = time.monotonic()
    rc, out, err = doctor(capsys, target, draft)
    assert time.monotonic() - start < 5  # the huge file is refused, not parsed
    assert rc == 2 and out == "" and err.startswith(f"eagle-probe doctor: {role} config")
    assert str(bad) in err
    for text in expected:
        assert text in err, (text, err)


@pytest.mark.parametrize("extra, expected", [
    (["--pp-size", "62"], ["--pp-size 62: more pipeline stages than the 61 layers", "num_hidden_layers"]),
    (["--pp-size", "0"], ["--pp-size 0: must be >= 1"]),
    (["--pp-size", "2", "--pp-partition", "61,0"], ["--pp-partition '61,0': every stage needs at least 1 layer"]),
    (["--pp-size", "2", "--pp-partition=-5,66"], ["every stage needs at least 1 layer"]),
    (["--pp-size", "2", "--pp-partition", "30,30"], ["needs 2 counts summing to 61"]),
    (["--pp-size", "2", "--pp-partition", "a,b"], ["--pp-partition 'a,b': expected comma-separated layer counts"]),
    (["--pp-size", "two"], ["--pp-size", "invalid int value"]),
    (["--trained-layers", "hf:"], ["--trained-layers 'hf:'"]),
    (["--trained-layers", "vllm:1"], ["unknown convention 'vllm'"]),
    (["--sglang-version", "latest"], ["--sglang-version 'latest': not a release number"]),
    (["--speculative-algorithm", "MEDUSA"], ["--speculative-algorithm", "invalid choice"]),
])
def test_doctor_options_contradicting_the_configs(tmp_path, capsys, extra, expected):
    rc, out, err = doctor(capsys, write_json(tmp_path / "t" / "config.json", GOOD_TARGET),
                          write_json(tmp_path / "d" / "config.json", GOOD_DRAFT), *extra)
    assert rc == 2 and out == ""
    for text in expected:
        assert text in err, (text, err)


def test_doctor_path_that_is_not_utf8_prints(tmp_path, capsys):
    """A valid config under a non-UTF-8 directory name: the text report escapes the name instead of failing."""
    odd = os.fsdecode(bytes(tmp_path) + b"/caf\xe9")
    os.makedirs(odd)
    write_json(Path(odd) / "config.json", GOOD_TARGET)
    rc, out, _ = doctor(capsys, odd, write_json(tmp_path / "d" / "config.json", GOOD_DRAFT))
    assert rc == 0 and "caf\\udce9" in out


# -- summarize: the committed corpus ----------------------------------------------------------------------------

# Each file of bad_inputs/summarize/: exit status, and {line: what its listed skip says}.
SUMMARIZE = {
    "truncated.jsonl": (0, {4: "invalid JSON: Unterminated string starting at: column 70 (a truncated line?)"}),
    "binary.log": (2, {1: "binary data: byte 0x8b at column 2 is not UTF-8", 2: "binary data: byte 0x80",
                       3: "binary data: byte 0xff at column 1", 4: "binary data: byte 0xff",
                       5: "binary data: NUL bytes"}),
    "not-utf8.jsonl": (0, {2: "binary data: byte 0xe9 at column 122 is not UTF-8"}),
    "nul-bytes.jsonl": (0, {2: "binary data: NUL bytes"}),
    "glued.jsonl": (0, {2: "invalid JSON: more text after the event at column 223 (two lines run together?)"}),
    "nested.jsonl": (0, {2: "invalid JSON: nested deeper than 64 levels"}),
    "huge-number.jsonl": (0, {2: "invalid JSON: Exceeds the limit (4300 digits)"}),
    "foreign-only.log": (2, {}),
    "empty.jsonl": (2, {}),
    "crlf.jsonl": (0, {}),
    "surrogates.jsonl": (0, {}),
    "wrong-types.jsonl": (0, None),  # each bad line names its field in "_expect" (not a field the report reads)
}


def test_summarize_corpus_has_an_expectation_per_file():
    assert sorted(p.name for p in (CORPUS / "summarize").iterdir()) == sorted(SUMMARIZE)


def expected_field_skips(path: Path) -> dict:
    out = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        record = json.loads(line)
        if "_expect" in record:
            out[number] = f"wrong field type: field '{record['_expect']}' must be"
    return out


def skips_in_text(out: str) -> dict:
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^  skipped .*?:(\d+): (.*)$", out, re.M)}


@pytest.mark.parametrize("name", sorted(SUMMARIZE))
def test_summarize_corpus(tmp_path, capsys, monkeypatch, name):
    monkeypatch.setattr(logread, "LISTED", 1000)  # list every skipped line of the corpus
    path = CORPUS / "summarize" / name
    status, skips = SUMMARIZE[name]
    skips = expected_field_skips(path) if skips is None else skips
    lines = count_lines(path.read_bytes())
    html = tmp_path / "report.html"
    rc, out, err = cli(capsys, "summarize", str(path), "--html", str(html))
    assert rc == status
    listed = skips_in_text(out if status == 0 else err)
    assert set(listed) == set(skips)
    for number, reason in skips.items():
        assert listed[number].startswith(reason), (number, listed[number])
    if status == 2:  # nothing usable: the message says what was read and why it was all skipped
        assert out == "" and f"no eagle_probe events in {path}" in err
        assert f"{lines} line(s): 0 probe event(s), {lines} skipped" in err
        return
    assert f"{lines} line(s): {lines - len(skips)} probe event(s), {len(skips)} skipped" in out
    page = html.read_text()
    assert f"{len(skips)} skipped" in page and page.count("<td>" + str(path) + "</td>") == len(skips)
    rc, out, _ = cli(capsys, "summarize", str(path), "--format", "json")
    doc = json.loads(out)["input"]
    assert (doc["lines"], doc["events"], doc["skipped"]) == (lines, lines - len(skips), len(skips))
    assert {s["line"]: s["reason"] for s in doc["skipped_lines"]}.keys() == skips.keys()


def test_wrong_types_cover_every_event_kind_the_report_reads():
    kinds = {json.loads(line)["event"] for line in (CORPUS / "summarize" / "wrong-types.jsonl").read_text().splitlines()
             if "_expect" in line}
    assert kinds >= set(fields.BY_EVENT)


def test_the_line_from_the_issue(tmp_path, capsys):
    """accepted_per_pos is no field of eagle_probe.acceptance (the report reads per_position_rate): an unknown
    field is ignored, as a newer probe's would be; the same line with the field the report reads is skipped."""
    log = tmp_path / "a.jsonl"
    log.write_text('{"event": "eagle_probe.acceptance", "accepted_per_pos": "x"}\n'
                   '{"event": "eagle_probe.acceptance", "per_position_rate": "x"}\n')
    rc, out, _ = cli(capsys, "summarize", str(log))
    assert rc == 0 and "acceptance over 1 window(s)" in out
    assert f"skipped {log}:2: wrong field type: field 'per_position_rate' must be a list" in out


# -- summarize: every field the report reads, each with a wrong type ---------------------------------------------

def wrong_values(check):
    """Values of the wrong type for a field: an object fails every check, a string all but the string ones."""
    return [value for value in ({"bad": [1]}, "x", [1], 1.5) if not check(value)][:2]


FIELD_CASES = [(kind, key, value) for kind, spec in [("eagle_probe.finding", fields.COMMON), *fields.BY_EVENT.items()]
               for key, (check, _) in spec.items() for value in wrong_values(check)]


@pytest.mark.parametrize("kind, key, value", FIELD_CASES,
                         ids=[f"{k}-{f}-{type(v).__name__}" for k, f, v in FIELD_CASES])
def test_every_field_the_report_reads_is_checked(tmp_path, capsys, kind, key, value):
    log = tmp_path / "p.jsonl"
    good = {"event": "eagle_probe.finding", "code": "x", "message": "kept"}
    bad = {"event": kind, "code": "c", "path": "eager", key: value}
    log.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    for fmt in ("text", "json"):
        rc, out, _ = cli(capsys, "summarize", str(log), "--format", fmt, "--html", str(tmp_path / "r.html"))
        assert rc == 0
    (skipped,) = json.loads(out)["input"]["skipped_lines"]
    assert (skipped["file"], skipped["line"]) == (str(log), 2)
    assert skipped["reason"].startswith(f"wrong field type: field '{key}' must be ")


def test_real_logs_pass_the_checks():
    reader = LogReader().read_paths([str(REAL_LOG)])
    assert reader.skipped == {} and len(reader.events) == reader.lines > 0


# -- summarize: inputs built here ----------------------------------------------------------------------------------

def event_line(pid, **extra):
    return json.dumps({"event": "eagle_probe.acceptance", "pid": pid, "tp_rank": 0, "drafts": 4, "draft_tokens": 8,
                       "accepted_tokens": 2, "per_position_rate": [0.5, 0.25], "mean_accept_length": 1.5,
                       "accept_length_histogram": {"0": 2, "1": 2}, "timestamp": "2026-01-01T00:00:00Z", **extra})


def test_directory_of_10000_files(tmp_path, capsys):
    """Every file is read (a big deployment writes one per process); it stays quick, and the report says so."""
    logs = tmp_path / "logs"
    logs.mkdir()
    for i in range(10_000):
        (logs / f"eagle-probe-host-{i}.jsonl").write_text(f"SGLang output {i}\n{event_line(i)}\n")
    (logs / "notes.txt").write_text("not a log\n")
    start = time.monotonic()
    rc, out, _ = cli(capsys, "summarize", str(logs), "--html", str(tmp_path / "r.html"))
    assert rc == 0 and time.monotonic() - start < 60
    assert ("input: 10000 file(s), 20000 line(s): 10000 probe event(s), 10000 skipped (not a probe event: 10000)"
            in out)
    assert out.count("== tp_rank=0") == 10_000


def test_directory_of_10000_files_without_events(tmp_path, capsys):
    logs = tmp_path / "logs"
    logs.mkdir()
    for i in range(10_000):
        (logs / f"server-{i}.log").write_bytes(b"\x00\x01binary\n")
    rc, out, err = cli(capsys, "summarize", str(logs))
    assert rc == 2 and out == ""
    assert "10000 file(s), 10000 line(s): 0 probe event(s), 10000 skipped (binary data: 10000)" in err
    assert "... and 9980 more skipped line(s) not listed" in err


def test_directory_without_log_files(tmp_path, capsys):
    (tmp_path / "README").write_text("hello\n")
    (tmp_path / "sub.jsonl").mkdir()  # a directory with a log's name is not read (nor descended into)
    (tmp_path / "sub.jsonl" / "x.jsonl").write_text(event_line(1) + "\n")
    rc, _, err = cli(capsys, "summarize", str(tmp_path))
    assert rc == 2 and "no eagle_probe events" in err and "0 file(s), 0 line(s)" in err


def test_line_too_long(tmp_path, capsys):
    log = tmp_path / "long.jsonl"
    with open(log, "w") as handle:
        handle.write(event_line(1) + "\n")
        handle.write('{"event": "eagle_probe.finding", "message": "' + "x" * (9 * 1024 * 1024) + '"}\n')
        handle.write(event_line(2) + "\n")
    rc, out, _ = cli(capsys, "summarize", str(log))
    assert rc == 0 and f"skipped {log}:2: line too long: over 8388608 bytes" in out
    assert "3 line(s): 2 probe event(s), 1 skipped (line too long: 1)" in out


def test_json_nested_beyond_the_recursion_limit(tmp_path, capsys):
    log = tmp_path / "deep.jsonl"
    log.write_text(event_line(1) + "\n" + '{"event": "eagle_probe.draft.loaded", "x": ' + "[" * 100_000
                   + "]" * 100_000 + "}\n")
    for fmt in ("text", "json"):
        rc, out, _ = cli(capsys, "summarize", str(log), "--format", fmt, "--html", str(tmp_path / "r.html"))
        assert rc == 0 and "invalid JSON: nested too deeply" in out


@pytest.mark.parametrize("make, expected", [
    (lambda d: os.symlink(d / "b.jsonl", d / "a.jsonl") or os.symlink(d / "a.jsonl", d / "b.jsonl") or d / "a.jsonl",
     "Too many levels of symbolic links"),
    (lambda d: os.symlink(d / "gone.jsonl", d / "dead.jsonl") or d / "dead.jsonl", "No such file or directory"),
])
@pytest.mark.parametrize("given", ["file", "directory"])
def test_unreadable_log_files(tmp_path, capsys, make, expected, given):
    """A link loop or a broken link, given or inside a directory: open() fails; exit 2 naming the file."""
    (tmp_path / "good.jsonl").write_text(event_line(1) + "\n")
    bad = make(tmp_path)
    rc, out, err = cli(capsys, "summarize", str(bad if given == "file" else tmp_path))
    assert rc == 2 and out == ""
    assert err.strip() == f"eagle-probe summarize: cannot read {bad}: {expected}"


def test_permission_denied(tmp_path, capsys):
    if AS_ROOT:
        pytest.skip("running as root: chmod 000 does not stop root from reading (test_unreadable_log_files has "
                    "open() failing on a link loop and a broken link instead)")
    log = tmp_path / "secret.jsonl"
    log.write_text(event_line(1) + "\n")
    log.chmod(0)
    rc, _, err = cli(capsys, "summarize", str(log))
    assert rc == 2 and f"cannot read {log}: Permission denied" in err


def test_html_path_is_a_directory(tmp_path, capsys):
    rc, out, err = cli(capsys, "summarize", str(REAL_LOG), "--html", str(tmp_path))
    assert rc == 2 and f"cannot write --html {tmp_path}: Is a directory" in err


def test_missing_paths_are_all_named(tmp_path, capsys):
    rc, _, err = cli(capsys, "summarize", str(tmp_path / "a.jsonl"), str(REAL_LOG), str(tmp_path / "b"))
    assert rc == 2 and f"no such file or directory: {tmp_path / 'a.jsonl'}, {tmp_path / 'b'}" in err


def test_binary_stdin(capsys, monkeypatch):
    class Stdin:
        buffer = io.BytesIO(b"\x89PNG\r\n\x1a\n\x00\x00" + bytes(range(256)) + b"\n" + event_line(3).encode()[:40])

    monkeypatch.setattr("sys.stdin", Stdin())
    rc, out, err = cli(capsys, "summarize")
    assert rc == 2 and "no eagle_probe events in stdin" in err
    assert "skipped <stdin>:1: binary data" in err and "invalid JSON" in err


def test_file_names_and_text_that_are_not_utf8(tmp_path, capsys):
    """A non-UTF-8 file name and a lone surrogate in the JSON: escaped in every output, never a UnicodeError."""
    name = os.fsdecode(bytes(tmp_path) + b"/caf\xe9.jsonl")
    with open(name, "w") as handle:
        handle.write(event_line(1, read_at="\ud800 lone") + "\n" + event_line(2)[:50] + "\n")
    html = tmp_path / "r.html"
    rc, out, _ = cli(capsys, "summarize", str(tmp_path), "--html", str(html))
    assert rc == 0 and "skipped " + str(tmp_path) + "/caf\\udce9.jsonl:2: invalid JSON" in out
    assert "\\ud800 lone" in out and "\\ud800 lone" in html.read_text()
    rc, out, _ = cli(capsys, "summarize", str(tmp_path), "--format", "json")
    assert rc == 0 and json.loads(out)["input"]["skipped"] == 1


def test_command_line_never_prints_a_traceback(tmp_path):
    """The real process on the whole corpus: a crash would print a traceback and exit 1."""
    corpus = [str(p) for p in sorted((CORPUS / "summarize").iterdir())]
    proc = subprocess.run([sys.executable, "-m", "eagle_probe", "summarize", *corpus, "--html", str(tmp_path / "r")],
                          capture_output=True, timeout=120)
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert b"skipped (" in proc.stdout


# -- summarize: property-based -------------------------------------------------------------------------------------

TEXT = st.text(st.characters(exclude_categories=()), max_size=8)  # surrogates included
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats(allow_nan=True, allow_infinity=True) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4), max_leaves=12)
KNOWN = sorted({key for spec in [fields.COMMON, *fields.BY_EVENT.values()] for key in spec} | {"count", "slot"})
KINDS = sorted(fields.BY_EVENT) + ["eagle_probe.draft.loaded", "eagle_probe.config_error", "eagle_probe.future"]


@st.composite
def probe_line(draw):
    """A probe line with random values in the fields the report reads, maybe cut short."""
    record = draw(st.dictionaries(st.sampled_from(KNOWN), JSON_VALUES, max_size=6))
    record["event"] = draw(st.sampled_from(KINDS))
    line = json.dumps(record, allow_nan=True).encode("utf-8", "surrogatepass")
    return line[:draw(st.integers(0, len(line)))] if draw(st.booleans()) else line


LINES = st.lists(st.binary(max_size=40) | probe_line() | st.sampled_from([b"", b"SGLang says hi", b"{\"", b"\xff"]),
                 max_size=12)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(LINES, st.booleans())
def test_log_reader_takes_any_bytes(lines, final_newline):
    data = b"\n".join(line.replace(b"\n", b" ") for line in lines) + (b"\n" if final_newline and lines else b"")
    reader = LogReader().read_stream(io.BytesIO(data), "prop.jsonl")
    stats = reader.stats()
    assert stats["lines"] == count_lines(data)
    # every line parsed, counted as skipped, or a once-only line read again (a rotated file begins with them); a
    # fingerprints line gives an event per slot, and a slot of the wrong type is skipped alone
    skipped_lines = stats["skipped"] - stats["skipped_by_reason"].get(BAD_SLOT, 0)
    assert stats["lines"] == stats["probe_lines"] + skipped_lines + stats["repeated"]
    assert stats["skipped"] == sum(stats["skipped_by_reason"].values())
    report = build_report(reader.events, stats)  # and what was kept renders in every format
    render_text(report).encode("utf-8", "backslashreplace")
    render_html(report).encode("utf-8", "backslashreplace")
    json.dumps(report, default=str)


NUMBERS = st.integers(-10**30, 10**30) | st.floats(allow_nan=False, allow_infinity=False)
SLOT = st.fixed_dictionaries({"slot": st.integers(), "capture_index": st.integers(), "hf_index": st.integers(),
                              "label": TEXT})
MIX_ROW = st.fixed_dictionaries({"path": TEXT}, optional={"role": st.none() | TEXT, "mode": st.none() | TEXT,
                                                          "tbo": st.none() | st.booleans(), "count": NUMBERS})
# A costs row: small counts (a bucket estimated) or any numbers; per-position request-steps.
COST_ROW = st.lists(st.integers(0, 200) | NUMBERS, max_size=12)
POSITION_COUNTS = st.lists(st.integers(0, 200) | st.integers(-10**30, 10**30), max_size=4)
# For each type in fields.py, values of that type: what passes the checks must render.
OF_TYPE = {
    fields.STR: TEXT, fields.STR_OR_ABSENT: TEXT, fields.OPT_STR: st.none() | TEXT,
    fields.OPT_INT: st.none() | st.integers(-10**30, 10**30), fields.OPT_BOOL: st.none() | st.booleans(),
    fields.OPT_NUMBER: st.none() | NUMBERS, fields.OPT_INTS: st.none() | st.lists(st.integers(), max_size=5),
    fields.OPT_STRS: st.none() | st.lists(TEXT, max_size=5),
    fields.OPT_RATES: st.none() | st.lists(st.none() | NUMBERS, max_size=6),
    fields.OPT_HISTOGRAM: st.none() | st.dictionaries(st.integers(0, 10**9 - 1).map(str), NUMBERS, max_size=5),
    fields.OPT_SLOTS: st.none() | st.lists(SLOT, max_size=3), fields.MIX: st.lists(MIX_ROW, max_size=3),
    fields.OPT_ANY_NUMBER: st.none() | st.integers(-10**30, 10**30) | st.floats(),
    fields.OPT_SIGNATURE: st.none() | st.lists(st.floats(), max_size=5),
    fields.OPT_SLICES: st.none() | st.dictionaries(TEXT, st.dictionaries(TEXT, st.fixed_dictionaries(
        {"request_steps": st.integers(-10**30, 10**30),
         "accepted": st.lists(st.integers(-10**30, 10**30), max_size=4)}),
        max_size=3), max_size=3),
    fields.OPT_BUCKET_COUNTS: st.none() | st.dictionaries(TEXT, st.integers(-10**30, 10**30), max_size=3),
    fields.OPT_LAUNCH: st.none() | st.fixed_dictionaries({"id": TEXT, "args": st.dictionaries(
        TEXT, st.none() | TEXT | st.integers(-10**30, 10**30) | st.booleans(), max_size=3)}),
    fields.OPT_COST_STEPS: st.none() | st.dictionaries(st.sampled_from(batch_buckets.LABELS) | TEXT, st.dictionaries(
        st.integers(0, 999).map(str), COST_ROW, max_size=3), max_size=3),
    fields.OPT_COST_FORWARDS: st.none() | st.dictionaries(TEXT, COST_ROW, max_size=3),
    fields.OPT_PLAIN_STEPS: st.none() | st.dictionaries(st.sampled_from(batch_buckets.LABELS) | TEXT,
                                                        st.none() | COST_ROW, max_size=3),
    fields.OPT_SURVIVAL: st.none() | st.dictionaries(st.sampled_from(("all", "greedy", "sampled")) | TEXT,
                                                     st.fixed_dictionaries({}, optional={
                                                         "accepted": st.none() | POSITION_COUNTS,
                                                         "drafted": st.none() | POSITION_COUNTS}), max_size=3),
}
# a fingerprints line's slots: each is read as an aux.fingerprint event, so its fields are of that event's types
OF_TYPE[fields.FINGERPRINT_SLOTS] = st.lists(st.fixed_dictionaries({}, optional={
    key: OF_TYPE[kind] for key, kind in fields.BY_EVENT["eagle_probe.aux.fingerprint"].items()}), min_size=1,
    max_size=3)


@st.composite
def typed_event(draw):
    kind = draw(st.sampled_from(sorted(fields.BY_EVENT)))
    spec = dict(fields.COMMON, **fields.BY_EVENT[kind])
    keys = draw(st.sets(st.sampled_from(sorted(spec))))
    record = {key: draw(OF_TYPE[spec[key]]) for key in keys | {k for k, t in spec.items() if t == fields.STR}}
    return dict(record, event=kind)


def test_every_field_type_has_a_strategy():
    assert {t for spec in [fields.COMMON, *fields.BY_EVENT.values()] for t in spec.values()} <= set(OF_TYPE)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(typed_event(), max_size=8))
def test_report_renders_every_event_that_passes_the_checks(events):
    data = "".join(json.dumps(e) + "\n" for e in events).encode()
    reader = LogReader().read_stream(io.BytesIO(data), "typed.jsonl")
    assert reader.skipped == {}  # values of the listed types pass
    report = build_report(reader.events, reader.stats())
    render_text(report).encode("utf-8", "backslashreplace")
    render_html(report).encode("utf-8", "backslashreplace")
    json.dumps(report, default=str)


# -- run: every EAGLE_PROBE_* variable -----------------------------------------------------------------------------

RUN = json.loads((CORPUS / "run" / "env.json").read_text())
VARIABLES = sorted(setting.variable for setting in SETTINGS)  # every variable load_config reads


@pytest.fixture
def no_launch(monkeypatch):
    """Nothing may be launched: a call to exec fails the test instead of replacing it."""
    for name in list(os.environ):
        if name.startswith("EAGLE_PROBE_"):
            monkeypatch.delenv(name)

    def execvpe(*args):
        raise AssertionError(f"launched {args[0]} despite a bad value")
    monkeypatch.setattr(os, "execvpe", execvpe)
    return monkeypatch


def test_run_corpus_names_only_real_variables():
    """The corpus names variables load_config reads (a variable added later is still covered by the garbage test)."""
    assert {row["variable"] for row in RUN["env"]} <= set(VARIABLES)
    assert len(VARIABLES) >= 18


@pytest.mark.parametrize("row", RUN["env"], ids=[f"{r['variable']}={r['value'][:12]!r}" for r in RUN["env"]])
def test_run_refuses_bad_variables(capsys, no_launch, row):
    no_launch.setenv(row["variable"], row["value"])
    rc, out, err = cli(capsys, "run", "--", "true")
    assert rc == 2 and out == ""
    assert err.startswith(f"eagle-probe run: {row['variable']}={row['value']!r} is not valid; accepted: ")
    assert row["accepted"] in err


@pytest.mark.parametrize("row", RUN["options"], ids=[" ".join(r["args"]) or "none" for r in RUN["options"]])
def test_run_refuses_bad_options(capsys, no_launch, row):
    rc, out, err = cli(capsys, "run", *row["args"], *([] if row.get("no_command") else ["--", "true"]))
    assert rc == 2 and out == ""
    for text in row["expect"]:
        assert text in err, (text, err)


@pytest.mark.parametrize("variable", VARIABLES)
def test_run_refuses_garbage_in_any_variable(capsys, no_launch, variable):
    """Also variables added after the corpus was written: text that is no value of any kind is refused."""
    if variable.endswith("_DIR"):
        pytest.skip("any text is a path; directories are checked below")
    no_launch.setenv(variable, "\x01 not a value \x7f")
    rc, _, err = cli(capsys, "run", "--", "true")
    assert rc == 2 and f"eagle-probe run: {variable}=" in err and "accepted: " in err


@pytest.mark.parametrize("variable, option", [("EAGLE_PROBE_LOG_DIR", None), ("EAGLE_PROBE_LOG_DIR", "--log-dir"),
                                              ("EAGLE_PROBE_DUMP_DIR", None)])
@pytest.mark.parametrize("where", ["a file", "under a file", "a link loop"])
def test_run_refuses_unusable_directories(tmp_path, capsys, no_launch, variable, option, where):
    (tmp_path / "file").write_text("x")
    os.symlink(tmp_path / "loop", tmp_path / "loop")
    path = {"a file": tmp_path / "file", "under a file": tmp_path / "file" / "logs", "a link loop": tmp_path / "loop"}
    if option:
        args = [option, str(path[where])]
    else:
        args = []
        no_launch.setenv(variable, str(path[where]))
    rc, _, err = cli(capsys, "run", *args, "--", "true")
    assert rc == 2
    assert err.startswith(f"eagle-probe run: {option + ': ' if option else ''}{variable}=")
    culprit = tmp_path / ("loop" if where == "a link loop" else "file")
    assert f"accepted: a writable directory, or a path where one can be created ({culprit} is not a directory)" in err


def test_run_checks_directories_only_when_enabled(capsys, no_launch, tmp_path):
    (tmp_path / "file").write_text("x")
    no_launch.setenv("EAGLE_PROBE_LOG_DIR", str(tmp_path / "file"))
    no_launch.setenv("EAGLE_PROBE_ENABLED", "0")
    launched = []
    no_launch.setattr(os, "execvpe", lambda *args: launched.append(args))
    cli(capsys, "run", "--", "true")
    assert launched and launched[0][1] == ["true"]


def test_run_exits_2_before_launching_in_a_real_process(tmp_path):
    marker = tmp_path / "launched"
    command = [sys.executable, "-m", "eagle_probe", "run", "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("EAGLE_PROBE_")}
    proc = subprocess.run(command, env=dict(env, EAGLE_PROBE_METRICS_PORT="nan"), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and not marker.exists() and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == ("eagle-probe run: EAGLE_PROBE_METRICS_PORT='nan' is not valid; accepted: an integer "
                                   "TCP port 1-65535")
    proc = subprocess.run(command, env=dict(env, EAGLE_PROBE_ENABLED="0"), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and marker.exists()  # the same launch with good values runs


# -- configuration parser: property-based ----------------------------------------------------------------------

TRICKY = st.sampled_from(["nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e309", "-0", "0", "1", "65535", "65536",
                          " 1 ", "1_000", "0x10", "\u0661\u0662", "\u00b2", "9" * 5000, "", " ", "\t", "\x00", "\udcff",
                          "hf:", "hf:0,3,31", "sglang:-1", "hf:embedding", "sglang:-2", "all", "0,1", ",", "on",
                          "ON", "yes", "auto"])
VALUES = TRICKY | st.text(st.characters(exclude_categories=())) | st.from_regex(r"\s*[-+]?[0-9.eE_]{0,8}\s*")


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(VARIABLES), VALUES)
def test_load_config_names_the_variable_or_returns_a_config(variable, value):
    try:
        config = load_config({variable: value})
    except ConfigError as exc:
        assert exc.variable == variable and variable in str(exc) and "accepted: " in str(exc)
        return
    assert isinstance(config, ProbeConfig)
    for number in (config.summary_interval_s, config.flush_interval_s, config.collapse_ratio):
        assert math.isfinite(number)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(VARIABLES), VALUES))
def test_load_config_with_many_variables(env):
    try:
        load_config(env)
    except ConfigError as exc:
        assert exc.variable in env


def test_a_fingerprints_line_is_an_event_per_slot_and_a_bad_slot_is_skipped_alone():
    line = {"event": "eagle_probe.aux.fingerprints", "pid": 7, "tp_rank": 1, "role": "draft", "mode": "DECODE",
            "step": 9, "tokens": 4, "source": "worker",
            "slots": [{"slot": 0, "capture_index": None, "rms": 1.0, "absmax": 2.0, "signature": [0.5]},
                      {"slot": "1", "rms": 1.0}, {"slot": 2, "capture_index": 5, "rms": 3.0, "absmax": 4.0}]}
    reader = LogReader().read_stream(io.BytesIO((json.dumps(line) + "\n").encode()), "fp.jsonl")
    assert [(e["event"], e["slot"], e["hf_index"], e["tp_rank"], e["step"], e["role"]) for e in reader.events] == [
        ("eagle_probe.aux.fingerprint", 0, None, 1, 9, "draft"), ("eagle_probe.aux.fingerprint", 2, 5, 1, 9, "draft")]
    stats = reader.stats()
    assert (stats["lines"], stats["probe_lines"], stats["skipped_by_reason"]) == (1, 1, {BAD_SLOT: 1})
    assert stats["skipped_lines"][0]["reason"].startswith(f"{BAD_SLOT}: slot '1': field 'slot' must be")
