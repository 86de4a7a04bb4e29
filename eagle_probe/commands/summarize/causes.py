"""The report's "causes users hit" part, from what the other parts read: first-position acceptance against the field's
prior when no training accuracy is known (acceptance_low, analysis.field_prior), acceptance past the draft's trained
length (acceptance_past_trained_length, analysis.trained_length, on the position slices), and a bimodal per-request
accept length (acceptance_bimodal, analysis.bimodal). Each becomes a finding of the rank it was seen on."""

import os

from ... import events as names
from ...analysis import bimodal, field_prior, sampled_traffic, trained_length
from ...analysis import findings as F
from ...analysis.slices import DIMENSIONS
from .fields import rank_key
from .training import NOT_CAUSES
from .training import checks as training_checks

SUMMARIZE_SOURCE = "summarize --draft-max-length"
LOGGED_SOURCE = "the probe's eagle_probe.draft.loaded event (source not logged)"
DECODE_PATH_DIMENSIONS = ("path", "step")
# Findings that are verdicts on acceptance, not causes of it.
VERDICTS = NOT_CAUSES + (F.ACCEPTANCE_LOW, F.ACCEPTANCE_BIMODAL, F.ACCEPTANCE_PAST_TRAINED_LENGTH,
                         F.ACCEPTANCE_SLICE_LOW)


def _where(rank: dict) -> str:
    return f"tp_rank {rank['tp_rank']}" if rank.get("tp_rank") is not None else f"pid {rank.get('pid')}"


def _as_event(finding, rank: dict, timestamp=None) -> dict:
    return {"code": finding.code, "severity": finding.severity, "message": finding.message,
            "evidence": finding.evidence_dict(), "role": "target", "tp_rank": rank.get("tp_rank"),
            "pp_rank": rank.get("pp_rank"), "dp_rank": rank.get("dp_rank"), "pid": rank.get("pid"),
            "timestamp": timestamp, "event": names.FINDING}


def _slice_rank(report: dict, rank: dict) -> dict | None:
    for item in (report.get("acceptance_slices") or {}).get("ranks") or []:
        if rank_key(item) == rank_key(rank):
            return item
    return None


def _slices_check(slice_rank: dict | None) -> dict:
    if slice_rank is None:
        return {"check": "slices", "status": "not checked", "detail": "no eagle_probe.acceptance_slices event"}
    if slice_rank["low"]:
        return {"check": "slices", "status": "problem", "detail": "low: " + ", ".join(
            f"{i['dimension']}={i['bucket']}" for i in slice_rank["low"])}
    return {"check": "slices", "status": "clean", "detail": f"no slice ({', '.join(DIMENSIONS)}) below the rest "
            "beyond chance"}


def _decode_path_suspect(slice_rank: dict | None) -> str | None:
    """Why the decode path is suspect: a slice of the verify path (CUDA graph or eager) or of the step (the first after
    prefill, whose draft is fed the prefill's aux states, against later ones, fed the verify forwards') is below the
    rest beyond chance (the slices' test; a raw gap between small counts is not taken as evidence)."""
    if slice_rank is None:
        return None
    for item in slice_rank["low"]:
        if item["dimension"] in DECODE_PATH_DIMENSIONS:
            return (f"{item['dimension']} = {item['bucket']} accepts {item['rate']:.2f} at draft position "
                    f"{item['position']} against {item['rest_rate']:.2f} in the rest (acceptance_slice_low)")
    return None


def _dump_dir(events) -> str | None:
    dumps = sorted({os.path.dirname(e["path"]) for e in events if e.get("event") == names.DUMP_WRITTEN
                    and isinstance(e.get("path"), str)})
    return dumps[0] if dumps else None


def next_steps(events, check_rows: list[dict], slice_rank: dict | None, found: set) -> list[str]:
    """In order: the low slice when one traffic class is low; consistency when the decode path is suspect; dumps then
    replay --search when the layers could be wrong; the vocabulary when it was not checked."""
    steps = []
    # a low path or step slice points at the decode path (consistency, below), any other at a class of traffic
    low = [i for i in (slice_rank["low"] if slice_rank else []) if i["dimension"] not in DECODE_PATH_DIMENSIONS]
    if low:
        steps.append("the slices: " + ", ".join(f"{i['dimension']}={i['bucket']} ({i['rate']:.2f} against "
                                                 f"{i['rest_rate']:.2f})" for i in low)
                     + " is low (acceptance_slice_low, `eagle-probe summarize` 'Acceptance by slice'): compare that "
                       "class of traffic with the draft's training data first.")
    directory = _dump_dir(events)
    dumps = ("" if directory else "dumps: run the server under `eagle-probe run --dump-dir DUMPS --dump-modes "
             "extend,target_verify ... -- <server command>` and send it traffic; then ")
    directory = directory or "DUMPS"
    suspect = _decode_path_suspect(slice_rank)
    consistency = (f"`eagle-probe consistency --dump {directory} --server http://HOST:PORT` (or `--target TARGET_DIR`, "
                   f"offline): do verify forwards carry the states a prefill of the same tokens gives?")
    if suspect:
        steps.append(f"{dumps}{consistency} The decode path is suspect: {suspect}.")
        dumps = ""
    layers_confirmed = F.TRAINED_LAYERS_INFERRED in found and not any(
        c["check"] == "layers" and c["status"] == "problem" for c in check_rows)
    if not layers_confirmed:
        steps.append(f"{dumps}`eagle-probe replay --draft DRAFT_DIR --target TARGET_DIR --dump {directory} --search` "
                     f"(the layers could be wrong: which wiring does the draft agree with its target best under?).")
    if not suspect:
        steps.append(f"{consistency} (if the layers are right).")
    if any(c["check"] == "vocabulary map" and c["status"] == "not checked" for c in check_rows):
        steps.append("`eagle-probe doctor --target TARGET_DIR --draft DRAFT_DIR` (the vocabulary map and the config "
                     "keys this release ignores).")
    return steps


def _low(events, report, found, causes) -> list[dict]:
    if (report.get("training") or {}).get("accuracy") is not None:
        return []  # a promise was given: acceptance_below_training judges against it
    out = []
    for rank in report["ranks"]:
        acc = rank.get("acceptance")
        rates = (acc or {}).get("per_position_rate") or []
        verdict = field_prior.judge(rates[0] if rates else None, int((acc or {}).get("drafts") or 0))
        if verdict is None or not verdict["low"]:
            continue
        slice_rank = _slice_rank(report, rank)
        traffic = sampled_traffic.split(((slice_rank or {}).get("slices") or {}).get("sampling"))
        greedy = traffic.get("greedy")
        if traffic.get("sampled") and greedy and greedy["request_steps"] >= field_prior.MIN_STEPS:
            greedy_verdict = field_prior.judge(greedy["first_position_rate"], greedy["first_drafted"])
            if greedy_verdict is not None and not greedy_verdict["low"]:  # the sampled traffic's shortfall
                finding = F.sampled_traffic_finding(
                    f"first-position acceptance {verdict['rate']:.3f}, under the field's {field_prior.FLOOR}",
                    greedy, traffic["sampled"], f"the field's prior is {field_prior.PRIOR} for greedy traffic")
                out.append(_as_event(finding, rank, ((acc or {}).get("last") or {}).get("timestamp")))
                continue
            verdict = greedy_verdict or verdict
        verdict["traffic"] = sampled_traffic.judged(traffic) if greedy is None or not traffic.get("sampled") \
            else "greedy traffic"
        rows = training_checks(events, report, found) + [_slices_check(slice_rank)]
        rows.append({"check": "training accuracy", "status": "not checked", "detail": "none given: judged against "
                     "the field's prior (--draft-accuracy, or EAGLE_PROBE_DRAFT_ACCURACY on the server)"})
        block = any(e.get("event") == names.BLOCK_DRAFT_LOADED for e in events)
        finding = field_prior.low_finding(verdict, rates, rows, next_steps(events, rows, slice_rank, found),
                                          _where(rank), causes, block_draft=block)
        out.append(_as_event(finding, rank, ((acc or {}).get("last") or {}).get("timestamp")))
    return out


def _trained_length(events, rank, option) -> tuple:
    """(length, source) for a rank: summarize's option, else the rank's draft.loaded event, else any rank's."""
    if option is not None:
        return option, SUMMARIZE_SOURCE
    loads = [e for e in events if e.get("event") == names.DRAFT_LOADED and isinstance(e.get("trained_length"), int)]
    mine = [e for e in loads if rank_key(e) == rank_key(rank)] or loads
    if not mine:
        return None, ""
    return mine[-1]["trained_length"], str(mine[-1].get("trained_length_source") or LOGGED_SOURCE)


def _past_length(events, report, option) -> list[dict]:
    out = []
    for slice_rank in (report.get("acceptance_slices") or {}).get("ranks") or []:
        length, source = _trained_length(events, slice_rank, option)
        position = slice_rank["slices"].get("position")
        if length is None or not position:
            continue
        result = trained_length.compare(position, length, slice_rank["positions"])
        slice_rank["trained_length"] = result and dict(result, source=source)
        if result is not None and result["low"] is not None:
            out.append(_as_event(trained_length.past_length_finding(result, source, _where(slice_rank)), slice_rank))
    return out


def _bimodal(report) -> list[dict]:
    out = []
    for slice_rank in (report.get("acceptance_slices") or {}).get("ranks") or []:
        histogram = slice_rank.get("request_accept_length") or {}
        result = bimodal.split(histogram)
        if result is not None:
            finding = bimodal.bimodal_finding(result, histogram, slice_rank["low"], _where(slice_rank))
            out.append(_as_event(finding, slice_rank))
    return out


def causes_section(events: list, report: dict, draft_max_length: int | None = None) -> dict:
    """{"findings": event-like dicts}; the prior's figures and sources for the report."""
    found = {g["code"] for g in report["findings"]}
    causes = sorted(g["code"] for g in report["findings"]
                    if g.get("severity") in (F.ERROR, F.WARNING) and g["code"] not in VERDICTS)
    findings = _low(events, report, found, causes) + _past_length(events, report, draft_max_length) \
        + _bimodal(report)
    return {"prior": field_prior.PRIOR, "floor": field_prior.FLOOR, "sources": list(field_prior.SOURCES),
            "findings": findings}
