"""Acceptance by traffic class in SGLang's HTTP server process (its TokenizerManager): the entry point a request came
in by (the HTTP route of `_init_req_state(obj, request)`; no request: the Engine API) and its custom labels (only the
keys `--tokenizer-metrics-allowed-custom-labels` allows, values bounded: analysis/traffic.py), counted once per
finished request from the histogram of accepted drafts per verify step that SGLang hands this process with the
request's last output (`_calculate_spec_decoding_metrics(meta_info, recv_obj, i)`, called once per finished request
of a speculative server). Nothing runs per token or per verify step, and the schedulers are not touched.

Between arrival and finish a request's classes wait in a dict keyed by its rid, bounded (the oldest go first: a
request aborted before its end never reaches the finish hook).
"""

from ... import versions
from ...analysis.traffic import ENTRY, UNKNOWN, LabelValues, entry_bucket, lengths_from_histogram
from ...events import CUSTOM_LABEL_NOT_SLICED
from ...observations import RequestFinished
from ..patcher import Integration, PatchTarget
from ..state import STATE

MAX_PENDING = 1 << 16  # requests between arrival and finish whose classes are kept
_pending = {}  # rid -> (entry bucket, custom labels), oldest first
_labels = []  # [LabelValues] once the server's allowed keys were read


def reset():
    _pending.clear()
    _labels.clear()


def _route(request):
    if request is None:
        return None
    try:
        return request.url.path
    except Exception:  # another kind of request object: counted under "other"
        return ""


def _speculative(manager) -> bool:
    return getattr(getattr(manager, "server_args", None), "speculative_algorithm", None) is not None


def arrival_wrapper(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    if STATE.active:
        try:
            obj = args[0] if args else kwargs["obj"]
            if _speculative(instance) and hasattr(obj, "sampling_params"):  # generation requests only
                request = args[1] if len(args) > 1 else kwargs.get("request")
                classes = (entry_bucket(_route(request)), getattr(obj, "custom_labels", None))
                for rid in ([obj.rid] if getattr(obj, "is_single", True) else list(obj.rid)):
                    _pending[rid] = classes
                while len(_pending) > MAX_PENDING:
                    del _pending[next(iter(_pending))]
        except Exception as exc:
            STATE.report_error("request_classes.arrival", exc)
    return result


def _label_values(manager) -> LabelValues:
    if not _labels:
        allowed = getattr(manager.server_args, "tokenizer_metrics_allowed_custom_labels", None)
        _labels.append(LabelValues(allowed if isinstance(allowed, (list, tuple)) else ()))
    return _labels[0]


def _launch_positions(args) -> int:
    """The drafts a step proposes at launch: the speculative steps, or a block draft's block less its bonus token
    (DFlash and DSpark launch with speculative_num_steps 1 whatever their block)."""
    algorithm = getattr(args, "speculative_algorithm", None)
    tokens = getattr(args, "speculative_num_draft_tokens", None)
    if str(getattr(algorithm, "name", algorithm)).upper() in versions.BLOCK_ALGORITHMS and isinstance(tokens, int):
        return tokens - 1
    return args.speculative_num_steps or 0


def _finished(manager, recv_obj, i: int):
    recorder = STATE.recorder
    recorder.ensure_http_server(manager.server_args)  # its node and host, and SGLang's /metrics for its series
    entry, labels = _pending.pop(recv_obj.rids[i], (UNKNOWN, None))
    histograms = getattr(recv_obj, versions.REQUEST_HISTOGRAM_FIELD, None)
    if not histograms or len(histograms) <= i or not histograms[i]:
        return  # no verify step (the request ended at its prefill)
    # Adaptive depth drafts deeper than the launch steps, and this process never sees a step's own depth: the
    # histogram's length bounds it (its accepted drafts are never clamped).
    positions = max(_launch_positions(manager.server_args), len(histograms[i]) - 1)
    values = _label_values(manager)
    classes = ((ENTRY, entry), *values.buckets(labels))
    for key, why in values.take_news():
        allowed = ", ".join(values.allowed) or "none"
        reason = (f"the server does not allow it (--tokenizer-metrics-allowed-custom-labels: {allowed})"
                  if why == "not_allowed" else "it reached its bound of distinct values; further values are "
                                               "counted as 'other'")
        recorder.out.emit("warning", CUSTOM_LABEL_NOT_SLICED, key=key, reason=why, allowed=list(values.allowed),
                          message=f"custom label {key!r}: {reason}")
    recorder.request_finished(RequestFinished(classes, lengths_from_histogram(histograms[i], positions), positions))


def finish_wrapper(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    if STATE.active:
        try:
            recv_obj = args[1] if len(args) > 1 else kwargs["recv_obj"]
            _finished(instance, recv_obj, args[2] if len(args) > 2 else kwargs["i"])
        except Exception as exc:
            STATE.report_error("request_classes.finish", exc)
    return result


_OFF = "acceptance by entry point and custom label (the HTTP server process)"
INTEGRATION = Integration("request_classes", (
    PatchTarget(versions.TOKENIZER_MODULE, versions.REQUEST_ARRIVAL_HOOK, arrival_wrapper, observes=_OFF,
                rows_only=True),
    PatchTarget(versions.TOKENIZER_MODULE, versions.REQUEST_FINISH_HOOK, finish_wrapper, observes=_OFF,
                rows_only=True),
), reset=reset)
