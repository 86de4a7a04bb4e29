"""Block-diffusion drafts (DFlash, DSpark): which target layers feed them, where SGLang took the ids from, and the
findings about them. Pure: shared by the running probe and `eagle-probe doctor`.

The facts (SGLang 0.5.11 to 0.5.23, sglang/srt/speculative/dflash_utils.py and spec_aux_hidden_state.py):
- The ids are "the output of layer i" (HF `hidden_states[i + 1]`). They come from the draft config's
  `dflash_config.target_layer_ids`, else a top-level `target_layer_ids`; a DSpark draft's `dspark_target_layer_ids`
  or `dspark_config.target_layer_ids` replace them.
- With none of these SGLang spreads the draft's layer count evenly over the target, without a word: one draft
  layer takes layer n // 2; k > 1 take round(1 + i * (n - 4) / (k - 1)) for i < k (n >= 4 target layers).
- The target's `set_dflash_layers_to_capture` turns id i into capture position i + 1 (the residual entering layer
  i + 1) in every family SGLang ships; DeepSeek-V4's `set_dspark_layers_to_capture` keeps the ids as given. The
  probe reads the positions the setter stored, so a family that maps otherwise is seen as it is.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .findings import (
    DFLASH_LAYER_IDS_DISAGREE,
    DFLASH_TARGET_LAYERS_DEFAULTED,
    LAYER_MISMATCH,
    Finding,
    _finding,
    _labels,
)

# Where the ids were read, in SGLang's order of precedence (a DSpark key replaces the DFlash ones).
SOURCE_DSPARK_TOP = "dspark_target_layer_ids"
SOURCE_DSPARK_NESTED = "dspark_config.target_layer_ids"
SOURCE_NESTED = "dflash_config.target_layer_ids"
SOURCE_TOP = "target_layer_ids"
SOURCE_DEFAULT = "default"

DEFAULT_FORMULA = "k = 1: [n // 2]; k > 1: round(1 + i * (n - 4) / (k - 1)) for i < k"
PIN_HINT = 'pin them in the draft\'s config.json: "dflash_config": {"target_layer_ids": [...]}'

CAPTURE_PLUS_ONE = "plus_one"  # position = id + 1 (set_dflash_layers_to_capture)
CAPTURE_AS_GIVEN = "as_given"  # position = id (DeepSeek-V4's set_dspark_layers_to_capture)
CAPTURE_OTHER = "other"
RULE_TEXT = {
    CAPTURE_PLUS_ONE: "adds 1 to every id (id i = the output of layer i = HF hidden_states[i + 1])",
    CAPTURE_AS_GIVEN: "uses the ids as given (id i = the residual entering layer i = HF hidden_states[i])",
    CAPTURE_OTHER: "maps the ids by no known rule",
}


@dataclass(frozen=True)
class BlockDraftConfig:
    """What a DFlash/DSpark draft config says about its feed (None where it says nothing)."""

    target_layer_ids: tuple[int, ...] | None
    source: str  # one of the SOURCE_* names (SOURCE_DEFAULT: no ids anywhere)
    num_draft_layers: int | None
    trained_num_target_layers: int | None  # dflash_config.num_target_layers: the target it was trained against
    block_size: int | None
    mask_token_id: int | None
    aux_layer_ids: tuple[int, ...] | None  # eagle_aux_hidden_state_layer_ids, when the checkpoint carries both

    @property
    def defaulted(self) -> bool:
        return self.source == SOURCE_DEFAULT


def _section(config: Mapping, key: str) -> Mapping:
    value = config.get(key)
    return value if isinstance(value, Mapping) else {}


def _int_list(value) -> tuple[int, ...] | None:
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, int) and not isinstance(v, bool)
                                                         for v in value):
        return tuple(value)
    return None


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _ids_and_source(config: Mapping) -> tuple[tuple[int, ...] | None, str]:
    dflash, dspark = _section(config, "dflash_config"), _section(config, "dspark_config")
    for source, value in ((SOURCE_DSPARK_TOP, config.get("dspark_target_layer_ids")),
                          (SOURCE_DSPARK_NESTED, dspark.get("target_layer_ids")),
                          (SOURCE_NESTED, dflash.get("target_layer_ids")),
                          (SOURCE_TOP, config.get("target_layer_ids"))):
        if value is not None:
            return _int_list(value), source
    return None, SOURCE_DEFAULT


def read_block_draft_config(config: Mapping) -> BlockDraftConfig:
    """The feed a draft's config.json (a dict) names. Values of the wrong type read as None (SGLang refuses them
    at start-up with its own message)."""
    dflash = _section(config, "dflash_config")
    text = _section(config, "text_config") or config
    ids, source = _ids_and_source(config)
    return BlockDraftConfig(
        target_layer_ids=ids, source=source,
        num_draft_layers=_int(text.get("num_hidden_layers")),
        trained_num_target_layers=_int(dflash.get("num_target_layers", config.get("num_target_layers"))),
        block_size=_int(dflash.get("block_size", config.get("block_size"))),
        mask_token_id=_int(dflash.get("mask_token_id", config.get("mask_token_id"))),
        aux_layer_ids=_int_list(config.get("eagle_aux_hidden_state_layer_ids")))


def is_block_draft_config(config: Mapping) -> bool:
    """Whether a draft config is a DFlash/DSpark draft's (its architecture, or a dflash/dspark section)."""
    architectures = config.get("architectures") or []
    named = any("dflash" in str(a).lower() or "dspark" in str(a).lower() for a in architectures)
    return named or any(key in config for key in ("dflash_config", "dspark_config", "dspark_target_layer_ids"))


def default_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> tuple[int, ...] | None:
    """SGLang's choice when the draft config names no layers (None where SGLang refuses: n < 4 with k > 1)."""
    n, k = int(num_target_layers), int(num_draft_layers)
    if n <= 0 or k <= 0:
        return None
    if k == 1:
        return (n // 2,)
    if n - 3 < 1:
        return None
    return tuple(int(round(1 + i * (n - 4) / (k - 1))) for i in range(k))


def capture_rule(ids: Sequence[int] | None, positions: Sequence[int]) -> str:
    """How a setter turned ids into capture positions, read from what it stored."""
    if ids is None:
        return CAPTURE_OTHER
    ids, positions = tuple(ids), tuple(positions)
    if positions == tuple(i + 1 for i in ids):
        return CAPTURE_PLUS_ONE
    return CAPTURE_AS_GIVEN if positions == ids else CAPTURE_OTHER


def ids_for_positions(positions: Sequence[int], rule: str = CAPTURE_PLUS_ONE) -> tuple[int, ...]:
    """The target_layer_ids that capture `positions` (HF hidden_states indices) under `rule`."""
    return tuple(p - 1 for p in positions) if rule == CAPTURE_PLUS_ONE else tuple(positions)


def unreachable(positions: Sequence[int], num_layers: int, rule: str = CAPTURE_PLUS_ONE) -> tuple[int, ...]:
    """HF indices no target_layer_ids can capture: the embedding output under +1 (ids start at 0), and the final
    layer's output (SGLang's loop captures before a layer, never after the last)."""
    low = 1 if rule == CAPTURE_PLUS_ONE else 0
    return tuple(p for p in positions if p < low or p >= num_layers)


def defaulted_finding(*, model_class: str, chosen_ids: Sequence[int], captured: Sequence[int], num_layers: int,
                      num_draft_layers: int | None) -> Finding:
    """The draft config names no target layers, so SGLang chose them (sglang #21274's silent default, for DFlash)."""
    return _finding(
        DFLASH_TARGET_LAYERS_DEFAULTED,
        f"The block draft's config names no target layers (no dflash_config.target_layer_ids), so SGLang chose "
        f"target_layer_ids {list(chosen_ids)} itself (its default for {num_layers} target layers and "
        f"{num_draft_layers} draft layers: {DEFAULT_FORMULA}); the target ({model_class}) captures HF hidden_states "
        f"{_labels(captured, num_layers)}. Nothing checks that the draft was trained on these: if it was not, "
        f"acceptance collapses with no error. Give the layers it was trained on and {PIN_HINT}.",
        chosen_ids=list(chosen_ids), captured=list(captured), num_layers=num_layers,
        num_draft_layers=num_draft_layers, fix_key="dflash_config.target_layer_ids")


def layer_mismatch_finding(*, captured: Sequence[int], trained_hf: Sequence[int], num_layers: int,
                           ids: Sequence[int] | None, source: str, rule: str = CAPTURE_PLUS_ONE) -> Finding | None:
    """The trained layers (HF indices) against the captured ones; the fix is the target_layer_ids to pin."""
    captured, trained = tuple(int(i) for i in captured), tuple(int(i) for i in trained_hf)
    if captured == trained:
        return None
    bad = unreachable(trained, num_layers, rule)
    fix_ids = None if bad else list(ids_for_positions(trained, rule))
    fix = (f'Set "dflash_config": {{"target_layer_ids": {fix_ids}}} in the draft\'s config.json '
           f"(the target {RULE_TEXT[rule]})." if fix_ids is not None else
           f"No target_layer_ids can capture HF hidden_states {list(bad)} (the target {RULE_TEXT[rule]}).")
    named = "SGLang's default" if source == SOURCE_DEFAULT else source
    return _finding(
        LAYER_MISMATCH,
        f"The target captures HF hidden_states {_labels(captured, num_layers)} for the block draft (from "
        f"target_layer_ids {None if ids is None else list(ids)}, {named}) but it was trained on "
        f"{_labels(trained, num_layers)}. {fix}",
        captured=list(captured), trained_hf=list(trained), requested_ids=None if ids is None else list(ids),
        ids_source=source, fix_ids=fix_ids, fix_impossible=list(bad) or None, version_rule=rule)


def aux_ids_disagree_finding(config: BlockDraftConfig, model_class: str) -> Finding | None:
    """A checkpoint with both target_layer_ids and eagle_aux_hidden_state_layer_ids: the second names the same
    layers one higher (capture positions). SGLang checks that for one published family only and uses
    target_layer_ids."""
    ids, aux = config.target_layer_ids, config.aux_layer_ids
    if ids is None or aux is None or tuple(i + 1 for i in ids) == aux:
        return None
    return _finding(
        DFLASH_LAYER_IDS_DISAGREE,
        f"The {model_class} draft's config names target_layer_ids {list(ids)} ({config.source}) and "
        f"eagle_aux_hidden_state_layer_ids {list(aux)}; the second should be the first plus one "
        f"({[i + 1 for i in ids]}). SGLang serves target_layer_ids and ignores the other: one of them was written "
        f"for another training run. Check which layers the draft was trained on.",
        target_layer_ids=list(ids), aux_layer_ids=list(aux), ids_source=config.source)
