"""Vocabulary coverage: the pure rules (analysis.vocab_coverage), the sampler's host and device counts
(runtime/values/coverage.py, on CPU tensors) and the recorder's coverage part (counters, event, finding)."""

import json
import random

import pytest
import torch

from eagle_probe.analysis import vocab_coverage as V
from eagle_probe.analysis.findings import ACCEPTANCE_COLLAPSE, CODES, DRAFT_VOCAB_COVERAGE_LOW, WARNING
from eagle_probe.config import ConfigError, ProbeConfig, load_config
from eagle_probe.observations import DraftVocabulary, VerifyStep
from eagle_probe.runtime.values.coverage import SLOTS, VocabCoverage

# ------------------------------------------------------------------------------------------------ pure rules


def test_hot_ids_per_map_kind():
    assert V.hot_ids(None, 256, None) == (V.MAP_FULL, None)  # the target's lm_head
    assert V.hot_ids(256, 256, None) == (V.MAP_FULL, None)
    assert V.hot_ids(4, 256, None) == (V.MAP_NONE, (0, 1, 2, 3))  # SGLang uses draft ids as target ids
    # draft id i -> i + d2t[i]; out of range dropped, duplicates once
    assert V.hot_ids(4, 10, [5, 5, 0, 7]) == (V.MAP_D2T, (2, 5, 6))  # 0+5, 1+5, 2+0, 3+7=10 (out)
    assert V.hot_ids(2, None, [1, 1]) == (V.MAP_D2T, (1, 2))


def test_table_counts_hot_tokens():
    table = V.in_vocab_table(8, (1, 3, 5))
    assert list(table) == [0, 1, 0, 1, 0, 1, 0, 0]
    assert sum(map(table.__getitem__, [1, 1, 2, 3, 7])) == 3


@pytest.mark.parametrize("coverage,positions,cap", [(0.5, None, 2.0), (0.75, None, 4.0), (0.75, 2, 3.0),
                                                    (1.0, None, None), (1.0, 3, 4.0), (0.0, None, 1.0)])
def test_length_cap(coverage, positions, cap):
    assert V.length_cap(coverage, positions) == cap


def test_cap_is_a_true_bound_on_random_chains():
    """Over random verify steps, accepted drafts are hot tokens, so (L - 1) / L <= coverage, whatever the draft."""
    rng = random.Random(7)
    hot = set(range(50))
    for _ in range(200):
        accepted_total = committed = inside = 0
        for _ in range(rng.randrange(1, 30)):
            accepted = []
            for _ in range(rng.randrange(0, 4)):  # accepted drafts: always hot
                accepted.append(rng.randrange(50))
            bonus = rng.randrange(100)
            tokens = accepted + [bonus]
            accepted_total += len(accepted)
            committed += len(tokens)
            inside += sum(t in hot for t in tokens)
        steps_mean = committed / (committed - accepted_total)  # mean accept length: tokens per step
        cap = V.length_cap(inside / committed)
        assert cap is None or steps_mean <= cap + 1e-9  # None: every token hot, no cap


def test_no_finding_without_enough_tokens_or_full_vocabulary():
    assert V.coverage_finding(10, 100, V.MAP_D2T, 32, 32, "x") is None  # 100 < MIN_TOKENS
    assert V.coverage_finding(0, 10_000, V.MAP_FULL, None, None, "x") is None
    assert V.coverage_finding(980, 1000, V.MAP_D2T, 32000, 32000, "x") is None  # high and not binding


def test_low_coverage_is_a_warning_naming_the_cap():
    finding = V.coverage_finding(600, 1000, V.MAP_D2T, 32000, 32000, "tp_rank 0")
    assert finding.code == DRAFT_VOCAB_COVERAGE_LOW and finding.severity == WARNING == CODES[finding.code][0]
    evidence = finding.evidence_dict()
    assert evidence["coverage"] == 0.6 and evidence["mean_accept_length_cap"] == 2.5 and evidence["low"]
    assert "600 of 1000" in finding.message and "at most 2.50" in finding.message and "rebuild" in finding.message


def test_low_only_beyond_chance():
    # 0.88 over 300 tokens: the upper bound (about 0.94) is over 0.9: not low; over 30000 tokens it is
    assert V.coverage_finding(264, 300, V.MAP_D2T, 100, 100, "x") is None
    assert V.coverage_finding(26400, 30000, V.MAP_D2T, 100, 100, "x") is not None


def test_binding_coverage_needs_acceptance_below_the_promise():
    # coverage 0.95; served L = 10 -> 90 % of tokens were accepted drafts: at the cap (>= 0.9 * 0.95)
    assert V.coverage_finding(950, 1000, V.MAP_D2T, 100, 100, "x", V.Served(10.0)) is None
    finding = V.coverage_finding(950, 1000, V.MAP_D2T, 100, 100, "x", V.Served(10.0, below_promise=True))
    assert finding is not None and finding.evidence_dict()["binding"] and not finding.evidence_dict()["low"]
    assert "limits acceptance" in finding.message
    # served far under the cap: the vocabulary does not explain it
    assert V.coverage_finding(950, 1000, V.MAP_D2T, 100, 100, "x", V.Served(1.5, below_promise=True)) is None


def test_missing_map_fix_points_at_d2t():
    finding = V.coverage_finding(100, 1000, V.MAP_NONE, 128, 128, "x")
    assert "no d2t: draft ids used as target ids 0..127" in finding.message and "d2t map" in finding.message


def test_config_interval():
    assert load_config({}).coverage_interval_s == 0.1
    assert load_config({"EAGLE_PROBE_COVERAGE_INTERVAL_S": "0"}).coverage_interval_s == 0
    with pytest.raises(ConfigError, match="EAGLE_PROBE_COVERAGE_INTERVAL_S"):
        load_config({"EAGLE_PROBE_COVERAGE_INTERVAL_S": "-1"})
    assert ProbeConfig(coverage_interval_s=0.5).to_env()["EAGLE_PROBE_COVERAGE_INTERVAL_S"] == "0.5"


# ------------------------------------------------------------------------------------------------ the sampler


def test_nothing_sampled_before_the_vocabulary_is_known_then_one_step_per_interval():
    sampler = VocabCoverage(1.0)
    assert sampler.next_due == float("inf")  # no clock reading reaches it: the hot path never samples
    sampler.set_vocabulary((1, 2), V.in_vocab_table(4, (1, 2)))
    assert sampler.next_due == 0.0
    sampler.sample_lists(100.25, [[1]])
    assert sampler.next_due == 101.25  # no step before an interval has passed is sampled
    sampler.sample_lists(101.5, [[0, 2]])  # the first step after it
    assert sampler.next_due == 102.5
    assert sampler.samples == 0  # counted on the flush thread, not on the hot path
    assert sampler.count() == (2, 3) and sampler.samples == 2


def test_an_uncounted_queue_keeps_its_bound_dropping_the_oldest(monkeypatch):
    from eagle_probe.runtime.values import coverage as module

    monkeypatch.setattr(module, "MAX_QUEUED", 3)
    sampler = VocabCoverage(1.0)
    sampler.set_vocabulary((1,), V.in_vocab_table(4, (1,)))
    for step in range(5):
        sampler.sample_lists(float(step), [[0 if step < 2 else 1]])  # the first two (out of vocabulary) go
    assert sampler.count() == (3, 3) and sampler.samples == 3
    sampler.sample_lists(9.0, [[1]])  # counted: queued again
    assert sampler.count() == (4, 4)


def test_host_lists_counted_on_read_ids_beyond_the_table_are_out():
    sampler = VocabCoverage(1.0)
    sampler.set_vocabulary((1, 2), V.in_vocab_table(4, (1, 2)))
    sampler.sample_lists(0.0, [[1, 2, 3], [0]])
    sampler.sample_lists(0.0, [[2, 9]])  # 9 is past the table
    assert (sampler.in_vocab, sampler.total) == (0, 0)  # nothing counted on the hot path
    sampler.count()
    assert (sampler.in_vocab, sampler.total) == (3, 6)


def test_full_vocabulary_counts_every_token():
    sampler = VocabCoverage(1.0)
    sampler.set_vocabulary(None, None)
    sampler.sample_lists(0.0, [[5, 6], [7]])
    sampler.sample_device(0.0, torch.tensor([1, 2, 3, 4]))
    sampler.count()
    assert (sampler.in_vocab, sampler.total) == (7, 7)


def test_device_counts_equal_an_independent_count():
    rng = torch.Generator().manual_seed(3)
    hot = tuple(sorted(set(torch.randint(0, 1000, (300,), generator=rng).tolist())))
    sampler = VocabCoverage(1.0)
    sampler.set_vocabulary(hot, V.in_vocab_table(1000, hot))
    expected_in = expected_total = 0
    for _ in range(5):
        ids = torch.randint(-3, 1100, (57,), generator=rng)  # some out of range on both ends
        assert sampler.sample_device(0.0, ids.to(torch.int32))
        expected_in += sum(1 for t in ids.tolist() if t in set(hot))
        expected_total += 57
    sampler.count()
    assert (sampler.in_vocab, sampler.total) == (expected_in, expected_total)


def test_device_slots_bound_what_waits_unread():
    sampler = VocabCoverage(1.0)
    sampler.set_vocabulary((0,), V.in_vocab_table(2, (0,)))
    for _ in range(SLOTS):
        assert sampler.sample_device(0.0, torch.tensor([0, 1]))
    assert not sampler.sample_device(0.0, torch.tensor([0]))  # every slot waits: skipped, not queued
    sampler.count()
    assert (sampler.in_vocab, sampler.total) == (SLOTS, 2 * SLOTS)
    assert sampler.sample_device(0.0, torch.tensor([0]))  # slots free again


# ------------------------------------------------------------------------------------------------ the part


@pytest.fixture
def make(make_recorder):
    """This file's recorders: a summary every second, the ranks read at once."""
    def make_ranked(interval=1.0, **config):
        probe = make_recorder(summary_interval_s=interval, **config)
        probe.recorder.ensure_ranks()
        return probe
    return make_ranked


def events(stream, name=None):
    out = [json.loads(line) for line in stream.getvalue().splitlines()]
    return [e for e in out if name is None or e["event"] == name]


def test_part_counts_exports_and_names_low_coverage_before_a_collapse(make):
    recorder, stream, registry, clock = make(draft_accuracy=(0.8,))
    recorder.observe("draft_vocabulary", DraftVocabulary("LlamaForCausalLMEagle3", 128, 256, V.MAP_NONE,
                                                         tuple(range(128))))
    sampler = recorder.coverage
    for step in range(300):  # no draft accepted, one token each: 100 of 300 inside
        recorder.verify_step(VerifyStep((0,), 2, "test"))
        assert clock.now >= sampler.next_due
        sampler.sample_lists(clock.now, [[step % 3 * 100]])  # 0, 100, 200: only 0 and 100 are < 128 ... two of three
        sampler.next_due = 0.0
    recorder.flush_metrics()
    inside = registry.get_sample_value("eagle_probe_draft_vocab_verified_tokens_total",
                                       dict(RANK0, in_vocab="true"))
    outside = registry.get_sample_value("eagle_probe_draft_vocab_verified_tokens_total",
                                        dict(RANK0, in_vocab="false"))
    share = registry.get_sample_value("eagle_probe_draft_vocab_coverage", RANK0)
    assert (inside, outside) == (200, 100) and share == pytest.approx(2 / 3)
    clock.now = 2.0
    recorder.periodic.tick()
    [event] = events(stream, "eagle_probe.draft.vocab_coverage")
    assert (event["in_vocab"], event["verified_tokens"], event["map"], event["hot_vocab_size"]) == (200, 300, "none",
                                                                                                     128)
    assert event["mean_accept_length_cap"] == pytest.approx(3.0)
    codes = [e["code"] for e in events(stream, "eagle_probe.finding")]
    # coverage 2/3 < 0.9 beyond chance; the collapse of the same interval comes after and names it
    assert codes == [DRAFT_VOCAB_COVERAGE_LOW, ACCEPTANCE_COLLAPSE]
    collapse = events(stream, "eagle_probe.finding")[1]
    assert DRAFT_VOCAB_COVERAGE_LOW in collapse["evidence"]["likely_causes"]


def test_part_silent_for_a_full_vocabulary_and_off_at_zero(make):
    recorder, stream, registry, clock = make()
    recorder.observe("draft_vocabulary", DraftVocabulary("LlamaForCausalLMEagle3", None, 256, V.MAP_FULL, None))
    recorder.coverage.sample_lists(0.0, [list(range(250))])
    clock.now = 2.0
    recorder.periodic.tick()
    [event] = events(stream, "eagle_probe.draft.vocab_coverage")
    assert event["coverage"] == 1.0 and event["mean_accept_length_cap"] is None
    assert not events(stream, "eagle_probe.finding")
    off, _, _, _ = make(coverage_interval_s=0)
    assert off.coverage is None
    off.observe("draft_vocabulary", DraftVocabulary("X", None, 256, V.MAP_FULL, None))  # nothing breaks


# ------------------------------------------------------------------------------------------------ summarize

from tests.unit.test_summarize_training import RANK, acceptance, healthy_run, summarize  # noqa: E402

RANK0 = dict(tp_rank="0", pp_rank="0", dp_rank="", node_rank="", host="")  # the series labels of tp rank 0


def coverage_event(in_vocab, total, map_kind="d2t", hot=32000, draft_vocab=32000, target_vocab=128256):
    return dict(RANK, event="eagle_probe.draft.vocab_coverage", role="target", in_vocab=in_vocab,
                verified_tokens=total, coverage=in_vocab / total, map=map_kind, hot_vocab_size=hot,
                draft_vocab_size=draft_vocab, target_vocab_size=target_vocab)


def test_summarize_shows_coverage_and_no_finding_when_it_is_high(tmp_path, capsys):
    events = healthy_run() + [acceptance([0.75, 0.6, 0.45]), coverage_event(100, 120), coverage_event(970, 1000)]
    report = summarize(tmp_path, capsys, events)
    section = report["draft_vocab_coverage"]
    assert section["coverage"] == 0.97 and (section["in_vocab"], section["verified_tokens"]) == (970, 1000)
    [row] = section["ranks"]
    assert row["mean_accept_length_cap"] == pytest.approx(4.0)  # min(1 / 0.03, 3 positions + 1)
    assert DRAFT_VOCAB_COVERAGE_LOW not in {f["code"] for f in report["findings"]}
    text = summarize(tmp_path, capsys, events, fmt="text")
    assert "draft vocabulary coverage: 0.970 (970 of 1000 sampled verified tokens inside 32000 target ids " \
           "through d2t); caps the mean accept length at 4.00" in text


def test_summarize_names_low_coverage_as_the_cause_of_acceptance_below_training(tmp_path, capsys):
    # served 0.5 / 0.25 / 0.1 against a promise of 0.8 per position: below; the coverage 0.6 caps L at 2.5
    events = healthy_run() + [acceptance([0.5, 0.25, 0.1]), coverage_event(600, 1000)]
    report = summarize(tmp_path, capsys, events, "--draft-accuracy", "0.8")
    codes = [f["code"] for f in report["findings"]]
    assert DRAFT_VOCAB_COVERAGE_LOW in codes and "acceptance_below_training" not in codes
    assert report["training"]["explained_by"] == [DRAFT_VOCAB_COVERAGE_LOW]
    text = summarize(tmp_path, capsys, events, "--draft-accuracy", "0.8", fmt="text")
    assert "findings that may explain the shortfall: draft_vocab_coverage_low" in text
    assert "FINDING draft_vocab_coverage_low [warning]" in text


def test_summarize_binding_coverage_explains_a_shortfall_only_at_the_cap(tmp_path, capsys):
    # coverage 213 / 250 = 0.852 is not low beyond chance (upper bound 0.92) but caps L at 6.76; the promise of 0.95
    # per position over 7 positions is L = 6.53
    at_cap = [0.85, 0.75, 0.65, 0.55, 0.45, 0.4, 0.35]  # L = 5.0: 80 % of the tokens accepted drafts (>= 0.9 * 0.852)
    events = healthy_run() + [acceptance(at_cap), coverage_event(213, 250)]
    report = summarize(tmp_path, capsys, events, "--draft-accuracy", "0.95")
    [found] = [f for f in report["findings"] if f["code"] == DRAFT_VOCAB_COVERAGE_LOW]
    assert "limits acceptance" in found["last_message"]
    assert "acceptance_below_training" not in {f["code"] for f in report["findings"]}
    # no promise given: the same figures are not judged
    assert DRAFT_VOCAB_COVERAGE_LOW not in {f["code"] for f in summarize(tmp_path, capsys, events)["findings"]}
    # far under the cap: not the vocabulary; acceptance_below_training speaks, listing the coverage as checked
    events = healthy_run() + [acceptance([0.4, 0.2, 0.1, 0.05, 0.02, 0.01, 0.0]), coverage_event(213, 250)]
    report = summarize(tmp_path, capsys, events, "--draft-accuracy", "0.95")
    codes = {f["code"] for f in report["findings"]}
    assert DRAFT_VOCAB_COVERAGE_LOW not in codes and "acceptance_below_training" in codes
    [vocab] = [c for c in report["training"]["checks"] if c["check"] == "vocabulary map"]
    assert vocab["status"] == "clean" and "vocabulary coverage 0.852" in vocab["detail"]


# ------------------------------------------------------------------------------------------------ contract check

_RESOLVER = '''
def resolve(self, result, batch):
    next_token_ids = result.next_token_ids.tolist()
    accept_lens = result.accept_lens.tolist()
    predict_tokens = []
    for i, req in enumerate(batch.reqs):
        {body}
    return predict_tokens
'''


@pytest.mark.parametrize("body,problem", [
    ("predict_tokens.append(next_token_ids[i * 3 : i * 3 + accept_lens[i]])", None),
    ("accept_tokens = next_token_ids[i * 3 : i * 3 + accept_lens[i]]\n        predict_tokens.append(accept_tokens)",
     None),
    ("if req.finished():\n            predict_tokens.append(next_token_ids[0:accept_lens[i]])", "returns no list"),
    ("predict_tokens.append(next_token_ids[i])", "appends no slice"),
])
def test_resolver_claim_reads_the_committed_tokens(body, problem):
    import ast

    from eagle_probe.commands.contract.rule_checks import returns_committed_token_lists

    node = ast.parse(_RESOLVER.format(body=body)).body[0]
    found = returns_committed_token_lists(node)
    assert (found is None) if problem is None else (problem in found)


def test_html_report_has_the_coverage_table(tmp_path, capsys):
    events = healthy_run() + [acceptance([0.75, 0.6, 0.45]), coverage_event(970, 1000)]
    log = tmp_path / "probe.jsonl"
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    from eagle_probe.commands.cli import main

    assert main(["summarize", str(log), "--html", str(tmp_path / "r.html")]) == 0
    capsys.readouterr()
    page = (tmp_path / "r.html").read_text()
    assert "Draft vocabulary coverage" in page and "<td>0.970</td>" in page and "<td>32000</td>" in page
