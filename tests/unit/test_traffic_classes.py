"""Traffic classes counted per finished request in SGLang's HTTP server process (analysis/traffic.py, the slice
counter's add_request, the low-slice test and its finding over them): pure logic on plain records.
tests/real_sglang/test_request_classes_hook.py runs the hooks on SGLang's real request and output classes."""

from eagle_probe.analysis import slices as S
from eagle_probe.analysis import traffic as T
from eagle_probe.observations import RequestFinished, VerifyStep
from eagle_probe.runtime.slice_counter import SliceCounter


def test_entry_point_from_the_route():
    assert [T.entry_bucket(r) for r in ("/v1/chat/completions", "/v1/completions", "/generate", None,
                                        "/health_generate", "")] == \
        ["chat", "completions", "generate", "engine", "other", "other"]
    assert set(T.ENTRY_ROUTES.values()) < set(T.ENTRY_BUCKETS)


def test_custom_labels_only_allowed_keys_values_bounded_news_once():
    values = T.LabelValues(["app"])
    assert values.buckets({"app": "chatbot", "team": "x"}) == [("label:app", "chatbot")]
    assert values.buckets(None) == [("label:app", "none")]
    assert values.buckets({"app": "y" * 100}) == [("label:app", "y" * T.MAX_LABEL_LENGTH)]
    assert values.take_news() == [("team", "not_allowed")]
    for n in range(T.MAX_LABEL_VALUES):  # two values are taken already
        values.buckets({"app": f"a{n}", "team": "again"})
    assert values.buckets({"app": "chatbot"}) == [("label:app", "chatbot")]  # a value seen before keeps its slice
    assert values.buckets({"app": "new"}) == [("label:app", "other")]
    assert values.take_news() == [("app", "values")] and values.take_news() == []
    assert T.LabelValues(None).buckets({"app": "x"}) == []


def test_lengths_from_sglang_histogram():
    # SGLang's histogram: entry k counts the request's verify steps that accepted exactly k drafts
    assert T.lengths_from_histogram([3, 0, 5, 2], 3) == {0: 3, 2: 5, 3: 2}
    assert T.lengths_from_histogram([1, 1, 1, 1, 4], 3) == {0: 1, 1: 1, 2: 1, 3: 5}  # clamped to the positions
    assert T.lengths_from_histogram([2, True, "x", -1, None], 3) == {0: 2}
    assert T.lengths_from_histogram(None, 3) == {}


def _finished(entry, lengths, label=None):
    classes = ((T.ENTRY, entry),) + ((("label:app", label),) if label else ())
    return RequestFinished(classes, lengths, 2)


def test_requests_count_into_their_classes_and_ordering_is_fixed():
    counter = SliceCounter()
    counter.add_request(_finished("generate", {0: 3, 2: 1}, "b"))
    counter.add_request(_finished("chat", {2: 4}, "a"))
    counter.add(VerifyStep([1], 2, "t", [], 1, False))  # the schedulers' own dimensions beside them
    snap = counter.snapshot()
    assert list(snap["slices"]) == list(S.DIMENSIONS) + ["entry", "label:app"]  # the schedulers', then these
    assert snap["slices"]["entry"] == {"chat": {"request_steps": 4, "accepted": [4, 4], "drafted": [4, 4]},
                                       "generate": {"request_steps": 4, "accepted": [1, 1], "drafted": [4, 4]}}
    assert list(snap["slices"]["label:app"]) == ["a", "b"] and counter.requests_classified == 2


def test_raw_prompts_far_below_chat_are_named_with_the_template_as_cause():
    counter = SliceCounter()
    for _ in range(40):
        counter.add_request(_finished("chat", {2: 8, 1: 2}))
        counter.add_request(_finished("generate", {0: 8, 2: 2}))
    snap = counter.snapshot()
    low = S.worst_per_slice(S.low_slices(snap["slices"], snap["positions"]))
    assert [(i["dimension"], i["bucket"]) for i in low] == [("entry", "generate")]
    finding = S.slice_low_finding(low[0], snap["positions"])
    assert "chat template" in finding.message and "entry = generate" in finding.message


def test_a_low_custom_label_value_is_named_with_its_key():
    counter = SliceCounter()
    for _ in range(40):
        counter.add_request(_finished("chat", {2: 9, 0: 1}, "en"))
        counter.add_request(_finished("chat", {0: 9, 2: 1}, "de"))
    snap = counter.snapshot()
    low = S.worst_per_slice(S.low_slices(snap["slices"], snap["positions"]))
    assert [(i["dimension"], i["bucket"]) for i in low] == [("label:app", "de")]
    assert "custom label 'app'" in S.slice_low_finding(low[0], snap["positions"]).message


def test_equal_classes_stay_silent():
    counter = SliceCounter()
    for _ in range(40):
        counter.add_request(_finished("chat", {2: 5, 0: 5}, "en"))
        counter.add_request(_finished("generate", {2: 5, 0: 5}, "de"))
    snap = counter.snapshot()
    assert S.low_slices(snap["slices"], snap["positions"]) == []
