"""Draft-side diagnosis rules: what enters the EAGLE-3 draft, and whether it is what it was trained on.

Pure functions, no SGLang import. The running probe (draft wrappers) and `eagle-probe doctor` call the
same functions, so a problem reads the same before launch and while serving.
"""

from collections.abc import Sequence

from .. import families
from ..families import Family
from ..versions import PLUS_ONE_ALWAYS, PLUS_ONE_IF_FIRST_IS_ONE, VersionRules, format_version, rule_since
from .findings import FC_SKIPPED, FC_WIDTH_MISMATCH, LAYER_MISMATCH, Finding, _finding, _labels
from .layers import apply_capture_rule, capture_label, default_layer_ids, unreachable_indices


def _states(width: int, per_state: int | None) -> str:
    """'2 aux states of width 7168' when width is a multiple of per_state, else the bare width."""
    if per_state and width % per_state == 0:
        count = width // per_state
        return f"{count} aux state{'s' if count != 1 else ''} of width {per_state} ({width})"
    if per_state:
        return f"width {width} (not a multiple of the target hidden size {per_state})"
    return f"width {width}"


def draft_input_findings(*, model_class: str, mode: str, aux_width: int, embed_width: int,
                         fc_in_width: int | None, target_hidden_size: int | None,
                         num_aux: int | None) -> list[Finding]:
    """Check the width of spec_info.hidden_states entering an EAGLE-3 draft against its fc.

    SGLang's draft runs `fc` only when `hidden_states.shape[-1] != embeds.shape[-1]`; otherwise the
    incoming states go straight into the decoder layer.
    """
    if fc_in_width is None:
        return []  # no fc: not an EAGLE-3 draft, nothing to check here
    evidence = dict(model_class=model_class, mode=mode, aux_width=aux_width, embed_width=embed_width,
                    fc_in_width=fc_in_width, target_hidden_size=target_hidden_size, num_aux=num_aux)
    expected = (f"{num_aux} aux states of width {target_hidden_size} ({fc_in_width})"
                if num_aux and target_hidden_size and num_aux * target_hidden_size == fc_in_width
                else f"width {fc_in_width}")
    if aux_width == embed_width:
        if fc_in_width == embed_width:
            cause = ("its fc takes the embedding width itself, so SGLang's gate can never run it "
                     "(num_aux_hidden_states or target_hidden_size in the draft config is wrong)")
        else:
            cause = ("likely an EAGLE-3 draft served with --speculative-algorithm EAGLE (the target sends only "
                     "its last hidden state; use --speculative-algorithm EAGLE3), or the target captured "
                     "nothing or only one layer (e.g. Two-Batch-Overlap dropped the other slots, or "
                     "use_aux_hidden_state is false)")
        return [_finding(
            FC_SKIPPED,
            f"{model_class} {mode}: the draft received {_states(aux_width, target_hidden_size)}, which equals "
            f"its embedding width {embed_width}, so SGLang's gate (hidden_states.shape[-1] != "
            f"embeds.shape[-1]) skips the fc that expects {expected}; the draft runs on an unprojected "
            f"state and acceptance collapses without an error. Cause: {cause}.",
            **evidence)]
    if aux_width != fc_in_width:
        return [_finding(
            FC_WIDTH_MISMATCH,
            f"{model_class} {mode}: the draft received {_states(aux_width, target_hidden_size)} but its fc "
            f"expects {expected}; SGLang fails with a shape error in fc (or a CUDA-graph buffer copy). Make "
            f"the target capture {num_aux if num_aux else 'as many'} layers (eagle_aux_hidden_state_layer_ids) "
            f"and check target_hidden_size / num_aux_hidden_states in the draft config.",
            **evidence)]
    return []


def _rule_text(rules: VersionRules, family: Family | None = None) -> str:
    if family is not None and family.name != "deepseek_v2":
        return (f"SGLang {family.releases_text} {families.RULE_TEXT.get(family.rule, 'maps ids by ' + family.rule)} "
                f"for {family.label} (rule {family.letter})")
    version = format_version(rule_since(rules, "capture_id_rule"))  # where the rule began, not where its row does
    if rules.capture_id_rule == PLUS_ONE_ALWAYS:
        how = "adds 1 to every id"
    elif rules.capture_id_rule == PLUS_ONE_IF_FIRST_IS_ONE:
        how = "adds 1 to every id only when the first id is 1, else uses the ids as given"
    else:
        how = f"maps ids by rule {rules.capture_id_rule}"
    return f"SGLang {version}+ {how}"


def _reach(rules: VersionRules, family: Family | None) -> dict:
    """What a family (default: DeepSeek's, from the version row) can capture."""
    if family is None:
        return dict(rule=rules.capture_id_rule, embedding_capturable=rules.embedding_capturable,
                    final_capturable=False, final_raises=False)
    return dict(rule=family.rule, embedding_capturable=family.embedding_capturable,
                final_capturable=family.final_capturable, final_raises=family.final_raises)


def ids_for_capture(wanted: Sequence[int], num_layers: int, rules: VersionRules, family: Family | None = None
                    ) -> tuple[tuple[int, ...] | None, str]:
    """Invert the capture rule: ids that make SGLang capture exactly `wanted` (HF hidden_states indices).

    The rule is DeepSeek's for the release (`rules`) unless a `family` row (eagle_probe.families) is given:
    e.g. Llama on 0.5.23 adds 1 to every id, so HF [3, 16, 29] needs ids [2, 15, 28].
    Returns (ids, "") or (None, why it is impossible).
    """
    wanted = tuple(int(i) for i in wanted)
    if not wanted:
        return None, "no layers to capture"
    reach = _reach(rules, family)
    rule = reach["rule"]
    bad = unreachable_indices(wanted, num_layers, reach["embedding_capturable"],
                              final_capturable=reach["final_capturable"], final_raises=reach["final_raises"])
    if bad:
        return None, "; ".join(
            f"HF index {i} ({capture_label(i)}): {why}"
            + (f" (it needs id {i - 1}, which yields capture index 0)"
               if i == 0 and rule == PLUS_ONE_ALWAYS else "")
            for i, why in bad)
    # Every known rule either keeps the ids or adds one; try both and keep the first that round-trips.
    for candidate in (wanted, tuple(i - 1 for i in wanted)):
        if apply_capture_rule(rule, candidate, num_layers)[0] == wanted:
            return candidate, ""
    if rule == PLUS_ONE_IF_FIRST_IS_ONE and wanted[0] == 1:
        return None, ("the first index is 1 (output of layer 0): as an id, 1 triggers the +1 rule, and id 0 "
                      "is used as given; no id list yields it first (reorder the layers if the draft allows)")
    if rule == families.RULE_AS_GIVEN_IF_MAX_IS_N:
        return None, (f"ids whose largest is {num_layers} are used as given and all others get +1, so "
                      f"{list(wanted)} (largest {max(wanted)}) has no id list")
    return None, f"no id list maps to {list(wanted)} under {rule}"


def _explain(captured: Sequence[int], trained: Sequence[int], num_layers: int, final: bool = False) -> str:
    captured, trained = tuple(captured), tuple(trained)
    if len(captured) != len(trained):
        return (f"it captures {len(captured)} states but the draft was trained on {len(trained)}")
    if all(c == t + 1 for c, t in zip(captured, trained)):
        return ("+1 offset: every captured index is one layer later than trained (the ids were already "
                "HF hidden_states indices and SGLang added 1 again)")
    if all(c == t - 1 for c, t in zip(captured, trained)):
        return ("-1 offset: every captured index is one layer earlier than trained (ids given as layer "
                "numbers where this version expects HF hidden_states indices)")
    if sorted(captured) == sorted(trained):
        return "the same layers in another order (the fc's input chunks are permuted)"
    parts = []
    for slot, (c, t) in enumerate(zip(captured, trained)):
        if c == t:
            continue
        if c in trained and c != t:
            kind = f"the layer trained for slot {trained.index(c)} (slots shifted or reordered)"
        elif t == 0 and c != 0:
            kind = "a layer output instead of the embedding"
        elif c == 0 and t != 0:
            kind = "the embedding instead of a layer output"
        elif c == t + 1:
            kind = "+1 offset"
        elif c == t - 1:
            kind = "-1 offset"
        else:
            kind = "wrong layer"
        parts.append(f"slot {slot}: {c} ({capture_label(c, num_layers, final)}) instead of {t} "
                     f"({capture_label(t, num_layers, final)}), {kind}")
    return "; ".join(parts)


def layer_mismatch_findings(*, captured: Sequence[int], trained_hf: Sequence[int], num_layers: int,
                            rules: VersionRules, requested_ids: Sequence[int] | None,
                            family: Family | None = None) -> list[Finding]:
    """Compare the capture indices (== HF hidden_states indices) with the HF indices the draft was trained on.
    The ids to set follow `family`'s rule (default: DeepSeek's, from `rules`)."""
    captured, trained = tuple(int(i) for i in captured), tuple(int(i) for i in trained_hf)
    if captured == trained:
        return []
    fix_ids, why_not = ids_for_capture(trained, num_layers, rules, family)
    if fix_ids is not None:
        fix = f"Set eagle_aux_hidden_state_layer_ids to {list(fix_ids)} ({_rule_text(rules, family)})"
        defaults = default_layer_ids(num_layers, family)
        if rules.graph_setup_uses_default_layers and defaults != trained:
            fix += (f"; in this version CUDA-graph replays still capture the defaults {list(defaults)}, so "
                    f"also run with --disable-cuda-graph or upgrade")
        fix += "."
    else:
        fix = (f"No eagle_aux_hidden_state_layer_ids can capture them in this version ({_rule_text(rules, family)}): "
               f"{why_not}.")
    ids_text = ("no ids: the defaults" if requested_ids is None
                else f"eagle_aux_hidden_state_layer_ids {list(requested_ids)}")
    extra = {} if family is None else {"family": family.name}
    final = family is not None and family.final_capturable
    return [_finding(
        LAYER_MISMATCH,
        f"The target captures {_labels(captured, num_layers, final)} (from {ids_text}) but the draft was trained on "
        f"HF hidden_states {_labels(trained, num_layers, final)}: {_explain(captured, trained, num_layers, final)}. "
        f"{fix}",
        captured=list(captured), trained_hf=list(trained),
        requested_ids=None if requested_ids is None else list(requested_ids),
        fix_ids=None if fix_ids is None else list(fix_ids), fix_impossible=why_not or None,
        version_rule=rules.capture_id_rule if family is None else family.rule, **extra)]
