"""Block-diffusion drafts (DFlash, DSpark): the target's capture for them with each slot's HF index and label, where
the ids came from, the worker's load-time facts and what each hand-off feeds the draft's projection; the findings on
them (analysis.dflash_layers): SGLang's silent default, trained layers given and missed, two id lists that disagree,
a width the draft's fc does not take."""

from ...analysis import dflash_layers as rules
from ...analysis.findings import FC_WIDTH_MISMATCH, _finding
from ...analysis.layers import capture_label, parse_trained_layers
from ...events import BLOCK_CAPTURE, BLOCK_DRAFT_FED, BLOCK_DRAFT_LOADED
from ..sinks.metrics import MetricsSink
from .base import Part

UNKNOWN_SOURCE = "unknown"


class BlockDrafts(Part):
    kinds = ("block_capture_configured", "block_draft_loaded", "block_draft_fed")

    def block_capture_configured(self, obs):
        config = obs.draft_config
        source = UNKNOWN_SOURCE if config is None else config.source
        default = None
        if config is not None and config.num_draft_layers:
            default = rules.default_target_layer_ids(obs.num_layers, config.num_draft_layers)
        rule = rules.capture_rule(obs.requested_ids, obs.layers_to_capture)
        self._log_capture(obs, source, default, rule)
        if not obs.is_last_pp_stage:
            return
        slots = [(slot, index, index, capture_label(index, obs.num_layers))
                 for slot, index in enumerate(obs.layers_to_capture)]
        self.out.metric(MetricsSink.capture_layers, "target", slots)
        for finding in self._capture_findings(obs, config, source, rule):
            self.out.finding(finding, "target")

    def _capture_findings(self, obs, config, source, rule):
        found = []
        if config is not None and config.defaulted and obs.requested_ids is not None:
            found.append(rules.defaulted_finding(
                model_class=obs.model_class, chosen_ids=obs.requested_ids, captured=obs.layers_to_capture,
                num_layers=obs.num_layers, num_draft_layers=config.num_draft_layers))
        if config is not None:
            found.append(rules.aux_ids_disagree_finding(config, obs.model_class))
        if self.config.trained_layers:
            found.append(rules.layer_mismatch_finding(
                captured=obs.layers_to_capture, trained_hf=parse_trained_layers(self.config.trained_layers),
                num_layers=obs.num_layers, ids=obs.requested_ids, source=source,
                rule=rule if rule != rules.CAPTURE_OTHER else rules.CAPTURE_PLUS_ONE))
        return [f for f in found if f is not None]

    def _log_capture(self, obs, source, default, rule):
        self.out.emit(
            "info", BLOCK_CAPTURE, model_class=obs.model_class, role="target", algorithm=obs.algorithm,
            setter=obs.setter, requested_ids=None if obs.requested_ids is None else list(obs.requested_ids),
            layers_to_capture=list(obs.layers_to_capture), rule=rule, rule_text=rules.RULE_TEXT[rule],
            slots=[{"slot": slot, "capture_index": index, "hf_index": index,
                    "label": capture_label(index, obs.num_layers)}
                   for slot, index in enumerate(obs.layers_to_capture)],
            num_layers=obs.num_layers, ids_source=source, default_ids=None if default is None else list(default),
            num_draft_layers=None if obs.draft_config is None else obs.draft_config.num_draft_layers,
            draft_config=obs.draft_config_path, is_last_pp_stage=obs.is_last_pp_stage, caller=obs.caller)

    def block_draft_loaded(self, obs):
        fields = {k: (list(v) if isinstance(v, tuple) else v) for k, v in obs.__dict__.items()}
        expected = obs.num_context_features * obs.hidden_size if obs.num_context_features and obs.hidden_size \
            else None
        positions = obs.block_size - 1 if obs.block_size else None
        self.out.emit("info", BLOCK_DRAFT_LOADED, role="draft", draft_positions=positions, fc_expected_in=expected,
                      **fields)

    def block_draft_fed(self, obs):
        self.out.emit("info", BLOCK_DRAFT_FED, role="draft", worker_class=obs.worker_class, mode=obs.mode,
                      width=obs.width, expected_width=obs.expected_width, rows=obs.rows, dtype=obs.dtype)
        if obs.expected_width is not None and obs.width != obs.expected_width:
            self.out.finding(_finding(
                FC_WIDTH_MISMATCH,
                f"The block draft's projection takes {obs.expected_width} wide rows (K target states x hidden "
                f"size) but a {obs.mode} hand-off fed it {obs.width}: the target captures another number of layers "
                f"than the draft's target_layer_ids name (SGLang raises \"DFLASH target_hidden feature dim "
                f"mismatch\").", mode=obs.mode, width=obs.width, expected=obs.expected_width), "draft")
