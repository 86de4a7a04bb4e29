"""`eagle-probe consistency --dump-dir DIR (--server http://HOST:PORT | --target MODEL_DIR) [--format json]`

Are the aux states the target fed the draft on the decode path the ones a prefill of the same tokens gives? For
every request of every TARGET_VERIFY dump in DIR (EAGLE_PROBE_DUMP_MODES=extend,target_verify) whose verify step's
outcome the probe saw, the committed rows (row 0, the pending token, and the accepted drafts) are compared with the
server itself as the reference: its prefix cache is flushed (/flush_cache), the tokens up to and including the last
committed row are sent again (/generate, one new token), and the EXTEND dump its probe writes of them gives the
prefill's rows. Each row and aux slot is compared by rel_diff = 1 - 2 Σxy / (Σx² + Σy²) against a tolerance
derived from measured noise (docs/commands/consistency.md). The server must be idle, serve the same model and
dump EXTEND forwards into DIR. `--target MODEL_DIR` instead takes the target checkpoint's own prefill in
transformers on this machine as the reference (offline.py), where the model fits its memory; no server is needed.

Exit status: 0 all rows agree, 1 verify_prefill_mismatch (the slot, forward mode, rows (position, step) and the size
of the difference named), 2 bad input (no dump directory, dumps of two servers, no verify rows; a server unreachable,
not SGLang, of another release than the dumps' or not dumping; a target that is not the served model, cannot be
loaded or does not fit).
"""

import argparse
import os
import sys
import time

from ...analysis.consistency import findings as mismatch_findings
from ...analysis.consistency import tolerance
from ..dump_dir_option import add_dump_dir_option
from ..dump_files import UNKNOWN, DumpError
from ..output import emit, finding_line
from ..sglang_server import ServerError, server_release
from .compare import compare_rows
from .offline import OfflineTarget, TargetError
from .reference import ReferenceFinder, prefill_reference
from .rows import read_verify_rows


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "consistency", help="compare verify forwards' committed aux states with a prefill of the same tokens",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dump_dir_option(parser, "the probe's dump directory (EAGLE_PROBE_DUMP_DIR) with TARGET_VERIFY dumps; the "
                        "server's reference prefills are dumped here too")
    reference = parser.add_mutually_exclusive_group(required=True)
    reference.add_argument("--server", help="URL of the same server, idle, e.g. http://127.0.0.1:30000: the "
                           "reference at any model size")
    reference.add_argument("--target", help="the target's HuggingFace checkpoint directory: its prefill in "
                           "transformers on this machine is the reference (where the model fits in memory)")
    parser.add_argument("--max-sequences", type=int, default=32, help="dumped requests to re-send at most "
                        "(default 32; one prefill each)")
    parser.add_argument("--wait", type=float, default=30.0, help="seconds to wait for each reference dump")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.set_defaults(func=run)
    return parser


def _slot_summary(diffs) -> list:
    out = {}
    for d in diffs:
        entry = out.setdefault(d.slot, {"slot": d.slot, "hf_index": d.hf_index, "rows": 0, "largest_rel_diff": 0.0})
        entry["rows"] += 1
        if not d.rel_diff <= entry["largest_rel_diff"]:
            entry["largest_rel_diff"] = d.rel_diff
    return [out[k] for k in sorted(out)]


def _server_references(server: str, dump_dir: str, found, chosen, wait_s: float):
    """(the prefill of a VerifyRows' tokens, the key rows share one by) with the server as its own reference."""
    served = server_release(server)
    if found.release not in (served, UNKNOWN):  # another release may capture other layers: no reference
        raise ServerError(f"--server {server} runs SGLang {served}, but the dumps in {dump_dir} were served by SGLang "
                          f"{found.release}: the reference must be the server that served them")
    every = max(rows.dump_every for rows in chosen)
    finder = ReferenceFinder(dump_dir if os.path.isdir(dump_dir) else os.path.dirname(dump_dir) or ".")
    # each rank dumps its own reference prefill
    return (lambda rows: prefill_reference(server, finder, rows.tokens, rows.tp_rank, every, wait_s),
            lambda rows: (rows.tokens, rows.tp_rank))


def _target_references(target: str, dtype: str):
    """The same pair with the offline target as the reference; every rank's aux states are the full hidden states,
    so one forward serves them all."""
    offline = OfflineTarget(target, dtype)
    return lambda rows: offline.reference(rows.tokens, rows.hf_indices, rows.hidden_size), lambda rows: rows.tokens


def check(dump_dir: str, server: str = None, max_sequences: int = 32, wait_s: float = 30.0, target: str = None) -> dict:
    """The report, against the server (`server`) or the offline target (`target`); raises DumpError, ServerError or
    TargetError for bad input."""
    started = time.perf_counter()
    found = read_verify_rows(dump_dir)
    read_s = time.perf_counter() - started
    chosen = found.rows[:max_sequences]
    dtype = chosen[0].dtype
    start = time.perf_counter()
    reference_of, key_of = (_server_references(server, dump_dir, found, chosen, wait_s) if target is None
                            else _target_references(target, dtype))
    load_s = time.perf_counter() - start
    references, diffs = {}, []
    prefill_s = compare_s = 0.0
    for rows in chosen:
        key = key_of(rows)
        if key not in references:
            start = time.perf_counter()
            references[key] = reference_of(rows)
            prefill_s += time.perf_counter() - start
        start = time.perf_counter()
        diffs.extend(compare_rows(rows, references[key]))
        compare_s += time.perf_counter() - start
    results = mismatch_findings(diffs, dtype)
    total_s = time.perf_counter() - started
    forwards = len({rows.path for rows in chosen})  # the dumped verify forwards compared
    return {
        "exit_status": 1 if results else 0, "dump": dump_dir, "reference": "server" if target is None else "target",
        "server": server, "target": target, "dtype": dtype,
        "tolerance": tolerance(dtype), "verify_dumps": found.dumps, "requests_compared": len(chosen),
        "requests_not_compared": len(found.rows) - len(chosen), "requests_unknown": found.unknown,
        "prefills": len(references), "rows_compared": len(diffs) // max(1, len(chosen[0].hf_indices)),
        "slots": _slot_summary(diffs),
        "findings": [{"code": f.code, "severity": f.severity, "message": f.message, "evidence": f.evidence_dict()}
                     for f in results],
        "skipped": [{"path": p, "why": why} for p, why in found.skipped],
        # what this command cost (reading includes loading torch; load_s: loading the offline target, or asking the
        # server who it is; a prefill: the server's work and its dump's wait, or the offline target's forward)
        "cost": {"total_s": round(total_s, 3), "read_s": round(read_s, 3), "load_s": round(load_s, 3),
                 "prefill_s": round(prefill_s, 3), "compare_s": round(compare_s, 3), "verify_forwards": forwards,
                 "per_verify_forward_s": round(total_s / max(forwards, 1), 3)},
    }


def render(result: dict) -> str:
    where = (f"on {result['server']}" if result["reference"] == "server"
             else f"by {result['target']} (offline, transformers)")
    lines = [f"consistency: {result['requests_compared']} dumped request(s), {result['rows_compared']} committed "
             f"verify row(s) against {result['prefills']} prefill(s) of the same tokens {where}",
             f"tolerance: rel_diff <= {result['tolerance']:.3g} ({result['dtype']})"]
    for slot in result["slots"]:
        lines.append(f"  slot {slot['slot']} (hidden_states[{slot['hf_index']}]): {slot['rows']} rows, largest "
                     f"rel_diff {slot['largest_rel_diff']:.3g}")
    if result["requests_unknown"]:
        lines.append(f"  {result['requests_unknown']} dumped request(s) not compared: their verify step's outcome "
                     f"was not seen")
    if result["requests_not_compared"]:
        lines.append(f"  {result['requests_not_compared']} more left out (--max-sequences)")
    lines += [finding_line(f) for f in result["findings"]] or ["no mismatch: verify rows equal prefill within the "
                                                               "tolerance"]
    cost = result["cost"]
    loading = f", loading the target {cost['load_s']:.2f} s" if result["reference"] == "target" else ""
    lines.append(f"cost: {cost['total_s']:.2f} s for {cost['verify_forwards']} dumped verify forward(s), "
                 f"{cost['per_verify_forward_s']:.2f} s each (reading {cost['read_s']:.2f} s{loading}, reference "
                 f"prefills {cost['prefill_s']:.2f} s, comparing {cost['compare_s']:.2f} s)")
    return "\n".join(lines)


def run(args) -> int:
    if args.max_sequences < 1:
        print("eagle-probe consistency: --max-sequences must be >= 1", file=sys.stderr)
        return 2
    try:
        result = check(args.dump_dir, args.server, args.max_sequences, args.wait, target=args.target)
    except (DumpError, ServerError, TargetError) as exc:
        print(f"eagle-probe consistency: {exc}", file=sys.stderr)
        return 2
    return emit(result, args.format, render)
