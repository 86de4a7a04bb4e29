"""The target's capture set-up and its forwards: what was asked for and captured, with which shapes, on which path.
A forward is logged on first sight and on change; the layers seen in graph capture and in eager forwards are
compared per (role, class)."""

from ...analysis import findings as rules_mod
from ...analysis.layers import capture_label, explain_mapping
from ...events import CAPTURE_CONFIGURED, TARGET_FORWARD
from ...families import UNVERIFIED
from ...versions import format_version, rule_since
from ..sinks.metrics import MetricsSink
from .base import Part


class CaptureLayers(Part):
    kinds = ("capture_configured", "target_forward")

    def __init__(self, recorder):
        super().__init__(recorder)
        self._signatures = {}  # (role, class, path, mode) -> the last forward signature logged
        self._graph_layers = {}  # (role, class) -> (source, layers) seen in graph capture / graph set-up
        self._eager_layers = {}  # (role, class) -> (source, layers) seen in eager forwards / configured calls

    def forget(self):
        self._signatures.clear()

    def capture_configured(self, obs):
        self._log_capture_configured(obs)
        if obs.is_last_pp_stage:
            slots = [(slot, index, index, capture_label(index, obs.num_layers))
                     for slot, index in enumerate(obs.layers_to_capture)]
            self.out.metric(MetricsSink.capture_layers, obs.role, slots)
        if obs.family_rule == UNVERIFIED:  # no row proves this class's rule: say so, predict nothing
            self.out.finding(rules_mod.capture_unverified_finding(obs), obs.role)
        else:
            for finding in rules_mod.capture_config_findings(obs, self.rules, self.family_of(obs)):
                self.out.finding(finding, obs.role)
        self._remember_layers((obs.role, obs.model_class), obs.during_graph_setup, "configuration",
                              obs.layers_to_capture, obs.num_layers)

    def target_forward(self, obs):
        key = (obs.role, obs.model_class, obs.path, obs.mode)  # modes alternate every step: one entry each
        signature = obs.signature()
        if self._signatures.get(key) != signature:
            self._signatures[key] = signature
            self._log_forward(obs)
            self.out.metric(MetricsSink.forward_shapes, obs)
            for finding in rules_mod.forward_findings(obs):
                self.out.finding(finding, obs.role)
            self._remember_layers((obs.role, obs.model_class), obs.capturing, "forward", obs.layers_to_capture,
                                  obs.num_layers)
        elif self.config.log_every_forward:
            self._log_forward(obs)

    def _remember_layers(self, pair, graph: bool, source: str, layers, num_layers):
        (self._graph_layers if graph else self._eager_layers)[pair] = (source, layers)
        graph_seen, eager_seen = self._graph_layers.get(pair), self._eager_layers.get(pair)
        if graph_seen is None or eager_seen is None:
            return
        how = graph_seen[0] if graph_seen[0] == eager_seen[0] else f"{graph_seen[0]}/{eager_seen[0]}"
        for finding in rules_mod.graph_eager_findings(pair[1], graph_seen[1], eager_seen[1], how, num_layers):
            self.out.finding(finding, pair[0])

    def _log_capture_configured(self, obs):
        self.out.emit(
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
            caller=obs.caller, during_graph_setup=obs.during_graph_setup, family=obs.family,
            family_rule=obs.family_rule, rule_applied=obs.rule_applied)

    def _log_forward(self, obs):
        self.out.emit(
            "info", TARGET_FORWARD, model_class=obs.model_class, role=obs.role,
            mode=obs.mode, path=obs.path, capturing=obs.capturing, can_run_tbo=obs.can_run_tbo,
            layers_to_capture=list(obs.layers_to_capture),
            slot_labels=[capture_label(i, obs.num_layers) for i in obs.layers_to_capture],
            normal_layers=list(obs.normal_range), tbo_layers=None if obs.tbo_range is None else list(obs.tbo_range),
            lost=list(obs.lost), tokens=obs.tokens, aux_expected=obs.aux_expected, aux_returned=obs.aux_returned,
            aux_format=obs.aux_format, aux_shape=None if obs.aux_shape is None else list(obs.aux_shape),
            slot_widths=list(obs.slot_widths), dtype=obs.dtype, error=obs.error)
