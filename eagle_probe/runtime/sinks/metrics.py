"""Prometheus metrics, created lazily inside the process that observes something.

prometheus_client chooses single- or multi-process mode when it is imported, and SGLang sets
PROMETHEUS_MULTIPROC_DIR only during start-up, so nothing here imports it at module level.
"""

import os

from ...analysis.findings import Finding
from ...observations import RANK_LABELS, Ranks, TargetForward
from ..values.dumps import STOP_REASONS
from . import endpoint
from .depth_metrics import add_depth_counts
from .endpoint import series_endpoint
from .histograms import observe_many
from .multiprocess import GAUGE_MULTIPROCESS_MODE, mark_self_dead, remove_dead_process_gauges


class MetricsSink:
    def __init__(self, ranks: Ranks, metrics_port: int | None = None, registry=None, addr: str = "127.0.0.1",
                 node_served: bool = True):
        """node_served: SGLang's /metrics on this node serves the multiprocess directory (sinks/endpoint.py)."""
        import prometheus_client as prom

        self.multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        self.endpoint = series_endpoint(self.multiprocess, metrics_port, node_served)
        self._rank = ranks.labels()
        self._sizes = ranks.sizes()
        self.port = None
        self.addr = None
        if registry is None and self.endpoint == endpoint.EXPORTER:
            registry = prom.CollectorRegistry()  # the exporter serves the probe's series, never SGLang's
        kw = {} if registry is None else {"registry": registry}
        self.registry_kw = kw  # for series other modules add (sinks/slice_metrics.py)
        self._label_names = {}

        def counter(name, doc, labels):
            metric = prom.Counter(name, doc, labels + RANK_LABELS, **kw)
            self._label_names[id(metric)] = labels
            return metric

        def gauge(name, doc, labels):
            metric = prom.Gauge(name, doc, labels + RANK_LABELS, multiprocess_mode=GAUGE_MULTIPROCESS_MODE, **kw)
            self._label_names[id(metric)] = labels
            return metric

        self.info = gauge("eagle_probe_info", "Probe and SGLang versions in this process, its group widths and "
                          "attention places, and tp_group: the ranks whose values must agree (a multi-node launch's "
                          "id, else this server's host:port) (value 1; SGLang's HTTP server process has none).",
                          ("probe_version", "sglang_version", "rules", "tp_group") + tuple(self._sizes))
        self.forwards = counter("eagle_probe_target_forwards_total",
                                "Python-level forwards of the target's inner model (DeepseekV2Model, LlamaModel, ...; "
                                "eager steps and CUDA-graph capture runs).",
                                ("role", "mode", "path", "tbo"))
        self.model_forwards = counter("eagle_probe_model_forwards_total", "ModelRunner.forward calls (target and "
                                      "draft) on every path, CUDA graphs included, by path (eager, graph_replay, "
                                      "graph_capture) and the graph runner that replayed it (none when eager).",
                                      ("role", "mode", "path", "graph"))
        self.layer_info = gauge("eagle_probe_capture_layer_info",
                                "Configured aux capture slots (1 = current, 0 = replaced).",
                                ("role", "slot", "capture_index", "hf_index", "label"))
        self.aux_width = gauge("eagle_probe_aux_width", "Width of the packed aux hidden states per token (K * H).",
                               ("role", "path"))
        self.aux_states = gauge("eagle_probe_aux_states", "Aux hidden states returned by the last forward.",
                                ("role", "path"))
        self.lost = counter("eagle_probe_captures_lost_total",
                            "Capture slots that fell in the Two-Batch-Overlap layer range, per forward run.",
                            ("role", "mode"))
        self.findings = counter("eagle_probe_findings_total", "Findings emitted by code.", ("code", "severity", "role"))
        self.errors = counter("eagle_probe_internal_errors_total",
                              "Exceptions inside the probe (never raised into SGLang).", ("where",))
        self.skipped = counter("eagle_probe_integration_skipped_total",
                               "Patch targets missing from the installed SGLang.", ("integration", "target"))
        self.draft_forwards = counter("eagle_probe_draft_forwards_total",
                                      "Python-level EAGLE-3 draft forwards, by whether SGLang ran the draft's fc.",
                                      ("mode", "path", "fc"))
        self.draft_input_width = gauge("eagle_probe_draft_input_width",
                                       "Width of the hidden states entering the draft (spec_info.hidden_states).",
                                       ("path",))
        self.draft_fc_in_width = gauge("eagle_probe_draft_fc_in_width", "Input width the draft's fc takes.", ())
        # vLLM's spec-decode definitions: drafts = request-steps that proposed tokens.
        self.verify_steps = counter("eagle_probe_spec_verify_steps_total", "Verify steps (batches).", ())
        self.drafts = counter("eagle_probe_spec_drafts_total", "Draft sequences verified (request-steps).", ())
        self.draft_tokens = counter("eagle_probe_spec_draft_tokens_total", "Draft tokens proposed.", ())
        self.accepted = counter("eagle_probe_spec_accepted_tokens_total",
                                "Draft tokens accepted (bonus token excluded).", ())
        self.accepted_per_pos = counter("eagle_probe_spec_accepted_tokens_per_pos_total",
                                        "Draft tokens accepted at each 0-based draft position.", ("position",))
        self.drafted_per_pos = counter("eagle_probe_spec_drafted_tokens_per_pos_total", "Request-steps whose draft "
                                       "reached each 0-based position (its rate's denominator).", ("position",))
        self.accept_length = prom.Histogram(
            "eagle_probe_spec_accepted_length", "Accepted draft tokens per request and verify step (bonus excluded).",
            RANK_LABELS, buckets=tuple(range(0, 17)) + (float("inf"),), **kw)
        self._label_names[id(self.accept_length)] = ()
        self.aux_rms = gauge("eagle_probe_aux_rms", "RMS of each aux slot in the last sampled forward.",
                             ("role", "slot"))
        self.aux_absmax = gauge("eagle_probe_aux_absmax", "Largest absolute value of each aux slot in the last "
                                "sampled forward.", ("role", "slot"))
        self.aux_step = gauge("eagle_probe_aux_fingerprint_step", "The model's forward count at the last sampled "
                              "forward (equal across TP ranks when their gauges describe the same forward).",
                              ("role",))
        self.dumps_written = counter("eagle_probe_dumps_written_total", "Dump files written.", ())
        self.dump_bytes = counter("eagle_probe_dump_bytes_total", "Bytes of dump files written.", ())
        self.dumps_stopped = counter("eagle_probe_dumps_stopped_total",
                                     f"Dumps stopped for good ({', '.join(STOP_REASONS)}).", ("reason",))
        self.dumps_skipped = counter("eagle_probe_dumps_skipped_total", "Planned dumps not written (the writer was "
                                     "behind).", ("reason",))
        self.aux_nonfinite = counter("eagle_probe_aux_nonfinite_total", "NaN or Inf values seen in sampled aux "
                                     "slots.", ("role", "slot"))
        self.vocab_tokens = counter("eagle_probe_draft_vocab_verified_tokens_total", "Verified tokens of sampled "
                                    "verify steps, by whether the draft's vocabulary holds them.", ("in_vocab",))
        self.vocab_coverage = gauge("eagle_probe_draft_vocab_coverage", "Share of the sampled verified tokens inside "
                                    "the draft's vocabulary so far (caps the accept rate).", ())
        self._children = {}
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

    def _child(self, metric, *values):
        key = (id(metric),) + values
        child = self._children.get(key)
        if child is None:
            labels = dict(zip(self._label_names[id(metric)], values))
            labels.update(self._rank)
            child = self._children[key] = metric.labels(**labels)
        return child

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
        add_depth_counts(self, sums.per_depth, depth)
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

