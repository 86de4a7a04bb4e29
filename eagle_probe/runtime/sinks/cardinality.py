"""How many series the probe can make in one process: a bound per label (the values it can take), a bound per series
(the product over its labels, or a stated bound where labels go together), and the sum. sinks/series.py makes no
child past its series' bound (it counts the refusals), so the bound holds whatever SGLang or the clients send;
the generated metrics reference states it. Every series also carries the process's rank labels, one value each.

Custom request labels (`label:KEY` slices) are the one bound that depends on the server: each key SGLang lets
through (--tokenizer-metrics-allowed-custom-labels) adds at most MAX_LABEL_VALUES values, `none` and `other`;
the stated bound counts CUSTOM_LABEL_KEYS of them, and a server with more keys is capped at it.
"""

import math

from ...analysis.findings import CODES
from ...analysis.slices import DIMENSIONS, REQUEST_LENGTH_BUCKETS
from ...analysis.traffic import MAX_LABEL_VALUES
from ..values.dumps import STOP_REASONS
from . import catalogue as C
from .series import Spec

MAX_POSITIONS = 32  # draft positions (and depths) counted apart; served chains are a few steps deep
CUSTOM_LABEL_KEYS = 4

# label -> how many values it takes in one process
LABEL_VALUES = {
    "role": 3,  # target, draft, http_server
    "mode": 16,  # SGLang's ForwardMode names (13 in 0.5.23)
    "path": 3,  # eager, graph_replay, graph_capture
    "tbo": 2,
    "graph": 8,  # the graph runner classes (versions.GRAPH_ENTRIES) and none
    "fc": 2,
    "slot": 16,  # aux slots (EAGLE-3 drafts take 3)
    "position": MAX_POSITIONS,
    "depth": MAX_POSITIONS,
    "batch_bucket": 9,  # analysis.batch_buckets
    "phase": 4,  # draft, verify, extend, step
    "in_vocab": 2,
    "code": len(CODES),
    "severity": 1,  # each code has one severity
    "where": 64,  # the probe's own error sites
    "integration": 1,  # each patch target belongs to one integration
    "target": 64,  # patch targets (runtime/integrations)
    "reason": len(STOP_REASONS) + 2,
}

# series whose labels go together: their own bound
SLICE_BUCKETS = sum(len(b) for b in DIMENSIONS.values()) + CUSTOM_LABEL_KEYS * (MAX_LABEL_VALUES + 2)
CORRELATED = {
    C.INFO.name: 1,  # one set of versions and group widths per process
    # slot -> its capture index, HF index and label; a reconfiguration keeps the replaced slots at 0
    C.CAPTURE_LAYER_INFO.name: LABEL_VALUES["role"] * LABEL_VALUES["slot"] * 4,
    C.SLICE_DRAFTS.name: SLICE_BUCKETS,
    C.SLICE_ACCEPTED_PER_POS.name: SLICE_BUCKETS * MAX_POSITIONS,
    C.REQUESTS_BY_ACCEPT_LENGTH.name: len(REQUEST_LENGTH_BUCKETS),
}


def series_bound(spec: Spec) -> int:
    """The most children `spec` can have in one process."""
    if spec.name in CORRELATED:
        return CORRELATED[spec.name]
    return math.prod(LABEL_VALUES[label] for label in spec.labels)


def all_specs() -> list[Spec]:
    return [value for value in vars(C).values() if isinstance(value, Spec)]


def process_bound() -> int:
    """Series (label sets) one process can make, histogram buckets not counted apart."""
    return sum(series_bound(spec) for spec in all_specs())
