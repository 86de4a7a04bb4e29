"""`eagle-probe doctor`: a preflight from the target's and the draft's config.json, before launch.

It predicts, for one SGLang release, which residual-stream indices the target captures on each path
(eager, CUDA-graph capture, Two-Batch-Overlap) and compares them with what the draft expects, with the
same findings as the running probe (analysis.config_rules, analysis.draft_rules, analysis.findings).
Exit status: 0 clean (warnings allowed), 1 a finding of severity error, 2 bad input.
"""

import os
import sys

from .. import families
from ..analysis import draft_config_keys, draft_ids, layers
from ..analysis.config_rules import (
    EAGLE,
    EAGLE3,
    DraftSpec,
    LaunchSpec,
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
from ..draft_dir import trained_length
from ..versions import SUPPORTED_RANGE_TEXT, installed_sglang_version, is_supported, parse_version, rules_for
from . import target_family
from .json_files import MAX_CONFIG_BYTES, read_json_object
from .json_files import shown as _shown
from .output import emit, finding_line, fix_lines

NESTED_TEXT_KEYS = target_family.NESTED_TEXT_KEYS


class DoctorInputError(Exception):
    """Bad input: the message names the file (or option) and the key."""


# -- reading configs ---------------------------------------------------------------------------------

def _config_file(path: str, what: str) -> str:
    """The file a --target/--draft path names: the directory's config.json, or the path itself."""
    if not os.path.isdir(path):
        if not os.path.lexists(path):
            raise DoctorInputError(f"{what} config: {path}: no such file or directory")
        return path
    file = os.path.join(path, "config.json")
    if not os.path.lexists(file):
        raise DoctorInputError(f"{what} config: {path}: no config.json in this directory")
    return file


def load_config_json(path: str, what: str) -> tuple[str, dict]:
    """Read a config.json from a directory or the file itself. Returns (file path, dict)."""
    file = _config_file(path, what)
    return file, read_json_object(file, f"{what} config", DoctorInputError, MAX_CONFIG_BYTES)


def _int(data: dict, key: str, file: str, what: str, prefix: str = "", required: bool = True,
         minimum: int = 1) -> int | None:
    name = prefix + key
    if key not in data or data[key] is None:
        if required:
            raise DoctorInputError(f"{what} config {file}: missing required key '{name}'")
        return None
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise DoctorInputError(f"{what} config {file}: key '{name}' must be an integer >= {minimum}, "
                               f"got {_shown(value)}")
    return value


def _bool(data: dict, key: str, file: str, prefix: str, default: bool) -> bool:
    if key not in data or data[key] is None:
        return default
    if not isinstance(data[key], bool):
        raise DoctorInputError(f"draft config {file}: key '{prefix}{key}' must be true or false, "
                               f"got {_shown(data[key])}")
    return data[key]


def _names(data: dict, file: str, what: str, prefix: str) -> list[str]:
    """'architectures': a list of class names (or absent)."""
    value = data.get("architectures")
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DoctorInputError(f"{what} config {file}: key '{prefix}architectures' must be a list of class names, "
                               f"got {_shown(value)}")
    return value


def parse_target(data: dict, file: str, need_fkdr: bool = False,
                 family=None) -> tuple[TargetSpec, list[str]]:
    """The target's shape from its config; `family` (a families.Family row) decides whether TBO needs
    first_k_dense_replace (only families whose TBO split starts there)."""
    notes = []
    if family is not None and family.tbo != families.TBO_FROM_FIRST_K_DENSE:
        need_fkdr = False
    text, prefix = data, ""
    for key in NESTED_TEXT_KEYS:
        if data.get(key) is not None and not isinstance(data[key], dict):
            raise DoctorInputError(f"target config {file}: key '{key}' must be an object, got {_shown(data[key])}")
        if isinstance(data.get(key), dict) and "num_hidden_layers" in data[key]:
            text, prefix = data[key], key + "."
            notes.append(f"target: text model read from '{key}'")
            break
    archs = _names(data, file, "target", "") or _names(text, file, "target", prefix)
    model_class = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else \
        str(text.get("model_type") or data.get("model_type") or "unknown")
    num_layers = _int(text, "num_hidden_layers", file, "target", prefix)
    hidden = _int(text, "hidden_size", file, "target", prefix)
    fkdr = _int(text, "first_k_dense_replace", file, "target", prefix, required=need_fkdr, minimum=0)
    if need_fkdr is False and fkdr is None and family is not None and family.tbo == families.TBO_FROM_FIRST_K_DENSE:
        notes.append(f"target: no '{prefix}first_k_dense_replace'; Two-Batch-Overlap effects not predicted")
    return TargetSpec(model_class, num_layers, hidden, fkdr, family), notes


def _ids(value, file: str, key: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise DoctorInputError(f"draft config {file}: key '{key}' must be a list of integers, got {_shown(value)}")
    return tuple(value)


def _draft_ids(data: dict, eagle: dict, file: str) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """(eagle_config's ids, the top-level ids). The target reads only the first; Kimi's MLA draft falls back to the
    second to size its fc (analysis.draft_ids), so the two must not disagree."""
    nested = _ids(eagle.get("eagle_aux_hidden_state_layer_ids"), file, "eagle_config.eagle_aux_hidden_state_layer_ids")
    top = _ids(data.get("eagle_aux_hidden_state_layer_ids"), file, "eagle_aux_hidden_state_layer_ids")
    if nested is not None and top is not None and nested != top:
        raise DoctorInputError(f"draft config {file}: keys 'eagle_config.eagle_aux_hidden_state_layer_ids' "
                               f"{list(nested)} and 'eagle_aux_hidden_state_layer_ids' {list(top)} disagree "
                               f"(SGLang's model classes read one or the other); keep one")
    return nested, top


def parse_draft(data: dict, file: str) -> tuple[DraftSpec, list[str]]:
    notes = []
    archs = _names(data, file, "draft", "")
    model_class = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else \
        str(data.get("model_type") or "unknown")
    eagle = data.get("eagle_config")
    if eagle is not None and not isinstance(eagle, dict):
        raise DoctorInputError(f"draft config {file}: key 'eagle_config' must be an object, got {_shown(eagle)}")
    eagle = eagle or {}
    is_eagle3 = any("eagle3" in str(a).lower() for a in (archs if isinstance(archs, list) else [])) or bool(eagle) \
        or "target_hidden_size" in data
    if not is_eagle3:
        raise DoctorInputError(
            f"draft config {file}: not an EAGLE-3 draft: key 'architectures' is {archs!r} (expected e.g. "
            f"LlamaForCausalLMEagle3 or Eagle3DeepseekV2ForCausalLM) and there is no 'eagle_config'")
    hidden = _int(data, "hidden_size", file, "draft")
    ids, top = _draft_ids(data, eagle, file)
    if ids is None:
        notes.append("draft: no eagle_config.eagle_aux_hidden_state_layer_ids: the target captures its defaults"
                     + ("" if top is None else f" (the top-level ids {list(top)} are not read by the target)"))
    named = {"eagle_config.eagle_aux_hidden_state_layer_ids": ids, "eagle_aux_hidden_state_layer_ids": top}
    for key, value in named.items():
        if value == ():
            raise DoctorInputError(f"draft config {file}: key '{key}' is empty")
    spec = DraftSpec(
        model_class=model_class, hidden_size=hidden,
        target_hidden_size=_int(data, "target_hidden_size", file, "draft", required=False),
        layer_ids=ids,
        num_aux_hidden_states=_int(data, "num_aux_hidden_states", file, "draft", required=False),
        use_aux_hidden_state=_bool(eagle, "use_aux_hidden_state", file, "eagle_config.", True),
        norm_before_fc=_bool(eagle, "norm_before_fc", file, "eagle_config.",
                             _bool(data, "norm_before_fc", file, "", False)),
        fc_norm=_bool(data, "fc_norm", file, "", False) or _bool(data, "use_aux_norm", file, "", False),
        top_level_ids=top,
    )
    return spec, notes


# -- --trained-layers -----------------------------------------------------------------------------

def parse_trained_layers(spec: str) -> tuple[int, ...]:
    """--trained-layers -> HF hidden_states indices (the one parser: analysis.layers)."""
    try:
        return layers.parse_trained_layers(spec)
    except ValueError as exc:
        raise DoctorInputError(f"--trained-layers {spec!r}: {exc}") from None


# -- the report ------------------------------------------------------------------------------------

def diagnose(target_path: str, draft_path: str, sglang_version: str | None = None,
             trained_layers: str | None = None, tbo: bool = False, cuda_graph: bool = True,
             algorithm: str = EAGLE3, pp_size: int = 1, pp_partition: str | None = None, spec=None) -> dict:
    """Everything doctor prints, as one dict (`spec`: the speculation flags, config_rules.SPECULATION_FLAGS' dests).
    Raises DoctorInputError on bad input."""
    notes = []
    if sglang_version is None:
        sglang_version = installed_sglang_version()
        if sglang_version is None:
            notes.append("SGLang is not installed here and --sglang-version was not given; using the newest rules")
    version = None
    if sglang_version is not None:
        version = parse_version(sglang_version)
        if version is None:
            raise DoctorInputError(f"--sglang-version {sglang_version!r}: not a release number such as 0.5.8 or 0.5.23")
        if not is_supported(version):
            notes.append(f"SGLang {sglang_version} is outside the supported range {SUPPORTED_RANGE_TEXT}; "
                         f"using the nearest release's rules")
    rules = rules_for(version)
    if pp_size < 1:
        raise DoctorInputError(f"--pp-size {pp_size}: must be >= 1")
    partition = None
    if pp_partition:
        try:
            partition = tuple(int(x) for x in pp_partition.split(","))
        except ValueError:
            raise DoctorInputError(f"--pp-partition {pp_partition!r}: expected comma-separated layer counts") from None
        if min(partition) < 1:
            raise DoctorInputError(f"--pp-partition {pp_partition!r}: every stage needs at least 1 layer")
    trained = parse_trained_layers(trained_layers) if trained_layers else None
    shape = speculation_for(spec or {}, algorithm, tbo, version, DoctorInputError)

    target_file, target_data = load_config_json(target_path, "target")
    draft_file, draft_data = load_config_json(draft_path, "draft")
    resolved = target_family.resolve(target_data, version)
    target, tnotes = parse_target(target_data, target_file, need_fkdr=tbo and resolved.served,
                                  family=resolved.family)
    draft, dnotes = parse_draft(draft_data, draft_file)
    notes += tnotes + dnotes + ([resolved.note] if resolved.note else [])
    absent = draft_ids.absent_note(draft.model_class, rules.absent_modules, sglang_version)
    notes += [absent] if absent else []
    if not resolved.served:
        return _not_served(sglang_version, rules, target, target_file, draft, draft_file, resolved, notes)
    if pp_size > target.num_layers:
        raise DoctorInputError(f"--pp-size {pp_size}: more pipeline stages than the {target.num_layers} layers of "
                               f"the target ({target_file}: num_hidden_layers)")
    if partition is not None and (len(partition) != pp_size or sum(partition) != target.num_layers):
        raise DoctorInputError(f"--pp-partition {pp_partition!r}: needs {pp_size} counts summing to "
                               f"{target.num_layers} (the target's num_hidden_layers)")
    launch = LaunchSpec(algorithm, cuda_graph, tbo, pp_size, partition)
    pred = predict(target, draft, rules, launch)
    findings = ([resolved.finding] if resolved.finding else []) + config_findings(target, draft, rules, launch,
                                                                                   trained, pred)
    from .draft_vocab import check_draft_vocab, render_vocab  # the d2t map: headers and d2t only
    vocab_findings, vocab_map, vocab_notes = check_draft_vocab(draft_path, draft_file, draft_data, target_file,
                                                               target_data, draft.model_class, DoctorInputError)
    findings, notes = findings + vocab_findings, notes + vocab_notes
    ignored = _ignored_keys(draft_data, draft.model_class, sglang_version)
    findings += [ignored] if ignored is not None else []
    length = trained_length(os.path.dirname(draft_file), draft_data)  # the draft directory's own statement
    if length.length:
        notes.append(f"trained length: {length.length} ({length.source}); `summarize` compares acceptance past it "
                     f"with acceptance within it (acceptance_past_trained_length)")
    notes += list(length.notes)
    if trained is None and algorithm == EAGLE3:
        notes.append("no --trained-layers: layer_mismatch not checked (give the layers the draft was trained on)")
    n, final = target.num_layers, target.final_capturable
    paths = [{
        "path": p.name, "description": p.description,
        "requested_ids": None if p.requested_ids is None else list(p.requested_ids),
        "layers_to_capture": list(p.configured),
        "captured": [{"capture_index": i, "hf_index": i, "label": capture_label(i, n, final)} for i in p.captured],
        "lost": [{"capture_index": i, "label": capture_label(i, n, final)} for i in p.lost],
        "lost_reason": p.lost_reason or None,
        "aux_width": target.hidden_size if p.name == "all" else len(p.captured) * target.hidden_size,
    } for p in pred.paths]
    errors = sum(1 for f in findings if f.severity == ERROR)
    return {
        **_head(sglang_version, rules, target, target_file, resolved),
        "draft": {"file": draft_file, "model_class": draft.model_class, "hidden_size": draft.hidden_size,
                  "target_hidden_size": draft.target_hidden_size,
                  "eagle_aux_hidden_state_layer_ids": None if draft.layer_ids is None else list(draft.layer_ids),
                  "num_aux_hidden_states": draft.num_aux_hidden_states,
                  "use_aux_hidden_state": draft.use_aux_hidden_state,
                  "top_level_layer_ids": None if draft.top_level_ids is None else list(draft.top_level_ids),
                  "ids_read_from": draft.ids_read()[1],
                  "sglang_num_aux": pred.num_aux, "fc_in_width": pred.fc_in_width},
        "launch": {"speculative_algorithm": algorithm, "cuda_graph": cuda_graph, "two_batch_overlap": tbo,
                   "pp_size": pp_size, "last_stage_layers": list(pred.stage_range)},
        "trained": None if trained is None else {"hf_indices": list(trained),
                                                 "labels": [capture_label(i, n, final) for i in trained]},
        "paths": paths,
        "fix": fix_for(target, rules, launch, trained) if trained is not None else None,
        "vocab_map": vocab_map, "vocab_line": render_vocab(vocab_map),
        "trained_length": {"length": length.length, "source": length.source, "notes": list(length.notes)},
        "findings": [{"code": f.code, "severity": f.severity, "message": f.message,
                      "evidence": f.evidence_dict()} for f in findings],
        "speculation": shape, "notes": notes,
        "exit_status": 1 if errors or shape["errors"] else 0,
    }


def _ignored_keys(draft_data: dict, model_class: str, sglang_version: str | None):
    """draft_config_ignored predicted from the config and the release table (the running probe's rule)."""
    release, _ = draft_config_keys.judged_release(sglang_version)
    return draft_config_keys.ignored_finding(draft_config_keys.ignored_keys(draft_data, model_class, release),
                                             model_class)


def _head(sglang_version, rules, target: TargetSpec, target_file: str, resolved) -> dict:
    """The release, rules and target part of the report; the capture rule is the target family's."""
    row = resolved.family
    return {"sglang_version": sglang_version, "rules": target_family.rules_text(rules, row),
            "rules_verified": rules.verified,
            "family": None if row is None else dict(row.as_dict(), verified=resolved.verified),
            "target": {"file": target_file, "model_class": target.model_class, "num_layers": target.num_layers,
                       "hidden_size": target.hidden_size, "first_k_dense_replace": target.first_k_dense_replace,
                       "family": resolved.describe()}}


def _not_served(sglang_version, rules, target, target_file, draft, draft_file, resolved, notes) -> dict:
    """A target SGLang does not serve with EAGLE-3: one finding, no prediction."""
    f = resolved.finding
    return {**_head(sglang_version, rules, target, target_file, resolved),
            "draft": {"file": draft_file, "model_class": draft.model_class, "hidden_size": draft.hidden_size,
                      "target_hidden_size": draft.target_hidden_size,
                      "eagle_aux_hidden_state_layer_ids": None if draft.layer_ids is None else list(draft.layer_ids),
                      "num_aux_hidden_states": draft.num_aux_hidden_states,
                      "use_aux_hidden_state": draft.use_aux_hidden_state, "sglang_num_aux": None,
                      "fc_in_width": None},
            "launch": None, "trained": None, "paths": [], "fix": None,
            "findings": [{"code": f.code, "severity": f.severity, "message": f.message,
                          "evidence": f.evidence_dict()}],
            "notes": notes, "exit_status": 1}


def _fmt_slots(slots) -> str:
    return ", ".join(f"{s['capture_index']} = HF hidden_states[{s['hf_index']}] = {s['label']}"
                     for s in slots) or "nothing"


def render_text(result: dict) -> str:
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
        result = diagnose(args.target, args.draft, args.sglang_version, args.trained_layers, args.tbo,
                          args.cuda_graph, args.speculative_algorithm, args.pp_size, args.pp_partition, vars(args))
    except DoctorInputError as exc:
        print(f"eagle-probe doctor: {exc}", file=sys.stderr)
        return 2
    return emit(result, args.format, render_text)


def add_parser(sub) -> None:
    doc = sub.add_parser("doctor", help="predict captures and findings from the target's and draft's config.json",
                         description=__doc__)
    doc.add_argument("--target", required=True, help="target model directory (or its config.json)")
    doc.add_argument("--draft", required=True, help="EAGLE-3 draft directory (or its config.json)")
    doc.add_argument("--sglang-version", help="SGLang release whose rules apply (default: the installed one)")
    doc.add_argument("--trained-layers", help=TRAINED_LAYERS_HELP)
    doc.add_argument("--tbo", "--enable-two-batch-overlap", action="store_true", help="two-batch overlap on")
    doc.add_argument("--cuda-graph", dest="cuda_graph", action="store_true", default=True,
                     help="CUDA graphs on (default)")
    doc.add_argument("--no-cuda-graph", dest="cuda_graph", action="store_false", help="--disable-cuda-graph")
    doc.add_argument("--speculative-algorithm", choices=(EAGLE3, EAGLE), default=EAGLE3,
                     help="the server's --speculative-algorithm (default EAGLE3)")
    doc.add_argument("--pp-size", type=int, default=1, help="pipeline-parallel size (default 1)")
    doc.add_argument("--pp-partition", help="SGLANG_PP_LAYER_PARTITION, e.g. 15,15,15,16")
    add_speculation_options(doc)
    doc.add_argument("--format", choices=("text", "json"), default="text")
    doc.set_defaults(func=cmd_doctor)
