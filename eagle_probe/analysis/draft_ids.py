"""Which eagle_aux_hidden_state_layer_ids each side reads: the EAGLE-3 draft class (to size its fc) and the target
(to choose what it captures). SGLang reads them in different places, so a draft can be sized for ids the target
never sees. Pure rules, shared by the running probe (draft load) and `eagle-probe doctor`.

Facts from SGLang's source (0.5.8-0.5.23; the contract check proves them per release):
- the target: `eagle_config["eagle_aux_hidden_state_layer_ids"]` of the draft's config only (model_runner, from
  0.5.16 spec_aux_hidden_state); without it, the target family's default set.
- LlamaForCausalLMEagle3 (llama_eagle3): `num_aux_hidden_states`, else the count of eagle_config's ids, else 3
  (0.5.8-0.5.10: always 3); it never reads top-level ids.
- Eagle3DeepseekV2ForCausalLM (kimi_k25_eagle3, 0.5.12+, Kimi-K2.5's MLA draft): eagle_config's ids, else the
  TOP-LEVEL config's `eagle_aux_hidden_state_layer_ids`, else 3 (`_get_eagle_aux_layer_count`); it never reads
  `num_aux_hidden_states`.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from .findings import DRAFT_TARGET_IDS_DIFFER, Finding, _finding, _labels

KEY = "eagle_aux_hidden_state_layer_ids"
FROM_EAGLE_CONFIG, FROM_TOP_LEVEL, FROM_NUM_AUX, FROM_DEFAULT = "eagle_config", "top_level", "num_aux_hidden_states", \
    "default"
LLAMA, KIMI = "LlamaForCausalLMEagle3", "Eagle3DeepseekV2ForCausalLM"


@dataclass(frozen=True)
class DraftClass:
    """How one SGLang EAGLE-3 draft class reads its config and checkpoint (data, not code)."""

    name: str
    module: str
    reads_num_aux: bool  # num_aux_hidden_states sizes the fc
    reads_top_level_ids: bool  # falls back to the config's top-level ids when eagle_config has none
    weight_naming: str  # analysis.draft_weights naming of its load_weights
    d2t_exact: bool  # takes d2t only as 'd2t' or '*.d2t' (else any name containing d2t)
    reads_norm_before_fc: bool  # implements eagle_config / config norm_before_fc
    since: str  # the first release that has the class


DRAFT_CLASSES = {
    LLAMA: DraftClass(LLAMA, "sglang.srt.models.llama_eagle3", True, False, "llama", False, True, "0.5.8"),
    KIMI: DraftClass(KIMI, "sglang.srt.models.kimi_k25_eagle3", False, True, "kimi", True, False, "0.5.12"),
}


def draft_class(architecture: str | None) -> DraftClass:
    """The row for a class name (Llama's for any other: SGLang's generic EAGLE-3 draft)."""
    return DRAFT_CLASSES.get(architecture or "", DRAFT_CLASSES[LLAMA])


def takes_d2t(row: DraftClass, name: str) -> bool:
    """Whether the class's load_weights takes a checkpoint tensor of this name as its d2t vocabulary map."""
    return (name == "d2t" or name.endswith(".d2t")) if row.d2t_exact else "d2t" in name


def absent_note(model_class: str, absent_modules: Sequence[str], release: str | None) -> str | None:
    """A note when the release has no module for the draft's class (Kimi's MLA draft before 0.5.12)."""
    row = DRAFT_CLASSES.get(model_class)
    if row is None or row.module not in absent_modules:
        return None
    return (f"draft: SGLang {release or 'of these rules'} has no {row.name} ({row.module}, from {row.since}): it "
            f"cannot load this draft; the predictions below assume it could")


def _get(container, key):
    """A key of a dict or an attribute of a config object (SGLang accepts both for eagle_config)."""
    if container is None:
        return None
    return container.get(key) if isinstance(container, dict) else getattr(container, key, None)


def _ids(value) -> tuple[int, ...] | None:
    return None if value is None else tuple(int(i) for i in value)


def target_ids(eagle_config) -> tuple[int, ...] | None:
    """The ids the target is given (None: its defaults). SGLang subscripts a dict eagle_config only."""
    return _ids(eagle_config.get(KEY)) if isinstance(eagle_config, dict) else None


def draft_reads(row: DraftClass, eagle_config, top_level_ids=None, num_aux_hidden_states=None
                ) -> tuple[tuple[int, ...] | None, str, int]:
    """(ids the draft sizes its fc from, where it found them, the aux count it sizes the fc for)."""
    nested = _ids(_get(eagle_config, KEY))
    if row.reads_num_aux and num_aux_hidden_states:
        return nested, FROM_NUM_AUX, int(num_aux_hidden_states)
    if row.reads_top_level_ids:  # SGLang tests `is None` here, so an empty list sizes the fc for 0 states
        for ids, source in ((nested, FROM_EAGLE_CONFIG), (_ids(top_level_ids), FROM_TOP_LEVEL)):
            if ids is not None:
                return ids, source, len(ids)
        return None, FROM_DEFAULT, 3
    if nested:
        return nested, FROM_EAGLE_CONFIG, len(nested)
    return nested, FROM_DEFAULT, 3


def ids_differ_finding(model_class: str, draft_ids: Sequence[int] | None, source: str,
                       requested: Sequence[int] | None, expected: Sequence[int], captured: Sequence[int],
                       num_layers: int) -> Finding | None:
    """The draft read ids (`source`) that the target was not given (`requested`, None: its defaults), and the
    layers those ids name (`expected`, by the target family's rule) are not what the target captures."""
    if draft_ids is None or source not in (FROM_TOP_LEVEL, FROM_EAGLE_CONFIG):
        return None
    draft_ids = tuple(draft_ids)
    if requested is not None and tuple(requested) == draft_ids:
        return None
    if tuple(expected) == tuple(captured):
        return None  # other ids, the same layers: nothing is fed wrongly
    where = ("the top level of its config (eagle_config has none)" if source == FROM_TOP_LEVEL
             else "eagle_config")
    given = "no ids, so it captures its defaults" if requested is None else f"ids {list(requested)}"
    return _finding(
        DRAFT_TARGET_IDS_DIFFER,
        f"{model_class}: the draft reads eagle_aux_hidden_state_layer_ids {list(draft_ids)} from {where} and sizes "
        f"its fc for {len(draft_ids)} aux states, but the target reads only eagle_config's ids and was given "
        f"{given}: it captures {_labels(captured, num_layers)} where the draft's ids name "
        f"{_labels(expected, num_layers)}. The draft is fed other layers than it was built for "
        f"(fc_width_mismatch too when the counts differ). Fix: put the ids in "
        f"eagle_config.eagle_aux_hidden_state_layer_ids, which both read.",
        model_class=model_class, draft_ids=list(draft_ids), ids_read_from=source,
        target_ids=None if requested is None else list(requested), expected=list(expected), captured=list(captured))
