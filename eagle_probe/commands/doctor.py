"""`eagle-probe doctor`: a preflight from the target's and the draft's config.json, before launch.

It predicts, for one SGLang release, which residual-stream indices the target captures on each path
(eager, CUDA-graph capture, Two-Batch-Overlap) and compares them with what the draft expects, with the
same findings as the running probe (analysis.config_rules, analysis.draft_rules, analysis.findings). For a
DFlash/DSpark draft (doctor_block) it says instead which target_layer_ids SGLang uses, where they came from (the
draft config or SGLang's silent default) and the HF hidden_states they capture.
Exit status: 0 clean (warnings allowed), 1 a finding of severity error, 2 bad input.
"""

import os
import sys
from dataclasses import dataclass, field, replace

from ..analysis import draft_config_keys, draft_ids
from ..analysis.config_rules import (
    EAGLE,
    EAGLE3,
    DraftSpec,
    LaunchSpec,
    Prediction,
    TargetSpec,
    add_speculation_options,
    config_findings,
    fix_for,
    predict,
    render_speculation,
    result_line,
    speculation_for,
)
from ..analysis.findings import ERROR
from ..analysis.layers import TRAINED_LAYERS_HELP, capture_label
from ..draft_dir import TrainedLength, trained_length
from ..versions import ResolvedSGLang, resolve_sglang
from . import doctor_block, target_family
from .doctor_configs import (  # noqa: F401 (load_config_json, parse_target, parse_draft: doctor's readers, kept here)
    NESTED_TEXT_KEYS,
    DoctorInputError,
    load_config_json,
    parse_draft,
    parse_target,
    parse_trained_layers,
)
from .output import emit, finding_dict, finding_line, fix_lines


@dataclass(frozen=True)
class DoctorRequest:
    """What doctor is asked: the two configs, the release and the launch (`spec`: the speculation flags,
    config_rules.SPECULATION_FLAGS' dests; `algorithm` None: the draft config's kind decides)."""

    target: str
    draft: str
    sglang_version: str | None = None
    trained_layers: str | None = None
    tbo: bool = False
    cuda_graph: bool = True
    algorithm: str | None = EAGLE3
    pp_size: int = 1
    pp_partition: str | None = None
    spec: dict | None = None

    @classmethod
    def from_args(cls, args) -> "DoctorRequest":
        return cls(args.target, args.draft, args.sglang_version, args.trained_layers, args.tbo, args.cuda_graph,
                   args.speculative_algorithm, args.pp_size, args.pp_partition, vars(args))


@dataclass
class Configs:
    """The two configs as read, and the target's family in the release."""

    target_file: str
    target_data: dict
    draft_file: str
    draft_data: dict
    resolved: target_family.TargetFamily
    target: TargetSpec
    draft: DraftSpec


@dataclass
class Diagnosis:
    """Everything the report is built from."""

    release: ResolvedSGLang
    configs: Configs
    launch: LaunchSpec
    pred: Prediction
    trained: tuple[int, ...] | None
    findings: list
    vocab_map: dict | None
    length: TrainedLength
    shape: dict
    notes: list[str] = field(default_factory=list)


# -- the report ------------------------------------------------------------------------------------

def resolve_release(given: str | None, notes: list[str]) -> ResolvedSGLang:
    """The release whose rules apply (versions.resolve_sglang: the given one, else the installed one); a given
    release that is not a release number is bad input."""
    release = resolve_sglang(given)
    if given is not None and not release.readable:
        raise DoctorInputError(f"--sglang-version {given!r}: not a release number such as 0.5.8 or 0.5.23")
    notes += [release.note] if release.note else []
    return release


def _partition(request: DoctorRequest) -> tuple[int, ...] | None:
    if request.pp_size < 1:
        raise DoctorInputError(f"--pp-size {request.pp_size}: must be >= 1")
    if not request.pp_partition:
        return None
    try:
        partition = tuple(int(x) for x in request.pp_partition.split(","))
    except ValueError:
        raise DoctorInputError(f"--pp-partition {request.pp_partition!r}: expected comma-separated layer "
                               f"counts") from None
    if min(partition) < 1:
        raise DoctorInputError(f"--pp-partition {request.pp_partition!r}: every stage needs at least 1 layer")
    return partition


def _check_pipeline(request: DoctorRequest, partition, target: TargetSpec, target_file: str) -> None:
    if request.pp_size > target.num_layers:
        raise DoctorInputError(f"--pp-size {request.pp_size}: more pipeline stages than the {target.num_layers} "
                               f"layers of the target ({target_file}: num_hidden_layers)")
    if partition is not None and (len(partition) != request.pp_size or sum(partition) != target.num_layers):
        raise DoctorInputError(f"--pp-partition {request.pp_partition!r}: needs {request.pp_size} counts summing "
                               f"to {target.num_layers} (the target's num_hidden_layers)")


def read_configs(request: DoctorRequest, release: ResolvedSGLang, notes: list[str],
                 loaded: tuple[tuple[str, dict], tuple[str, dict]]) -> Configs:
    (target_file, target_data), (draft_file, draft_data) = loaded
    resolved = target_family.resolve(target_data, release.version)
    target, tnotes = parse_target(target_data, target_file, need_fkdr=request.tbo and resolved.served,
                                  family=resolved.family)
    draft, dnotes = parse_draft(draft_data, draft_file)
    notes += tnotes + dnotes + ([resolved.note] if resolved.note else [])
    absent = draft_ids.absent_note(draft.model_class, release.rules.absent_modules, release.text)
    notes += [absent] if absent else []
    return Configs(target_file, target_data, draft_file, draft_data, resolved, target, draft)


def diagnose(request: DoctorRequest) -> dict:
    """Everything doctor prints, as one dict. Raises DoctorInputError on bad input."""
    notes: list[str] = []
    release = resolve_release(request.sglang_version, notes)
    partition = _partition(request)
    trained = parse_trained_layers(request.trained_layers) if request.trained_layers else None
    loaded = load_config_json(request.target, "target"), load_config_json(request.draft, "draft")
    algorithm = doctor_block.resolve_algorithm(request.algorithm, loaded[1][1], loaded[1][0])
    given = "given" if request.algorithm is not None else "from the draft config"
    request = replace(request, algorithm=algorithm)
    if algorithm in doctor_block.BLOCK_ALGORITHMS:  # DFlash/DSpark: the target layers feeding the block draft
        return doctor_block.diagnose_block(request, release, trained, loaded[0], loaded[1], given)
    shape = speculation_for(request.spec or {}, algorithm, request.tbo, release.version, DoctorInputError)
    configs = read_configs(request, release, notes, loaded)
    if not configs.resolved.served:
        return _not_served(release, configs, notes)
    _check_pipeline(request, partition, configs.target, configs.target_file)
    launch = LaunchSpec(algorithm, request.cuda_graph, request.tbo, request.pp_size, partition)
    pred = predict(configs.target, configs.draft, release.rules, launch)
    found = [configs.resolved.finding] if configs.resolved.finding else []
    found += config_findings(configs.target, configs.draft, release.rules, launch, trained, pred)
    from .draft_vocab import check_draft_vocab  # the d2t map: headers and d2t only
    vocab_findings, vocab_map, vocab_notes = check_draft_vocab(
        request.draft, configs.draft_file, configs.draft_data, configs.target_file, configs.target_data,
        configs.draft.model_class, DoctorInputError)
    found, notes = found + vocab_findings, notes + vocab_notes
    ignored = _ignored_keys(configs.draft_data, configs.draft.model_class, release.text)
    found += [ignored] if ignored is not None else []
    length = trained_length(os.path.dirname(configs.draft_file), configs.draft_data)  # the directory's statement
    if length.length:
        notes.append(f"trained length: {length.length} ({length.source}); `summarize` compares acceptance past it "
                     f"with acceptance within it (acceptance_past_trained_length)")
    notes += list(length.notes)
    if trained is None and request.algorithm == EAGLE3:
        notes.append("no --trained-layers: layer_mismatch not checked (give the layers the draft was trained on)")
    return _report(Diagnosis(release, configs, launch, pred, trained, found, vocab_map, length, shape, notes))


def _paths(pred, target: TargetSpec) -> list[dict]:
    n, final = target.num_layers, target.final_capturable
    return [{
        "path": p.name, "description": p.description,
        "requested_ids": None if p.requested_ids is None else list(p.requested_ids),
        "layers_to_capture": list(p.configured),
        "captured": [{"capture_index": i, "hf_index": i, "label": capture_label(i, n, final)} for i in p.captured],
        "lost": [{"capture_index": i, "label": capture_label(i, n, final)} for i in p.lost],
        "lost_reason": p.lost_reason or None,
        "aux_width": target.hidden_size if p.name == "all" else len(p.captured) * target.hidden_size,
    } for p in pred.paths]


def _findings(found) -> list[dict]:
    return [finding_dict(f) for f in found]


def _report(d: Diagnosis) -> dict:
    from .draft_vocab import render_vocab

    c, pred, launch, trained, length = d.configs, d.pred, d.launch, d.trained, d.length
    target, draft, rules = c.target, c.draft, d.release.rules
    n, final = target.num_layers, target.final_capturable
    errors = sum(1 for f in d.findings if f.severity == ERROR)
    return {
        **_head(d.release, c),
        "draft": {**_draft_head(c), "top_level_layer_ids": None if draft.top_level_ids is None
                  else list(draft.top_level_ids),
                  "ids_read_from": draft.ids_read()[1], "sglang_num_aux": pred.num_aux,
                  "fc_in_width": pred.fc_in_width},
        "launch": {"speculative_algorithm": launch.algorithm, "cuda_graph": launch.cuda_graph,
                   "two_batch_overlap": launch.tbo, "pp_size": launch.pp_size,
                   "last_stage_layers": list(pred.stage_range)},
        "trained": None if trained is None else {"hf_indices": list(trained),
                                                 "labels": [capture_label(i, n, final) for i in trained]},
        "paths": _paths(pred, target),
        "fix": fix_for(target, rules, launch, trained) if trained is not None else None,
        "vocab_map": d.vocab_map, "vocab_line": render_vocab(d.vocab_map),
        "trained_length": {"length": length.length, "source": length.source, "notes": list(length.notes)},
        "findings": _findings(d.findings),
        "speculation": d.shape, "notes": d.notes,
        "exit_status": 1 if errors or d.shape["errors"] else 0,
    }


def _ignored_keys(draft_data: dict, model_class: str, sglang_version: str | None):
    """draft_config_ignored predicted from the config and the release table (the running probe's rule)."""
    release, _ = draft_config_keys.judged_release(sglang_version)
    return draft_config_keys.ignored_finding(draft_config_keys.ignored_keys(draft_data, model_class, release),
                                             model_class)


def _head(release: ResolvedSGLang, c: Configs) -> dict:
    """The release, rules and target part of the report; the capture rule is the target family's."""
    row, rules, target = c.resolved.family, release.rules, c.target
    return {"sglang_version": release.text, "rules": target_family.rules_text(rules, row),
            "rules_verified": rules.verified,
            "family": None if row is None else dict(row.as_dict(), verified=c.resolved.verified),
            "target": {"file": c.target_file, "model_class": target.model_class, "num_layers": target.num_layers,
                       "hidden_size": target.hidden_size, "first_k_dense_replace": target.first_k_dense_replace,
                       "family": c.resolved.describe()}}


def _draft_head(c: Configs) -> dict:
    draft = c.draft
    return {"file": c.draft_file, "model_class": draft.model_class, "hidden_size": draft.hidden_size,
            "target_hidden_size": draft.target_hidden_size,
            "eagle_aux_hidden_state_layer_ids": None if draft.layer_ids is None else list(draft.layer_ids),
            "num_aux_hidden_states": draft.num_aux_hidden_states,
            "use_aux_hidden_state": draft.use_aux_hidden_state}


def _not_served(release: ResolvedSGLang, c: Configs, notes: list[str]) -> dict:
    """A target SGLang does not serve with EAGLE-3: one finding, no prediction."""
    return {**_head(release, c), "draft": {**_draft_head(c), "sglang_num_aux": None, "fc_in_width": None},
            "launch": None, "trained": None, "paths": [], "fix": None,
            "findings": _findings([c.resolved.finding]), "notes": notes, "exit_status": 1}


def _fmt_slots(slots) -> str:
    return ", ".join(f"{s['capture_index']} = HF hidden_states[{s['hf_index']}] = {s['label']}"
                     for s in slots) or "nothing"


def render_text(result: dict) -> str:
    if result.get("block_draft"):
        return doctor_block.render_text(result)
    t, d, la = result["target"], result["draft"], result["launch"]
    out = [f"eagle-probe doctor: SGLang {result['sglang_version'] or '(newest rules)'}: {result['rules']}"
           + ("" if result["rules_verified"] else " [rules from the source map, not run here]"),
           f"target  {t['file']}: {t['model_class']}, {t['num_layers']} layers, hidden {t['hidden_size']}, "
           f"first_k_dense_replace {t['first_k_dense_replace']}",
           f"family  {t['family']}"]
    if la is None:  # not an EAGLE-3 target: the finding says why, nothing is predicted
        out += [finding_line(f) for f in result["findings"]] + [f"note: {n}" for n in result["notes"]]
        return "\n".join(out + ["result: 1 error(s), 0 warning(s)"])
    out += [f"draft   {d['file']}: {d['model_class']}, hidden {d['hidden_size']}, target_hidden_size "
            f"{d['target_hidden_size']}, eagle_aux_hidden_state_layer_ids {d['eagle_aux_hidden_state_layer_ids']}"
            + (f" (top level {d['top_level_layer_ids']}: the draft's)" if d["ids_read_from"] == "top_level" else "")
            + f", fc takes {d['sglang_num_aux']} x {d['target_hidden_size'] or d['hidden_size']} = {d['fc_in_width']}",
            f"launch  --speculative-algorithm {la['speculative_algorithm']}, CUDA graphs "
            f"{'on' if la['cuda_graph'] else 'off'}, two-batch-overlap {'on' if la['two_batch_overlap'] else 'off'}, "
            f"pp {la['pp_size']}" + (f" (last stage layers {la['last_stage_layers']})" if la["pp_size"] > 1 else "")]
    if result.get("vocab_line"):
        out.append(result["vocab_line"])
    if result["trained"]:
        tr = result["trained"]
        out.append("trained on HF hidden_states " + ", ".join(
            f"{i} ({lab})" for i, lab in zip(tr["hf_indices"], tr["labels"])))
    out.append("predicted captures:")
    for p in result["paths"]:
        ids = "no ids (defaults)" if p["requested_ids"] is None else f"ids {p['requested_ids']}"
        out.append(f"  {p['path']}: {p['description']}")
        if p["path"] != "all":
            out.append(f"    {ids} -> layers_to_capture {p['layers_to_capture']}")
        out.append(f"    captured: {_fmt_slots(p['captured'])}; draft receives width {p['aux_width']}")
        if p["lost"]:
            out.append(f"    lost ({p['lost_reason']}): "
                       + ", ".join(f"{s['capture_index']} ({s['label']})" for s in p["lost"]))
    out += render_speculation(result.get("speculation"))
    fix = result["fix"]
    if fix:
        out += fix_lines("to capture the trained layers", fix["ids"], fix["impossible"], fix["notes"])
    for note in result["notes"]:
        out.append(f"note: {note}")
    if not result["findings"]:
        out.append("findings: none")
    for f in result["findings"]:
        out.append(finding_line(f))
    errors = sum(1 for f in result["findings"] if f["severity"] == ERROR)
    out.append(result_line(errors, len(result["findings"]) - errors, result.get("speculation")))
    return "\n".join(out)


def cmd_doctor(args) -> int:
    try:
        result = diagnose(DoctorRequest.from_args(args))
    except DoctorInputError as exc:
        print(f"eagle-probe doctor: {exc}", file=sys.stderr)
        return 2
    return emit(result, args.format, render_text)


def add_parser(sub) -> None:
    doc = sub.add_parser("doctor", help="predict captures and findings from the target's and draft's config.json",
                         description=__doc__)
    doc.add_argument("--target", required=True, help="target model directory (or its config.json)")
    doc.add_argument("--draft", required=True, help="EAGLE-3, DFlash or DSpark draft directory (or its config.json)")
    doc.add_argument("--sglang-version", help="SGLang release whose rules apply (default: the installed one)")
    doc.add_argument("--trained-layers", help=TRAINED_LAYERS_HELP)
    doc.add_argument("--tbo", "--enable-two-batch-overlap", action="store_true", help="two-batch overlap on")
    doc.add_argument("--cuda-graph", dest="cuda_graph", action="store_true", default=True,
                     help="CUDA graphs on (default)")
    doc.add_argument("--no-cuda-graph", dest="cuda_graph", action="store_false", help="--disable-cuda-graph")
    doc.add_argument("--speculative-algorithm", choices=(EAGLE3, EAGLE, *doctor_block.BLOCK_ALGORITHMS), default=None,
                     help="the server's --speculative-algorithm (default: DFLASH or DSPARK for a block-diffusion "
                     "draft's config, else EAGLE3)")
    doc.add_argument("--pp-size", type=int, default=1, help="pipeline-parallel size (default 1)")
    doc.add_argument("--pp-partition", help="SGLANG_PP_LAYER_PARTITION, e.g. 15,15,15,16")
    add_speculation_options(doc)
    doc.add_argument("--format", choices=("text", "json"), default="text")
    doc.set_defaults(func=cmd_doctor)
