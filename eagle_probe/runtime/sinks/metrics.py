"""Prometheus metrics, created lazily inside the process that observes something.

prometheus_client chooses single- or multi-process mode when it is imported, and SGLang sets
PROMETHEUS_MULTIPROC_DIR only during start-up, so nothing here imports it at module level.
"""

import os

from ...analysis.findings import Finding
from ...observations import RANK_LABELS, Ranks, TargetForward
from . import catalogue as C
from . import endpoint
from .depth_metrics import DepthSeries
from .endpoint import series_endpoint
from .histograms import observe_many
from .multiprocess import mark_self_dead, remove_dead_process_gauges
from .series import Series
from .slice_metrics import SliceSeries

__all__ = ["RANK_LABELS", "MetricsSink"]


class MetricsSink:
    def __init__(self, ranks: Ranks, metrics_port: int | None = None, registry=None, addr: str = "127.0.0.1",
                 node_served: bool = True):
        """node_served: SGLang's /metrics on this node serves the multiprocess directory (sinks/endpoint.py)."""
        import prometheus_client as prom

        self.multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        self.endpoint = series_endpoint(self.multiprocess, metrics_port, node_served)
        self._sizes = ranks.sizes()
        self.port = None
        self.addr = None
        if registry is None and self.endpoint == endpoint.EXPORTER:
            registry = prom.CollectorRegistry()  # the exporter serves the probe's series, never SGLang's
        self.series = series = Series(prom, ranks, registry)
        self._child = series.child
        self._make_series(series.make)
        self.depth = DepthSeries(series)  # made on the first flush that counts a verify step
        self.slices = SliceSeries(series)  # made on the first flush that counts a slice
        self._layer_series = {}
        self._verify_children = {}  # draft positions -> the series add_verify_counts adds to
        if self.multiprocess:
            path = os.environ["PROMETHEUS_MULTIPROC_DIR"]
            import atexit

            atexit.register(mark_self_dead, path, os.getpid())
            remove_dead_process_gauges(path)
        if self.endpoint == endpoint.EXPORTER:
            # One port per TP rank; in multiprocess mode it serves this process's own values (the registry's metrics
            # read them from this pid's files).
            self.port = metrics_port + (ranks.tp_rank or 0)
            self.addr = addr
            prom.start_http_server(self.port, addr=addr, registry=registry)

    def _make_series(self, make):
        """The series made with the sink, in the catalogue's order."""
        self.info = make(C.INFO, tuple(self._sizes))
        self.forwards = make(C.TARGET_FORWARDS)
        self.model_forwards = make(C.MODEL_FORWARDS)
        self.layer_info = make(C.CAPTURE_LAYER_INFO)
        self.aux_width = make(C.AUX_WIDTH)
        self.aux_states = make(C.AUX_STATES)
        self.lost = make(C.CAPTURES_LOST)
        self.findings = make(C.FINDINGS)
        self.errors = make(C.INTERNAL_ERRORS)
        self.skipped = make(C.INTEGRATION_SKIPPED)
        self.draft_forwards = make(C.DRAFT_FORWARDS)
        self.draft_input_width = make(C.DRAFT_INPUT_WIDTH)
        self.draft_fc_in_width = make(C.DRAFT_FC_IN_WIDTH)
        self.verify_steps = make(C.VERIFY_STEPS)
        self.drafts = make(C.DRAFTS)
        self.draft_tokens = make(C.DRAFT_TOKENS)
        self.accepted = make(C.ACCEPTED)
        self.accepted_per_pos = make(C.ACCEPTED_PER_POS)
        self.drafted_per_pos = make(C.DRAFTED_PER_POS)
        self.accept_length = make(C.ACCEPT_LENGTH)
        self.aux_rms = make(C.AUX_RMS)
        self.aux_absmax = make(C.AUX_ABSMAX)
        self.aux_step = make(C.AUX_STEP)
        self.dumps_written = make(C.DUMPS_WRITTEN)
        self.dump_bytes = make(C.DUMP_BYTES)
        self.dumps_stopped = make(C.DUMPS_STOPPED)
        self.dumps_skipped = make(C.DUMPS_SKIPPED)
        self.aux_nonfinite = make(C.AUX_NONFINITE)
        self.vocab_tokens = make(C.VOCAB_TOKENS)
        self.vocab_coverage = make(C.VOCAB_COVERAGE)
        self.phase_seconds = make(C.PHASE_SECONDS)
        self.timed_steps = make(C.TIMED_STEPS)
        self.estimated_speedup = make(C.ESTIMATED_SPEEDUP)
        self.estimated_speedup_upper = make(C.ESTIMATED_SPEEDUP_UPPER)

    def set_info(self, probe_version: str, sglang_version: str, rules: str, tp_group: str = ""):
        self._child(self.info, probe_version, sglang_version, rules, tp_group, *self._sizes.values()).set(1)

    # Counted values arrive at a flush, as (labels, amount added since the last flush). Every series is resolved
    # before the first one is increased: a call that fails (a new series cannot be created) adds nothing, and the
    # recorder sends the same amounts again at the next flush.
    def _add(self, metric, items):
        for child, amount in [(self._child(metric, *labels), amount) for labels, amount in items]:
            child.inc(amount)

    def add_forwards(self, items):
        self._add(self.forwards, items)

    def add_model_forwards(self, items):
        self._add(self.model_forwards, items)

    def add_lost(self, items):
        self._add(self.lost, items)

    def add_draft_forwards(self, items):
        self._add(self.draft_forwards, items)

    def forward_shapes(self, obs: TargetForward):
        width = obs.aux_shape[-1] if obs.aux_shape else sum(obs.slot_widths)
        self._child(self.aux_width, obs.role, obs.path).set(width)
        if obs.aux_returned is not None:
            self._child(self.aux_states, obs.role, obs.path).set(obs.aux_returned)

    def capture_layers(self, role: str, slots):
        """slots: [(slot, capture_index, hf_index, label)]; earlier series of this role drop to 0."""
        current = {(role,) + tuple(str(v) for v in slot) for slot in slots}
        for key in self._layer_series.get(role, set()) - current:
            self._child(self.layer_info, *key).set(0)
        for key in current:
            self._child(self.layer_info, *key).set(1)
        self._layer_series[role] = current

    def finding(self, finding: Finding, role: str):
        self._child(self.findings, finding.code, finding.severity, role).inc()

    def internal_error(self, where: str, count: int = 1):
        self._child(self.errors, where).inc(count)

    def draft_shapes(self, obs):
        if obs.aux_width is not None:
            self._child(self.draft_input_width, obs.path).set(obs.aux_width)
        if obs.fc_in is not None:
            self._child(self.draft_fc_in_width).set(obs.fc_in)

    def _verify_series(self, positions: int):
        """The series a flush of verify steps adds to, resolved once per number of draft positions."""
        series = self._verify_children.get(positions)
        if series is None:
            series = [self._child(m) for m in (self.verify_steps, self.drafts, self.draft_tokens, self.accepted,
                                                 self.accept_length)]
            series += [[self._child(m, str(k)) for k in range(positions)] for m in (self.accepted_per_pos,
                                                                                    self.drafted_per_pos)]
            self._verify_children[positions] = series
        return series

    def add_verify_counts(self, window, depth=None):
        """Verify steps since the last flush (an AcceptanceWindow of them); `depth`: the last step's draft depth.
        Every series is resolved before the first is increased: nothing is added twice."""
        sums, (verify_steps, drafts, draft_tokens, accepted, histogram, per_pos, drafted_pos) = \
            window.sums(), self._verify_series(window.positions)
        self.depth.add(sums.per_depth, depth)
        verify_steps.inc(window.steps)
        if not sums.request_steps:
            return
        drafts.inc(sums.request_steps)
        draft_tokens.inc(window.draft_tokens)
        accepted.inc(sums.accepted_tokens)
        for children, counts in ((per_pos, sums.per_position), (drafted_pos, sums.drafted_per_position)):
            for child, count in zip(children, counts):
                if count:
                    child.inc(count)
        for value, count in sums.length_histogram.items():
            observe_many(histogram, value, count)

    def add_phase_seconds(self, seconds: dict, steps: dict, speedups: dict):
        """Phase seconds {(bucket, phase): s} and timed steps {bucket: n} since the last flush; the latest estimate
        {bucket: (speed-up, its upper bound or None)}."""
        adds = [(self._child(self.phase_seconds, phase, bucket), s) for (bucket, phase), s in seconds.items() if s > 0]
        adds += [(self._child(self.timed_steps, bucket), n) for bucket, n in steps.items() if n > 0]
        gauges = [(self._child(self.estimated_speedup, bucket), value) for bucket, (value, _) in speedups.items()]
        gauges += [(self._child(self.estimated_speedup_upper, bucket), upper)
                   for bucket, (_, upper) in speedups.items() if upper is not None]
        for child, amount in adds:
            child.inc(amount)
        for child, value in gauges:
            child.set(value)

    def add_vocab_coverage(self, in_vocab, total, all_in_vocab, all_total):
        """Sampled verified tokens since the last flush (in the draft's vocabulary, in all), and the running share."""
        inside, outside, share = (self._child(self.vocab_tokens, "true"), self._child(self.vocab_tokens, "false"),
                                  self._child(self.vocab_coverage))
        inside.inc(in_vocab)
        outside.inc(total - in_vocab)
        share.set(all_in_vocab / all_total)

    def aux_fingerprints(self, prints):
        """One sampled forward's fingerprints (a list of AuxFingerprint of one role)."""
        for fp in prints:
            slot = str(fp.slot)
            self._child(self.aux_rms, fp.role, slot).set(fp.rms)
            self._child(self.aux_absmax, fp.role, slot).set(fp.absmax)
            self._child(self.aux_nonfinite, fp.role, slot).inc(fp.nonfinite)  # a 0 series too: "none seen"
        if prints:
            self._child(self.aux_step, prints[0].role).set(prints[0].step)

    def dump_written(self, nbytes: int):
        self._child(self.dumps_written).inc()
        self._child(self.dump_bytes).inc(nbytes)

    def dump_stopped(self, reason: str):
        self._child(self.dumps_stopped, reason).inc()

    def dump_skipped(self, reason: str):
        self._child(self.dumps_skipped, reason).inc()

    def integration_skipped(self, integration: str, target: str):
        self._child(self.skipped, integration, target).inc()

    def add_slice_counts(self, slices: dict, request_lengths: dict):
        """Acceptance by slice since the last flush (sinks/slice_metrics.py)."""
        self.slices.add(slices, request_lengths)
