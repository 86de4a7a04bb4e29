"""The recorder: per-process state between observations and sinks.

It routes each observation: logs a fact on first sight and on change (never a line per forward by default),
runs the diagnosis rules when something new is seen, counts in plain Python on the hot path, moves the counts
into the Prometheus series at a flush (a background thread every flush interval, and at exit), and writes a
periodic summary. Any exception in a sink is counted and logged once; the caller never sees it.
"""

import threading
import time
from typing import Callable, Optional

from .. import __version__
from ..analysis import draft_rules
from ..analysis import findings as rules_mod
from ..analysis.fingerprints import identical, moved, reference_mismatch
from ..analysis.findings import Finding
from ..analysis.layers import apply_capture_rule, capture_label, explain_mapping, parse_trained_layers
from ..config import ProbeConfig, is_loopback, read_reference
from ..events import (ACCEPTANCE, AUX_FINGERPRINT, CAPTURE_CONFIGURED, DRAFT_FORWARD, DRAFT_LOADED, DUMP_STOPPED,
                      DUMP_WRITTEN, FINDING, INTEGRATION_SKIPPED, METRICS_EXPOSED,
                      INTERNAL_ERROR, STARTED, SUMMARY, TARGET_FORWARD)
from ..versions import LAYER_CAPTURE_KWARG, SUPPORTED_RANGE_TEXT, VersionRules, format_version, rule_since
from .acceptance_monitor import AcceptanceMonitor, counts_since
from .flusher import PeriodicFlusher
from .observations import (AuxFingerprint, CaptureConfigured, DraftForward, DraftLoaded, Ranks, TargetForward,
                           VerifyStep)
from .values.dumps import STOP_REASONS, DumpPlanner, DumpWriter
from .values.sampler import FingerprintSampler

SELF_FED_DRAFT_MODES = ("DECODE", "IDLE")


def forward_count_key(obs: TargetForward) -> tuple:
    """The labels a target forward is counted under (role, mode, path, tbo)."""
    return obs.role, obs.mode, obs.path, "true" if obs.can_run_tbo else "false"


def draft_count_key(obs: DraftForward) -> tuple:
    """The labels a draft forward is counted under (mode, path, fc)."""
    return obs.mode, obs.path, "ran" if obs.fc_ran else "skipped"


class _Counts:
    """Everything the hot path counts, in plain dicts of ints (cumulative; a flush sends the differences)."""

    def __init__(self):
        self.forwards = {}  # (role, mode, path, tbo) -> target forwards
        self.lost = {}  # (role, mode) -> capture slots lost to TBO
        self.drafts = {}  # (mode, path, fc) -> draft forwards

    def snapshot(self):
        return dict(self.forwards), dict(self.lost), dict(self.drafts)


def _added(now: dict, before: dict):
    return [(key, value - before.get(key, 0)) for key, value in now.items() if value != before.get(key, 0)]


class Recorder:
    def __init__(self, config: ProbeConfig, rules: VersionRules, sglang_version: Optional[str], logs,
                 read_ranks: Callable[[], Optional[Ranks]], make_metrics: Optional[Callable] = None,
                 clock=time.monotonic, on_serving: Optional[Callable[[], bool]] = None):
        self.config = config
        self.rules = rules
        self.sglang_version = sglang_version
        self.logs = logs
        self._read_ranks = read_ranks
        self._make_metrics = make_metrics
        self._clock = clock
        # Called on the first forwards and verify steps until it returns True (install: the SIGTERM flush, set up
        # once SGLang's own start-up in this process is done).
        self._on_serving = on_serving
        self.ranks: Optional[Ranks] = None
        self.metrics = None
        self.log_every_forward = config.log_every_forward  # wrappers then build every observation
        self._pending_skips = []
        self._pending_errors = {}  # where -> internal errors counted before the metrics sink existed
        self._signatures = {}
        self._seen_findings = set()
        self._errors_logged = set()
        self._graph_layers = {}  # (role, class) -> layers seen in graph capture / graph set-up
        self._eager_layers = {}  # (role, class) -> layers seen in eager forwards / configured calls
        self.counts = _Counts()
        self.acceptance = AcceptanceMonitor(config)
        self._flushed = (self.counts.snapshot(), self.acceptance.snapshot())
        self._flush_lock = threading.Lock()
        self._tick_lock = threading.Lock()
        self._flusher = None
        self._findings_total = {}
        self._errors_total = 0
        self._last_summary = self._last_acceptance = clock()
        self._next_tick = self._last_summary + config.summary_interval_s
        self._target_capture = None  # last CaptureConfigured outside graph set-up (the eager truth)
        self._draft = None  # DraftLoaded
        self.fingerprints = (FingerprintSampler(config.fingerprint_interval_s)
                             if config.fingerprint_interval_s > 0 else None)
        self._fingerprint_logged = {}  # (role, slot) -> (rms, signature) last logged
        self._fingerprint_bucket = {}  # role -> summary-interval bucket of the last full log
        self._values_reported = set()  # (code, role, slot or slots) already reported as a finding
        self._reference = read_reference(config.reference) if config.reference else None
        self.dump_planner = self.dump_writer = None
        if config.dump_dir:
            kwarg = LAYER_CAPTURE_KWARG if rules.embedding_capturable else None
            self.dump_planner = DumpPlanner(config.dump_every, config.dump_ranks, config.dump_layers == "all", kwarg)
            self.dump_writer = DumpWriter(config.dump_dir, int(config.dump_max_mb * 1024 * 1024),
                                          self.dump_written, self.dump_stopped,
                                          on_error=lambda exc: self.internal_error("dumps.write", exc))

    # -- process context ---------------------------------------------------------------------

    def _ensure_ranks(self) -> bool:
        """Ranks exist only in worker processes after distributed init; metrics start then."""
        if self.ranks is not None:
            return True
        ranks = self._read_ranks()
        if ranks is None:
            return False
        self.ranks = ranks
        self.logs.bind(**ranks.fields())
        self._start_metrics(ranks)
        self._emit("info", STARTED, probe_version=__version__, sglang_version=self.sglang_version,
                   rules=self.rules.describe(), metrics_port=getattr(self.metrics, "port", None),
                   metrics_multiprocess=getattr(self.metrics, "multiprocess", None),
                   flush_interval_s=self.config.flush_interval_s)
        return True

    def _start_metrics(self, ranks: Ranks):
        if self._make_metrics is None:
            return
        try:
            self.metrics = self._make_metrics(ranks)
            self.metrics.set_info(__version__, self.sglang_version or "unknown", self.rules.capture_id_rule)
            for integration, target in self._pending_skips:
                self.metrics.integration_skipped(integration, target)
            for where, count in self._pending_errors.items():
                self.metrics.internal_error(where, count)
            self._pending_errors.clear()
        except Exception as exc:  # a port in use must not stop the logs
            self.metrics = None
            self.internal_error("metrics.start", exc)
        self._pending_skips.clear()
        addr = getattr(self.metrics, "addr", None)
        if addr and not is_loopback(addr):
            self._emit("warning", METRICS_EXPOSED, addr=addr, port=self.metrics.port,
                       message=f"the probe's metrics exporter listens on {addr}:{self.metrics.port}, reachable from "
                               f"other hosts (EAGLE_PROBE_METRICS_ADDR); the default is 127.0.0.1")
        if self.metrics is not None and self.config.flush_interval_s > 0:
            self._flusher = PeriodicFlusher(self, self.config.flush_interval_s).start()

    def _emit(self, level: str, event: str, **fields):
        """A log line; a failing log sink (full disk, unusable log dir) is counted, and metrics carry on."""
        try:
            self.logs.emit(level, event, **fields)
        except Exception as exc:
            self.internal_error("logs.emit", exc)

    def _metric(self, method: str, *args) -> bool:
        """Whether the sink took it (a failure is counted under metrics.METHOD)."""
        if self.metrics is None:
            return False
        try:
            getattr(self.metrics, method)(*args)
        except Exception as exc:
            self.internal_error(f"metrics.{method}", exc)
            return False
        return True

    def _serving(self):
        try:
            if self._on_serving is not None and self._on_serving():
                self._on_serving = None
        except Exception as exc:
            self._on_serving = None
            self.internal_error("sigterm.install", exc)

    # -- hot path: count only ------------------------------------------------------------------

    def forward_repeated(self, count_key: tuple, lost: int):
        """A target forward whose signature the wrapper has seen just before: count it, nothing else."""
        forwards = self.counts.forwards
        forwards[count_key] = forwards.get(count_key, 0) + 1
        if lost:
            self._count_lost(count_key, lost)
        if self._clock() >= self._next_tick:
            self._tick()

    def draft_repeated(self, count_key: tuple):
        drafts = self.counts.drafts
        drafts[count_key] = drafts.get(count_key, 0) + 1
        if self._clock() >= self._next_tick:
            self._tick()

    def verify_step(self, step: VerifyStep):
        if self.ranks is None:
            self._ensure_ranks()
        if self._on_serving is not None:
            self._serving()
        self.acceptance.add(step.accepted, step.positions, step.source)
        if self._clock() >= self._next_tick:
            self._tick()

    def _count_lost(self, count_key: tuple, lost: int):
        key = count_key[:2]
        self.counts.lost[key] = self.counts.lost.get(key, 0) + lost

    # -- inputs that carry something new -------------------------------------------------------

    def integration_skipped(self, integration: str, target: str, reason: str, expected: bool = True, off: str = ""):
        """A missing target the version table expects is a warning; one it says this release lacks is info.
        Only this target stays unwrapped; the event says what the probe cannot report because of it."""
        message = (f"{target} is not wrapped in SGLang {self.sglang_version} (supported range "
                   f"{SUPPORTED_RANGE_TEXT}): {reason}" + (f"; off: {off}" if off else ""))
        self._emit("warning" if expected else "info", INTEGRATION_SKIPPED, integration=integration, target=target,
                   reason=reason, expected=expected, sglang_version=self.sglang_version,
                   supported=SUPPORTED_RANGE_TEXT, off=off, message=message)
        if self.metrics is not None:
            self._metric("integration_skipped", integration, target)
        else:
            self._pending_skips.append((integration, target))

    def internal_error(self, where: str, exc: BaseException):
        self._errors_total += 1
        if self.metrics is not None:
            try:
                self.metrics.internal_error(where)
            except Exception:
                pass
        else:  # e.g. at model load, before ranks are known: counted once the sink starts
            self._pending_errors[where] = self._pending_errors.get(where, 0) + 1
        if where not in self._errors_logged:
            self._errors_logged.add(where)
            try:
                self.logs.emit("error", INTERNAL_ERROR, where=where, error=f"{type(exc).__name__}: {exc}")
            except Exception:
                pass

    def capture_configured(self, obs: CaptureConfigured):
        self._ensure_ranks()
        self._log_capture_configured(obs)
        if obs.is_last_pp_stage:
            slots = [(slot, index, index, capture_label(index, obs.num_layers))
                     for slot, index in enumerate(obs.layers_to_capture)]
            self._metric("capture_layers", obs.role, slots)
        for finding in rules_mod.capture_config_findings(obs, self.rules):
            self.finding(finding, obs.role)
        self._remember_layers((obs.role, obs.model_class), obs.during_graph_setup, "configuration",
                              obs.layers_to_capture, obs.num_layers)
        if obs.role == "target" and not obs.during_graph_setup and obs.is_last_pp_stage:
            self._target_capture = obs
            self._check_draft_layers()

    def target_forward(self, obs: TargetForward):
        """A target forward the wrapper had not just seen (or every forward under log_every_forward)."""
        self._ensure_ranks()
        if self._on_serving is not None:
            self._serving()
        count_key = forward_count_key(obs)
        forwards = self.counts.forwards
        forwards[count_key] = forwards.get(count_key, 0) + 1
        if obs.lost:
            self._count_lost(count_key, len(obs.lost))
        key = (obs.role, obs.model_class, obs.path, obs.mode)  # modes alternate every step: one entry each
        signature = obs.signature()
        if self._signatures.get(key) != signature:
            self._signatures[key] = signature
            self._log_forward(obs)
            self._metric("forward_shapes", obs)
            for finding in rules_mod.forward_findings(obs):
                self.finding(finding, obs.role)
            self._remember_layers((obs.role, obs.model_class), obs.capturing, "forward", obs.layers_to_capture,
                                  obs.num_layers)
        elif self.log_every_forward:
            self._log_forward(obs)
        if self._clock() >= self._next_tick:
            self._tick()

    def draft_loaded(self, obs: DraftLoaded):
        self._ensure_ranks()
        self._draft = obs
        fields = {k: (list(v) if isinstance(v, tuple) else v) for k, v in obs.__dict__.items()}
        self._emit("info", DRAFT_LOADED, role="draft", **fields)
        if obs.dropped:
            self.finding(rules_mod.draft_weights_dropped_finding(obs.model_class, obs.dropped), "draft")
        replaced = rules_mod.draft_replaced_finding(obs)
        if replaced is not None:
            self.finding(replaced, "draft")
        self._check_draft_layers()

    def draft_forward(self, obs: DraftForward):
        """A draft forward the wrapper had not just seen."""
        self._ensure_ranks()
        if self._on_serving is not None:
            self._serving()
        self.draft_repeated(draft_count_key(obs))
        key = ("draft", obs.model_class, obs.path, obs.mode)
        signature = obs.signature()
        if self._signatures.get(key) == signature:
            return
        self._signatures[key] = signature
        self._emit("info", DRAFT_FORWARD, role="draft", model_class=obs.model_class, mode=obs.mode,
                   path=obs.path, aux_width=obs.aux_width, embed_width=obs.embed_width, fc_in=obs.fc_in,
                   fc_ran=obs.fc_ran, num_aux=obs.num_aux, target_hidden_size=obs.target_hidden_size,
                   tokens=obs.tokens, error=obs.error)
        self._metric("draft_shapes", obs)
        # Only target-fed forwards (prefill and draft extend) must pass through fc; multi-step draft DECODE
        # feeds the draft its own hidden state, which skips fc by design.
        if obs.aux_width is not None and obs.mode not in SELF_FED_DRAFT_MODES:
            for finding in draft_rules.draft_input_findings(
                    model_class=obs.model_class, mode=obs.mode, aux_width=obs.aux_width,
                    embed_width=obs.embed_width, fc_in_width=obs.fc_in,
                    target_hidden_size=obs.target_hidden_size, num_aux=obs.num_aux):
                self.finding(finding, "draft")

    def finding(self, finding: Finding, role: str):
        key = (finding.code, role, repr(finding.evidence))
        if key in self._seen_findings:
            return
        self._seen_findings.add(key)
        self._findings_total[finding.code] = self._findings_total.get(finding.code, 0) + 1
        level = finding.severity if finding.severity in ("error", "warning", "info") else "warning"
        self._emit(level, FINDING, code=finding.code,
                   severity=finding.severity, role=role, message=finding.message, evidence=finding.evidence_dict())
        self._metric("finding", finding, role)

    def aux_sampled(self, context, values):
        """A sampled forward's fingerprints, read from host memory: gauges, log lines, value findings."""
        self._ensure_ranks()
        prints = [AuxFingerprint(context.role, slot, index, context.mode, context.step, context.tokens,
                                 width, rms, mean, absmax, nonfinite, signature)
                  for slot, (index, width, (rms, mean, absmax, nonfinite, signature))
                  in enumerate(zip(context.capture_indices, context.widths, values))]
        self._metric("aux_fingerprints", prints)
        self._log_fingerprints(prints, context)
        for fp in prints:
            if fp.nonfinite and ("nonfinite", fp.role, fp.slot) not in self._values_reported:
                self._values_reported.add(("nonfinite", fp.role, fp.slot))
                self.finding(rules_mod.aux_nonfinite_finding(
                    fp.role, fp.slot, fp.capture_index, self._slot_label(fp, context.num_layers), fp.nonfinite,
                    fp.tokens, fp.width), fp.role)
        if self._reference is not None and context.role == "target":
            self._compare_reference(prints, context.num_layers)
        for i, a in enumerate(prints):
            for b in prints[i + 1:]:
                key = ("identical", a.role, a.slot, b.slot)
                if key not in self._values_reported and identical((a.rms, a.mean, a.absmax, a.signature),
                                                                  (b.rms, b.mean, b.absmax, b.signature)):
                    self._values_reported.add(key)
                    self.finding(rules_mod.aux_slots_identical_finding(
                        a.role, (a.slot, b.slot), (a.capture_index, b.capture_index)), a.role)

    def _compare_reference(self, prints, num_layers):
        """EAGLE_PROBE_REFERENCE: each live slot against the training data's same slot (once per slot)."""
        for fp in prints:
            key = ("reference", fp.role, fp.slot)
            if key in self._values_reported:
                continue
            mismatch = reference_mismatch(fp.slot, fp.rms, fp.signature, self._reference)
            if mismatch is None:
                continue
            self._values_reported.add(key)
            resembles = None if mismatch["resembles"] is None else f"slot {mismatch['resembles']}"
            finding = rules_mod.aux_value_mismatch_finding(
                fp.role, fp.slot, fp.capture_index, None, mismatch["cosine"], resembles,
                source=f"signature against EAGLE_PROBE_REFERENCE, rms ratio {mismatch['rms_ratio']:.3g}")
            self.finding(finding, fp.role)

    def dump_written(self, path: str, nbytes: int):
        """From the dump writer's thread: one file is complete."""
        self._emit("info", DUMP_WRITTEN, path=path, bytes=nbytes)
        self._metric("dump_written", nbytes)

    def dump_stopped(self, reason: str, error: str):
        """From the dump writer (or the planner): dumps stop for good in this process; the server goes on."""
        self._emit("warning", DUMP_STOPPED, reason=reason, error=error, directory=self.config.dump_dir,
                   message=f"dumps stopped: {STOP_REASONS.get(reason, reason)} ({error}); the server is not affected")
        self._metric("dump_stopped", reason)

    def dump_skipped(self, reason: str):
        self._metric("dump_skipped", reason)

    def _log_fingerprints(self, prints, context):
        """Every slot on first sight and once per summary interval (on the same forward on every rank: the bucket
        comes from the wall clock), a single slot also when it moved beyond the change tolerance."""
        bucket = int(context.wall // self.config.summary_interval_s)
        log_all = self._fingerprint_bucket.get(context.role) != bucket
        self._fingerprint_bucket[context.role] = bucket
        for fp in prints:
            key = (fp.role, fp.slot)
            last = self._fingerprint_logged.get(key)
            if not (log_all or last is None or moved(last, (fp.rms, fp.signature))):
                continue
            self._fingerprint_logged[key] = (fp.rms, fp.signature)
            self._emit("info", AUX_FINGERPRINT, role=fp.role, slot=fp.slot, capture_index=fp.capture_index,
                       hf_index=fp.capture_index, label=self._slot_label(fp, context.num_layers), mode=fp.mode,
                       step=fp.step, tokens=fp.tokens, width=fp.width, rms=fp.rms, mean=fp.mean, absmax=fp.absmax,
                       nonfinite=fp.nonfinite, signature=[round(v, 6) for v in fp.signature])

    @staticmethod
    def _slot_label(fp: AuxFingerprint, num_layers):
        if fp.capture_index is None:
            return f"draft input slot {fp.slot}"
        return capture_label(fp.capture_index, num_layers)

    # -- cross-checks ----------------------------------------------------------------------------

    def _remember_layers(self, pair, graph: bool, source: str, layers, num_layers):
        (self._graph_layers if graph else self._eager_layers)[pair] = (source, layers)
        graph_seen, eager_seen = self._graph_layers.get(pair), self._eager_layers.get(pair)
        if graph_seen is None or eager_seen is None:
            return
        how = graph_seen[0] if graph_seen[0] == eager_seen[0] else f"{graph_seen[0]}/{eager_seen[0]}"
        for finding in rules_mod.graph_eager_findings(pair[1], graph_seen[1], eager_seen[1], how, num_layers):
            self.finding(finding, pair[0])

    def _check_draft_layers(self):
        """The draft's eagle_config ids (and the trained layers, when given) against what the target captured."""
        target, draft = self._target_capture, self._draft
        if target is None or draft is None:
            return
        captured = target.layers_to_capture
        if self.config.trained_layers:
            trained = parse_trained_layers(self.config.trained_layers)
            for finding in draft_rules.layer_mismatch_findings(
                    captured=captured, trained_hf=trained, num_layers=target.num_layers, rules=self.rules,
                    requested_ids=target.requested_ids):
                self.finding(finding, "draft")
        expected, _ = apply_capture_rule(self.rules.capture_id_rule, draft.eagle_layer_ids, target.num_layers)
        finding = rules_mod.draft_config_layer_finding(draft.model_class, draft.eagle_layer_ids, expected,
                                                       captured, target.num_layers)
        if finding is not None:
            self.finding(finding, "draft")

    # -- log lines ---------------------------------------------------------------------------------

    def _log_capture_configured(self, obs: CaptureConfigured):
        self._emit(
            "info", CAPTURE_CONFIGURED, model_class=obs.model_class, role=obs.role,
            requested_ids=None if obs.requested_ids is None else list(obs.requested_ids),
            layers_to_capture=list(obs.layers_to_capture),
            mapping=explain_mapping(obs.requested_ids, obs.layers_to_capture, obs.num_layers),
            version_rule=self.rules.capture_id_rule,
            version_rule_since=format_version(rule_since(self.rules, "capture_id_rule")),
            slots=[{"slot": slot, "capture_index": index, "hf_index": index,
                    "label": capture_label(index, obs.num_layers)}
                   for slot, index in enumerate(obs.layers_to_capture)],
            num_layers=obs.num_layers, first_k_dense_replace=obs.first_k_dense_replace,
            layer_range=[obs.start_layer, obs.end_layer], is_last_pp_stage=obs.is_last_pp_stage,
            caller=obs.caller, during_graph_setup=obs.during_graph_setup)

    def _log_forward(self, obs: TargetForward):
        self._emit(
            "info", TARGET_FORWARD, model_class=obs.model_class, role=obs.role,
            mode=obs.mode, path=obs.path, capturing=obs.capturing, can_run_tbo=obs.can_run_tbo,
            layers_to_capture=list(obs.layers_to_capture),
            slot_labels=[capture_label(i, obs.num_layers) for i in obs.layers_to_capture],
            normal_layers=list(obs.normal_range), tbo_layers=None if obs.tbo_range is None else list(obs.tbo_range),
            lost=list(obs.lost), tokens=obs.tokens, aux_expected=obs.aux_expected, aux_returned=obs.aux_returned,
            aux_format=obs.aux_format, aux_shape=None if obs.aux_shape is None else list(obs.aux_shape),
            slot_widths=list(obs.slot_widths), dtype=obs.dtype, error=obs.error)

    # -- periodic work -----------------------------------------------------------------------------

    def _tick(self):
        """Due at most once per summary interval: the summary and the acceptance window. Called on the hot path and
        by the flush thread; whichever comes first does it."""
        if not self._tick_lock.acquire(blocking=False):
            return
        try:
            now = self._clock()
            if now < self._next_tick:
                return
            self._next_tick = now + self.config.summary_interval_s
            self.flush_metrics()
            self._emit_summary(now)
            self._emit_acceptance(now)
        finally:
            self._tick_lock.release()

    def on_timer(self):
        """The flush thread's call: counted values into the series, and the periodic events if they are due."""
        self.flush_metrics()
        if self._clock() >= self._next_tick:
            self._tick()

    def _emit_summary(self, now: float):
        self._last_summary = now
        forwards = self.counts.forwards.copy()
        self._emit(
            "info", SUMMARY,
            forwards=[{"role": r, "mode": m, "path": p, "tbo": t == "true", "count": c}
                      for (r, m, p, t), c in sorted(forwards.items())],
            captures_lost=sum(self.counts.lost.copy().values()), findings=dict(self._findings_total),
            internal_errors=self._errors_total)

    def _emit_acceptance(self, now: float):
        self._last_acceptance = now
        monitor = self.acceptance
        window = monitor.take_window()
        if window is None:
            return
        fields = window.as_fields()
        fields["read_at"] = monitor.source
        expected = monitor.expected_length(window)
        if expected is not None:
            fields.update(expected_mean_accept_length=expected, observed_over_expected=window.mean_length() / expected)
        total = monitor.total().as_fields()
        fields["total"] = {k: total[k] for k in
                           ("steps", "drafts", "accepted_tokens", "mean_accept_length", "per_position_rate")}
        self._emit("info", ACCEPTANCE, role="target", **fields)
        collapse = monitor.collapse(window, sorted({code for code, _, _ in self._seen_findings}))
        if collapse is not None:
            self.finding(collapse, "target")

    def flush_metrics(self):
        """Move what was counted since the last flush into the Prometheus series (thread-safe). A part the sink
        refused stays unflushed and is sent again at the next flush: a failing flush delays counts, never loses them."""
        if self.metrics is None:
            return
        with self._flush_lock:
            (forwards, lost, drafts), verify = (self.counts.snapshot(), self.acceptance.snapshot())
            (forwards_0, lost_0, drafts_0), verify_0 = self._flushed
            if not self._metric("add_forwards", _added(forwards, forwards_0)):
                forwards = forwards_0
            if not self._metric("add_lost", _added(lost, lost_0)):
                lost = lost_0
            if not self._metric("add_draft_forwards", _added(drafts, drafts_0)):
                drafts = drafts_0
            steps, lengths, per_position = counts_since(verify, verify_0, self.acceptance.positions)
            if steps and not self._metric("add_verify_counts", steps, lengths, per_position,
                                          self.acceptance.positions):
                verify = verify_0
            self._flushed = ((forwards, lost, drafts), verify)

    def flush(self):
        """Everything out: metrics, a final summary, the open acceptance window (at uninstall or process exit)."""
        self.flush_metrics()
        with self._tick_lock:
            now = self._clock()
            if self.counts.forwards:
                self._emit_summary(now)
            self._emit_acceptance(now)

    def close(self):
        if self.dump_writer is not None:
            self.dump_writer.drain()
        if self._flusher is not None:
            self._flusher.stop()
            self._flusher = None
        self.flush()
