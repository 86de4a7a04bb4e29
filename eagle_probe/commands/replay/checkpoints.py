"""Reading checkpoints for replay: the draft's config.json and tensors, and two tensors of the target
(`model.embed_tokens.weight`, `lm_head.weight`) found through its safetensors index alone, never the whole target.
Every failure is a ReplayInputError naming the file and what is wrong."""

import os

from .. import safetensors_io
from ..json_files import read_json_object
from .spec import ReplayInputError

INDEX = "model.safetensors.index.json"
MAX_JSON_BYTES = 64 * 1024 * 1024  # a large MoE's safetensors index runs to megabytes; configs are kilobytes
# Where multimodal wrappers (Kimi-K2.5 and the like) keep the language model's tensors.
PREFIXES = ("", "language_model.", "model.language_model.", "text_model.")
EMBED, LM_HEAD = "model.embed_tokens.weight", "lm_head.weight"


def read_json(path: str, what: str) -> dict:
    if not os.path.lexists(path):
        raise ReplayInputError(f"{what} {path}: no such file")
    kind = "safetensors index" if path.endswith(INDEX) else "config.json"
    return read_json_object(path, what, ReplayInputError, MAX_JSON_BYTES, kind)


def model_dir(path: str, what: str) -> str:
    if not os.path.isdir(path):
        raise ReplayInputError(f"{what} {path}: {'not a directory' if os.path.lexists(path) else 'no such directory'}"
                               f" (expected a checkpoint directory with config.json and *.safetensors)")
    return path


def open_safetensors(path: str, what: str):
    return safetensors_io.open_safetensors(path, what, ReplayInputError)


def read_tensor(handle, path: str, name: str, what: str):
    return safetensors_io.read_tensor(handle, path, name, what, ReplayInputError)


def weight_files(directory: str, what: str) -> tuple[dict[str, str], list[str]]:
    """{tensor name: file} from the index when there is one, else from every *.safetensors file's header."""
    index = os.path.join(directory, INDEX)
    if os.path.lexists(index):
        data = read_json(index, f"{what} index")
        weight_map = data.get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ReplayInputError(f"{what} index {index}: no 'weight_map' object")
        files = sorted(set(weight_map.values()))
        return {name: os.path.join(directory, file) for name, file in weight_map.items()}, \
            [os.path.join(directory, f) for f in files]
    files = sorted(os.path.join(directory, f) for f in os.listdir(directory) if f.endswith(".safetensors"))
    if not files:
        bins = [f for f in os.listdir(directory) if f.endswith(".bin") or f.endswith(".pt")]
        hint = f" (found {', '.join(sorted(bins)[:3])}: convert it to safetensors)" if bins else ""
        raise ReplayInputError(f"{what} {directory}: no *.safetensors file and no {INDEX}{hint}")
    names = {}
    for file in files:
        with open_safetensors(file, what) as handle:
            for name in handle.keys():  # noqa: SIM118  (safe_open has keys(), no __iter__)
                names[name] = file
    return names, files


def load_all(directory: str, what: str) -> dict[str, object]:
    """Every tensor of a (small) checkpoint, e.g. the draft's."""
    names, _ = weight_files(directory, what)
    out, by_file = {}, {}
    for name, file in names.items():
        by_file.setdefault(file, []).append(name)
    for file, wanted in sorted(by_file.items()):
        if not os.path.lexists(file):
            raise ReplayInputError(f"{what} {file}: named by the index, but no such file")
        with open_safetensors(file, what) as handle:
            keys = set(handle.keys())
            for name in wanted:
                if name not in keys:
                    raise ReplayInputError(f"{what} {file}: the index puts tensor {name} here, but the file lacks it")
                out[name] = read_tensor(handle, file, name, what)
    return out


def find_name(names, wanted: str) -> str | None:
    """The checkpoint's name for `wanted`, trying the prefixes multimodal wrappers add."""
    for prefix in PREFIXES:
        if prefix + wanted in names:
            return prefix + wanted
    return None


def load_named(directory: str, wanted: list[str], what: str) -> dict[str, object]:
    """Only the named tensors (looked up with the wrapper prefixes); absent ones are left out."""
    names, _ = weight_files(directory, what)
    out = {}
    for key in wanted:
        name = find_name(names, key)
        if name is None:
            continue
        file = names[name]
        if not os.path.lexists(file):
            raise ReplayInputError(f"{what} {file}: named by the index for {name}, but no such file")
        with open_safetensors(file, what) as handle:
            if name not in set(handle.keys()):
                raise ReplayInputError(f"{what} {file}: the index puts tensor {name} here, but the file lacks it")
            out[key] = read_tensor(handle, file, name, what)
    return out


def target_head_and_embedding(directory: str) -> tuple[object, object, dict, list[str]]:
    """(embedding, lm_head, target config, notes) of the target; lm_head is the embedding when tied."""
    model_dir(directory, "target")
    config_path = os.path.join(directory, "config.json")
    config = read_json(config_path, "target config") if os.path.lexists(config_path) else {}
    text = config
    for key in ("text_config", "language_config", "llm_config"):
        if isinstance(config.get(key), dict):
            text = config[key]
            break
    notes = [] if config else [f"target {directory}: no config.json; tensors read without it"]
    tensors = load_named(directory, [EMBED, LM_HEAD], "target checkpoint")
    if EMBED not in tensors:
        raise ReplayInputError(f"target checkpoint {directory}: no tensor {EMBED} (looked for it under the prefixes "
                               f"{', '.join(repr(p) for p in PREFIXES if p)} too)")
    head = tensors.get(LM_HEAD)
    if head is None:
        if text.get("tie_word_embeddings") or config.get("tie_word_embeddings"):
            head = tensors[EMBED]
            notes.append("target: tie_word_embeddings, its lm_head is the embedding")
        else:
            raise ReplayInputError(f"target checkpoint {directory}: no tensor {LM_HEAD} and the config does not tie "
                                   f"word embeddings")
    return tensors[EMBED], head, text, notes
