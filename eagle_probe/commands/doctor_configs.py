"""`eagle-probe doctor`'s inputs: the target's and the draft's config.json read into the specs the rules take
(analysis.config_rules), with every bad value named by file and key (DoctorInputError, exit status 2)."""

import os

from .. import families
from ..analysis import layers
from ..analysis.config_rules import DraftSpec, TargetSpec
from . import target_family
from .json_files import MAX_CONFIG_BYTES, read_json_object
from .json_files import shown as _shown

NESTED_TEXT_KEYS = target_family.NESTED_TEXT_KEYS


class DoctorInputError(Exception):
    """Bad input: the message names the file (or option) and the key."""


# -- reading configs ---------------------------------------------------------------------------------

def _config_file(path: str, what: str) -> str:
    """The file a --target/--draft path names: the directory's config.json, or the path itself."""
    if not os.path.isdir(path):
        if not os.path.lexists(path):
            raise DoctorInputError(f"{what} config: {path}: no such file or directory")
        return path
    file = os.path.join(path, "config.json")
    if not os.path.lexists(file):
        raise DoctorInputError(f"{what} config: {path}: no config.json in this directory")
    return file


def load_config_json(path: str, what: str) -> tuple[str, dict]:
    """Read a config.json from a directory or the file itself. Returns (file path, dict)."""
    file = _config_file(path, what)
    return file, read_json_object(file, f"{what} config", DoctorInputError, MAX_CONFIG_BYTES)


def _int(data: dict, key: str, file: str, what: str, prefix: str = "", required: bool = True,
         minimum: int = 1) -> int | None:
    name = prefix + key
    if key not in data or data[key] is None:
        if required:
            raise DoctorInputError(f"{what} config {file}: missing required key '{name}'")
        return None
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise DoctorInputError(f"{what} config {file}: key '{name}' must be an integer >= {minimum}, "
                               f"got {_shown(value)}")
    return value


def _bool(data: dict, key: str, file: str, prefix: str, default: bool) -> bool:
    if key not in data or data[key] is None:
        return default
    if not isinstance(data[key], bool):
        raise DoctorInputError(f"draft config {file}: key '{prefix}{key}' must be true or false, "
                               f"got {_shown(data[key])}")
    return data[key]


def _names(data: dict, file: str, what: str, prefix: str) -> list[str]:
    """'architectures': a list of class names (or absent)."""
    value = data.get("architectures")
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DoctorInputError(f"{what} config {file}: key '{prefix}architectures' must be a list of class names, "
                               f"got {_shown(value)}")
    return value


def parse_target(data: dict, file: str, need_fkdr: bool = False,
                 family=None) -> tuple[TargetSpec, list[str]]:
    """The target's shape from its config; `family` (a families.Family row) decides whether TBO needs
    first_k_dense_replace (only families whose TBO split starts there)."""
    notes = []
    if family is not None and family.tbo != families.TBO_FROM_FIRST_K_DENSE:
        need_fkdr = False
    text, prefix = data, ""
    for key in NESTED_TEXT_KEYS:
        if data.get(key) is not None and not isinstance(data[key], dict):
            raise DoctorInputError(f"target config {file}: key '{key}' must be an object, got {_shown(data[key])}")
        if isinstance(data.get(key), dict) and "num_hidden_layers" in data[key]:
            text, prefix = data[key], key + "."
            notes.append(f"target: text model read from '{key}'")
            break
    archs = _names(data, file, "target", "") or _names(text, file, "target", prefix)
    model_class = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else \
        str(text.get("model_type") or data.get("model_type") or "unknown")
    num_layers = _int(text, "num_hidden_layers", file, "target", prefix)
    hidden = _int(text, "hidden_size", file, "target", prefix)
    fkdr = _int(text, "first_k_dense_replace", file, "target", prefix, required=need_fkdr, minimum=0)
    if need_fkdr is False and fkdr is None and family is not None and family.tbo == families.TBO_FROM_FIRST_K_DENSE:
        notes.append(f"target: no '{prefix}first_k_dense_replace'; Two-Batch-Overlap effects not predicted")
    return TargetSpec(model_class, num_layers, hidden, fkdr, family), notes


def _ids(value, file: str, key: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise DoctorInputError(f"draft config {file}: key '{key}' must be a list of integers, got {_shown(value)}")
    return tuple(value)


def _draft_ids(data: dict, eagle: dict, file: str) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """(eagle_config's ids, the top-level ids). The target reads only the first; Kimi's MLA draft falls back to the
    second to size its fc (analysis.draft_ids), so the two must not disagree."""
    nested = _ids(eagle.get("eagle_aux_hidden_state_layer_ids"), file, "eagle_config.eagle_aux_hidden_state_layer_ids")
    top = _ids(data.get("eagle_aux_hidden_state_layer_ids"), file, "eagle_aux_hidden_state_layer_ids")
    if nested is not None and top is not None and nested != top:
        raise DoctorInputError(f"draft config {file}: keys 'eagle_config.eagle_aux_hidden_state_layer_ids' "
                               f"{list(nested)} and 'eagle_aux_hidden_state_layer_ids' {list(top)} disagree "
                               f"(SGLang's model classes read one or the other); keep one")
    return nested, top


def parse_draft(data: dict, file: str) -> tuple[DraftSpec, list[str]]:
    notes = []
    archs = _names(data, file, "draft", "")
    model_class = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else \
        str(data.get("model_type") or "unknown")
    eagle = data.get("eagle_config")
    if eagle is not None and not isinstance(eagle, dict):
        raise DoctorInputError(f"draft config {file}: key 'eagle_config' must be an object, got {_shown(eagle)}")
    eagle = eagle or {}
    is_eagle3 = any("eagle3" in str(a).lower() for a in (archs if isinstance(archs, list) else [])) or bool(eagle) \
        or "target_hidden_size" in data
    if not is_eagle3:
        raise DoctorInputError(
            f"draft config {file}: not an EAGLE-3 draft: key 'architectures' is {archs!r} (expected e.g. "
            f"LlamaForCausalLMEagle3 or Eagle3DeepseekV2ForCausalLM) and there is no 'eagle_config'")
    hidden = _int(data, "hidden_size", file, "draft")
    ids, top = _draft_ids(data, eagle, file)
    if ids is None:
        notes.append("draft: no eagle_config.eagle_aux_hidden_state_layer_ids: the target captures its defaults"
                     + ("" if top is None else f" (the top-level ids {list(top)} are not read by the target)"))
    named = {"eagle_config.eagle_aux_hidden_state_layer_ids": ids, "eagle_aux_hidden_state_layer_ids": top}
    for key, value in named.items():
        if value == ():
            raise DoctorInputError(f"draft config {file}: key '{key}' is empty")
    spec = DraftSpec(
        model_class=model_class, hidden_size=hidden,
        target_hidden_size=_int(data, "target_hidden_size", file, "draft", required=False),
        layer_ids=ids,
        num_aux_hidden_states=_int(data, "num_aux_hidden_states", file, "draft", required=False),
        use_aux_hidden_state=_bool(eagle, "use_aux_hidden_state", file, "eagle_config.", True),
        norm_before_fc=_bool(eagle, "norm_before_fc", file, "eagle_config.",
                             _bool(data, "norm_before_fc", file, "", False)),
        fc_norm=_bool(data, "fc_norm", file, "", False) or _bool(data, "use_aux_norm", file, "", False),
        top_level_ids=top,
    )
    return spec, notes


# -- --trained-layers -----------------------------------------------------------------------------

def parse_trained_layers(spec: str) -> tuple[int, ...]:
    """--trained-layers -> HF hidden_states indices (the one parser: analysis.layers)."""
    try:
        return layers.parse_trained_layers(spec)
    except ValueError as exc:
        raise DoctorInputError(f"--trained-layers {spec!r}: {exc}") from None
