"""Diagnosis rules: evidence in, findings out. Shared by the running probe and offline commands."""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from ..versions import VersionRules
from .fingerprints import RMS_SPREAD_TOLERANCE, SIGNATURE_COSINE_TOLERANCE
from .layers import apply_capture_rule, capture_label, unreachable_indices

if TYPE_CHECKING:  # the observation types only; analysis never needs the runtime itself
    from ..families import Family
    from ..observations import CaptureConfigured, TargetForward


@dataclass(frozen=True)
class Finding:
    """What a rule concluded: a stable code, its severity, a message naming the cause, and the evidence."""

    code: str
    severity: str  # error | warning | info
    message: str
    evidence: tuple[tuple[str, object], ...] = field(default_factory=tuple)

    def evidence_dict(self) -> dict:
        return dict(self.evidence)


TBO_CAPTURE_LOST = "tbo_capture_lost"
AUX_COUNT_MISMATCH = "aux_count_mismatch"
GRAPH_EAGER_LAYER_MISMATCH = "graph_eager_layer_mismatch"
CAPTURE_AFTER_GRAPH = "capture_after_graph"
CAPTURE_ID_UNREACHABLE = "capture_id_unreachable"
CAPTURE_RULE_UNEXPECTED = "capture_rule_unexpected"
# Target families (eagle_probe.families): a target SGLang cannot serve with EAGLE-3, or one with no proven row.
TARGET_NOT_EAGLE3 = "target_not_eagle3"
CAPTURE_RULE_UNVERIFIED = "capture_rule_unverified"
# Draft side, configuration and acceptance (shared by the running probe and `eagle-probe doctor`).
LAYER_MISMATCH = "layer_mismatch"
FC_WIDTH_MISMATCH = "fc_width_mismatch"
FC_SKIPPED = "fc_skipped"
DRAFT_WEIGHTS_DROPPED = "draft_weights_dropped"
DRAFT_EMBEDDING_REPLACED = "draft_embedding_replaced"
DRAFT_TARGET_IDS_DIFFER = "draft_target_ids_differ"
PP_STAGE_NO_CAPTURE = "pp_stage_no_capture"
ACCEPTANCE_COLLAPSE = "acceptance_collapse"
# Values (fingerprints of the aux slots).
AUX_NONFINITE = "aux_nonfinite"
AUX_SLOTS_IDENTICAL = "aux_slots_identical"
TP_RANK_DIVERGENCE = "tp_rank_divergence"
AUX_VALUE_MISMATCH = "aux_value_mismatch"
# Replay (`eagle-probe replay --search`): the wiring the draft agrees with its target best under.
TRAINED_LAYERS_INFERRED = "trained_layers_inferred"
# The draft's vocabulary map (analysis.vocab_map) and acceptance against training (analysis.training_gap).
DRAFT_VOCAB_MAP_MISSING = "draft_vocab_map_missing"
DRAFT_VOCAB_MAP_INVALID = "draft_vocab_map_invalid"
ACCEPTANCE_BELOW_TRAINING = "acceptance_below_training"
DRAFT_VOCAB_COVERAGE_LOW = "draft_vocab_coverage_low"
ACCEPTANCE_SLICE_LOW = "acceptance_slice_low"  # analysis.slices
VERIFY_PREFILL_MISMATCH = "verify_prefill_mismatch"  # analysis.consistency (`eagle-probe consistency`)
DRAFT_CONFIG_IGNORED = "draft_config_ignored"  # analysis.draft_config_keys
ACCEPTANCE_LOW = "acceptance_low"  # analysis.field_prior
ACCEPTANCE_SAMPLED_TRAFFIC = "acceptance_sampled_traffic"  # analysis.sampled_traffic
ACCEPTANCE_PAST_TRAINED_LENGTH = "acceptance_past_trained_length"  # analysis.trained_length
ACCEPTANCE_BIMODAL = "acceptance_bimodal"  # analysis.bimodal
SPECULATION_SLOWER_THAN_PLAIN = "speculation_slower_than_plain"  # analysis.speculation_cost
SPECULATION_DEPTH_OFF = "speculation_depth_off"  # analysis.speculation_cost
DFLASH_TARGET_LAYERS_DEFAULTED = "dflash_target_layers_defaulted"  # analysis.dflash_layers
DFLASH_LAYER_IDS_DISAGREE = "dflash_layer_ids_disagree"  # analysis.dflash_layers

ERROR, WARNING, INFO = "error", "warning", "info"

# Every code with its severity and one line of meaning (docs/reference/findings.md is generated from it, with
# analysis/finding_guide.py).
CODES = {
    TBO_CAPTURE_LOST: (ERROR, "capture slots fall in the layers Two-Batch-Overlap runs, which never capture"),
    AUX_COUNT_MISMATCH: (ERROR, "the target returned fewer (or more) aux hidden states than configured"),
    GRAPH_EAGER_LAYER_MISMATCH: (ERROR, "CUDA-graph capture and eager forwards capture different layers"),
    CAPTURE_AFTER_GRAPH: (ERROR, "aux capture was configured after the target's CUDA graphs were captured: replays run "
                                 "without it"),
    CAPTURE_ID_UNREACHABLE: (ERROR, "a configured capture index can never be captured"),
    CAPTURE_RULE_UNEXPECTED: (WARNING, "SGLang mapped capture ids differently from its version's known rule"),
    TARGET_NOT_EAGLE3: (ERROR, "the target's architecture defines no set_eagle3_layers_to_capture in this release: "
                               "SGLang refuses it as an EAGLE-3 target"),
    CAPTURE_RULE_UNVERIFIED: (WARNING, "the target class defines set_eagle3_layers_to_capture but no family row "
                                       "proves its rule: its captures are reported with the rule unverified"),
    LAYER_MISMATCH: (ERROR, "the target captures other layers than the draft was trained on"),
    FC_WIDTH_MISMATCH: (ERROR, "the aux width entering the draft differs from the width its fc takes"),
    FC_SKIPPED: (ERROR, "the draft's fc is skipped: the incoming width equals the embedding width "
                        "(e.g. an EAGLE-3 draft under --speculative-algorithm EAGLE)"),
    DRAFT_WEIGHTS_DROPPED: (WARNING, "checkpoint weights of the draft that SGLang dropped without a word"),
    DRAFT_EMBEDDING_REPLACED: (WARNING, "the draft's own embedding or lm_head is replaced by the target's"),
    DRAFT_TARGET_IDS_DIFFER: (ERROR, "the draft sizes its fc from layer ids the target is not given (e.g. Kimi-K2.5's "
                                     "MLA draft reads top-level ids, the target only eagle_config's), and the "
                                     "target captures other layers than those ids name"),
    PP_STAGE_NO_CAPTURE: (WARNING, "capture ids on pipeline stages other than the last are never captured"),
    ACCEPTANCE_COLLAPSE: (ERROR, "observed mean acceptance length stays far under the expected one"),
    AUX_NONFINITE: (ERROR, "an aux slot carries NaN or Inf values"),
    AUX_SLOTS_IDENTICAL: (WARNING, "two aux slots carry the same values (e.g. a repeated capture index)"),
    TP_RANK_DIVERGENCE: (ERROR, "tensor-parallel ranks that must hold the same aux states for the same tokens "
                                "disagree beyond the tolerance"),
    AUX_VALUE_MISMATCH: (ERROR, "an aux slot's served values differ from the training data's slot"),
    TRAINED_LAYERS_INFERRED: (WARNING, "replay: the draft agrees with its target best when fed other layers than "
                                       "the served ones"),
    DRAFT_VOCAB_MAP_MISSING: (ERROR, "the draft's vocabulary is smaller than the target's and its checkpoint has no "
                                     "d2t map: SGLang uses draft ids as target ids"),
    DRAFT_VOCAB_MAP_INVALID: (ERROR, "the draft's d2t map sends ids out of the target's vocabulary, or two draft ids "
                                     "to one target id"),
    ACCEPTANCE_BELOW_TRAINING: (WARNING, "summarize: served acceptance is below what the draft's training accuracies "
                                         "promise and no finding explains it (error under 60 % of the promise)"),
    DRAFT_VOCAB_COVERAGE_LOW: (WARNING, "the target's verified tokens often lie outside the draft's vocabulary (or "
                                        "acceptance sits at the cap that coverage sets): the draft cannot propose "
                                        "them"),
    ACCEPTANCE_SLICE_LOW: (WARNING, "acceptance in one slice (sequence position, batch size, cached prefix, "
                                    "forward path, first decode step) is below the rest beyond chance"),
    VERIFY_PREFILL_MISMATCH: (ERROR, "consistency: the aux states of verified, accepted rows differ from a prefill of "
                                     "the same tokens on the same server beyond the tolerance"),
    DRAFT_CONFIG_IGNORED: (WARNING, "the draft config sets a key that changes the EAGLE-3 forward (norm_before_fc, "
                                    "fc_norm, norm_output, norm_before_residual, target_hidden_size, "
                                    "num_aux_hidden_states, RoPE scaling) which this release's draft class never "
                                    "reads where it is written: the draft is served as another network"),
    ACCEPTANCE_LOW: (WARNING, "summarize, with no training accuracy given: first-position acceptance is far below the "
                              "published EAGLE-3 figure for chat traffic beyond chance (always under 0.4 over 100 or "
                              "more verify steps)"),
    ACCEPTANCE_SAMPLED_TRAFFIC: (INFO, "acceptance below what was expected is sampled traffic's (temperature > 0 "
                                       "verifies by the target's probabilities), while greedy traffic is served as "
                                       "expected: not a wiring fault"),
    ACCEPTANCE_PAST_TRAINED_LENGTH: (WARNING, "summarize: acceptance at sequence positions beyond the draft's trained "
                                              "length is below acceptance within it beyond chance"),
    ACCEPTANCE_BIMODAL: (WARNING, "summarize: finished requests' accept lengths split into two groups (a subset of "
                                  "the traffic fails while the rest is served well)"),
    SPECULATION_SLOWER_THAN_PLAIN: (WARNING, "summarize, advise: at a batch-size bucket (or for one traffic class) "
                                             "speculation is estimated slower than plain decoding beyond its "
                                             "uncertainty"),
    SPECULATION_DEPTH_OFF: (INFO, "summarize, advise: another draft depth is estimated faster than the one served by "
                                  "a margin"),
    DFLASH_TARGET_LAYERS_DEFAULTED: (WARNING, "a DFlash/DSpark draft's config names no target_layer_ids: SGLang "
                                              "spread the draft's layer count over the target by its own formula, "
                                              "unchecked against the layers the draft was trained on"),
    DFLASH_LAYER_IDS_DISAGREE: (WARNING, "a DFlash/DSpark draft's config names target_layer_ids and "
                                         "eagle_aux_hidden_state_layer_ids that are not the same layers (the second "
                                         "one higher): SGLang serves the first"),
}


# Codes that mean the draft is fed other layers or shapes than it expects (the dashboards' mismatch panel and
# alert select on these).
MISMATCH_CODES = (LAYER_MISMATCH, FC_WIDTH_MISMATCH, AUX_COUNT_MISMATCH, GRAPH_EAGER_LAYER_MISMATCH,
                  CAPTURE_AFTER_GRAPH, CAPTURE_ID_UNREACHABLE, FC_SKIPPED, PP_STAGE_NO_CAPTURE, DRAFT_TARGET_IDS_DIFFER)


def _labels(indices: Sequence[int], num_layers: int | None = None, final_capturable: bool = False) -> str:
    return ", ".join(f"{i} ({capture_label(i, num_layers, final_capturable)})" for i in indices) or "none"


def _finding(code: str, message: str, **evidence) -> Finding:
    return Finding(code, CODES[code][0], message, tuple(sorted(evidence.items())))


def capture_unverified_finding(obs: "CaptureConfigured") -> Finding:
    """A running target class whose setter no family row describes: what SGLang set is reported as is."""
    return _finding(
        CAPTURE_RULE_UNVERIFIED,
        f"{obs.model_class} defines set_eagle3_layers_to_capture but no family row proves its rule: ids "
        f"{None if obs.requested_ids is None else list(obs.requested_ids)} became {list(obs.layers_to_capture)} "
        f"(what SGLang set, reported as is; the rule is unverified and the draft's ids are not checked against it).",
        model_class=obs.model_class, requested_ids=None if obs.requested_ids is None else list(obs.requested_ids),
        layers_to_capture=list(obs.layers_to_capture), rule=obs.family_rule)


def capture_config_findings(obs: "CaptureConfigured", rules: VersionRules,
                            family: Optional["Family"] = None) -> list[Finding]:
    """The configured positions checked against what the target can capture and against its rule: DeepSeek's
    (from `rules`) unless a `family` row (eagle_probe.families) is given."""
    findings: list[Finding] = []
    if not obs.is_last_pp_stage:
        return findings  # SGLang returns early on earlier PP stages; nothing is configured there
    embedding = rules.embedding_capturable if family is None else family.embedding_capturable
    bad = unreachable_indices(obs.layers_to_capture, obs.num_layers, embedding, obs.start_layer, obs.end_layer,
                              final_capturable=family is not None and family.final_capturable,
                              final_raises=family is not None and family.final_raises)
    if bad:
        reasons = "; ".join(f"index {i}: {why}" for i, why in bad)
        findings.append(_finding(
            CAPTURE_ID_UNREACHABLE,
            f"{obs.model_class}: layers_to_capture {list(obs.layers_to_capture)} (from ids "
            f"{None if obs.requested_ids is None else list(obs.requested_ids)}) contains indices that "
            f"can never be captured: {reasons}. The draft will get fewer aux states than it expects.",
            layers_to_capture=list(obs.layers_to_capture), unreachable=[i for i, _ in bad],
            requested_ids=None if obs.requested_ids is None else list(obs.requested_ids),
            num_layers=obs.num_layers))
    if obs.graphs_captured:
        findings.append(_finding(
            CAPTURE_AFTER_GRAPH,
            f"{obs.model_class}: aux capture set to layers_to_capture {list(obs.layers_to_capture)} by {obs.caller} "
            f"after the target's CUDA graphs ({', '.join(obs.graphs_captured)}) were captured: every replayed "
            f"forward (each verify step, graph-sized prefills) runs what was captured then, without this "
            f"configuration (sglang #22836: acceptance near zero, default ids). Configure capture before graph "
            f"capture (a release with #22836's fix), or serve with --disable-cuda-graph.",
            layers_to_capture=list(obs.layers_to_capture), caller=obs.caller, graphs=list(obs.graphs_captured)))
    predicted, rule = apply_capture_rule(rules.capture_id_rule, obs.requested_ids, obs.num_layers, family)
    if tuple(predicted) != tuple(obs.layers_to_capture):
        findings.append(_finding(
            CAPTURE_RULE_UNEXPECTED,
            f"{obs.model_class}: ids {obs.requested_ids} became {list(obs.layers_to_capture)}, but this "
            f"SGLang version's rule ({rule}) predicts {list(predicted)}; the layer labels below follow "
            f"what SGLang actually set.",
            requested_ids=None if obs.requested_ids is None else list(obs.requested_ids),
            layers_to_capture=list(obs.layers_to_capture), predicted=list(predicted), rule=rule))
    return findings


def _duplicates(indices: Sequence[int]) -> list[int]:
    seen, repeated = set(), []
    for index in indices:
        if index in seen and index not in repeated:
            repeated.append(index)
        seen.add(index)
    return repeated


def _aux_count_causes(obs: "TargetForward", repeated: list[int]) -> str:
    """What explains a short aux count: slots lost to TBO, and indices listed more than once (SGLang's layer
    loop appends a layer's output once, however often its index is listed)."""
    causes = f"; lost to TBO: {list(obs.lost)}" if obs.lost else ""
    if repeated:
        causes += (f"; index {', '.join(map(str, repeated))} is listed more than once and SGLang captures each "
                   f"layer once (e.g. 0.5.8's defaults [2, n//2, n-3] repeat 3 when n = 6): give distinct ids")
    return causes


def forward_findings(obs: "TargetForward") -> list[Finding]:
    findings = []
    if obs.lost and obs.tbo_range is not None:  # slots are lost only where TBO ran a range
        kept = [i for i in obs.layers_to_capture if i not in obs.lost]
        findings.append(_finding(
            TBO_CAPTURE_LOST,
            f"{obs.model_class} {obs.mode}: Two-Batch-Overlap ran layers [{obs.tbo_range[0]}, "
            f"{obs.tbo_range[1]}) in its stages, which do not capture aux hidden states; lost capture "
            f"slots {_labels(obs.lost)}; kept {_labels(kept)}. Disable --enable-two-batch-overlap or "
            f"capture only indices below {obs.tbo_range[0]}.",
            lost=list(obs.lost), kept=kept, layers_to_capture=list(obs.layers_to_capture),
            tbo_range=list(obs.tbo_range), mode=obs.mode, path=obs.path))
    if obs.aux_returned is not None and obs.aux_returned != obs.aux_expected:
        repeated = _duplicates(obs.layers_to_capture)
        findings.append(_finding(
            AUX_COUNT_MISMATCH,
            f"{obs.model_class} {obs.mode}: returned {obs.aux_returned} aux hidden states, "
            f"configured {obs.aux_expected} ({list(obs.layers_to_capture)}){_aux_count_causes(obs, repeated)}.",
            returned=obs.aux_returned, expected=obs.aux_expected,
            layers_to_capture=list(obs.layers_to_capture), duplicated=repeated, mode=obs.mode, path=obs.path))
    elif obs.error and "aux hidden states" in obs.error:
        # 0.5.23's packer raises "captured X of K aux hidden states" instead of returning fewer.
        repeated = _duplicates(obs.layers_to_capture)
        findings.append(_finding(
            AUX_COUNT_MISMATCH,
            f"{obs.model_class} {obs.mode}: SGLang raised '{obs.error}' with layers_to_capture "
            f"{list(obs.layers_to_capture)}{_aux_count_causes(obs, repeated)}.",
            error=obs.error, expected=obs.aux_expected, layers_to_capture=list(obs.layers_to_capture),
            duplicated=repeated, mode=obs.mode, path=obs.path))
    return findings


def graph_eager_findings(model_class: str, graph_layers: Sequence[int], eager_layers: Sequence[int],
                         source: str, num_layers: int | None = None) -> list[Finding]:
    """source: 'forward' (both seen running) or 'configuration' (graph set-up vs later setter call)."""
    if tuple(graph_layers) == tuple(eager_layers):
        return []
    return [_finding(
        GRAPH_EAGER_LAYER_MISMATCH,
        f"{model_class}: CUDA graphs capture layers {_labels(graph_layers, num_layers)} but eager forwards "
        f"capture {_labels(eager_layers, num_layers)}; steps replayed from a graph feed the draft other "
        f"layers than eager steps (evidence from {source}).",
        graph_layers=list(graph_layers), eager_layers=list(eager_layers), source=source)]


def draft_weights_dropped_finding(model_class: str, dropped: Sequence[str]) -> Finding:
    shown = ", ".join(list(dropped)[:8]) + (f" and {len(dropped) - 8} more" if len(dropped) > 8 else "")
    return _finding(
        DRAFT_WEIGHTS_DROPPED,
        f"{model_class}: SGLang's loader dropped {len(dropped)} checkpoint tensor(s) without a word: {shown}. "
        f"They match no parameter of the draft as this release builds it (e.g. norm_before_fc / fc_norm "
        f"weights whose config flag is missing, or more aux layers than the fc takes); the draft runs "
        f"without them.",
        dropped=list(dropped))


def draft_replaced_finding(obs) -> Finding | None:
    """obs: DraftLoaded. SGLang always gives an EAGLE-3 draft the target's embedding, and the target's lm_head
    when the draft config has no draft_vocab_size and does not tie embeddings. An embedding measured equal to the
    target's (the usual draft, trained with the target's frozen embedding) is no finding; one that could not be
    compared is said at info level."""
    replaced, measured = [], None
    embed_differs = obs.embed_in_checkpoint and obs.embed_rel_diff is not None and obs.embed_rel_diff > 1e-12
    if embed_differs:
        replaced.append("embed_tokens (SGLang always shares the target's embedding with an EAGLE-3 draft)")
        measured = f" The checkpoint's embedding differs from the target's: relative difference " \
                   f"{obs.embed_rel_diff:.3g} ({obs.embed_compare})."
    if obs.lm_head_in_checkpoint and obs.lm_head_from_target:
        replaced.append("lm_head (no draft_vocab_size in the draft config, so SGLang loads the target's)")
    evidence = dict(embed_in_checkpoint=obs.embed_in_checkpoint, lm_head_in_checkpoint=obs.lm_head_in_checkpoint,
                    lm_head_from_target=obs.lm_head_from_target, embed_rel_diff=obs.embed_rel_diff,
                    embed_compare=obs.embed_compare)
    if not replaced:
        if obs.embed_in_checkpoint and obs.embed_rel_diff is None:
            return Finding(DRAFT_EMBEDDING_REPLACED, INFO,
                           f"{obs.model_class}: SGLang replaces the checkpoint's own embed_tokens with the target's; "
                           f"not compared here ({obs.embed_compare}).", tuple(sorted(evidence.items())))
        return None
    return _finding(
        DRAFT_EMBEDDING_REPLACED,
        f"{obs.model_class}: the checkpoint's own {' and '.join(replaced)} will be replaced by the target's."
        f"{measured or ''} Harmless if the draft was trained with the target's frozen weights; if it was trained "
        f"with its own, acceptance collapses (seen: 0.99 offline accuracy, 0.012 accept rate).", **evidence)


def draft_config_layer_finding(model_class: str, draft_ids, expected: Sequence[int], captured: Sequence[int],
                               num_layers: int) -> Finding | None:
    """The draft config's eagle_aux_hidden_state_layer_ids, mapped by the release's rule, against the
    layers the target actually captures in this process."""
    if tuple(expected) == tuple(captured):
        return None
    return _finding(
        LAYER_MISMATCH,
        f"{model_class}: the draft config names eagle_aux_hidden_state_layer_ids "
        f"{None if draft_ids is None else list(draft_ids)}, which this release maps to capture indices "
        f"{_labels(expected, num_layers)}, but the target captures {_labels(captured, num_layers)}; the draft "
        f"is fed other layers than its config names.",
        draft_ids=None if draft_ids is None else list(draft_ids), expected=list(expected), captured=list(captured))


_SAMPLED_ONLY = (" Only sampled traffic was judged, and it accepts less than greedy traffic with any wiring (a draft "
                 "token is accepted with the target's probability of it): judge the layers on greedy requests.")


@dataclass(frozen=True)
class CollapseEvidence:
    """What acceptance_collapse reports. accuracy: per-position conditional accuracies (analysis.acceptance);
    traffic: what was judged (analysis.sampled_traffic.judged)."""

    observed: float
    expected: float
    accuracy: Sequence[float]
    positions: int
    per_position: Sequence[float | None]
    drafts: int
    threshold: float
    seen_codes: Sequence[str]
    traffic: str = "unknown traffic"


def acceptance_collapse_finding(evidence: CollapseEvidence) -> Finding:
    from .acceptance import describe_accuracy

    observed, expected, positions, per_position = (evidence.observed, evidence.expected, evidence.positions,
                                                   evidence.per_position)
    drafts, threshold, seen_codes, traffic = evidence.drafts, evidence.threshold, evidence.seen_codes, evidence.traffic
    causes = ", ".join(seen_codes) if seen_codes else "none observed in this process; run `eagle-probe doctor` " \
        "with the target and draft configs and --trained-layers"
    accuracy = [float(v) for v in evidence.accuracy]
    return _finding(
        ACCEPTANCE_COLLAPSE,
        f"mean acceptance length {observed:.2f} tokens per step (bonus included) over {drafts} drafts of {traffic} "
        f"is {observed / expected:.0%} of the {expected:.2f} expected from {describe_accuracy(accuracy)} "
        f"at the depths served (deepest {positions}; threshold {threshold:.0%}); per-position acceptance "
        f"{[None if r is None else round(r, 3) for r in per_position]}. Likely causes among the findings seen: "
        f"{causes}.{_SAMPLED_ONLY if traffic.startswith('sampled') else ''}",
        observed=round(observed, 4), expected=round(expected, 4), draft_accuracy=accuracy,
        per_position_rate=[None if r is None else round(r, 4) for r in per_position], drafts=drafts,
        likely_causes=list(seen_codes), traffic=traffic)


def sampled_traffic_finding(judgement: str, greedy: dict, sampled: dict, expected: str) -> Finding:
    """acceptance_sampled_traffic: `judgement` names what was low overall (a collapse, a low first position);
    greedy and sampled: analysis.sampled_traffic.split sides; expected: what greedy traffic was held against."""
    def side(c):
        rate = c.get("first_position_rate")
        return (f"mean accept length {c['mean_accept_length']:.2f}, first position "
                f"{'n/a' if rate is None else f'{rate:.3f}'} over {c['request_steps']} request-steps")

    return _finding(
        ACCEPTANCE_SAMPLED_TRAFFIC,
        f"{judgement} over all traffic, but greedy traffic is served as expected ({side(greedy)}; {expected}) and "
        f"sampled traffic accounts for the shortfall ({side(sampled)}). At temperature > 0 SGLang accepts a draft "
        f"token with the target's probability of it, not when it is the target's argmax: sampled requests accept "
        f"less with any wiring. The layers are not what this shows; judge them on greedy traffic.",
        greedy=greedy, sampled=sampled, judged=judgement)


def aux_nonfinite_finding(role: str, slot: int, capture_index: int | None, label: str, count: int,
                          tokens: int, width: int) -> Finding:
    where = f"aux slot {slot}" + (f" (capture index {capture_index}, {label})" if capture_index is not None else "")
    return _finding(
        AUX_NONFINITE,
        f"{role}: {where} carries {count} non-finite values (NaN or Inf) in a sampled forward of {tokens} tokens x "
        f"{width} channels; the draft is fed them as they are. Find the first layer whose output is non-finite "
        f"(an all-layer dump, EAGLE_PROBE_DUMP_LAYERS=all, holds every layer) and check its weights and dtype.",
        role=role, slot=slot, capture_index=capture_index, label=label, nonfinite=count, tokens=tokens)


def aux_slots_identical_finding(role: str, slots: Sequence[int], capture_indices: Sequence[int | None]) -> Finding:
    pairs = ", ".join(f"slot {s}" + (f" (capture index {i})" if i is not None else "")
                      for s, i in zip(slots, capture_indices))
    return _finding(
        AUX_SLOTS_IDENTICAL,
        f"{role}: {pairs} carry the same values to the bit: the draft gets one layer twice and misses the one it "
        f"was trained on (a repeated capture index, or two ids that map to the same layer under this release's "
        f"rule).", role=role, slots=list(slots), capture_indices=list(capture_indices))


def tp_rank_divergence_finding(role: str, slot: int, label: str, step: int, disagreement: dict, layout: str,
                               nodes: dict | None = None) -> Finding:
    """disagreement: analysis.fingerprints.rank_disagreement's (ranks, rms_spread, lowest_signature_cosine, rms by
    rank); nodes: {tp_rank: "node_rank N (host H)"} where the ranks span several nodes (named beside each rank)."""
    nodes = nodes or {}
    ranks, rms_spread, rms_by_rank = disagreement["ranks"], disagreement["rms_spread"], disagreement["rms"]
    lowest_cosine = disagreement["lowest_signature_cosine"]
    cosine_text = "" if lowest_cosine is None else f", lowest signature cosine {lowest_cosine:.6f}"
    rms_text = ", ".join(f"tp_rank {r}" + (f" on {nodes[r]}" if r in nodes else "") + f": {v:.6g}"
                         for r, v in sorted(rms_by_rank.items()))
    return _finding(
        TP_RANK_DIVERGENCE,
        f"{role}: aux slot {slot} ({label}) differs between tp ranks {', '.join(map(str, ranks))} at forward "
        f"{step}: rms spread {rms_spread:.3g} ({rms_text}){cosine_text}; tolerance: spread "
        f"{RMS_SPREAD_TOLERANCE:g}, cosine {SIGNATURE_COSINE_TOLERANCE:g}. {layout} A rank holding partial sums "
        f"(a missing all-reduce) or another model state feeds its draft other values than the others.",
        role=role, slot=slot, label=label, step=step, ranks=list(ranks), rms_spread=rms_spread,
        lowest_signature_cosine=lowest_cosine, rms_by_rank={str(k): v for k, v in sorted(rms_by_rank.items())},
        **({"nodes": {str(k): v for k, v in sorted(nodes.items())}} if nodes else {}))


def aux_value_mismatch_finding(role: str, slot: int, served_index: int | None, distance: float | None,
                               cosine: float | None, resembles: str | None, source: str) -> Finding:
    served = "" if served_index is None else f" (served capture index {served_index})"
    how = "" if distance is None else f"relative difference {distance:.3g}"
    how += "" if cosine is None else (", " if how else "") + f"cosine {cosine:.4f}"
    like = (f"; it resembles the training data's {resembles}" if resembles else
            "; it resembles no training slot")
    return _finding(
        AUX_VALUE_MISMATCH,
        f"{role}: aux slot {slot}{served} differs from the same slot of the draft's training data ({how}, "
        f"{source}){like}. The draft is fed other states than it learned from: check the captured layers "
        f"(`eagle-probe replay --search` names the wiring it was trained on) and the dtype and kernels of prefill.",
        role=role, slot=slot, served_index=served_index, distance=distance, cosine=cosine, resembles=resembles,
        source=source)


@dataclass(frozen=True)
class WiringSearch:
    """`eagle-probe replay --search`'s result: the served wiring (HF indices) and the best, their position-0
    agreement and positions; ids: the layer ids that reach the best on this release (None: unreachable, why).
    `ties_reachable`: the near-ties the release can capture (best among them by likelihood); `margin_within_noise`:
    whether its likelihood margin over the next is under two standard errors."""

    served: Sequence[int]
    served_accuracy: float
    served_positions: int
    best: Sequence[int]
    best_accuracy: float
    best_positions: int
    num_layers: int
    ids: Sequence[int] | None
    unreachable: str | None
    sglang_version: str | None
    near_tie: bool
    method: str
    ties_reachable: int = 1
    margin_within_noise: bool | None = None


def wiring_search_finding(search: WiringSearch) -> Finding:
    """trained_layers_inferred: the served wiring against the one the draft agrees with best. Severity warning
    when they differ, info when the served wiring is the best (the layers it was trained on, confirmed)."""
    served, best = tuple(search.served), tuple(search.best)
    served_accuracy, served_positions, best_accuracy, best_positions = (
        search.served_accuracy, search.served_positions, search.best_accuracy, search.best_positions)
    num_layers, ids, unreachable, sglang_version = search.num_layers, search.ids, search.unreachable, \
        search.sglang_version
    near_tie, method, ties_reachable, margin_within_noise = (search.near_tie, search.method, search.ties_reachable,
                                                             search.margin_within_noise)
    evidence = dict(served_hf=list(served), served_accuracy=round(served_accuracy, 6),
                    served_positions=served_positions, best_hf=list(best), best_accuracy=round(best_accuracy, 6),
                    best_positions=best_positions, fix_ids=None if ids is None else list(ids),
                    fix_impossible=unreachable, sglang_version=sglang_version, served_is_near_tie=near_tie,
                    search=method, ties_reachable=ties_reachable, margin_within_noise=margin_within_noise)
    others = ties_reachable - 1
    ties = "" if others < 1 else (
        f" {others} other wiring(s) tie with it by accuracy; it is the one the draft finds likeliest"
        + (", by a margin within noise (dump more tokens to separate them)." if margin_within_noise else "."))
    release = f"SGLang {sglang_version}" if sglang_version else "this SGLang release"
    if served == best:
        return Finding(TRAINED_LAYERS_INFERRED, "info",
                       f"The draft agrees with the target best when fed the served layers {_labels(served, num_layers)}"
                       f": position-0 agreement {served_accuracy:.3f} over {served_positions} positions ({method} "
                       f"search). The served wiring is the one it was trained on.{ties}",
                       tuple(sorted(evidence.items())))
    fix = (f"Set eagle_aux_hidden_state_layer_ids to {list(ids)} ({release})" if ids is not None
           else f"No eagle_aux_hidden_state_layer_ids reach it on {release}: {unreachable}")
    tie = (" The served wiring's interval overlaps the best's: the dumps do not separate them; dump more tokens."
           if near_tie else "")
    return Finding(TRAINED_LAYERS_INFERRED, WARNING,
                   f"The draft agrees with the target best when fed HF hidden_states {_labels(best, num_layers)}: "
                   f"position-0 agreement {best_accuracy:.3f} over {best_positions} positions, against "
                   f"{served_accuracy:.3f} for the served {_labels(served, num_layers)} ({method} search). It was "
                   f"likely trained on those layers. {fix}.{tie}{ties}", tuple(sorted(evidence.items())))
