"""Every offline command takes its dump directory as --dump-dir; --dump still works, with a deprecation line."""

import pytest

from eagle_probe.commands.cli import build_parser

# Each command with its other required options (their values are not read by the parser).
COMMANDS = {
    "replay": ["--draft", "D", "--target", "T"],
    "parity": ["--data", "S"],
    "consistency": ["--server", "http://127.0.0.1:1"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_dump_dir_is_the_name(command, capsys):
    args = build_parser().parse_args([command, *COMMANDS[command], "--dump-dir", "/var/tmp/dumps"])
    assert args.dump_dir == "/var/tmp/dumps"
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_dump_still_works_and_says_it_is_deprecated(command, capsys):
    args = build_parser().parse_args([command, *COMMANDS[command], "--dump", "/var/tmp/dumps"])
    assert args.dump_dir == "/var/tmp/dumps"
    err = capsys.readouterr().err
    assert "--dump is deprecated; use --dump-dir" in err and err.count("\n") == 1


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_dump_directory_is_required(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([command, *COMMANDS[command]])
    assert exit_info.value.code == 2
    assert "--dump-dir" in capsys.readouterr().err


def test_both_spellings_together_are_refused(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["parity", "--data", "S", "--dump-dir", "a", "--dump", "b"])
    assert "not allowed with" in capsys.readouterr().err
