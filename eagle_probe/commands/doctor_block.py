"""`eagle-probe doctor` for block-diffusion drafts (--speculative-algorithm DFLASH or DSPARK): which target layers
SGLang feeds the draft, where the ids came from, and the findings, from the two config.json files.

SGLang's facts (0.5.11 to 0.5.23: speculative/dflash_utils.py, model_runner.py or model_runner_components/
spec_aux_hidden_state.py, arg_groups/speculative_hook.py, dflash_worker_v2.py, models/dflash.py), read from the wheels:
- DFLASH arrives in 0.5.11 and DSPARK in 0.5.16; the loop models' `num_loops` multiplies the target's layer count from
  0.5.20.
- The ids come from the draft config (analysis.dflash_layers) or SGLang's silent default spread over the target's
  layer count; SGLang refuses ids outside [0, n) at start-up (DSpark ids are not checked), and a default with more
  than one draft layer over fewer than 4 target layers.
- Id i is the output of layer i, HF hidden_states[i + 1]; the loop captures the residual entering a layer, so the
  final layer's output (id n - 1) is never captured unless the target's family captures it after its loop.
- A draft config's num_target_layers other than the target's only makes SGLang warn; the runtime target decides.
- The served block is --speculative-num-draft-tokens, else the config's block_size, else 16; the mask token id must
  lie inside the target's vocabulary; pipeline parallelism is refused.
"""

from dataclasses import dataclass

from ..analysis import dflash_layers as B
from ..analysis.config_rules import EAGLE, EAGLE3, checked_speculation, result_line, speculation_from_flags
from ..analysis.findings import CAPTURE_ID_UNREACHABLE, ERROR, FC_WIDTH_MISMATCH, LAYER_MISMATCH, Finding, _finding
from ..analysis.layers import capture_label
from ..versions import ResolvedSGLang, Version, format_version
from . import target_family
from .doctor_configs import DoctorInputError, _int, parse_target
from .json_files import shown
from .output import finding_dict, finding_line

DFLASH, DSPARK = "DFLASH", "DSPARK"
BLOCK_ALGORITHMS = (DFLASH, DSPARK)
SINCE: dict[str, Version] = {DFLASH: (0, 5, 11, 0), DSPARK: (0, 5, 16, 0)}
NUM_LOOPS_SINCE: Version = (0, 5, 20, 0)
DEFAULT_BLOCK_SIZE = 16  # speculative_hook: no --speculative-num-draft-tokens and no block_size in the config
DEFAULT_MASK_TOKEN = "<|MASK|>"  # dflash_utils.DEFAULT_DFLASH_MASK_TOKEN
DSPARK_KEYS = ("dspark_target_layer_ids", "dspark_config")
ID_KEYS: tuple[tuple[str, str | None], ...] = ((B.SOURCE_DSPARK_TOP, None), (B.SOURCE_DSPARK_NESTED, "dspark_config"),
           (B.SOURCE_NESTED, "dflash_config"), (B.SOURCE_TOP, None))
RULES_TEXT = ("block-diffusion draft ({algorithm}): target_layer_ids from the draft config, else SGLang's default "
              "spread; id i = output of layer i, captured as HF hidden_states[i + 1]")


def _archs(data: dict) -> list:
    archs = data.get("architectures")
    return archs if isinstance(archs, list) else []


def _is_eagle3(data: dict) -> bool:
    archs = _archs(data)
    return any("eagle3" in str(a).lower() for a in archs) or isinstance(data.get("eagle_config"), dict)


def _dspark_named(data: dict) -> bool:
    archs = _archs(data)
    return any(key in data for key in DSPARK_KEYS) or any("dspark" in str(a).lower() for a in archs)


def resolve_algorithm(given: str | None, draft_data: dict, draft_file: str) -> str:
    """The launch's --speculative-algorithm: the one given, else the draft config's kind (DFLASH/DSPARK for a
    block-diffusion draft, else EAGLE3). A block draft under EAGLE/EAGLE3, or an EAGLE-3 draft under DFLASH/DSPARK,
    is bad input."""
    block = B.is_block_draft_config(draft_data)
    if given is None:
        return (DSPARK if _dspark_named(draft_data) else DFLASH) if block else EAGLE3
    if given in (EAGLE, EAGLE3) and block:
        raise DoctorInputError(
            f"--speculative-algorithm {given}: draft config {draft_file} is a block-diffusion draft's (DFlash/DSpark: "
            f"{_kind(draft_data)}); SGLang serves it with --speculative-algorithm DFLASH (or DSPARK), never {given}")
    if given in BLOCK_ALGORITHMS and not block and _is_eagle3(draft_data):
        raise DoctorInputError(
            f"--speculative-algorithm {given}: draft config {draft_file} is an EAGLE-3 draft's (eagle_config or an "
            f"Eagle3 architecture), not a block-diffusion draft's; serve it with --speculative-algorithm EAGLE3")
    return given


def _kind(data: dict) -> str:
    archs = data.get("architectures")
    named = [k for k in ("dflash_config", *DSPARK_KEYS) if k in data]
    return ", ".join([f"architectures {shown(archs)}"] * bool(archs) + [f"key '{k}'" for k in named])


# -- reading the two configs ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BlockTarget:
    file: str
    model_class: str
    num_hidden_layers: int
    num_loops: int  # read from the config (1 when absent); counted only from NUM_LOOPS_SINCE
    num_layers: int  # the layer count SGLang selects and checks ids against
    hidden_size: int
    vocab_size: int | None
    final_capturable: bool  # the family captures the final layer's output (families.Family.final_capturable)


def _text(data: dict) -> dict:
    for key in target_family.NESTED_TEXT_KEYS:
        if isinstance(data.get(key), dict) and "num_hidden_layers" in data[key]:
            return data[key]
    return data


def read_target(data: dict, file: str, release: ResolvedSGLang, notes: list[str]) -> BlockTarget:
    spec, more = parse_target(data, file)
    text = _text(data)
    loops = _int(text, "num_loops", file, "target", required=False) or 1
    counted = release.version is None or release.version >= NUM_LOOPS_SINCE
    if loops > 1:
        notes.append(f"target: num_loops {loops}: " + (
            f"SGLang counts {spec.num_layers} x {loops} = {spec.num_layers * loops} target layers for the ids"
            if counted else f"SGLang {release.text} does not count it (from {format_version(NUM_LOOPS_SINCE)}): "
                            f"{spec.num_layers} target layers for the ids"))
    vocab = _int(text, "vocab_size", file, "target", required=False)
    family = target_family.resolve(data, release.version).family
    notes += more
    return BlockTarget(file, spec.model_class, spec.num_layers, loops, spec.num_layers * (loops if counted else 1),
                       spec.hidden_size, vocab if vocab is not None else _int(data, "vocab_size", file, "target",
                                                                              required=False),
                       bool(family is not None and family.final_capturable))


def _check_ids(value, file: str, key: str) -> None:
    if value is None:
        return
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise DoctorInputError(f"draft config {file}: key '{key}' must be a list of integers, got {shown(value)}")
    if not value:
        raise DoctorInputError(f"draft config {file}: key '{key}' is empty (SGLang refuses an empty list)")


def check_draft(data: dict, file: str) -> None:
    """The keys SGLang's DFlash/DSpark parsers read, with their types (bad input names file and key)."""
    for section in ("dflash_config", "dspark_config", "text_config"):
        if data.get(section) is not None and not isinstance(data[section], dict):
            raise DoctorInputError(f"draft config {file}: key '{section}' must be an object, got "
                                   f"{shown(data[section])}")
    for source, nested in ID_KEYS:
        holder = (data.get(nested) or {}) if nested else data
        _check_ids(holder.get("target_layer_ids" if nested else source), file, source)
    _check_ids(data.get("eagle_aux_hidden_state_layer_ids"), file, "eagle_aux_hidden_state_layer_ids")
    dflash = data.get("dflash_config") or {}
    for key, minimum in (("num_target_layers", 1), ("block_size", 1), ("mask_token_id", 0)):
        holder, prefix = (dflash, "dflash_config.") if key in dflash else (data, "")
        _int(holder, key, file, "draft", prefix, required=False, minimum=minimum)
    text, prefix = (data["text_config"], "text_config.") if isinstance(data.get("text_config"), dict) else (data, "")
    _int(text, "num_hidden_layers", file, "draft", prefix)  # SGLang: "DFLASH requires draft num_hidden_layers"
    _int(text, "hidden_size", file, "draft", prefix, required=False)
    token = dflash.get("mask_token", data.get("mask_token"))
    if token is not None and (not isinstance(token, str) or not token):
        raise DoctorInputError(f"draft config {file}: key 'mask_token' must be a non-empty string, got {shown(token)}")


def served_config(data: dict, algorithm: str) -> B.BlockDraftConfig:
    """What SGLang reads of the draft config under `algorithm`: DFLASH never reads the DSpark keys."""
    if algorithm == DSPARK:
        return B.read_block_draft_config(data)
    return B.read_block_draft_config({k: v for k, v in data.items() if k not in DSPARK_KEYS})


# -- the rules ------------------------------------------------------------------------------------------------------

def served_ids(config: B.BlockDraftConfig, target: BlockTarget, errors: list[str]) -> tuple[int, ...] | None:
    """The target_layer_ids SGLang uses (None: it refuses to start; the reason appended to `errors`)."""
    if config.target_layer_ids is not None:
        return config.target_layer_ids
    k = config.num_draft_layers or 0
    ids = B.default_target_layer_ids(target.num_layers, k)
    if ids is None:
        errors.append(f"SGLang refuses to start: the draft config names no target_layer_ids and SGLang's default "
                      f"needs at least 4 target layers for {k} draft layers ({target.num_layers} here; 'DFlash layer "
                      f"selection requires num_target_layers >= 4'); {B.PIN_HINT}")
    return ids


def range_findings(ids, source: str, target: BlockTarget) -> list[Finding]:
    """Ids no capture can reach: outside [0, n) (SGLang refuses the DFlash ids at start-up) and the final layer's
    output (id n - 1) where the target's loop cannot capture it."""
    n, out = target.num_layers, []
    checked = source not in (B.SOURCE_DSPARK_TOP, B.SOURCE_DSPARK_NESTED)
    for slot, i in enumerate(ids):
        key = f"{'target_layer_ids' if source == B.SOURCE_DEFAULT else source}[{slot}] = {i}"
        if i < 0 or i >= n:
            consequence = (f"SGLang refuses to start ('DFLASH target_layer_ids contains an out-of-range layer id'; "
                           f"the range is 0 to {n - 1} for {n} target layers)" if checked else
                           f"SGLang does not check DSpark ids: no layer {i} exists among the {n} target layers, so "
                           f"it is never captured (or the setter raises IndexError)")
            out.append(_finding(CAPTURE_ID_UNREACHABLE, f"The block draft's {key} is out of range: {consequence}.",
                                id=i, slot=slot, valid_ids=[0, n - 1], ids_source=source, refused_at_start=checked))
        elif i == n - 1 and not target.final_capturable:
            out.append(_finding(
                CAPTURE_ID_UNREACHABLE,
                f"The block draft's {key} names the final layer's output (HF hidden_states[{n}]): SGLang accepts it, "
                f"but the target's loop captures the residual entering a layer and no layer follows layer {n - 1}, so "
                f"it is never captured: the draft gets one feature fewer than it takes (SGLang raises 'DFLASH "
                f"target_hidden feature dim mismatch' at the first forward, or IndexError at start-up in classes "
                f"that flag the layer).", id=i, slot=slot, hf_index=n, ids_source=source, refused_at_start=False))
    return out


def width_finding(target: BlockTarget, hidden: int | None, k: int, algorithm: str) -> Finding | None:
    """SGLang's DFlash draft (models/dflash.py) takes K x its own hidden_size; the target feeds K x its own."""
    if algorithm != DFLASH or hidden is None or hidden == target.hidden_size:
        return None
    return _finding(
        FC_WIDTH_MISMATCH,
        f"The DFlash draft's fc takes {k} x {hidden} = {k * hidden} (its hidden_size), but the target feeds {k} x "
        f"{target.hidden_size} = {k * target.hidden_size}: SGLang raises 'DFLASH target_hidden feature dim mismatch' "
        f"at the first forward. The draft was made for another target.",
        fc_in=k * hidden, aux_width=k * target.hidden_size, draft_hidden_size=hidden,
        target_hidden_size=target.hidden_size)


def config_notes(config: B.BlockDraftConfig, target: BlockTarget, algorithm: str) -> list[str]:
    notes = []
    if config.trained_num_target_layers is not None and config.trained_num_target_layers != target.num_layers:
        notes.append(f"draft config num_target_layers {config.trained_num_target_layers} differs from the target's "
                     f"{target.num_layers} layers: SGLang logs a warning ('differs from runtime target "
                     f"num_hidden_layers') and selects the capture layers from the runtime target; the draft was "
                     f"trained against another target depth")
    if algorithm == DSPARK:
        notes.append("DSPARK: a target class with its own set_dspark_layers_to_capture (0.5.23: DeepSeek-V4, Kimi-K3, "
                     "Kimi-Linear, Bailing-MoE-V3, MiniMax-M3) maps the ids its own way; the HF indices shown follow "
                     "the convention id i = output of layer i; the running probe reads the positions its setter stored")
    return notes


def launch_lines(request, config: B.BlockDraftConfig, target: BlockTarget, errors: list[str],
                 notes: list[str]) -> dict:
    """The launch as SGLang takes it for a block draft: the block served, the flags it overrides or refuses."""
    flags, algorithm = request.spec or {}, request.algorithm
    checked_speculation(speculation_from_flags(flags), algorithm, request.tbo, DoctorInputError)  # bad values: exit 2
    tokens = flags.get("speculative_num_draft_tokens")
    if tokens is not None:
        block, block_from = tokens, "--speculative-num-draft-tokens"
        if config.block_size is not None and config.block_size != tokens:
            notes.append(f"--speculative-num-draft-tokens {tokens} is not the draft config's block_size "
                         f"{config.block_size}: SGLang serves {tokens} and logs 'DFLASH block size mismatch'")
    elif config.block_size is not None:
        block, block_from = config.block_size, "the draft config's block_size"
    else:
        block, block_from = DEFAULT_BLOCK_SIZE, "SGLang's default: the draft config has no block_size"
    for flag, dest in (("--speculative-eagle-topk", "speculative_eagle_topk"),
                       ("--speculative-num-steps", "speculative_num_steps")):
        if flags.get(dest) not in (None, 1):
            notes.append(f"{flag} {flags[dest]}: {algorithm} takes 1 only; SGLang overrides it to 1 with a warning")
    if flags.get("speculative_adaptive"):
        notes.append(f"--speculative-adaptive: adaptive depth is for EAGLE/EAGLE3 only; {algorithm} drafts a fixed "
                     f"block")
    if request.tbo or not request.cuda_graph:
        notes.append("--tbo/--no-cuda-graph: not judged for a block draft (the capture is set once, on every path)")
    if request.pp_size > 1:
        refusal = (f"SGLang refuses to start: --pp-size {request.pp_size} ('Currently DFLASH speculative decoding "
                   f"only supports pp_size == 1')")
        if algorithm == DFLASH:
            errors.append(refusal)
        else:
            notes.append(f"--pp-size {request.pp_size}: SGLang serves DSPARK with pp_size > 1 only on a disaggregated "
                         f"prefill server")
    mask = config.mask_token_id
    if mask is not None and target.vocab_size is not None and mask >= target.vocab_size:
        errors.append(f"SGLang refuses to start: the draft config's mask_token_id {mask} is outside the target's "
                      f"vocabulary of {target.vocab_size} ('DFLASH mask_token_id is outside the target vocab size')")
    return {"speculative_algorithm": algorithm, "block_size": block, "block_size_from": block_from,
            "pp_size": request.pp_size}


def _mask_token(data: dict) -> str:
    dflash = data.get("dflash_config") or {}
    return dflash.get("mask_token", data.get("mask_token")) or DEFAULT_MASK_TOKEN


@dataclass
class BlockDiagnosis:
    """What the block report is built from."""

    release: ResolvedSGLang
    algorithm: str
    algorithm_from: str
    target: BlockTarget
    draft_file: str
    draft_data: dict
    config: B.BlockDraftConfig
    trained: tuple[int, ...] | None
    notes: list[str]


def _model_class(data: dict) -> str:
    archs = data.get("architectures")
    return archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else \
        str(data.get("model_type") or "unknown")


def _hidden(data: dict) -> int | None:
    text = data["text_config"] if isinstance(data.get("text_config"), dict) else data
    return text.get("hidden_size")


def too_old(release: ResolvedSGLang, algorithm: str) -> str | None:
    """Why the release cannot serve `algorithm` (None: it can)."""
    since = SINCE[algorithm]
    if release.version is None or release.version >= since:
        return None
    kind = "DFlash" if algorithm == DFLASH else "DSpark"
    return (f"SGLang {release.text} has no --speculative-algorithm {algorithm}: {kind} drafts arrive in "
            f"{format_version(since)} (the first release whose SpeculativeAlgorithm has {algorithm}"
            + (", with sglang/srt/speculative/dflash_utils.py" if algorithm == DFLASH else "")
            + f"); serve this draft on {format_version(since)} or later")


def diagnose_block(request, release: ResolvedSGLang, trained, target_cfg: tuple[str, dict],
                   draft_cfg: tuple[str, dict], algorithm_from: str) -> dict:
    """doctor's report for a DFlash/DSpark draft (`request.algorithm` resolved). Raises DoctorInputError."""
    notes: list[str] = [release.note] if release.note else []
    draft_file, draft_data = draft_cfg
    check_draft(draft_data, draft_file)
    target = read_target(target_cfg[1], target_cfg[0], release, notes)
    config = served_config(draft_data, request.algorithm)
    d = BlockDiagnosis(release, request.algorithm, algorithm_from, target, draft_file, draft_data, config, trained,
                       notes)
    old = too_old(release, request.algorithm)
    if old is not None:
        return _report(d, None, [], [old], None)
    errors: list[str] = []
    launch = launch_lines(request, config, target, errors, notes)
    ids = served_ids(config, target, errors)
    found = _findings(d, ids)
    if trained is None:
        notes.append("no --trained-layers: layer_mismatch not checked (give the layers the draft was trained on)")
    notes += config_notes(config, target, request.algorithm)
    return _report(d, ids, found, errors, launch)


def _findings(d: BlockDiagnosis, ids) -> list[Finding]:
    config, target = d.config, d.target
    model_class = _model_class(d.draft_data)
    found = [f for f in [B.aux_ids_disagree_finding(config, model_class)] if f is not None]
    if ids is None:
        return found
    captured = [i + 1 for i in ids]
    if config.defaulted:
        found.append(B.defaulted_finding(model_class=model_class, chosen_ids=ids, captured=captured,
                                         num_layers=target.num_layers, num_draft_layers=config.num_draft_layers))
    found += range_findings(ids, config.source, target)
    if d.trained is not None:
        mismatch = B.layer_mismatch_finding(captured=captured, trained_hf=d.trained, num_layers=target.num_layers,
                                            ids=ids, source=config.source)
        found += [mismatch] if mismatch is not None else []
    hidden = _hidden(d.draft_data)
    width = width_finding(target, hidden, len(ids), d.algorithm)
    return found + ([width] if width is not None else [])


# -- the report --------------------------------------------------------------------------------------------------

def _slots(hf_indices, target: BlockTarget) -> list[dict]:
    return [{"capture_index": i, "hf_index": i, "label": capture_label(i, target.num_layers, target.final_capturable)}
            for i in hf_indices]


def _fix(found: list[Finding]) -> dict | None:
    for f in found:
        if f.code == LAYER_MISMATCH:
            evidence = f.evidence_dict()
            return {"target_layer_ids": evidence["fix_ids"], "impossible": evidence["fix_impossible"]}
    return None


def _draft_part(d: BlockDiagnosis) -> dict:
    c = d.config
    return {"file": d.draft_file, "model_class": _model_class(d.draft_data), "num_draft_layers": c.num_draft_layers,
            "hidden_size": _hidden(d.draft_data), "block_size": c.block_size, "mask_token_id": c.mask_token_id,
            "mask_token": _mask_token(d.draft_data), "num_target_layers": c.trained_num_target_layers,
            "target_layer_ids": None if c.target_layer_ids is None else list(c.target_layer_ids),
            "ids_source": c.source,
            "eagle_aux_hidden_state_layer_ids": None if c.aux_layer_ids is None else list(c.aux_layer_ids)}


def _layers_part(d: BlockDiagnosis, ids) -> dict | None:
    if ids is None:
        return None
    t, k, hidden = d.target, len(ids), _hidden(d.draft_data)
    return {"target_layer_ids": list(ids), "source": d.config.source,
            "default_formula": B.DEFAULT_FORMULA if d.config.defaulted else None,
            "captured": _slots([i + 1 for i in ids], t),
            "fc": {"features": k, "hidden_size": hidden, "in_width": None if hidden is None else k * hidden,
                   "target_feeds": k * t.hidden_size}}


def _report(d: BlockDiagnosis, ids, found: list[Finding], errors: list[str], launch: dict | None) -> dict:
    t, n = d.target, d.target.num_layers
    n_errors = sum(1 for f in found if f.severity == ERROR) + len(errors)
    return {
        "sglang_version": d.release.text, "block_draft": True,
        "rules": RULES_TEXT.format(algorithm=d.algorithm),
        "target": {"file": t.file, "model_class": t.model_class, "num_layers": n,
                   "num_hidden_layers": t.num_hidden_layers, "num_loops": t.num_loops, "hidden_size": t.hidden_size,
                   "vocab_size": t.vocab_size, "final_layer_capturable": t.final_capturable},
        "draft": _draft_part(d),
        "launch": None if launch is None else dict(launch, algorithm_from=d.algorithm_from),
        "layers": _layers_part(d, ids),
        "trained": None if d.trained is None else {
            "hf_indices": list(d.trained), "labels": [capture_label(i, n, t.final_capturable) for i in d.trained]},
        "fix": _fix(found),
        "findings": [finding_dict(f) for f in found],
        "errors": errors, "notes": d.notes,
        "exit_status": 1 if n_errors else 0,
    }


def _fmt_slots(slots) -> str:
    return ", ".join(f"{s['capture_index']} = HF hidden_states[{s['hf_index']}] = {s['label']}" for s in slots)


def _head_lines(result: dict) -> list[str]:
    t, d, la = result["target"], result["draft"], result["launch"]
    loops = f" ({t['num_hidden_layers']} x {t['num_loops']} loops)" if t["num_layers"] != t["num_hidden_layers"] else ""
    out = [f"eagle-probe doctor: SGLang {result['sglang_version'] or '(newest rules)'}: {result['rules']}",
           f"target  {t['file']}: {t['model_class']}, {t['num_layers']} layers{loops}, hidden {t['hidden_size']}",
           f"draft   {d['file']}: {d['model_class']}, {d['num_draft_layers']} layers, hidden {d['hidden_size']}, "
           f"block_size {d['block_size']}, mask_token_id "
           + (str(d["mask_token_id"]) if d["mask_token_id"] is not None
              else f"none (SGLang looks up mask_token {d['mask_token']!r} in the tokenizer)")]
    if la is not None:
        out.append(f"launch  --speculative-algorithm {la['speculative_algorithm']} ({la['algorithm_from']}), block "
                   f"{la['block_size']} ({la['block_size_from']}), pp {la['pp_size']}")
    return out


def _layer_lines(result: dict) -> list[str]:
    layers, d, t = result["layers"], result["draft"], result["target"]
    if layers is None:
        return []
    if layers["default_formula"]:
        where = (f"SGLang's default for {t['num_layers']} target layers and {d['num_draft_layers']} draft layers "
                 f"({layers['default_formula']}): the draft config names none")
    else:
        where = f"given in the draft config ({layers['source']})"
    fc = layers["fc"]
    width = "?" if fc["in_width"] is None else fc["in_width"]
    return [f"target_layer_ids {layers['target_layer_ids']}: {where}",
            f"captured: {_fmt_slots(layers['captured'])}",
            f"draft's fc takes {fc['features']} x {fc['hidden_size']} = {width}; the target feeds "
            f"{fc['features']} x {t['hidden_size']} = {fc['target_feeds']}"]


def render_text(result: dict) -> str:
    out = _head_lines(result) + _layer_lines(result)
    if result["trained"]:
        tr = result["trained"]
        out.append("trained on HF hidden_states " + ", ".join(
            f"{i} ({lab})" for i, lab in zip(tr["hf_indices"], tr["labels"])))
    fix = result["fix"]
    if fix:
        out.append(f'to capture the trained layers: "dflash_config": {{"target_layer_ids": {fix["target_layer_ids"]}}}'
                   if fix["target_layer_ids"] is not None else
                   f"to capture the trained layers: impossible: no target_layer_ids captures HF hidden_states "
                   f"{fix['impossible']}")
    out += [f"note: {n}" for n in result["notes"]]
    out += [f"ERROR {e}" for e in result["errors"]]
    if not result["findings"] and not result["errors"]:
        out.append("findings: none")
    out += [finding_line(f) for f in result["findings"]]
    errors = sum(1 for f in result["findings"] if f["severity"] == ERROR)
    out.append(result_line(errors, len(result["findings"]) - errors, {"errors": result["errors"]}))
    return "\n".join(out)
