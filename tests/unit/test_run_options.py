"""`eagle-probe run`: every probe option as a flag, checked before launch; a flag overrides its variable."""

import json
import os

import pytest

from eagle_probe.commands.cli import build_parser, main
from eagle_probe.config import load_config


@pytest.fixture
def launch(monkeypatch):
    """The environment the command would be launched with (exec replaced), or an AssertionError when a bad value
    launched anything."""
    for name in list(os.environ):
        if name.startswith("EAGLE_PROBE_"):
            monkeypatch.delenv(name)
    launched = []
    monkeypatch.setattr(os, "execvpe", lambda file, argv, env: launched.append((argv, env)))
    return launched


def run(capsys, *argv):
    try:
        rc = main(["run", *argv])
    except SystemExit as exc:
        rc = exc.code
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, err


def good_reference(tmp_path):
    from eagle_probe.analysis.fingerprints import REFERENCE_FORMAT

    path = tmp_path / "reference.json"
    path.write_text(json.dumps({"format": REFERENCE_FORMAT, "slots": [{"slot": 0, "rms": 1.0, "signature": [1.0]}]}))
    return str(path)


def test_every_option_reaches_the_launched_environment(tmp_path, capsys, launch, monkeypatch):
    monkeypatch.chdir(tmp_path)
    reference = good_reference(tmp_path)
    args = ["--metrics-addr", "0.0.0.0", "--flush-interval", "0", "--fingerprint-interval", "2.5",
            "--reference", os.path.relpath(reference), "--trained-layers", "hf:0,3,31",
            "--draft-accuracy", "0.75,0.62,0.55", "--collapse-ratio", "0.5", "--collapse-min-drafts", "32",
            "--dump-dir", "dumps", "--dump-every", "3", "--dump-ranks", "0,1", "--dump-layers", "ALL",
            "--dump-max-mb", "64", "--dump-modes", "extend,target_verify", "--draft-max-length", "4096"]
    rc, err = run(capsys, *args, "--", "python", "-m", "sglang.launch_server")
    assert rc is None and err == ""  # exec replaced: main returns what the stub returned
    [(argv, env)] = launch
    assert argv == ["python", "-m", "sglang.launch_server"]
    config = load_config(env)
    assert config.metrics_addr == "0.0.0.0" and config.flush_interval_s == 0 and config.fingerprint_interval_s == 2.5
    assert config.reference == reference and config.trained_layers == "hf:0,3,31"
    assert config.draft_accuracy == (0.75, 0.62, 0.55)
    assert config.collapse_ratio == 0.5 and config.collapse_min_drafts == 32
    assert config.dump_dir == str(tmp_path / "dumps") and config.dump_every == 3 and config.dump_ranks == (0, 1)
    assert config.dump_layers == "all" and config.dump_max_mb == 64 and config.dump_modes == ("extend", "target_verify")
    assert config.draft_max_length == 4096 and config.to_env()["EAGLE_PROBE_DRAFT_MAX_LENGTH"] == "4096"


def test_every_variable_but_enabled_has_a_flag():
    from eagle_probe.commands.cli import run_flags
    from eagle_probe.config import SETTINGS

    variables = {setting.variable for setting in SETTINGS}
    flags = run_flags()
    assert variables - set(flags) == {"EAGLE_PROBE_ENABLED"}  # `run` is the probe switched on
    assert set(flags) <= variables
    options = {a.option_strings[0] for a in build_parser()._subparsers._group_actions[0].choices["run"]._actions
               if a.option_strings}
    assert set(flags.values()) <= options


def test_a_flag_overrides_its_variable(capsys, launch, monkeypatch):
    monkeypatch.setenv("EAGLE_PROBE_DRAFT_ACCURACY", "0.9")
    monkeypatch.setenv("EAGLE_PROBE_FINGERPRINT_INTERVAL_S", "not a number")  # overridden: never read
    rc, err = run(capsys, "--draft-accuracy", "0.5", "--fingerprint-interval", "0", "--", "true")
    assert err == ""
    [(_, env)] = launch
    assert env["EAGLE_PROBE_DRAFT_ACCURACY"] == "0.5" and env["EAGLE_PROBE_FINGERPRINT_INTERVAL_S"] == "0"


@pytest.mark.parametrize("args, expect", [
    (["--draft-accuracy", "0.75,1.5"], "--draft-accuracy: EAGLE_PROBE_DRAFT_ACCURACY='0.75,1.5' is not valid"),
    (["--draft-accuracy", "75%"], "--draft-accuracy: EAGLE_PROBE_DRAFT_ACCURACY="),
    (["--fingerprint-interval", "-1"], "--fingerprint-interval: EAGLE_PROBE_FINGERPRINT_INTERVAL_S='-1'"),
    (["--flush-interval", "soon"], "--flush-interval: EAGLE_PROBE_FLUSH_INTERVAL_S='soon'"),
    (["--metrics-addr", "localhost"], "--metrics-addr: EAGLE_PROBE_METRICS_ADDR='localhost'"),
    (["--trained-layers", "0,3,31"], "--trained-layers: EAGLE_PROBE_TRAINED_LAYERS='0,3,31'"),
    (["--reference", "/nonexistent/ref.json"], "--reference: EAGLE_PROBE_REFERENCE='/nonexistent/ref.json'"),
    (["--collapse-ratio", "2"], "--collapse-ratio: EAGLE_PROBE_COLLAPSE_RATIO='2'"),
    (["--draft-max-length", "2k"], "--draft-max-length: EAGLE_PROBE_DRAFT_MAX_LENGTH='2k' is not valid; accepted: an "
     "integer >= 1"),
    (["--draft-max-length", "0"], "--draft-max-length: EAGLE_PROBE_DRAFT_MAX_LENGTH='0'"),
    (["--draft-accuracy", "0.7", "--collapse-min-drafts", "0"], "--collapse-min-drafts: EAGLE_PROBE_COLLAPSE_MIN"),
    (["--dump-dir", "D", "--dump-every", "0"], "--dump-every: EAGLE_PROBE_DUMP_EVERY='0' is not valid"),
    (["--dump-dir", "D", "--dump-ranks", "first"], "--dump-ranks: EAGLE_PROBE_DUMP_RANKS='first'"),
    (["--dump-dir", "D", "--dump-max-mb", "0"], "--dump-max-mb: EAGLE_PROBE_DUMP_MAX_MB='0'"),
    (["--dump-dir", "D", "--dump-modes", "decode"], "--dump-modes: EAGLE_PROBE_DUMP_MODES='decode' is not valid; "
     "accepted: comma-separated forward modes among extend, target_verify"),
    (["--dump-dir", "D", "--dump-layers", "some"], "argument --dump-layers: invalid choice: 'some'"),
    (["--dump-modes", "extend"], "--dump-modes has no effect without --dump-dir (or EAGLE_PROBE_DUMP_DIR)"),
    (["--dump-every", "5"], "--dump-every has no effect without --dump-dir"),
    (["--collapse-ratio", "0.5"], "--collapse-ratio has no effect without --draft-accuracy"),
    (["--dump-dir", ""], "--dump-dir: must not be blank"),
    (["--draft-accuracy", " "], "--draft-accuracy: must not be blank"),
])
def test_bad_flags_exit_2_before_launch_naming_the_flag(tmp_path, capsys, launch, monkeypatch, args, expect):
    monkeypatch.chdir(tmp_path)
    rc, err = run(capsys, *args, "--", "true")
    assert rc == 2 and not launch
    assert expect in err, err


def test_dump_options_may_rely_on_the_variable(tmp_path, capsys, launch, monkeypatch):
    monkeypatch.setenv("EAGLE_PROBE_DUMP_DIR", str(tmp_path / "dumps"))
    run(capsys, "--dump-modes", "target_verify", "--", "true")
    [(_, env)] = launch
    assert load_config(env).dump_modes == ("target_verify",)


def test_unwritable_dump_dir_flag(tmp_path, capsys, launch):
    (tmp_path / "file").write_text("x")
    rc, err = run(capsys, "--dump-dir", str(tmp_path / "file" / "dumps"), "--", "true")
    assert rc == 2 and not launch
    assert err.startswith("eagle-probe run: --dump-dir: EAGLE_PROBE_DUMP_DIR=")


def test_run_options_are_generated_from_the_settings():
    """Each option's kind, help, path handling and the option it needs come from its row in config.SETTINGS."""
    from eagle_probe.config import SETTING_BY_VARIABLE, SETTINGS, default_text

    run_parser = build_parser()._subparsers._group_actions[0].choices["run"]
    actions = {a.option_strings[0]: a for a in run_parser._actions if a.option_strings}
    for setting in SETTINGS:
        if setting.option is None:
            continue
        action = actions[setting.option]
        assert action.help.startswith(setting.meaning.replace("`", "").replace("%", "%%"))
        assert action.help.endswith(f"[{setting.variable}]") and f"(default: {default_text(setting)}" in action.help
        assert (action.nargs == 0) == setting.switch
        assert tuple(action.choices or ()) == (setting.choices or ())
        if setting.needs:
            assert f"needs {SETTING_BY_VARIABLE[setting.needs].option})" in action.help
    assert {s.option for s in SETTINGS if s.path} == {"--log-dir", "--dump-dir", "--reference"}
    assert {s.option: s.needs for s in SETTINGS if s.needs} == {
        **dict.fromkeys(("--dump-every", "--dump-ranks", "--dump-layers", "--dump-max-mb", "--dump-modes"),
                        "EAGLE_PROBE_DUMP_DIR"),
        **dict.fromkeys(("--collapse-ratio", "--collapse-min-drafts"), "EAGLE_PROBE_DRAFT_ACCURACY"),
        **dict.fromkeys(("--log-max-mb", "--log-keep"), "EAGLE_PROBE_LOG_DIR")}


def test_to_env_writes_every_setting_that_has_a_value():
    """to_env is generated from SETTINGS: each setting's formatter, and load_config reads it all back."""
    from eagle_probe.config import ProbeConfig

    config = ProbeConfig(enabled=False, log_dir="/l", metrics_port=9400, dump_dir="/d", dump_ranks=None,
                         dump_modes=("extend", "target_verify"), draft_accuracy=(0.75, 0.5), log_every_forward=True,
                         disabled_integrations=("targets",), draft_max_length=4096, trained_layers="hf:0,3,31")
    env = config.to_env()
    assert env["EAGLE_PROBE_ENABLED"] == "0" and env["EAGLE_PROBE_LOG_EVERY_FORWARD"] == "1"
    assert env["EAGLE_PROBE_DUMP_RANKS"] == "all" and env["EAGLE_PROBE_DUMP_MODES"] == "extend,target_verify"
    assert env["EAGLE_PROBE_DRAFT_ACCURACY"] == "0.75,0.5" and env["EAGLE_PROBE_METRICS_PORT"] == "9400"
    assert load_config(env) == config
    unset = ProbeConfig().to_env()
    assert not {"EAGLE_PROBE_LOG_DIR", "EAGLE_PROBE_METRICS_PORT", "EAGLE_PROBE_DUMP_DIR", "EAGLE_PROBE_REFERENCE",
                "EAGLE_PROBE_DRAFT_ACCURACY", "EAGLE_PROBE_DRAFT_MAX_LENGTH"} & set(unset)
