"""The EAGLE-3 draft: its load-time facts (configuration, checkpoint, embedding), the widths it is fed, and the ids
its config names against what the target captured (and the trained layers, when given)."""

from ...analysis import draft_config_keys, draft_ids, draft_rules
from ...analysis import findings as rules_mod
from ...analysis.layers import apply_capture_rule, parse_trained_layers
from ...analysis.vocab_map import load_findings
from ...events import DRAFT_FORWARD, DRAFT_LOADED
from ...families import UNVERIFIED
from ..sinks.metrics import MetricsSink
from .base import Part

# Multi-step draft DECODE feeds the draft its own hidden state, which skips fc by design; only target-fed
# forwards (prefill and draft extend) must pass through it.
SELF_FED_DRAFT_MODES = ("DECODE", "IDLE")


class DraftFacts(Part):
    kinds = ("capture_configured", "draft_loaded", "draft_forward")

    def __init__(self, recorder):
        super().__init__(recorder)
        self._signatures = {}  # (class, path, mode) -> the last draft forward signature logged
        self._target_capture = None  # last CaptureConfigured outside graph set-up (the eager truth)
        self._draft = None  # DraftLoaded

    def forget(self):
        self._signatures.clear()

    def capture_configured(self, obs):
        if obs.role == "target" and not obs.during_graph_setup and obs.is_last_pp_stage:
            self._target_capture = obs
            self._check_layers()

    def draft_loaded(self, obs):
        self._draft = obs
        fields = {k: (list(v) if isinstance(v, tuple) else v) for k, v in obs.__dict__.items()}
        self.out.emit("info", DRAFT_LOADED, role="draft", **fields)
        if obs.dropped:
            self.out.finding(rules_mod.draft_weights_dropped_finding(obs.model_class, obs.dropped), "draft")
        replaced = rules_mod.draft_replaced_finding(obs)
        if replaced is not None:
            self.out.finding(replaced, "draft")
        ignored = draft_config_keys.ignored_finding(
            draft_config_keys.from_observed(obs.config_ignored, obs.sglang_release or ""), obs.model_class)
        if ignored is not None:
            self.out.finding(ignored, "draft")
        for finding in load_findings(obs.model_class, obs.draft_vocab_size, obs.target_vocab_size, obs.d2t_size,
                                     obs.d2t_problems):
            self.out.finding(finding, "draft")
        self._check_layers()

    def draft_forward(self, obs):
        key = (obs.model_class, obs.path, obs.mode)
        signature = obs.signature()
        if self._signatures.get(key) == signature:
            return
        self._signatures[key] = signature
        self.out.emit("info", DRAFT_FORWARD, role="draft", model_class=obs.model_class, mode=obs.mode,
                      path=obs.path, aux_width=obs.aux_width, embed_width=obs.embed_width, fc_in=obs.fc_in,
                      fc_ran=obs.fc_ran, num_aux=obs.num_aux, target_hidden_size=obs.target_hidden_size,
                      tokens=obs.tokens, error=obs.error)
        self.out.metric(MetricsSink.draft_shapes, obs)
        if obs.aux_width is not None and obs.mode not in SELF_FED_DRAFT_MODES:
            for finding in draft_rules.draft_input_findings(
                    model_class=obs.model_class, mode=obs.mode, aux_width=obs.aux_width,
                    embed_width=obs.embed_width, fc_in_width=obs.fc_in,
                    target_hidden_size=obs.target_hidden_size, num_aux=obs.num_aux):
                self.out.finding(finding, "draft")

    def _check_layers(self):
        """The draft's eagle_config ids (and the trained layers, when given) against what the target captured."""
        target, draft = self._target_capture, self._draft
        if target is None or draft is None:
            return
        captured = target.layers_to_capture
        row = self.family_of(target)  # the ids map by the target family's rule (DeepSeek's without a row)
        if self.config.trained_layers:
            trained = parse_trained_layers(self.config.trained_layers)
            for finding in draft_rules.layer_mismatch_findings(
                    captured=captured, trained_hf=trained, num_layers=target.num_layers, rules=self.rules,
                    requested_ids=target.requested_ids, family=row):
                self.out.finding(finding, "draft")
        if target.family_rule == UNVERIFIED:
            return  # how this target maps the draft's ids is not known: no guess (capture_rule_unverified says so)
        expected, _ = apply_capture_rule(self.rules.capture_id_rule, draft.eagle_layer_ids, target.num_layers, row)
        finding = rules_mod.draft_config_layer_finding(draft.model_class, draft.eagle_layer_ids, expected,
                                                       captured, target.num_layers)
        if finding is not None:
            self.out.finding(finding, "draft")
        if draft.ids_read is not None:  # the ids the draft sized its fc from, when the target was given others
            named, _ = apply_capture_rule(self.rules.capture_id_rule, draft.ids_read, target.num_layers, row)
            finding = draft_ids.ids_differ_finding(draft.model_class, draft.ids_read, draft.ids_read_from,
                                                   target.requested_ids, named, captured, target.num_layers)
            if finding is not None:
                self.out.finding(finding, "draft")
