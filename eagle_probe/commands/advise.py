"""`eagle-probe advise LOG_DIR... [--format json] [--write FILE [--force]]`

Does speculation pay on this server, and at which depth? From the probe's eagle_probe.spec.costs events (written
with EAGLE_PROBE_PHASE_TIMING on, the default). Give the logs of the same target served without speculation (the
probe injected) with them, and the plain step is measured there instead of estimated. Per batch-size bucket: the
estimated speed-up over plain decoding with its uncertainty, the accept length that would break even, the best
number of draft steps, the phase costs behind them; the findings speculation_slower_than_plain and
speculation_depth_off; and SGLang's --speculative-adaptive-config that serves the best depth at each batch size
(--write FILE writes it).

--since TIME estimates from the steps after TIME only (each process's counts less its last costs line written at or
before it): a warm-up left out, or a change of traffic or settings.

Exit status: 0 at least one bucket estimated, 1 none (why is printed: no costs events, too few steps), 2 bad input
(a LOG_DIR missing or without probe logs, a --since that is no time, --write FILE existing without --force, FILE
not writable).
"""

import argparse
import datetime
import json
import os
import sys

from .output import emit, finding_line
from .speculation_advice import advice, why_nothing_estimated
from .summarize.logread import LogReader

PROG = "eagle-probe advise"


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "advise", help="does speculation pay? the speed-up per batch size, the best depth, and the adaptive config",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log_dirs", nargs="+", metavar="LOG_DIR", help="the probe's log directories "
                        "(EAGLE_PROBE_LOG_DIR; one per node) or log files")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--write", metavar="FILE", help="write the adaptive config (SGLang's "
                        "--speculative-adaptive-config) to FILE; refused if FILE exists")
    parser.add_argument("--force", action="store_true", help="with --write: replace FILE if it exists")
    parser.add_argument("--since", metavar="TIME", help="only the steps after TIME (ISO 8601, e.g. "
                        "2026-12-06T03:05:00Z; without a zone, UTC): leaves out a warm-up, or what ran before a "
                        "change; each process's counts less its last costs line at or before TIME")
    parser.set_defaults(func=run)
    return parser


def read_logs(paths: list[str]) -> list:
    """Every probe event under the paths; OSError or ValueError naming the path that is missing or holds none."""
    reader = LogReader()
    for path in paths:
        if not os.path.lexists(path):
            raise ValueError(f"no such file or directory: {path}")
        before = len(reader.events)
        reader.read_paths([path])
        if len(reader.events) == before:
            raise ValueError(f"no eagle_probe events in {path} (expected the probe's JSON lines: *.jsonl / *.log "
                             f"files, or a directory of them)")
    return reader.events


def _seconds(value) -> str:
    return "n/a" if value is None else f"{value:.4g} s"


def _speedup(item: dict) -> str:
    error = item["uncertainty"]
    return f"{item['estimated_speedup']:.2f}x " + ("± ?" if error is None else f"± {error:.2f}")


def _recommended(item: dict) -> str:
    return f"recommended num steps {item['recommended_num_steps']}" + (
        " (extrapolated)" if item["recommended_extrapolated"] else "")


def _bucket_lines(bucket: dict) -> list[str]:
    lo, hi = bucket["batch_size"]
    head = f"batch size [{lo}, {'inf' if hi is None else hi}]: {bucket['steps']} steps served at depth " \
           f"{bucket['served_depth']}"
    phases = bucket["phase_seconds"]
    costs = ", ".join(f"{name} {_seconds(phases.get(name))}" for name in ("draft", "verify", "extend", "period"))
    if not bucket["estimated"]:
        return [f"{head}: not estimated ({bucket['why']}); per step {costs}"]
    out = [f"{head}: estimated speed-up {_speedup(bucket)}, break-even accept length "
           f"{bucket['break_even_accept_length']:.2f} (tokens per step {bucket['tokens_per_step']:.2f}), "
           f"{_recommended(bucket)}; per step {costs}; plain step {_seconds(bucket['plain_step_seconds'])} "
           f"({bucket['plain_source']})"]
    for name in ("greedy", "sampled"):
        item = (bucket["classes"] or {}).get(name)
        if item is not None:
            out.append(f"  {name}: {_speedup(item)}, break-even accept length "
                       f"{item['break_even_accept_length']:.2f}, {_recommended(item)}")
    return out


def render(result: dict) -> str:
    plain = f", {result['plain_runs']} of them without speculation (the measured plain step)" \
        if result.get("plain_runs") else ""
    out = [f"speculation cost: {result['runs']} process(es) counted{plain} (attention-TP rank 0; "
           f"{result['tp_ranks_left_out']} other TP rank(s) left out: they time the same steps)"
           + (f", steps after {result['since']}" if result.get("since") else "") + ", clock "
           f"{result['source']}, topk {result['topk']}"]
    for bucket in result["buckets"]:
        out += _bucket_lines(bucket)
    why = why_nothing_estimated(result)
    if why:
        out.append(f"nothing estimated: {why}")
    out += [finding_line(f) for f in result["findings"]]
    out += [f"note: {note}" for note in result["notes"]]
    if result["adaptive_config"]:
        out.append("adaptive config (--speculative-adaptive-config FILE; one candidate per batch-size key, 0: no "
                   "drafting): " + json.dumps(result["adaptive_config"]))
        out.append("launch SGLang with: " + " ".join(result["launch_args"]))
    if result.get("written"):
        out.append(f"written to {result['written']}")
    return "\n".join(out)


def write_config(path: str, config: dict, force: bool) -> None:
    """The config as JSON (indent 2); FileExistsError unless force: never replaced silently."""
    with open(path, "w" if force else "x", encoding="utf-8") as handle:
        handle.write(json.dumps(config, indent=2) + "\n")


def log_time(text: str) -> str:
    """TIME as the probe's log lines write their timestamps (UTC, microseconds, Z), so that they compare as text;
    ValueError naming it otherwise."""
    try:
        moment = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"--since {text!r}: not an ISO 8601 time (e.g. 2026-12-06T03:05:00Z)") from None
    if moment.tzinfo is not None:
        moment = moment.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _refuse(message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return 2


def run(args) -> int:
    if args.force and not args.write:
        return _refuse("--force has no effect without --write FILE")
    if args.write and os.path.lexists(args.write) and not args.force:
        return _refuse(f"--write {args.write}: the file exists; not replaced (pass --force to replace it)")
    try:
        since = log_time(args.since) if args.since else None
        events = read_logs(args.log_dirs)
    except ValueError as exc:
        return _refuse(str(exc))
    except OSError as exc:  # a broken link, a link loop, no permission
        return _refuse(f"cannot read {exc.filename or 'input'}: {exc.strerror or exc}")
    result = advice(events, since)
    result["since"] = since
    why = why_nothing_estimated(result)
    result["exit_status"] = 1 if why else 0
    if args.write and not why:
        try:
            write_config(args.write, result["adaptive_config"], args.force)
        except FileExistsError:
            return _refuse(f"--write {args.write}: the file exists; not replaced (pass --force to replace it)")
        except OSError as exc:
            return _refuse(f"cannot write --write {args.write}: {exc.strerror or exc}")
        result["written"] = args.write
    status = emit(result, args.format, render)
    if why:
        print(f"{PROG}: nothing estimated{', nothing written' if args.write else ''}: {why}", file=sys.stderr)
    return status
