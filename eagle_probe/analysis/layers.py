"""Layer-index conventions.

A capture index i means the residual stream entering decoder layer i, i.e. the output of layer
i - 1, which is HuggingFace `output_hidden_states[i]`; index 0 is the embedding output. The last
layer's output (HF index n) is never captured by SGLang's DeepSeek loop; some families capture it
(eagle_probe.families: Family.final_capturable). Every function here defaults to DeepSeek's behaviour and
takes an optional `family` (a families.Family row) for the others.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from .. import families
from ..layer_spec import parse_trained_layers  # noqa: F401 (its home is the vocabulary; kept importable here)
from ..versions import DEFAULT_LAYERS


def default_layer_ids(num_layers: int, family: Optional["families.Family"] = None) -> tuple[int, ...]:
    """SGLang's default positions (no ids configured): [2, n//2, n-3], or the family's own default."""
    if family is not None:
        return families.default_positions(family.rule, num_layers)
    return (2, num_layers // 2, num_layers - 3)


def apply_capture_rule(rule: str, layer_ids: Sequence[int] | None, num_layers: int,
                       family: Optional["families.Family"] = None):
    """Predict layers_to_capture from the ids passed to set_eagle3_layers_to_capture.

    `rule` is a capture-id rule (versions.RULES' for DeepSeek, or a families.RULE_*); a `family` row, when
    given, decides instead. Returns (indices, rule actually applied).
    """
    if family is not None:
        rule = family.rule
    if layer_ids is None and rule != families.RULE_PLUS_ONE_WITH_DEFAULT:
        return default_layer_ids(num_layers), DEFAULT_LAYERS
    return families.positions(rule, layer_ids, num_layers)


def explain_mapping(layer_ids: Sequence[int] | None, result: Sequence[int], num_layers: int) -> str:
    """Name the rule that maps ids to result, from the values alone."""
    result = tuple(result)
    if layer_ids is None:
        return DEFAULT_LAYERS if result == default_layer_ids(num_layers) else "unknown"
    ids = tuple(layer_ids)
    if result == ids:
        return "as_given"
    if result == tuple(i + 1 for i in ids):
        return "plus_one"
    return "unknown"


def capture_label(index: int, num_layers: int | None = None, final_capturable: bool = False) -> str:
    """Human label of a capture index (= HF hidden_states index)."""
    if index < 0:
        return f"never captured (negative index {index})"
    if num_layers is not None and index == num_layers and final_capturable:
        return f"output of layer {index - 1} (the final layer, before the final norm)"
    if num_layers is not None and index >= num_layers:
        return f"never captured (index {index} >= {num_layers} layers)"
    if index == 0:
        return "embedding output"
    return f"output of layer {index - 1}"


@dataclass(frozen=True)
class LayerSplit:
    """Which layers one forward runs in the normal loop (where captures happen) and in TBO stages."""

    normal: tuple[int, int]
    tbo: tuple[int, int] | None

    def lost(self, layers_to_capture: Sequence[int]) -> tuple[int, ...]:
        if self.tbo is None:
            return ()
        start, end = self.tbo
        return tuple(i for i in layers_to_capture if start <= i < end)


def split_layers(start_layer: int, end_layer: int, first_k_dense_replace: int | None,
                 can_run_tbo: bool) -> LayerSplit:
    """Mirror of DeepseekV2Model.forward's normal/TBO split (0.5.8 and 0.5.23 alike)."""
    normal_start, normal_end = start_layer, end_layer
    if can_run_tbo and first_k_dense_replace is not None:
        if start_layer < first_k_dense_replace < end_layer:
            normal_end = first_k_dense_replace
        elif first_k_dense_replace < start_layer:
            normal_start = normal_end = 0
    tbo = (normal_end, end_layer) if normal_end != end_layer else None
    return LayerSplit((normal_start, normal_end), tbo)


def unreachable_indices(indices: Sequence[int], num_layers: int, embedding_capturable: bool,
                        start_layer: int = 0, end_layer: int | None = None, final_capturable: bool = False,
                        final_raises: bool = False):
    """Capture indices the loop can never capture, each with the reason. `final_capturable`: the family captures
    index n (the final layer's output) after its loop; `final_raises`: index n raises IndexError in the setter."""
    end_layer = num_layers if end_layer is None else end_layer
    out = []
    for index in indices:
        if index < 0:
            out.append((index, "negative index never matches a layer"))
        elif index == num_layers and final_capturable and end_layer == num_layers:
            continue
        elif index == num_layers and final_raises:
            out.append((index, f"index == number of layers ({num_layers}): this model's setter flags "
                               f"self.layers[{index}] and raises IndexError at start-up"))
        elif index >= num_layers:
            out.append((index, f"index >= number of layers ({num_layers}); the last layer's output cannot be captured"))
        elif index == 0 and not embedding_capturable:
            out.append((index, "embedding output (index 0) fails in this SGLang version (residual is None)"))
        elif not start_layer <= index < end_layer:
            out.append((index, f"outside this pipeline stage's layers [{start_layer}, {end_layer})"))
    return tuple(out)


TRAINED_LAYERS_HELP = (
    "layers the draft was trained on, with the convention named: 'hf:0,3,31' (HuggingFace "
    "output_hidden_states indices: 0 = embedding output, i = output of layer i-1) or 'sglang:-1,2,30' "
    "(layer numbers: -1 = embedding output, k = output of layer k); 'embedding' is accepted in both")
