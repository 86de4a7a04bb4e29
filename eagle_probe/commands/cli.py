"""The eagle-probe command line: run, doctor, summarize, bootstrap-path."""

import argparse
import os
import sys

from .. import __version__
from ..bootstrap import BOOTSTRAP_DIR
from ..config import INNER_FORWARD_MODES, LOG_LEVELS, ConfigError, load_config


def _run_environment(args, base_env) -> dict:
    env = dict(base_env)
    options = {
        "EAGLE_PROBE_LOG_DIR": None if args.log_dir is None else os.path.abspath(args.log_dir),
        "EAGLE_PROBE_METRICS_PORT": args.metrics_port,
        "EAGLE_PROBE_LOG_LEVEL": args.log_level,
        "EAGLE_PROBE_SUMMARY_INTERVAL_S": args.summary_interval,
        "EAGLE_PROBE_INNER_FORWARD": args.inner_forward,
        "EAGLE_PROBE_LOG_EVERY_FORWARD": "1" if args.log_every_forward else None,
    }
    env.update({k: str(v) for k, v in options.items() if v is not None})
    env.setdefault("EAGLE_PROBE_ENABLED", "1")
    existing = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != BOOTSTRAP_DIR]
    env["PYTHONPATH"] = os.pathsep.join([BOOTSTRAP_DIR] + existing)
    return env


def cmd_run(args) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print("eagle-probe run: no command given; usage: eagle-probe run [options] -- COMMAND ...", file=sys.stderr)
        return 2
    env = _run_environment(args, os.environ)
    try:
        load_config(env)
    except ConfigError as exc:
        print(f"eagle-probe run: {exc}", file=sys.stderr)
        return 2
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        print(f"eagle-probe run: cannot execute {command[0]!r}: {exc.strerror}", file=sys.stderr)
        return 127


def cmd_summarize(args) -> int:
    import json

    from .summarize.logread import iter_lines, parse_events
    from .summarize.report import build_report, render_text

    paths = [p for p in args.paths if p != "-"]
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        print(f"eagle-probe summarize: no such file or directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    lines = iter_lines(paths) if paths else sys.stdin
    try:
        events = list(parse_events(lines))
    except OSError as exc:
        print(f"eagle-probe summarize: cannot read {exc.filename or 'input'}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if not events:
        where = ", ".join(paths) if paths else "stdin"
        print(f"eagle-probe summarize: no eagle_probe events in {where} (expected the probe's JSON lines: "
              f"*.jsonl / *.log files or a directory of them)", file=sys.stderr)
        return 2
    report = build_report(events)
    if args.html:
        from .summarize.html_report import render_html
        try:
            with open(args.html, "w", encoding="utf-8") as handle:
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
    run.add_argument("--log-dir", help="one JSON-lines file per process here (default: stderr)")
    run.add_argument("--metrics-port", type=int, help="per-process exporter on 127.0.0.1:PORT+tp_rank "
                     "when SGLang's --enable-metrics is off")
    run.add_argument("--log-level", choices=LOG_LEVELS)
    run.add_argument("--summary-interval", type=float, help="seconds between eagle_probe.summary events")
    run.add_argument("--log-every-forward", action="store_true", help="debug: a line per forward")
    run.add_argument("--inner-forward", choices=INNER_FORWARD_MODES,
                     help="wrap inner model forwards (auto: off under torch.compile / piecewise CUDA graphs)")
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    run.set_defaults(func=cmd_run)

    from .doctor import add_parser as add_doctor_parser
    add_doctor_parser(sub)

    summ = sub.add_parser("summarize", help="summarise the probe's JSON logs of all ranks")
    summ.add_argument("paths", nargs="*", help="log files or directories (default: stdin)")
    summ.add_argument("--format", choices=("text", "json"), default="text")
    summ.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report with plots")
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
    try:
        return args.func(args)
    except BrokenPipeError:  # e.g. `eagle-probe summarize DIR | head`: the reader left, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
