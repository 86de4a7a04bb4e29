"""What a draft's directory says about it, read with the standard library only (no SGLang, no torch, nothing executed):
its config.json, and the sequence length it was trained on. Shared by the running probe (draft load) and the commands.

The trained length, first found of:
1. EAGLE_PROBE_DRAFT_MAX_LENGTH (`eagle-probe run --draft-max-length`), given by the caller;
2. SpecForge's training arguments: its train_eagle3.py (v0.1.0 of July 2025 to its July 2026 refactor) saves
   `training_state.pt` beside the draft's config.json and weights in every `epoch_N[_step_M]` directory, a torch
   pickle of {"epoch", "global_step", "args": the argparse Namespace, ...}, and `args.max_length` (--max-length,
   default 2048) is the length its training sequences were cut to. The pickle is read by a restricted unpickler that
   builds only plain containers and a stand-in for argparse.Namespace: no class of the file is imported, no code of
   it runs, no tensor is read (optimizer tensors become opaque placeholders). Its later layout (training state
   outside the exported draft) leaves no arguments in the draft directory.
3. config.json's `max_position_embeddings`: the longest position the draft's RoPE is set up for, stated as such (it
   is often the target's, far above what the draft saw in training).
A training_state.pt that cannot be read is said, and the next source used.
"""

import io
import json
import os
import pickle
import zipfile
from dataclasses import dataclass

CONFIG_MAX_BYTES = 10 * 1024 * 1024
STATE_FILE = "training_state.pt"
PICKLE_MAX_BYTES = 64 * 1024 * 1024  # data.pkl of the state (the tensors are separate members, never read)
ENV_SOURCE = "EAGLE_PROBE_DRAFT_MAX_LENGTH"
SPECFORGE_SOURCE = f"SpecForge's {STATE_FILE} (args.max_length)"
CONFIG_SOURCE = ("config.json max_position_embeddings (the longest position the draft's RoPE is set up for, not "
                 "necessarily the length it was trained on)")


class DraftDirError(ValueError):
    """A draft directory file that cannot be read; the message names the file and what is wrong."""


def read_config(directory: str) -> dict:
    """The draft's config.json as a dict; DraftDirError naming the file and the problem."""
    path = os.path.join(directory, "config.json")
    try:
        size = os.path.getsize(path)
        if size > CONFIG_MAX_BYTES:
            raise DraftDirError(f"{path}: {size} bytes, over the {CONFIG_MAX_BYTES} byte limit for a config")
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as exc:
        raise DraftDirError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise DraftDirError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise DraftDirError(f"{path}: not a JSON object")
    return data


class _Namespace:
    """Stands in for argparse.Namespace: pickle sets its __dict__."""


class _Opaque:
    """Stands in for every other class or function the pickle names (tensors, storages, optimizer objects)."""

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        pass

    def __setitem__(self, key, value):
        pass

    def append(self, value):
        pass

    def extend(self, values):
        pass


_SAFE = {("collections", "OrderedDict"): dict, ("builtins", "dict"): dict, ("builtins", "list"): list,
         ("builtins", "set"): set, ("builtins", "frozenset"): frozenset, ("builtins", "tuple"): tuple,
         ("argparse", "Namespace"): _Namespace}


class _Restricted(pickle.Unpickler):
    def find_class(self, module, name):
        return _SAFE.get((module, name), _Opaque)

    def persistent_load(self, pid):
        return None  # a tensor's storage: not read


def _state_pickle(path: str) -> bytes:
    try:
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
            if not names:
                raise DraftDirError(f"{path}: a zip without data.pkl, not a torch.save file")
            info = archive.getinfo(names[0])
            if info.file_size > PICKLE_MAX_BYTES:
                raise DraftDirError(f"{path}: data.pkl is {info.file_size} bytes, over the {PICKLE_MAX_BYTES} limit")
            return archive.read(names[0])
    except zipfile.BadZipFile:
        raise DraftDirError(f"{path}: not a zip (torch.save's format since torch 1.6); the legacy format is not "
                            f"read") from None
    except OSError as exc:
        raise DraftDirError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def specforge_max_length(path: str) -> int:
    """args.max_length of a SpecForge training_state.pt; DraftDirError naming what is missing or wrong."""
    data = _state_pickle(path)
    try:
        state = _Restricted(io.BytesIO(data)).load()
    except Exception as exc:
        raise DraftDirError(f"{path}: its pickle cannot be read ({type(exc).__name__}: {exc})") from None
    if not isinstance(state, dict):
        raise DraftDirError(f"{path}: holds a {type(state).__name__}, not SpecForge's dict of training state")
    args = state.get("args")
    if not isinstance(args, _Namespace):
        raise DraftDirError(f"{path}: no 'args' (SpecForge's argparse arguments) in it: keys "
                            f"{sorted(map(str, state))[:8]}")
    value = vars(args).get("max_length")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DraftDirError(f"{path}: args.max_length is {value!r}, not a positive integer")
    return value


@dataclass(frozen=True)
class TrainedLength:
    length: int | None
    source: str  # ENV_SOURCE, SPECFORGE_SOURCE, CONFIG_SOURCE or "none"
    notes: tuple[str, ...] = ()  # sources that were present but could not be read, and why


def trained_length(directory: str | None, config: dict | None, given: int | None = None) -> TrainedLength:
    """The draft's trained sequence length and where it came from (see the module docstring). Never raises."""
    if given is not None:
        return TrainedLength(given, ENV_SOURCE)
    notes = []
    if directory:
        path = os.path.join(directory, STATE_FILE)
        if os.path.exists(path):
            try:
                return TrainedLength(specforge_max_length(path), SPECFORGE_SOURCE)
            except DraftDirError as exc:
                notes.append(f"{exc}; falling back to config.json")
    value = (config or {}).get("max_position_embeddings")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return TrainedLength(value, CONFIG_SOURCE, tuple(notes))
    notes.append("no EAGLE_PROBE_DRAFT_MAX_LENGTH, no readable training arguments and no max_position_embeddings: "
                 "the trained length is not known")
    return TrainedLength(None, "none", tuple(notes))
