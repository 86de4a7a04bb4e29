"""`eagle-probe parity`: are the states the server fed the draft the ones it was trained on?

Matches served tokens (from the probe's dumps) to SpecForge training samples by input ids and positions, and
compares, slot by slot, the served aux states with the training aux states of the same tokens: cosine and
relative difference (1 - 2 sum(xy) / (sum(x^2) + sum(y^2))) per token, summarised. With all-layer dumps it also
says which served HF index each training slot matches best, and the eagle_aux_hidden_state_layer_ids that make
the target capture those, by the rule of the target's family (`--target DIR`: its config.json `architectures`;
default: the class the dumps name); for a DFlash/DSpark draft (`--draft DIR`) the ids are its config's
dflash_config.target_layer_ids (id i captures HF hidden_states[i + 1]): the comparison itself is the same for any
draft. `--server URL -n N` first sends N training samples' input ids to a running
server whose probe dumps every EXTEND forward into --dump-dir.
"""

import argparse
import json
import sys

from .. import versions
from ..analysis.dflash_layers import is_block_draft_config
from ..analysis.draft_rules import ids_for_capture
from ..analysis.findings import aux_value_mismatch_finding
from ..analysis.layers import capture_label
from . import block_drafts, target_family
from .doctor_configs import DoctorInputError, load_config_json
from .dump_dir_option import add_dump_dir_option
from .dump_files import DumpError, read_dump_dir, wait_until_written
from .output import finding_dict, finding_line, fix_lines
from .sglang_server import ServerError, generate, server_release
from .specforge_data import DataError, read_samples

# Training features are prefill without CUDA graphs; served prefill may run other kernels or batch shapes: close,
# not bit-equal. rel_diff is a squared-error ratio, so bf16 rounding (relative 4e-3 per element) gives about 1e-5;
# another layer gives 1e-2 and more (measured on the tiny models: neighbouring layers 0.05 to 0.4). 1e-3 separates.
REL_DIFF_TOLERANCE = 1e-3


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "parity", help="compare the states the server fed the draft with SpecForge training data",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="SpecForge offline data directory (*.ckpt, *.ckpt.gz)")
    add_dump_dir_option(parser, "the probe's dump directory (EAGLE_PROBE_DUMP_DIR)")
    parser.add_argument("--server", help="URL of a running server to send training samples to first")
    parser.add_argument("-n", type=int, default=8, help="samples to send with --server (default 8)")
    parser.add_argument("--target", help="target model directory (or its config.json): its architectures decide "
                        "the family whose rule gives the ids to set (default: the model class the dumps name)")
    parser.add_argument("--sglang-version", help="SGLang release whose rules give the ids to set (default: the "
                        "dumps' release, else the installed one)")
    parser.add_argument("--draft", help="the draft directory (or its config.json): a DFlash/DSpark draft gets the ids "
                        "to set as dflash_config.target_layer_ids (an EAGLE-3 draft changes nothing)")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.set_defaults(func=run)
    return parser


def _match(samples, ids, positions):
    """The training sample whose tokens at `positions` are `ids`, or None."""
    first = int(positions[0])
    for sample in samples:
        seq = sample.input_ids
        if int(positions[-1]) < seq.shape[0] and int(seq[first]) == int(ids[0]) \
                and bool((seq[positions] == ids).all()):
            return sample
    return None


def _stats(x, y) -> dict[str, float]:
    """Per-token cosine and rel_diff of x, y [n, H] (float32), summarised, plus the totals for aggregating."""
    import torch

    dot, xx, yy = (x * y).sum(-1), (x * x).sum(-1), (y * y).sum(-1)
    cosine = dot / torch.sqrt(xx * yy).clamp_min(1e-30)
    rel = 1 - 2 * dot / (xx + yy).clamp_min(1e-30)
    return {"cosine_mean": float(cosine.mean()), "cosine_min": float(cosine.min()),
            "rel_diff_mean": float(rel.mean()), "rel_diff_max": float(rel.max())}


def compare(samples, dumps) -> dict:
    """The parity report (plain values) for samples and dumps already read."""
    import torch

    hidden = samples[0].hidden_size
    slots = samples[0].slots
    served_rows, train_rows = [], []  # per matched request: (served aux [n, K*H], training aux [n, K*H])
    layer_rows: dict[int, list] = {}
    unmatched, capture = 0, None
    for dump in dumps:
        if dump.hidden_size != hidden:
            raise DumpError(f"dump {dump.path}: hidden size {dump.hidden_size}, the training data's is {hidden}")
        capture = capture or dump.capture_indices
        aux = dump.tensors["aux_hidden_states"].float()
        for start, end, _ in dump.requests:
            ids, positions = dump.tensors["input_ids"][start:end].long(), dump.tensors["positions"][start:end].long()
            sample = _match(samples, ids, positions)
            if sample is None:
                unmatched += 1
                continue
            served_rows.append(aux[start:end])
            train_rows.append(sample.aux_hidden_state[positions].float())
            for index, states in dump.layers.items():
                layer_rows.setdefault(index, []).append(states[start:end].float())
    report = {"samples": len(samples), "dumps": len(dumps), "positions_matched": sum(r.shape[0] for r in served_rows),
              "requests_unmatched": unmatched, "tolerance": {"rel_diff": REL_DIFF_TOLERANCE}, "slots": [],
              "served_capture_indices": capture}
    if not served_rows:
        return report
    served, train = torch.cat(served_rows), torch.cat(train_rows)
    served_slots = served.shape[-1] // hidden
    layers = {i: torch.cat(rows) for i, rows in layer_rows.items() if len(rows) == len(served_rows)}
    for slot in range(slots):
        y = train[:, slot * hidden:(slot + 1) * hidden]
        entry = {"slot": slot, "served_hf_index": capture[slot] if capture and slot < len(capture) else None}
        if slot < served_slots:
            entry.update(_stats(served[:, slot * hidden:(slot + 1) * hidden], y))
        best = {i: _stats(x, y)["rel_diff_mean"] for i, x in layers.items()}
        entry["best_hf_index"] = min(best, key=best.get) if best else None
        entry["best_rel_diff"] = best[entry["best_hf_index"]] if best else None
        entry["rel_diff_by_hf_index"] = {str(i): v for i, v in sorted(best.items())}
        entry["cosine"] = entry.get("cosine_mean")
        entry["rel_diff"] = entry.get("rel_diff_mean")
        entry["matches"] = entry["rel_diff"] is not None and entry["rel_diff"] <= REL_DIFF_TOLERANCE
        report["slots"].append(entry)
    return report


def findings(report: dict, num_layers: int | None) -> list:
    out = []
    for entry in report["slots"]:
        if entry["matches"]:
            continue
        best = entry["best_hf_index"]
        resembles = None if best is None else f"HF hidden_states[{best}] ({capture_label(best, num_layers)})"
        out.append(aux_value_mismatch_finding(
            "target", entry["slot"], entry["served_hf_index"], entry["rel_diff"], entry["cosine"], resembles,
            source="parity against the training data"))
    return out


def ids_to_set(report: dict, num_layers: int, release: versions.ResolvedSGLang, resolved) -> dict | None:
    """The ids that make the target capture, slot by slot, the served HF indices the training slots match best
    (all-layer dumps), by the family's rule in `release` (versions.resolve_sglang); None when some slot has no
    best match."""
    trained = [e["best_hf_index"] for e in report["slots"]]
    if not trained or any(i is None for i in trained):
        return None
    rules = release.rules
    family = None if resolved is None else resolved.family
    out = {"trained_hf": trained, "sglang_version": release.text, "ids": None, "impossible": None,
           "family": None if resolved is None else resolved.describe()}
    if resolved is not None and family is None:
        out["impossible"] = resolved.finding.message if resolved.finding else "not an EAGLE-3 target"
        return out
    ids, why = ids_for_capture(trained, num_layers, rules, family)
    out.update(ids=None if ids is None else list(ids), impossible=why or None)
    return out


def _fix(args, report: dict, num_layers: int, release: versions.ResolvedSGLang, meta: dict,
         block: bool) -> dict | None:
    """ids_to_set for a block draft (its target_layer_ids), else for the target's family."""
    if block:
        trained = [e["best_hf_index"] for e in report["slots"]]
        return None if not trained or None in trained else block_drafts.ids_to_set(trained, num_layers, release.text)
    if args.target:
        try:
            resolved = target_family.resolve_directory(args.target, release.version)
        except target_family.TargetConfigError as exc:
            raise target_family.TargetConfigError(f"--target {args.target}: {exc}") from None
    else:
        model_class = meta.get("model_class")
        resolved = target_family.resolve({"architectures": [model_class]} if model_class else {}, release.version)
    return ids_to_set(report, num_layers, release, resolved)


def send_samples(url: str, samples, n: int) -> int:
    """Prefill the first n samples' input ids on the SGLang server at `url` (one new token each), once it has
    answered as SGLang; returns how many were sent. ServerError for a server that cannot be used."""
    server_release(url)
    for sample in samples[:n]:
        generate(url, [int(t) for t in sample.input_ids])
    return min(n, len(samples))


def render(report: dict, found: list) -> str:
    lines = [f"eagle-probe parity: {report['positions_matched']} served positions matched to {report['samples']} "
             f"training samples ({report['dumps']} dumps, {report['requests_unmatched']} requests unmatched; "
             f"tolerance rel_diff <= {REL_DIFF_TOLERANCE:g})"]
    for e in report["slots"]:
        served = "" if e["served_hf_index"] is None else f" (served HF index {e['served_hf_index']})"
        verdict = "matches training" if e["matches"] else "DIFFERS from training"
        numbers = "" if e["rel_diff"] is None else (
            f": rel_diff mean {e['rel_diff']:.3g} (max {e['rel_diff_max']:.3g}), cosine mean {e['cosine']:.6f} "
            f"(min {e['cosine_min']:.6f})")
        best = "" if e["best_hf_index"] is None else (f"; best served match: HF index {e['best_hf_index']} "
                                                      f"(rel_diff {e['best_rel_diff']:.3g})")
        lines.append(f"  slot {e['slot']}{served} {verdict}{numbers}{best}")
    for finding in found:
        lines.append(finding_line(finding))
    fix = report.get("ids_to_set")
    if fix is not None:
        lines.append(f"target family: {fix['family']}")
        lines += fix_lines(f"to capture the trained layers HF {fix['trained_hf']} (SGLang {fix['sglang_version']})",
                           fix["ids"], fix["impossible"], [], fix.get("key", "eagle_aux_hidden_state_layer_ids"))
    if not report["positions_matched"]:
        lines.append("no served tokens match a training sample: serve the samples' input ids (--server) with "
                     "--disable-radix-cache and EAGLE_PROBE_DUMP_EVERY=1")
    return "\n".join(lines)


def run(args) -> int:
    try:
        block = args.draft is not None and is_block_draft_config(load_config_json(args.draft, "--draft")[1])
    except DoctorInputError as exc:
        print(f"eagle-probe parity: {exc}", file=sys.stderr)
        return 2
    try:
        data = read_samples(args.data)
        if args.server:
            try:
                send_samples(args.server, data.samples, args.n)
            except ServerError as exc:
                print(f"eagle-probe parity: {exc}", file=sys.stderr)
                return 2
            wait_until_written(args.dump_dir)
        dumps = read_dump_dir(args.dump_dir)
        report = compare(data.samples, dumps.dumps)
    except (DataError, DumpError) as exc:
        print(f"eagle-probe parity: {exc}", file=sys.stderr)
        return 2
    report["skipped"] = [{"path": p, "why": w} for p, w in data.skipped + dumps.skipped]
    num_layers = dumps.dumps[0].num_layers
    meta = dumps.dumps[0].meta
    release = versions.resolve_sglang(args.sglang_version or meta.get("sglang_version"))
    if args.sglang_version and not release.readable:
        print(f"eagle-probe parity: --sglang-version {args.sglang_version!r}: not a release number such as 0.5.23",
              file=sys.stderr)
        return 2
    try:
        report["ids_to_set"] = _fix(args, report, num_layers, release, meta, block)
    except target_family.TargetConfigError as exc:
        print(f"eagle-probe parity: {exc}", file=sys.stderr)
        return 2
    found = findings(report, num_layers)
    report["findings"] = [finding_dict(f) for f in found]
    print(json.dumps(report) if args.format == "json" else render(report, found))
    return 0
