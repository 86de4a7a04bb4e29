"""Vocabulary coverage: the share of the target's verified tokens inside the draft's hot vocabulary (analysis.
vocab_coverage), from sampled verify steps (runtime/values/coverage.py), counted on the flush thread. Counters at a
flush, one eagle_probe.draft.vocab_coverage event per summary interval, and draft_vocab_coverage_low when the
coverage is low or caps the acceptance served. It runs before the acceptance part, so that an acceptance_collapse of
the same interval names it among the likely causes."""

from ...analysis import vocab_coverage as rules
from ...events import VOCAB_COVERAGE
from ..sinks.metrics import MetricsSink
from ..values.coverage import VocabCoverage
from .base import Part


class Coverage(Part):
    kinds = ("draft_vocabulary",)

    def __init__(self, recorder):
        super().__init__(recorder)
        interval = self.config.coverage_interval_s
        self.sampler = VocabCoverage(interval) if interval > 0 else None
        self._vocab = None  # DraftVocabulary
        self._flushed = (0, 0)  # (in_vocab, total) sent to the series
        self._window = (0, 0)  # (in_vocab, total) at the last event

    def draft_vocabulary(self, obs):
        self._vocab = obs
        if self.sampler is None:
            return
        table = None
        if obs.hot_ids is not None:
            size = obs.target_vocab_size or (max(obs.hot_ids, default=-1) + 1)
            table = rules.in_vocab_table(size, obs.hot_ids)
        self.sampler.set_vocabulary(obs.hot_ids, table)

    def _counts(self):
        return self.sampler.count()

    def flush(self, metrics):
        if self.sampler is None or not self.sampler.known:
            return
        now = self._counts()
        added = (now[0] - self._flushed[0], now[1] - self._flushed[1])
        if added[1] and not self.out.metric(MetricsSink.add_vocab_coverage, added[0], added[1], now[0], now[1]):
            return  # refused: sent again at the next flush
        self._flushed = now

    def tick(self, now: float, final: bool = False):
        sampler, vocab = self.sampler, self._vocab
        if sampler is None or vocab is None:
            return
        in_vocab, total = self._counts()
        window = (in_vocab - self._window[0], total - self._window[1])
        if not window[1]:
            return
        self._window = (in_vocab, total)
        hot_size = None if vocab.hot_ids is None else len(vocab.hot_ids)
        acceptance = self.recorder.acceptance.total()
        positions = acceptance.positions or None
        coverage = in_vocab / total
        cap = rules.length_cap(coverage, positions)
        self.out.emit("info", VOCAB_COVERAGE, role="target", in_vocab=in_vocab, verified_tokens=total,
                      coverage=coverage, window_in_vocab=window[0], window_verified_tokens=window[1],
                      samples=sampler.samples, map=vocab.map_kind, hot_vocab_size=hot_size,
                      draft_vocab_size=vocab.draft_vocab_size, target_vocab_size=vocab.target_vocab_size,
                      mean_accept_length_cap=cap, interval_s=sampler.interval)
        mean = acceptance.mean_length() if acceptance.drafts else None
        expected = self.recorder.acceptance.expected_length(acceptance) if acceptance.drafts else None
        below = expected is not None and mean is not None and mean < self.config.collapse_ratio * expected
        finding = rules.coverage_finding(in_vocab, total, vocab.map_kind, hot_size, vocab.draft_vocab_size,
                                         f"{vocab.model_class} in this process", rules.Served(mean, positions, below))
        if finding is not None and finding.code not in self.out.seen_codes():
            self.out.finding(finding, "draft")
