"""The fields report.py reads from each event kind, and the types it computes with.

A probe line whose known field has another type is skipped and counted (logread), so the report never
sums a string, hashes a list or formats an object as a number. Unknown fields are not checked: a newer
probe may add some. A field that report.py (or html_report.py) starts to read must be listed here.
"""

import math
import re

from ... import events as names
from ..json_files import shown as _shown

MAX_POSITIONS = 256  # draft positions or accepted lengths per window; real chains have a handful

_HIST_KEY = re.compile(r"[0-9]{1,9}")  # accepted lengths; int() must read them all


def _str(v) -> bool:
    return isinstance(v, str)


def _bool(v) -> bool:
    return isinstance(v, bool)


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v) -> bool:
    return (_int(v) or isinstance(v, float)) and math.isfinite(v)


ABSENT = object()  # what a check receives for a field the event does not have


def _optional(check):
    """null or absent (the report reads both as None)."""
    return lambda v: v is None or v is ABSENT or check(v)


def _absent_or(check):
    """absent but not null: the report reads the field with a default (event.get(key, default))."""
    return lambda v: v is ABSENT or check(v)


def _list_of(check):
    return lambda v: isinstance(v, list) and all(check(i) for i in v)


def _rates(v) -> bool:
    return isinstance(v, list) and len(v) <= MAX_POSITIONS and all(r is None or _number(r) for r in v)


def _histogram(v) -> bool:
    return (isinstance(v, dict) and len(v) <= MAX_POSITIONS
            and all(_HIST_KEY.fullmatch(k) and _number(n) for k, n in v.items()))


def _slot(v) -> bool:
    return (isinstance(v, dict) and all(_int(v.get(k)) for k in ("slot", "capture_index", "hf_index"))
            and _str(v.get("label")))


def _mix_row(v) -> bool:
    """A row of the summary's forward counts: the report adds up count per path."""
    return (isinstance(v, dict) and _str(v.get("path")) and _optional(_str)(v.get("role"))
            and _optional(_str)(v.get("mode")) and _optional(_bool)(v.get("tbo"))
            and _optional(_number)(v.get("count")))


def _slice_counts(v) -> bool:
    return (isinstance(v, dict) and _int(v.get("request_steps")) and isinstance(v.get("accepted"), list)
            and len(v["accepted"]) <= MAX_POSITIONS and all(_int(a) for a in v["accepted"]))


def _slices(v) -> bool:
    """Acceptance by slice: {dimension: {bucket: {request_steps, accepted per position}}}, fixed label sets."""
    return (isinstance(v, dict) and len(v) <= 16 and all(
        _str(d) and isinstance(b, dict) and len(b) <= 64 and all(_str(k) and _slice_counts(c) for k, c in b.items())
        for d, b in v.items()))


OPT_SLICES = (_optional(_slices), "an object of dimensions to objects of buckets to {request_steps: integer, "
              "accepted: a list of integers}, or null")
OPT_BUCKET_COUNTS = (_optional(lambda v: isinstance(v, dict) and len(v) <= 64 and all(_str(k) and _int(n)
                                                                                   for k, n in v.items())),
                     "an object of buckets to integers, or null")
STR = (_str, "a string")
STR_OR_ABSENT = (_absent_or(_str), "a string (or absent)")
OPT_STR = (_optional(_str), "a string or null")
OPT_INT = (_optional(_int), "an integer or null")
OPT_BOOL = (_optional(_bool), "true, false or null")
OPT_NUMBER = (_optional(_number), "a finite number or null")
OPT_INTS = (_optional(_list_of(_int)), "a list of integers or null")
OPT_STRS = (_optional(_list_of(_str)), "a list of strings or null")
OPT_RATES = (_optional(_rates), f"a list of at most {MAX_POSITIONS} finite numbers or nulls, or null")
OPT_HISTOGRAM = (_optional(_histogram), f"an object of at most {MAX_POSITIONS} accepted lengths ('0', '1', ...) "
                 f"to counts, or null")
OPT_SLOTS = (_optional(_list_of(_slot)), "a list of objects with integer slot, capture_index, hf_index and "
             "string label, or null")
MIX = (_absent_or(_list_of(_mix_row)), "a list of objects with string path, string role and mode, boolean tbo "
       "and number count (or absent)")

OPT_ANY_NUMBER = (_optional(lambda v: _int(v) or isinstance(v, float)), "a number (NaN and Infinity allowed: a "
                  "non-finite slot) or null")
FINGERPRINT_SLOTS = (_optional(lambda v: isinstance(v, list) and len(v) <= MAX_POSITIONS and all(
    isinstance(s, dict) for s in v)), f"a list of at most {MAX_POSITIONS} objects (one per slot), or null")
OPT_SIGNATURE = (_optional(lambda v: isinstance(v, list) and len(v) <= MAX_POSITIONS
                           and all(_int(x) or isinstance(x, float) for x in v)),
                 f"a list of at most {MAX_POSITIONS} numbers, or null")

_DEPTH_KEY = re.compile(r"[0-9]{1,3}")  # draft steps; int() reads them, as the estimate does
MAX_COUNTS = 16  # numbers in one costs row: speculation_cost.STEP_FIELDS or FIT_FIELDS, with room for a later layout's


def _counts(v) -> bool:
    return isinstance(v, list) and len(v) <= MAX_COUNTS and all(_number(x) for x in v)


def _cost_steps(v) -> bool:
    """{batch bucket: {depth: [steps, batch_sum, seconds ...]}}: the estimate adds them up and divides."""
    return isinstance(v, dict) and len(v) <= 64 and all(
        _str(b) and isinstance(d, dict) and len(d) <= 64 and all(_DEPTH_KEY.fullmatch(k) and _counts(r)
                                                                  for k, r in d.items()) for b, d in v.items())


def _position_counts(v) -> bool:
    return v is None or v is ABSENT or (isinstance(v, list) and len(v) <= MAX_POSITIONS and all(_int(x) for x in v))


def _survival(v) -> bool:
    """{traffic class: {accepted: [...], drafted: [...]}}: request-steps per draft position."""
    return isinstance(v, dict) and len(v) <= 16 and all(
        _str(name) and isinstance(c, dict) and all(_position_counts(c.get(k, ABSENT)) for k in ("accepted", "drafted"))
        for name, c in v.items())


OPT_COST_STEPS = (_optional(_cost_steps), "an object of batch buckets to objects of depths ('0', '1', ...) to lists "
                  f"of at most {MAX_COUNTS} finite numbers, or null")
OPT_PLAIN_STEPS = (_optional(lambda v: isinstance(v, dict) and len(v) <= 64 and all(
    _str(k) and (r is None or _counts(r)) for k, r in v.items())), "an object of batch buckets to lists of at most "
    f"{MAX_COUNTS} finite numbers, or null")
OPT_COST_FORWARDS = (_optional(lambda v: isinstance(v, dict) and len(v) <= 1024 and all(
    _str(k) and _counts(r) for k, r in v.items())), f"an object of forward keys to lists of at most {MAX_COUNTS} "
    "finite numbers, or null")
OPT_SURVIVAL = (_optional(_survival), f"an object of traffic classes to {{accepted, drafted}}: lists of at most "
                f"{MAX_POSITIONS} integers, or null")

OPT_LAUNCH = (_optional(lambda v: isinstance(v, dict) and _str(v.get("id")) and isinstance(v.get("args", {}), dict)),
              "an object with a string id and an object of args, or null")

# A rank of one run: a restarted process under a pid already read is another run (logread.LogReader numbers it).
RANK_KEY = ("tp_rank", "pp_rank", "dp_rank", "pid", "run")


def rank_key(item: dict) -> tuple:
    """Which rank of which run an event, finding or rank entry belongs to."""
    return tuple(item.get(name) for name in RANK_KEY)


def rank_fields(key: tuple) -> dict:
    """A rank_key as the fields of a report's entry."""
    return dict(zip(RANK_KEY, key))


COMMON = {"pid": OPT_INT, "tp_rank": OPT_INT, "pp_rank": OPT_INT, "dp_rank": OPT_INT, "timestamp": OPT_STR,
          "node_rank": OPT_INT, "nnodes": OPT_INT, "host": OPT_STR}

BY_EVENT = {
    names.STARTED: {"sglang_version": OPT_STR, "rules": OPT_STR,
                    "launch": OPT_LAUNCH},
    names.CAPTURE_CONFIGURED: {
        "role": OPT_STR, "caller": OPT_STR, "during_graph_setup": OPT_BOOL, "requested_ids": OPT_INTS,
        "layers_to_capture": OPT_INTS, "mapping": OPT_STR, "version_rule": OPT_STR, "slots": OPT_SLOTS},
    names.TARGET_FORWARD: {
        "model_class": OPT_STR, "role": OPT_STR, "mode": OPT_STR, "path": STR, "can_run_tbo": OPT_BOOL,
        "layers_to_capture": OPT_INTS, "slot_labels": OPT_STRS, "tbo_layers": OPT_INTS, "lost": OPT_INTS,
        "tokens": OPT_INT, "aux_returned": OPT_INT, "aux_expected": OPT_INT, "aux_format": OPT_STR,
        "aux_shape": OPT_INTS, "slot_widths": OPT_INTS, "dtype": OPT_STR, "error": OPT_STR},
    names.SUMMARY: {"forwards": MIX, "captures_lost": OPT_INT, "internal_errors": OPT_INT},
    names.FINDING: {"code": STR_OR_ABSENT, "severity": OPT_STR, "role": OPT_STR, "message": OPT_STR},
    names.INTERNAL_ERROR: {"where": OPT_STR, "error": OPT_STR},
    names.ACCEPTANCE: {
        "steps": OPT_NUMBER, "drafts": OPT_NUMBER, "draft_tokens": OPT_NUMBER, "drafted_tokens": OPT_NUMBER,
        "accepted_tokens": OPT_NUMBER, "mean_accept_length": OPT_NUMBER, "expected_mean_accept_length": OPT_NUMBER,
        "per_position_rate": OPT_RATES, "accept_length_histogram": OPT_HISTOGRAM, "read_at": OPT_STR,
        "draft_accuracy": OPT_RATES},
    names.VOCAB_COVERAGE: {"in_vocab": OPT_INT, "verified_tokens": OPT_INT, "map": OPT_STR, "hot_vocab_size": OPT_INT,
                           "draft_vocab_size": OPT_INT, "target_vocab_size": OPT_INT},
    names.ACCEPTANCE_SLICES: {
        "positions": OPT_INT, "requests": OPT_INT, "slices": OPT_SLICES, "request_accept_length": OPT_BUCKET_COUNTS},
    names.DRAFT_LOADED: {"model_class": OPT_STR, "draft_vocab_size": OPT_INT, "target_vocab_size": OPT_INT,
                         "d2t_size": OPT_INT},
    names.DRAFT_FORWARD: {"mode": OPT_STR, "aux_width": OPT_INT, "fc_in": OPT_INT, "fc_ran": OPT_BOOL},
    names.DUMP_WRITTEN: {"path": OPT_STR},
    names.BLOCK_CAPTURE: {"model_class": OPT_STR, "algorithm": OPT_STR, "requested_ids": OPT_INTS,
                          "layers_to_capture": OPT_INTS, "slots": OPT_SLOTS, "ids_source": OPT_STR,
                          "rule_text": OPT_STR},
    names.SPEC_COSTS: {"source": OPT_STR, "topk": OPT_INT, "steps": OPT_COST_STEPS, "forwards": OPT_COST_FORWARDS,
                       "acceptance": OPT_SURVIVAL, "server": OPT_STR, "plain_steps": OPT_PLAIN_STEPS},
    names.AUX_FINGERPRINT: {
        "role": OPT_STR, "slot": OPT_INT, "step": OPT_INT, "tokens": OPT_INT, "rms": OPT_ANY_NUMBER,
        "absmax": OPT_ANY_NUMBER, "nonfinite": OPT_INT, "label": OPT_STR, "signature": OPT_SIGNATURE},
    # each slot is checked as an AUX_FINGERPRINT once the reader made it one (logread.fingerprint_slots)
    names.AUX_FINGERPRINTS: {"role": OPT_STR, "step": OPT_INT, "tokens": OPT_INT, "slots": FINGERPRINT_SLOTS},
}


def field_problem(event: dict) -> str | None:
    """Why the report cannot use this event (a known field of the wrong type), or None."""
    for spec in (COMMON, BY_EVENT.get(event.get("event"), {})):
        for key, (check, accepted) in spec.items():
            value = event.get(key, ABSENT)
            if not check(value):
                got = "it is missing" if value is ABSENT else f"got {_shown(value)}"
                return f"field '{key}' must be {accepted}; {got}"
    return None
