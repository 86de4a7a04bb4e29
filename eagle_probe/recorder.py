"""The recorder: per-process state between observations and sinks.

It logs a fact on first sight and on change (never a line per forward by default), keeps counters,
runs the diagnosis rules when something new is seen, and writes a periodic summary. Any exception in
a sink is counted and logged once; the caller never sees it.
"""

import time
from collections import Counter
from typing import Callable, Optional

from . import __version__
from .analysis import draft_rules
from .analysis import findings as rules_mod
from .analysis.acceptance import AcceptanceWindow, expected_mean_length, step_counts
from .analysis.layers import apply_capture_rule, capture_label, explain_mapping, parse_trained_layers
from .config import ProbeConfig
from .observations import CaptureConfigured, DraftForward, DraftLoaded, Finding, Ranks, TargetForward, VerifyStep
from .versions import SUPPORTED_RANGE_TEXT, VersionRules
from .events import (ACCEPTANCE as EV_ACCEPTANCE, CAPTURE_CONFIGURED as EV_CAPTURE_CONFIGURED,
                     CONFIG_ERROR as EV_CONFIG_ERROR, DRAFT_FORWARD as EV_DRAFT_FORWARD,
                     DRAFT_LOADED as EV_DRAFT_LOADED, FINDING as EV_FINDING, INTERNAL_ERROR as EV_INTERNAL_ERROR,
                     INTEGRATION_SKIPPED as EV_SKIPPED, STARTED as EV_STARTED, SUMMARY as EV_SUMMARY,
                     TARGET_FORWARD as EV_TARGET_FORWARD)

SELF_FED_DRAFT_MODES = ("DECODE", "IDLE")


class Recorder:
    def __init__(self, config: ProbeConfig, rules: VersionRules, sglang_version: Optional[str], logs,
                 read_ranks: Callable[[], Optional[Ranks]], make_metrics: Optional[Callable] = None,
                 clock=time.monotonic):
        self.config = config
        self.rules = rules
        self.sglang_version = sglang_version
        self.logs = logs
        self._read_ranks = read_ranks
        self._make_metrics = make_metrics
        self._clock = clock
        self.ranks: Optional[Ranks] = None
        self.metrics = None
        self._pending_skips = []
        self._signatures = {}
        self._seen_findings = set()
        self._errors_logged = set()
        self._graph_layers = {}  # (role, class) -> layers seen in graph capture / graph set-up
        self._eager_layers = {}  # (role, class) -> layers seen in eager forwards / configured calls
        self._counts = Counter()
        self._lost_total = 0
        self._findings_total = Counter()
        self._errors_total = 0
        self._last_summary = clock()
        self._target_capture = None  # last CaptureConfigured outside graph set-up (the eager truth)
        self._draft = None  # DraftLoaded
        self._window = AcceptanceWindow()  # since the last acceptance event
        self._total = AcceptanceWindow()  # since start
        self._last_acceptance = clock()
        self._acceptance_source = ""  # the SGLang function acceptance is read from

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
        if self._make_metrics is not None:
            try:
                self.metrics = self._make_metrics(ranks)
                self.metrics.set_info(__version__, self.sglang_version or "unknown", self.rules.capture_id_rule)
                for integration, target in self._pending_skips:
                    self.metrics.integration_skipped(integration, target)
            except Exception as exc:  # a port in use must not stop the logs
                self.metrics = None
                self.internal_error("metrics.start", exc)
        self._pending_skips.clear()
        self._emit("info", EV_STARTED, probe_version=__version__, sglang_version=self.sglang_version,
                       rules=self.rules.describe(), metrics_port=getattr(self.metrics, "port", None),
                       metrics_multiprocess=getattr(self.metrics, "multiprocess", None))
        return True

    def _emit(self, level: str, event: str, **fields):
        """A log line; a failing log sink (full disk, unusable log dir) is counted, and metrics carry on."""
        try:
            self.logs.emit(level, event, **fields)
        except Exception as exc:
            self.internal_error("logs.emit", exc)

    def _metric(self, method: str, *args):
        if self.metrics is None:
            return
        try:
            getattr(self.metrics, method)(*args)
        except Exception as exc:
            self.internal_error(f"metrics.{method}", exc)

    # -- inputs --------------------------------------------------------------------------------

    def integration_skipped(self, integration: str, target: str, reason: str, expected: bool = True, off: str = ""):
        """A missing target the version table expects is a warning; one it says this release lacks is info.
        Only this target stays unwrapped; the event says what the probe cannot report because of it."""
        message = (f"{target} is not wrapped in SGLang {self.sglang_version} (supported range "
                   f"{SUPPORTED_RANGE_TEXT}): {reason}" + (f"; off: {off}" if off else ""))
        self._emit("warning" if expected else "info", EV_SKIPPED, integration=integration, target=target,
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
        if where not in self._errors_logged:
            self._errors_logged.add(where)
            try:
                self.logs.emit("error", EV_INTERNAL_ERROR, where=where, error=f"{type(exc).__name__}: {exc}")
            except Exception:
                pass

    def capture_configured(self, obs: CaptureConfigured):
        self._ensure_ranks()
        slots = [(slot, index, index, capture_label(index, obs.num_layers))
                 for slot, index in enumerate(obs.layers_to_capture)]
        self._emit(
            "info", EV_CAPTURE_CONFIGURED, model_class=obs.model_class, role=obs.role,
            requested_ids=None if obs.requested_ids is None else list(obs.requested_ids),
            layers_to_capture=list(obs.layers_to_capture),
            mapping=explain_mapping(obs.requested_ids, obs.layers_to_capture, obs.num_layers),
            version_rule=self.rules.capture_id_rule,
            slots=[{"slot": s, "capture_index": i, "hf_index": h, "label": lab} for s, i, h, lab in slots],
            num_layers=obs.num_layers, first_k_dense_replace=obs.first_k_dense_replace,
            layer_range=[obs.start_layer, obs.end_layer], is_last_pp_stage=obs.is_last_pp_stage,
            caller=obs.caller, during_graph_setup=obs.during_graph_setup)
        if obs.is_last_pp_stage:
            self._metric("capture_layers", obs.role, slots)
        for finding in rules_mod.capture_config_findings(obs, self.rules):
            self.finding(finding, obs.role)
        key = (obs.role, obs.model_class)
        store = self._graph_layers if obs.during_graph_setup else self._eager_layers
        store[key] = ("configuration", obs.layers_to_capture)
        self._check_graph_vs_eager(key, obs.num_layers)
        if obs.role == "target" and not obs.during_graph_setup and obs.is_last_pp_stage:
            self._target_capture = obs
            self._check_draft_layers()

    def target_forward(self, obs: TargetForward):
        self._ensure_ranks()
        self._counts[(obs.role, obs.mode, obs.path, obs.can_run_tbo)] += 1
        self._lost_total += len(obs.lost)
        self._metric("forward", obs)
        key = (obs.role, obs.model_class, obs.path, obs.mode)  # modes alternate every step: one entry each
        signature = obs.signature()
        if self._signatures.get(key) != signature:
            self._signatures[key] = signature
            self._log_forward(obs)
            self._metric("forward_shapes", obs)
            for finding in rules_mod.forward_findings(obs):
                self.finding(finding, obs.role)
            pair = (obs.role, obs.model_class)
            store = self._graph_layers if obs.capturing else self._eager_layers
            store[pair] = ("forward", obs.layers_to_capture)
            self._check_graph_vs_eager(pair, obs.num_layers)
        elif self.config.log_every_forward:
            self._log_forward(obs)
        self._maybe_summary()

    def draft_loaded(self, obs: DraftLoaded):
        self._ensure_ranks()
        self._draft = obs
        fields = {k: (list(v) if isinstance(v, tuple) else v) for k, v in obs.__dict__.items()}
        self._emit("info", EV_DRAFT_LOADED, role="draft", **fields)
        if obs.dropped:
            self.finding(rules_mod.draft_weights_dropped_finding(obs.model_class, obs.dropped), "draft")
        replaced = rules_mod.draft_replaced_finding(obs)
        if replaced is not None:
            self.finding(replaced, "draft")
        self._check_draft_layers()

    def draft_forward(self, obs: DraftForward):
        self._ensure_ranks()
        self._metric("draft_forward", obs)
        key = ("draft", obs.model_class, obs.path, obs.mode)
        signature = obs.signature()
        if self._signatures.get(key) != signature:
            self._signatures[key] = signature
            self._emit("info", EV_DRAFT_FORWARD, role="draft", model_class=obs.model_class, mode=obs.mode,
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
        self._maybe_summary()

    def verify_step(self, step: VerifyStep):
        self._ensure_ranks()
        self._acceptance_source = step.source
        lengths, per_position = step_counts(step.accepted, step.positions)
        self._window.add_counts(lengths, per_position, step.positions)
        self._total.add_counts(lengths, per_position, step.positions)
        self._metric("verify_step", lengths, per_position, step.positions)
        if self._clock() - self._last_acceptance >= self.config.summary_interval_s:
            self._emit_acceptance()

    def _emit_acceptance(self):
        window, self._window = self._window, AcceptanceWindow()
        self._last_acceptance = self._clock()
        if not window.drafts:
            return
        fields = window.as_fields()
        fields["read_at"] = self._acceptance_source
        expected = None
        if self.config.draft_accuracy is not None:
            expected = expected_mean_length(self.config.draft_accuracy, window.positions)
            fields.update(expected_mean_accept_length=expected,
                          observed_over_expected=window.mean_length() / expected)
        total = self._total.as_fields()
        fields["total"] = {k: total[k] for k in
                           ("steps", "drafts", "accepted_tokens", "mean_accept_length", "per_position_rate")}
        self._emit("info", EV_ACCEPTANCE, role="target", **fields)
        if expected is not None and window.drafts >= self.config.collapse_min_drafts \
                and window.mean_length() / expected < self.config.collapse_ratio:
            seen = sorted({code for code, _, _ in self._seen_findings if code != rules_mod.ACCEPTANCE_COLLAPSE})
            self.finding(rules_mod.acceptance_collapse_finding(
                window.mean_length(), expected, self.config.draft_accuracy, window.positions,
                window.per_position_rate(), window.drafts, self.config.collapse_ratio, seen), "target")

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

    def finding(self, finding: Finding, role: str):
        key = (finding.code, role, repr(finding.evidence))
        if key in self._seen_findings:
            return
        self._seen_findings.add(key)
        self._findings_total[finding.code] += 1
        self._emit("warning" if finding.severity != "error" else "error", EV_FINDING, code=finding.code,
                       severity=finding.severity, role=role, message=finding.message,
                       evidence=finding.evidence_dict())
        self._metric("finding", finding, role)

    # -- internals -------------------------------------------------------------------------------

    def _check_graph_vs_eager(self, key, num_layers):
        graph, eager = self._graph_layers.get(key), self._eager_layers.get(key)
        if graph is None or eager is None:
            return
        source = graph[0] if graph[0] == eager[0] else f"{graph[0]}/{eager[0]}"
        for finding in rules_mod.graph_eager_findings(key[1], graph[1], eager[1], source, num_layers):
            self.finding(finding, key[0])

    def _log_forward(self, obs: TargetForward):
        self._emit(
            "info", EV_TARGET_FORWARD, model_class=obs.model_class, role=obs.role,
            mode=obs.mode, path=obs.path, capturing=obs.capturing, can_run_tbo=obs.can_run_tbo,
            layers_to_capture=list(obs.layers_to_capture),
            slot_labels=[capture_label(i, obs.num_layers) for i in obs.layers_to_capture],
            normal_layers=list(obs.normal_range), tbo_layers=None if obs.tbo_range is None else list(obs.tbo_range),
            lost=list(obs.lost), tokens=obs.tokens, aux_expected=obs.aux_expected, aux_returned=obs.aux_returned,
            aux_format=obs.aux_format, aux_shape=None if obs.aux_shape is None else list(obs.aux_shape),
            slot_widths=list(obs.slot_widths), dtype=obs.dtype, error=obs.error)

    def _maybe_summary(self, force: bool = False):
        now = self._clock()
        if not force and now - self._last_summary < self.config.summary_interval_s:
            return
        self._last_summary = now
        self._emit(
            "info", EV_SUMMARY,
            forwards=[{"role": r, "mode": m, "path": p, "tbo": t, "count": c}
                      for (r, m, p, t), c in sorted(self._counts.items())],
            captures_lost=self._lost_total, findings=dict(self._findings_total),
            internal_errors=self._errors_total)

    def flush(self):
        """Write a final summary (at uninstall or process exit)."""
        if self._counts:
            self._maybe_summary(force=True)
        if self._window.drafts:
            self._emit_acceptance()
