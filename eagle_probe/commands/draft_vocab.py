"""`eagle-probe doctor`: the draft's vocabulary map, from the checkpoint's safetensors header(s) and the d2t tensor.

Only the headers (kilobytes) and d2t (draft_vocab_size integers) are read, never the weights. The rules are
analysis.vocab_map's, the same the running probe applies at load time.
"""

import os

from ..analysis.draft_ids import draft_class, takes_d2t
from ..analysis.vocab_map import needs_map, vocab_map_findings
from .json_files import shown as _shown
from .safetensors_header import find_tensor, read_header, read_integer_vector

NESTED_TEXT_KEYS = ("text_config", "language_config", "llm_config")


def is_d2t(name: str) -> bool:
    """A candidate for the map: any name containing d2t (what the Llama loader takes; analysis.draft_ids.takes_d2t
    says whether the draft's class takes it)."""
    return "d2t" in name


def _vocab(data: dict, key: str, file: str, what: str, error: type) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise error(f"{what} config {file}: key '{key}' must be an integer >= 1 or null, got {_shown(value)}")
    return value


def target_vocab_size(data: dict, file: str, error: type) -> int | None:
    for key in NESTED_TEXT_KEYS:
        nested = data.get(key)
        if isinstance(nested, dict) and nested.get("vocab_size") is not None:
            return _vocab(nested, "vocab_size", file, "target", error)
    return _vocab(data, "vocab_size", file, "target", error)


def checkpoint_files(draft_dir: str) -> list[str]:
    return sorted(os.path.join(draft_dir, n) for n in os.listdir(draft_dir)
                  if n.endswith(".safetensors") and os.path.isfile(os.path.join(draft_dir, n)))


def check_draft_vocab(draft_path: str, draft_file: str, draft_data: dict, target_file: str, target_data: dict,
                      model_class: str, error: type) -> tuple[list, dict, list[str]]:
    """(findings, the "vocab_map" section of doctor's report, notes). Raises error for a config key of the wrong
    type, or a checkpoint header or d2t that cannot be read (wrong dtype or shape, truncated)."""
    draft_vocab = _vocab(draft_data, "draft_vocab_size", draft_file, "draft", error)
    target_vocab = target_vocab_size(target_data, target_file, error)
    info = {"draft_vocab_size": draft_vocab, "target_vocab_size": target_vocab, "needs_map": None,
            "checkpoint_files": 0, "d2t": None, "checked": False}
    notes = []
    if target_vocab is None:
        if draft_vocab is not None:
            notes.append("target: no 'vocab_size'; the draft's vocabulary map was not checked")
        return [], info, notes
    info["needs_map"] = needs_map(draft_vocab, target_vocab)
    draft_dir = draft_path if os.path.isdir(draft_path) else os.path.dirname(os.path.abspath(draft_path))
    files = checkpoint_files(draft_dir)
    info["checkpoint_files"] = len(files)
    if not files:
        if info["needs_map"]:
            notes.append(f"draft: draft_vocab_size {draft_vocab} < the target's vocab_size {target_vocab}, but no "
                         f"*.safetensors beside {draft_file}: whether the checkpoint carries the d2t map it needs "
                         f"was not checked (give the checkpoint directory as --draft)")
        return [], info, notes
    headers = {file: read_header(file, error) for file in files}
    found = find_tensor(files, headers, is_d2t)
    where = f"the checkpoint ({draft_dir}, {len(files)} safetensors file(s))"
    d2t = None
    if found is not None and not takes_d2t(draft_class(model_class), found[1]):
        notes.append(f"draft: {model_class} loads d2t only under the name 'd2t' or '*.d2t'; the checkpoint's "
                     f"{found[1]!r} is ignored by SGLang, so the map counts as missing")
        found = None
    if found is not None:
        file, name = found
        entry = headers[file][name]
        d2t = read_integer_vector(file, name, entry, error)
        info["d2t"] = {"file": file, "name": name, "dtype": entry["dtype"], "shape": entry["shape"]}
        where = f"{os.path.basename(file)} ({name})"
    findings = vocab_map_findings(model_class, draft_vocab, target_vocab, d2t, where)
    info["checked"] = True
    return findings, info, notes


def render_vocab(info: dict) -> str | None:
    """doctor's text line for the vocabulary (None when neither size is known)."""
    if info["draft_vocab_size"] is None and info["target_vocab_size"] is None:
        return None
    draft = ("the target's lm_head (no draft_vocab_size)" if info["draft_vocab_size"] is None
             else f"draft_vocab_size {info['draft_vocab_size']}")
    if info["d2t"]:
        d2t = f"d2t {info['d2t']['name']} {info['d2t']['dtype']} {info['d2t']['shape']} checked"
    elif info["checked"]:
        d2t = "no d2t in the checkpoint"
    else:
        d2t = "checkpoint not read"
    return (f"vocab   {draft}, target vocab_size {info['target_vocab_size']}"
            + ("" if info["needs_map"] is None else f", map {'needed' if info['needs_map'] else 'not needed'}")
            + f"; {d2t}")
