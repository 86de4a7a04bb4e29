"""The eagle-probe command line: run, doctor, summarize, bootstrap-path; replay, parity, consistency, advise and the
others register their own subcommands."""

import argparse
import os
import sys

from .. import __version__
from ..bootstrap import BOOTSTRAP_DIR
from ..config import SETTING_BY_VARIABLE, SETTINGS, ConfigError, default_text, load_config

# `eagle-probe run` takes every setting that has an option in config.SETTINGS. Each value is checked by load_config, as
# the variable is, so a bad one is named with what it accepts.
RUN_SETTINGS = tuple(setting for setting in SETTINGS if setting.option)


def run_flags() -> dict:
    """{variable: its `eagle-probe run` option}; EAGLE_PROBE_ENABLED has none (`run` is the probe switched on)."""
    return {setting.variable: setting.option for setting in RUN_SETTINGS}


def _dest(option: str) -> str:
    return option[2:].replace("-", "_")


def _option_values(args) -> dict:
    """{variable: (option, value)} for the run options given; a bad value is reported under both names."""
    values = {}
    for setting in RUN_SETTINGS:
        value = getattr(args, _dest(setting.option))
        if setting.switch:
            value = "1" if value else None
        elif value is not None and setting.path:
            value = os.path.abspath(value)
        if value is not None:
            values[setting.variable] = (setting.option, value)
    return values


def _useless_option(args, env) -> str | None:
    """An option given that has no effect without another one (neither given as an option nor as a variable)."""
    given = _option_values(args)
    for setting in RUN_SETTINGS:
        if setting.needs and setting.variable in given and not env.get(setting.needs):
            needed = SETTING_BY_VARIABLE[setting.needs].option
            return f"{setting.option} has no effect without {needed} (or {setting.needs})"
    return None


def _run_environment(args, base_env) -> dict:
    env = dict(base_env)
    env.update({name: str(value) for name, (_, value) in _option_values(args).items()})
    env.setdefault("EAGLE_PROBE_ENABLED", "1")
    existing = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != BOOTSTRAP_DIR]
    env["PYTHONPATH"] = os.pathsep.join([BOOTSTRAP_DIR] + existing)
    return env


def _dir_problem(directory: str) -> str | None:
    """Why the probe could not write its files under directory; it creates the missing part itself."""
    path = os.path.abspath(directory)
    while not os.path.lexists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    if not os.path.isdir(path):
        return f"{path} is not a directory"
    if not os.access(path, os.W_OK | os.X_OK):
        return f"{path} is not writable"
    return None


def _config_problem(env) -> ConfigError | None:
    """The first bad EAGLE_PROBE_* value, found before anything is launched (the probe would only log it)."""
    try:
        config = load_config(env)
    except ConfigError as exc:
        return exc
    for name, path in (("EAGLE_PROBE_LOG_DIR", config.log_dir), ("EAGLE_PROBE_DUMP_DIR", config.dump_dir)):
        why = _dir_problem(path) if config.enabled and path else None
        if why:
            return ConfigError(name, path, f"a writable directory, or a path where one can be created ({why})")
    return None


def cmd_run(args) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print("eagle-probe run: no command given; usage: eagle-probe run [options] -- COMMAND ...", file=sys.stderr)
        return 2
    env = _run_environment(args, os.environ)
    problem = _config_problem(env)
    if problem is not None:
        option = _option_values(args).get(problem.variable, ("",))[0]
        print(f"eagle-probe run: {option + ': ' if option else ''}{problem}", file=sys.stderr)
        return 2
    useless = _useless_option(args, env)
    if useless:
        print(f"eagle-probe run: {useless}", file=sys.stderr)
        return 2
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        print(f"eagle-probe run: cannot execute {command[0]!r}: {exc.strerror}", file=sys.stderr)
        return 127


def _nonblank(text: str) -> str:
    """argparse type: an option given as '' would silently mean 'not set'."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be blank")
    return text


def _run_help(setting) -> str:
    """The option's help: the setting's own words, its default and its variable (argparse formats '%')."""
    needs = f"; needs {SETTING_BY_VARIABLE[setting.needs].option}" if setting.needs else ""
    text = f"{setting.meaning} (default: {default_text(setting)}{needs}) [{setting.variable}]"
    return text.replace("`", "").replace("%", "%%")


def add_run_options(run) -> None:
    """One option per setting that has one; values are checked by load_config, as the variables are."""
    for setting in RUN_SETTINGS:
        if setting.switch:
            run.add_argument(setting.option, action="store_true", help=_run_help(setting))
        elif setting.choices:
            run.add_argument(setting.option, type=str.lower, choices=setting.choices, help=_run_help(setting))
        else:
            run.add_argument(setting.option, type=_nonblank, help=_run_help(setting))


def _accuracy_option(text: str):
    """argparse type for --draft-accuracy: the variable's parser, its message (argparse names the option)."""
    from ..config import DRAFT_ACCURACY_ACCEPTED, parse_accuracy

    try:
        return parse_accuracy(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not valid ({exc}); accepted: "
                                         f"{DRAFT_ACCURACY_ACCEPTED}") from None


def _length_option(text: str) -> int:
    """argparse type for --draft-max-length: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not valid; accepted: an integer >= 1 (the trained sequence "
                                         f"length in tokens)")
    return value


def cmd_summarize(args) -> int:
    import json

    from .summarize.logread import LogReader
    from .summarize.nodes import describe_input, launch_mismatch
    from .summarize.report import build_report, input_lines, render_text

    paths = [p for p in args.paths if p != "-"]
    missing = [p for p in paths if not os.path.lexists(p)]
    if missing:
        print(f"eagle-probe summarize: no such file or directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    reader = LogReader()
    inputs = []
    try:
        if paths:
            for path in paths:  # one at a time: which node each input holds (summarize/nodes.py)
                before, stats_before = len(reader.events), (reader.files, reader.lines)
                reader.read_paths([path])
                inputs.append(describe_input(path, reader.events[before:], {
                    "files": reader.files - stats_before[0], "lines": reader.lines - stats_before[1]}))
        else:
            reader.read_stream(getattr(sys.stdin, "buffer", sys.stdin), "<stdin>")
    except OSError as exc:  # a broken link, a link loop, no permission
        print(f"eagle-probe summarize: cannot read {exc.filename or 'input'}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if not reader.events:
        where = ", ".join(paths) if paths else "stdin"
        print(f"eagle-probe summarize: no eagle_probe events in {where} (expected the probe's JSON lines: "
              f"*.jsonl / *.log files or a directory of them)", file=sys.stderr)
        print("\n".join(input_lines(reader.stats())), file=sys.stderr)
        return 2
    mismatch = launch_mismatch(inputs)
    if mismatch and not args.any_launch:
        print(f"eagle-probe summarize: {mismatch}", file=sys.stderr)
        return 2
    report = build_report(reader.events, reader.stats(), args.draft_accuracy, args.draft_max_length,
                          inputs if len(inputs) > 1 else None)
    if mismatch:
        report["node_notices"].insert(0, mismatch.replace("\n", "; "))
    if args.html:
        from .summarize.html_report import render_html
        try:
            # backslashreplace: a log's JSON may hold a lone surrogate ("\\ud800"), which UTF-8 cannot encode
            with open(args.html, "w", encoding="utf-8", errors="backslashreplace") as handle:
                handle.write(render_html(report))
        except OSError as exc:
            print(f"eagle-probe summarize: cannot write --html {args.html}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    if args.format == "json":
        print(json.dumps(report, default=str))
    else:
        print(render_text(report))
        if args.html:
            print(f"HTML report: {args.html}")
    return 0


def cmd_compat(args) -> int:
    import json

    from .compat import compat_report, exit_status, render

    report = compat_report(import_modules=not args.no_import, source_check=args.source)
    print(json.dumps(report, default=str) if args.format == "json" else render(report))
    return exit_status(report)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="eagle-probe", description=__doc__)
    parser.add_argument("--version", action="version", version=f"eagle-probe {__version__}")
    sub = parser.add_subparsers(dest="cmd", required=True)

    run = sub.add_parser("run", help="run a command (e.g. python -m sglang.launch_server ...) with the probe injected")
    add_run_options(run)
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    run.set_defaults(func=cmd_run)

    from .doctor import add_parser as add_doctor_parser
    add_doctor_parser(sub)
    from .parity import add_parser as add_parity_parser
    add_parity_parser(sub)
    from .consistency.command import add_parser as add_consistency_parser
    add_consistency_parser(sub)
    from .reference import add_parser as add_reference_parser
    add_reference_parser(sub)
    from .replay import add_parser as add_replay_parser  # torch is imported only when replay runs
    add_replay_parser(sub)
    from .advise import add_parser as add_advise_parser
    add_advise_parser(sub)

    summ = sub.add_parser("summarize", help="summarise the probe's JSON logs of all ranks")
    summ.add_argument("paths", nargs="*", help="log files or directories (default: stdin); one directory per node "
                      "of a multi-node launch, read together and compared across nodes")
    summ.add_argument("--any-launch", action="store_true", help="read inputs of different launches together (by "
                      "default summarize refuses them, naming the arguments that differ)")
    summ.add_argument("--format", choices=("text", "json"), default="text")
    summ.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report with plots")
    summ.add_argument("--draft-accuracy", type=_accuracy_option, metavar="A[,A2,...]",
                      help="the draft's training accuracy: one per-token number or per-position conditional "
                           "accuracies as SpecForge logs them (0.75,0.62,0.55); default: what the probe logged")
    summ.add_argument("--draft-max-length", type=_length_option, metavar="N",
                      help="the sequence length the draft was trained on (default: what the probe logged at draft "
                           "load: EAGLE_PROBE_DRAFT_MAX_LENGTH, SpecForge's training_state.pt, else max_position_"
                           "embeddings)")
    summ.set_defaults(func=cmd_summarize)

    compat = sub.add_parser("compat", help="for the installed SGLang: every integration target resolved / skipped "
                            "(and why) and the version rules in force")
    compat.add_argument("--format", choices=("text", "json"), default="text")
    compat.add_argument("--no-import", action="store_true", help="do not import SGLang's modules (targets unresolved)")
    compat.add_argument("--source", action="store_true", help="also run the contract check on the installed "
                        "SGLang's source")
    compat.set_defaults(func=cmd_compat)

    path = sub.add_parser("bootstrap-path", help="print the directory to put first on PYTHONPATH")
    path.set_defaults(func=lambda args: print(BOOTSTRAP_DIR) or 0)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    # Paths and logs may hold text stdout cannot encode (a lone surrogate): print it escaped, not a traceback.
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        return args.func(args)
    except BrokenPipeError:  # e.g. `eagle-probe summarize DIR | head`: the reader left, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
