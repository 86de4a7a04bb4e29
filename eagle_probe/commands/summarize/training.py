"""The report's "against training" part: served acceptance against what the draft's training accuracies promise,
per rank and per draft position, and acceptance_below_training when no finding explains a shortfall.

The accuracy comes from `--draft-accuracy`, else from the logs: an acceptance event's `draft_accuracy` (per-position
list), an acceptance_collapse finding's evidence, or, last, the number that reproduces the logged
expected_mean_accept_length (one per-token accuracy: per-position comparisons are then approximate). Which checks
came back clean is derived from the events present; a check the logs hold no evidence for is "not checked".
"""

import math
import os

from ... import events as names
from ...analysis import findings as F
from ...analysis.acceptance import accuracy_for_mean_length
from ...analysis.training_gap import below_training_finding, compare
from ...analysis.vocab_map import vocab_map_findings
from .fields import rank_fields, rank_key

# Findings that can explain acceptance below the promise: everything of severity warning or error except the
# acceptance verdicts themselves.
NOT_CAUSES = (F.ACCEPTANCE_COLLAPSE, F.ACCEPTANCE_BELOW_TRAINING)

LAYER_CODES = (F.LAYER_MISMATCH, F.CAPTURE_ID_UNREACHABLE, F.GRAPH_EAGER_LAYER_MISMATCH, F.TBO_CAPTURE_LOST,
               F.PP_STAGE_NO_CAPTURE, F.CAPTURE_RULE_UNEXPECTED, F.TRAINED_LAYERS_INFERRED,
               F.DFLASH_TARGET_LAYERS_DEFAULTED, F.DFLASH_LAYER_IDS_DISAGREE)
SHAPE_CODES = (F.AUX_COUNT_MISMATCH,)
WIDTH_CODES = (F.FC_WIDTH_MISMATCH, F.FC_SKIPPED)
VOCAB_CODES = (F.DRAFT_VOCAB_MAP_MISSING, F.DRAFT_VOCAB_MAP_INVALID, F.DRAFT_VOCAB_COVERAGE_LOW)
VALUE_CODES = (F.AUX_NONFINITE, F.AUX_SLOTS_IDENTICAL, F.AUX_VALUE_MISMATCH, F.VERIFY_PREFILL_MISMATCH)
TP_CODES = (F.TP_RANK_DIVERGENCE,)


def _accuracy_list(value) -> list | None:
    """A logged accuracy (a number or a list of numbers in (0, 1]) as a list, or None when it is not one."""
    values = value if isinstance(value, list) else [value]
    if not values or len(values) > 64:
        return None
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 < v <= 1:
            return None
    return [float(v) for v in values]


def find_accuracy(events, option) -> tuple[object, str]:
    """(accuracy, where it came from); (None, why not) when nothing gives one."""
    if option is not None:
        return option, "--draft-accuracy"
    for event in reversed(events):
        if event.get("event") == names.ACCEPTANCE and event.get("draft_accuracy") is not None:
            found = _accuracy_list(event["draft_accuracy"])
            if found:
                return tuple(found), "the probe's EAGLE_PROBE_DRAFT_ACCURACY, logged"
    for event in reversed(events):
        evidence = event.get("evidence")
        if event.get("event") == names.FINDING and event.get("code") == F.ACCEPTANCE_COLLAPSE \
                and isinstance(evidence, dict):
            found = _accuracy_list(evidence.get("draft_accuracy"))
            if found:
                return tuple(found), \
                    "EAGLE_PROBE_DRAFT_ACCURACY, from the acceptance_collapse finding"
    for event in reversed(events):
        expected, positions = event.get("expected_mean_accept_length"), event.get("per_position_rate")
        if event.get("event") == names.ACCEPTANCE and expected is not None and positions:
            accuracy = accuracy_for_mean_length(expected, len(positions))
            if accuracy is not None:
                return (accuracy,), (f"the one per-token accuracy that gives the logged expected_mean_accept_length "
                                  f"{expected:.3f}; per-position figures approximate: give --draft-accuracy")
    return None, ("no training accuracy: give --draft-accuracy 0.75,0.62,0.55 (SpecForge's per-position "
                  "accuracies), or run the server with it")


def _codes(findings) -> set:
    return {f.get("code") for f in findings}


def _by_event(events, name):
    return [e for e in events if e.get("event") == name]


def _status(found: set, codes, clean_detail: str | None, missing: str) -> dict:
    problems = sorted(found & set(codes))
    if problems:
        return {"status": "problem", "detail": "findings " + ", ".join(problems)}
    if clean_detail is None:
        return {"status": "not checked", "detail": missing}
    return {"status": "clean", "detail": clean_detail}


def _block_layers(events, found) -> dict:
    """A block draft (DFlash, DSpark): the capture for it and where its ids came from."""
    capture = _by_event(events, names.BLOCK_CAPTURE)[-1]
    source = capture.get("ids_source")
    named = "SGLang's silent default" if source == "default" else f"from {source}"
    detail = (f"the target captures {capture.get('layers_to_capture')} for the block draft (target_layer_ids "
              f"{capture.get('requested_ids')}, {named}); against the layers it was trained on only if the server had "
              f"--trained-layers (`eagle-probe replay --search` infers them)")
    return _status(found, LAYER_CODES, detail, "")


def _layers(events, found) -> dict:
    if _by_event(events, names.BLOCK_CAPTURE):
        return _block_layers(events, found)
    captures = _by_event(events, names.CAPTURE_CONFIGURED)
    loads = [e for e in _by_event(events, names.DRAFT_LOADED)]
    detail = None
    if captures and loads:
        layers = captures[-1].get("layers_to_capture")
        detail = (f"the target captures {layers}, the layers the draft config names; against the layers it was "
                  f"trained on only if the server had --trained-layers (`eagle-probe replay --search` infers them)")
    return _status(found, LAYER_CODES, detail, "no eagle_probe.draft.loaded event to compare the captures with"
                   if captures else "no eagle_probe.capture.configured event")


def _shapes(events, found) -> dict:
    forwards = [e for e in _by_event(events, names.TARGET_FORWARD) if e.get("aux_expected") is not None]
    good = [e for e in forwards if e.get("aux_returned") == e.get("aux_expected") and not e.get("error")]
    detail = None
    if good and len(good) == len(forwards):
        modes = sorted({str(e.get("mode")) for e in good})
        paths = sorted({str(e.get("path")) for e in good})
        detail = (f"every logged target forward returned its {good[-1]['aux_expected']} aux states "
                  f"({', '.join(modes)}; {', '.join(paths)})")
    return _status(found, SHAPE_CODES, detail, "no eagle_probe.target.forward event with aux counts"
                   if not forwards else "some target forwards returned another aux count or failed")


def _block_widths(events, found) -> dict:
    """A block draft: what each hand-off fed its projection (fc) against the width fc takes."""
    fed = [e for e in _by_event(events, names.BLOCK_DRAFT_FED) if e.get("expected_width") is not None]
    detail = None
    if fed and all(e.get("width") == e.get("expected_width") for e in fed):
        modes = ", ".join(sorted({str(e.get("mode")) for e in fed}))
        detail = f"every hand-off ({modes}) fed the block draft's fc its width {fed[-1]['expected_width']}"
    return _status(found, WIDTH_CODES, detail, "no eagle_probe.block_draft.fed event with the width fc takes"
                   if not fed else "a hand-off's width differs from the block draft's fc")


def _widths(events, found) -> dict:
    if _by_event(events, names.BLOCK_DRAFT_FED):
        return _block_widths(events, found)
    fed = [e for e in _by_event(events, names.DRAFT_FORWARD) if e.get("fc_in") is not None
           and e.get("aux_width") is not None and e.get("mode") not in ("DECODE", "IDLE")]
    detail = None
    if fed and all(e.get("aux_width") == e.get("fc_in") and e.get("fc_ran") is not False for e in fed):
        detail = f"the draft received width {fed[-1]['aux_width']} = its fc's input and ran fc"
    return _status(found, WIDTH_CODES, detail, "no target-fed eagle_probe.draft.forward event" if not fed
                   else "a draft forward's width differs from its fc")


def _vocab(events, found) -> dict:
    """Clean only on evidence: no draft_vocab_size (the target's lm_head), or the load event's target_vocab_size and
    d2t_size (null: no d2t) with no vocabulary finding (the probe checks a d2t's values at load)."""
    loads = _by_event(events, names.DRAFT_LOADED)
    coverage = [e["in_vocab"] / e["verified_tokens"] for e in _by_event(events, names.VOCAB_COVERAGE)
                if isinstance(e.get("in_vocab"), int) and isinstance(e.get("verified_tokens"), int)
                and e["verified_tokens"] > 0]
    suffix = f"; vocabulary coverage {coverage[-1]:.3f}" if coverage else ""
    if not loads and _by_event(events, names.BLOCK_DRAFT_LOADED):
        return {"status": "n/a", "detail": "a block draft proposes with the target's embedding and lm_head: no map"}
    if not loads:
        return _status(found, VOCAB_CODES, None, "no eagle_probe.draft.loaded event; `eagle-probe doctor --target "
                       "DIR --draft DIR` reads the checkpoint's d2t")
    load = loads[-1]
    draft_vocab, target_vocab = load.get("draft_vocab_size"), load.get("target_vocab_size")
    detail = None
    if draft_vocab is None and "draft_vocab_size" in load:
        detail = "no draft_vocab_size: the draft predicts over the target's vocabulary with its lm_head" + suffix
    elif isinstance(target_vocab, int) and isinstance(draft_vocab, int) and "d2t_size" in load:
        if load["d2t_size"] is None:
            rule = vocab_map_findings(str(load.get("model_class")), draft_vocab, target_vocab, None)
            if rule:
                return {"status": "problem", "detail": f"{rule[0].code} (from the draft.loaded event's sizes)"}
            detail = f"draft_vocab_size {draft_vocab} of {target_vocab}: no map needed" + suffix
        else:
            detail = (f"draft_vocab_size {draft_vocab} of {target_vocab}, d2t of {load['d2t_size']} entries checked "
                      f"at load" + suffix)
    return _status(found, VOCAB_CODES, detail, f"the logs name draft_vocab_size {draft_vocab} but not the target's "
                   f"vocabulary or whether the checkpoint has d2t; run `eagle-probe doctor --target DIR --draft DIR`")


def _values(events, found, report) -> dict:
    rows = report["values"]["fingerprints"]
    detail = None
    if rows:
        detail = (f"{sum(r['samples'] for r in rows)} sampled fingerprints of {len(rows)} (rank, slot) series: finite, "
                  f"slots distinct; against the training data only if the server had --reference")
    return _status(found, VALUE_CODES, detail, values_missing_reason(events))


def values_missing_reason(events) -> str:
    """Why there are no fingerprints: the start-up statement's own reason where a process made one."""
    statements = [e for e in events
                  if e.get("event") == names.OBSERVABILITY and isinstance(e.get("observations"), list)]
    for statement in statements:
        for item in statement["observations"]:
            if isinstance(item, dict) and str(item.get("what", "")).startswith("values") and not item.get("live"):
                return f"no eagle_probe.aux.fingerprint events: values are not seen in this process ({item.get('why')})"
    if statements:
        return ("no eagle_probe.aux.fingerprint events although the start-up statement says values are seen: "
                "fingerprints off (EAGLE_PROBE_FINGERPRINT_INTERVAL_S=0) or no prefill/verify forward yet")
    return "no eagle_probe.aux.fingerprint events and no start-up statement (eagle_probe.observability) in the logs"


def _tp(events, found, report) -> dict:
    sizes = {e.get("tp_size") for e in events if isinstance(e.get("tp_size"), int)}
    if report["values"]["compared"]:
        detail = f"ranks agree at {report['values']['compared']} (step, slot) pairs compared"
    elif sizes == {1}:
        return {"status": "n/a", "detail": "one tensor-parallel rank (tp_size 1)"}
    else:
        detail = None
    return _status(found, TP_CODES, detail, "no sampled forward seen by two ranks of one (pp, dp) rank: log every "
                   "rank, with fingerprints on")


def checks(events, report, found: set) -> list[dict]:
    out = []
    for name, result in (("layers", _layers(events, found)), ("shapes", _shapes(events, found)),
                         ("widths", _widths(events, found)), ("vocabulary map", _vocab(events, found)),
                         ("values", _values(events, found, report)), ("TP ranks", _tp(events, found, report))):
        out.append(dict(check=name, **result))
    return out


def next_steps(events, check_rows) -> list[str]:
    """The commands to run next, in order: doctor when the vocabulary was not checked, dumps when there are none,
    then replay, parity and consistency on them."""
    steps = []
    if any(c["check"] == "vocabulary map" and c["status"] == "not checked" for c in check_rows):
        steps.append("`eagle-probe doctor --target TARGET_DIR --draft DRAFT_DIR` (the vocabulary map, from the "
                     "checkpoint's header and d2t).")
    dumps = sorted({os.path.dirname(e["path"]) for e in _by_event(events, names.DUMP_WRITTEN)
                    if isinstance(e.get("path"), str)})
    directory = dumps[0] if dumps else "DUMPS"
    if not dumps:
        steps.append("dumps: run the server again under `eagle-probe run --dump-dir DUMPS --dump-modes "
                     "extend,target_verify ... -- <server command>` and send it traffic.")
    steps.append(f"`eagle-probe replay --draft DRAFT_DIR --target TARGET_DIR --dump-dir {directory} --search` (does "
                 f"the draft agree with its target on these states, and under which layers?), `eagle-probe parity "
                 f"--data SPECFORGE_DATA --dump-dir {directory}` (are they the states it was trained on?), "
                 f"`eagle-probe consistency --dump-dir {directory} --server http://HOST:PORT` (do verify forwards "
                 f"carry the states a prefill of the same tokens gives? `--target TARGET_DIR` instead: offline, where "
                 f"the model fits).")
    return steps


def _mean_length(acc: dict) -> float | None:
    return acc.get("mean_accept_length")


def training_section(events: list, report: dict, option=None) -> dict:
    """{"accuracy", "accuracy_source", "ranks": [...], "explained_by": [...], "checks", "next_steps", "findings"}:
    findings are event-like dicts (code, severity, message, evidence, tp_rank...) for the report's finding lists."""
    accuracy, source = find_accuracy(events, option)
    all_findings = report["findings"]
    causes = sorted(g["code"] for g in all_findings
                    if g.get("severity") in (F.ERROR, F.WARNING) and g.get("code") not in NOT_CAUSES)
    section = {"accuracy": None if accuracy is None else list(accuracy),
               "accuracy_source": source, "ranks": [], "explained_by": causes, "checks": None, "next_steps": None,
               "findings": []}
    if accuracy is None:
        return section
    found = set()
    for group in all_findings:
        found.add(group["code"])
    for rank in report["ranks"]:
        acc = rank.get("acceptance")
        if not acc:
            continue
        mix = {int(d): c["request_steps"] for d, c in (acc.get("per_depth") or {}).items() if d.isdigit()}
        comparison = compare(accuracy, int(acc.get("drafts") or 0), acc.get("per_position_rate") or [],
                             _mean_length(acc), mix or None, acc.get("per_position_drafted"))
        if comparison is None:
            continue
        where = f"tp_rank {rank['tp_rank']}" if rank["tp_rank"] is not None else f"pid {rank['pid']}"
        section["ranks"].append(dict(comparison, **rank_fields(rank_key(rank)), where=where))
    below = [r for r in section["ranks"] if r["below"]]
    if not below or causes:
        return section
    section["checks"] = checks(events, report, found)
    section["next_steps"] = next_steps(events, section["checks"])
    for row in below:
        finding = below_training_finding(row, accuracy, source, section["checks"], section["next_steps"], row["where"])
        last = (report_rank(report, row).get("acceptance") or {}).get("last") or {}
        section["findings"].append({
            "code": finding.code, "severity": finding.severity, "message": finding.message,
            "evidence": finding.evidence_dict(), "role": "target", **rank_fields(rank_key(row)),
            "timestamp": last.get("timestamp"), "event": names.FINDING})
    return section


def report_rank(report, row) -> dict:
    for rank in report["ranks"]:
        if rank_key(rank) == rank_key(row):
            return rank
    return {}


def render_training_text(section: dict) -> list[str]:
    if section["accuracy"] is None:
        return []
    out = ["", f"Acceptance against training ({section['accuracy_source']}):"]
    for row in section["ranks"]:
        verdict = ("BELOW what training promised" if row["below"] else "within what training promised")
        out.append(f"  {row['where']}: served mean accept length {row['served_mean_accept_length']:.2f} of the "
                   f"promised {row['promised_mean_accept_length']:.2f} ({row['served_over_promised']:.0%}, "
                   f"{row['drafts']} drafts): {verdict}")
        out.append("    per position, served / promised (conditional): " + ", ".join(
            f"{p['position']}: {_f(p['served_rate'])} / {_f(p['promised_rate'])} ({_f(p['served_conditional'])} / "
            f"{_f(p['promised_conditional'])}){' short' if p['below'] else ''}" for p in row["per_position"]))
    if not section["ranks"]:
        out.append("  no acceptance events to compare")
    if any(r["below"] for r in section["ranks"]) and section["explained_by"]:
        out.append("  findings that may explain the shortfall: " + ", ".join(section["explained_by"]))
    for check in section["checks"] or []:
        out.append(f"  check {check['check']}: {check['status']} ({check['detail']})")
    for number, step in enumerate(section["next_steps"] or [], 1):
        out.append(f"  next {number}: {step}")
    return out


def _f(value) -> str:
    return "n/a" if value is None else f"{value:.3f}"
