"""Reading the probe's dump files (docs/values.md): the one reader `replay` and `parity` share, with one set of
checks. A file that is not a usable dump raises DumpError naming the file and what is wrong, never a traceback."""

import json
import os
import time
from dataclasses import dataclass, field

from ..dump_format import (
    ACCEPTED,
    AUX,
    EXTEND_MODE,
    FINAL,
    FORMAT_KEY,
    FORMAT_VERSION,
    INPUT_IDS,
    LAYER_PREFIX,
    META_KEY,
    POSITIONS,
    PREFIX_COUNTS,
    PREFIX_IDS,
    PREFIX_LENS,
    REQUIRED,
    SEQ_LENS,
    SUFFIX,
    TARGET_IDS,
)
from .safetensors_io import open_safetensors, read_tensor

NO_DUMPS_HINT = ("the probe writes them when EAGLE_PROBE_DUMP_DIR is set (EAGLE_PROBE_DUMP_LAYERS=all for replay "
                 "--search and parity's best matches)")


UNKNOWN = "unknown"


class DumpError(ValueError):
    """A dump directory or file that cannot be used; the message names it and what is wrong."""


@dataclass
class Dump:
    path: str
    meta: dict
    tensors: dict[str, object]  # name -> torch.Tensor: the required ones and the extend lengths when present
    layers: dict[int, object]  # HF index -> [T, H] (all-layer dumps, when read)
    layer_indices: list[int]  # the hidden_states.I this file holds, read or not
    hf_indices: tuple[int, ...]  # per aux slot, as served
    num_layers: int
    requests: list[tuple[int, int, int]]  # (first row, end row, tokens cached before the first row) per request

    @property
    def rows(self) -> int:
        return int(self.tensors[INPUT_IDS].shape[0])

    @property
    def hidden_size(self) -> int:
        final = self.tensors.get(FINAL)
        return int(final.shape[-1]) if final is not None else int(self.meta["hidden_size"])

    @property
    def has_final(self) -> bool:
        """Whether the file holds the final hidden state (not when taken from a forward replayed from a graph)."""
        return FINAL in self.tensors

    @property
    def capture_indices(self) -> list[int]:
        return list(self.meta.get("capture_indices") or [])


@dataclass
class DumpSet:
    directory: str
    dumps: list[Dump] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why)


def _meta(header: dict, path: str) -> dict:
    if header.get(FORMAT_KEY) != FORMAT_VERSION:
        raise DumpError(f"dump {path}: not an eagle-probe dump (its metadata has no {FORMAT_KEY} = {FORMAT_VERSION})")
    try:
        meta = json.loads(header.get(META_KEY) or "")
    except json.JSONDecodeError as exc:
        raise DumpError(f"dump {path}: its {META_KEY} metadata is not JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise DumpError(f"dump {path}: its {META_KEY} metadata is not a JSON object")
    if "format_version" in meta:  # one type for readers: earlier writers stored the integer 1
        meta["format_version"] = str(meta["format_version"])
    return meta


def _int_list(meta: dict, key: str, path: str) -> tuple[int, ...]:
    value = meta.get(key)
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise DumpError(f"dump {path}: metadata '{key}' is {value!r}, expected a list of integers")
    return tuple(value)


def _layer_index(name: str, path: str) -> int:
    suffix = name[len(LAYER_PREFIX):]
    if not suffix.isdigit():
        raise DumpError(f"dump {path}: tensor {name} is not named {LAYER_PREFIX}<index>")
    return int(suffix)


def _requests(tensors: dict, rows: int, path: str) -> list[tuple[int, int, int]]:
    lens = tensors.get(SEQ_LENS)
    if lens is None:
        return [(0, rows, 0)]
    values = [int(v) for v in lens.reshape(-1).tolist()]
    if any(v < 0 for v in values) or sum(values) != rows:
        raise DumpError(f"dump {path}: {SEQ_LENS} {values} do not add up to its {rows} rows")
    prefixes = tensors.get(PREFIX_LENS)
    cached = [int(v) for v in prefixes.reshape(-1).tolist()] if prefixes is not None else [0] * len(values)
    if len(cached) != len(values):
        raise DumpError(f"dump {path}: {PREFIX_LENS} has {len(cached)} entries, {SEQ_LENS} {len(values)}")
    out, start = [], 0
    for n, before in zip(values, cached):
        out.append((start, start + n, before))
        start += n
    return out


def _check_shapes(tensors: dict, hf_indices: tuple[int, ...], path: str, meta: dict) -> int:
    """The hidden size, once the shapes agree."""
    shapes = {name: list(tensors[name].shape) for name in REQUIRED + (FINAL, TARGET_IDS) if name in tensors}
    if any(tensors[name].dim() != 1 for name in (INPUT_IDS, POSITIONS, TARGET_IDS) if name in tensors):
        raise DumpError(f"dump {path}: {INPUT_IDS}, {POSITIONS} and {TARGET_IDS} must be 1-D: {shapes}")
    if tensors[AUX].dim() != 2 or (FINAL in tensors and tensors[FINAL].dim() != 2):
        raise DumpError(f"dump {path}: {AUX} and {FINAL} must be 2-D: {shapes}")
    if len({shape[0] for shape in shapes.values()}) != 1:
        raise DumpError(f"dump {path}: tensors disagree on the number of rows: {shapes}")
    if FINAL in tensors:
        hidden = shapes[FINAL][1]
    else:
        hidden = meta.get("hidden_size")
        if isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 1:
            raise DumpError(f"dump {path}: no {FINAL} and metadata 'hidden_size' is {hidden!r}, expected an "
                            f"integer >= 1")
    width = shapes[AUX][1]
    if width != len(hf_indices) * hidden:
        raise DumpError(f"dump {path}: {AUX} is {width} wide, but its metadata names {len(hf_indices)} slots "
                        f"{list(hf_indices)} of hidden size {hidden} ({len(hf_indices) * hidden})")
    return hidden


def read_dump(path: str, layers: bool = True) -> Dump:
    """One dump file, checked; `layers=False` leaves the hidden_states.I tensors on disk."""
    with open_safetensors(path, "dump", DumpError) as handle:
        names = set(handle.keys())
        meta = _meta(handle.metadata() or {}, path)
        missing = [name for name in REQUIRED if name not in names]
        if missing:
            raise DumpError(f"dump {path}: lacks the tensor(s) {', '.join(missing)}")
        layer_names = {_layer_index(n, path): n for n in names if n.startswith(LAYER_PREFIX)}

        def read(name):
            return read_tensor(handle, path, name, "dump", DumpError)

        optional = (FINAL, TARGET_IDS, SEQ_LENS, PREFIX_LENS, ACCEPTED, PREFIX_IDS, PREFIX_COUNTS)
        tensors = {name: read(name) for name in REQUIRED + optional if name in names}
        hf_indices = _int_list(meta, "hf_indices", path)
        hidden = _check_shapes(tensors, hf_indices, path, meta)
        rows = int(tensors[INPUT_IDS].shape[0])
        held = {index: read(layer_names[index]) for index in sorted(layer_names)} if layers else {}
    for index, states in held.items():
        if list(states.shape) != [rows, hidden]:
            raise DumpError(f"dump {path}: {layer_names[index]} is {list(states.shape)}, expected [{rows}, {hidden}]")
    num_layers = meta.get("num_layers")
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
        raise DumpError(f"dump {path}: metadata 'num_layers' is {num_layers!r}, expected an integer >= 1")
    return Dump(path, meta, tensors, held, sorted(layer_names), hf_indices, num_layers,
                _requests(tensors, rows, path))


def dump_paths(path: str) -> tuple[str, list[str]]:
    """(directory, dump files sorted by name) for a dump directory or a single dump file."""
    if os.path.isfile(path):
        return os.path.dirname(path) or ".", [path]
    if not os.path.isdir(path):
        raise DumpError(f"--dump-dir {path}: no such file or directory")
    try:
        names = sorted(n for n in os.listdir(path) if n.endswith(SUFFIX))
    except OSError as exc:
        raise DumpError(f"--dump-dir {path}: cannot be listed ({exc.strerror or exc})") from None
    if not names:
        raise DumpError(f"--dump-dir {path}: no dump files (*{SUFFIX}) in this directory; {NO_DUMPS_HINT}")
    return path, [os.path.join(path, name) for name in names]


def wait_until_written(directory: str, quiet_s: float = 1.0, timeout_s: float = 60.0) -> bool:
    """Wait for the probe's writer thread, which writes a dump after the forward that made it (and holds a verify
    dump until its step resolved): until no file under `directory` appeared, grew or was still being written (a
    .tmp) for quiet_s. False when timeout_s passed first (what is there is read all the same)."""
    deadline, last, since = time.monotonic() + timeout_s, None, time.monotonic()
    while time.monotonic() < deadline:
        try:
            listing = sorted((entry.name, entry.stat().st_size) for entry in os.scandir(directory))
        except OSError:
            listing = []  # not there yet, or a file replaced while listed: look again
        if listing != last:
            last, since = listing, time.monotonic()
        elif time.monotonic() - since >= quiet_s and not any(name.endswith(".tmp") for name, _ in listing):
            return True
        time.sleep(0.1)
    return False


def read_dump_dir(path: str, layers: bool = True, strict: bool = False, modes=(EXTEND_MODE,)) -> DumpSet:
    """Every dump under `path` (a directory, or one file) of a forward mode in `modes` (default EXTEND: verify
    dumps are `consistency`'s, other files are left out silently). `strict`: the first unusable file is the error;
    otherwise unusable files are listed as skipped, and only a set with no usable dump is an error."""
    directory, files = dump_paths(path)
    found = DumpSet(directory)
    for file in files:
        try:
            dump = read_dump(file, layers=layers)
            if dump.meta.get("mode", EXTEND_MODE) in modes:
                found.dumps.append(dump)
        except DumpError as exc:
            if strict:
                raise
            found.skipped.append((file, str(exc)))
    if not found.dumps:
        why = "; ".join(reason for _, reason in found.skipped[:3]) or f"none of forward mode {', '.join(modes)}"
        raise DumpError(f"--dump-dir {path}: no readable eagle-probe dumps ({why})")
    _one_server(found.dumps, path)
    return found


def server_of(dump: Dump) -> tuple[str, str, int]:
    """What a dump says served it: (SGLang release, target class, hidden size); "unknown" where it does not say."""
    meta = dump.meta
    return str(meta.get("sglang_version") or UNKNOWN), str(meta.get("model_class") or UNKNOWN), dump.hidden_size


def _one_server(dumps: list[Dump], path: str) -> None:
    """Dumps of two releases or two models hold states of other layer conventions or shapes: no command may pool
    them. DumpError naming each group (its size and a file); the files stay where they are."""
    groups: dict[tuple[str, str, int], list[str]] = {}
    for dump in dumps:
        groups.setdefault(server_of(dump), []).append(dump.path)
    if len(groups) > 1:
        named = "; ".join(f"SGLang {release}, {model} hidden {hidden}: {len(files)} file(s), e.g. "
                          f"{os.path.basename(files[0])}" for (release, model, hidden), files in sorted(groups.items()))
        raise DumpError(f"--dump-dir {path}: mixes dumps of {len(groups)} servers ({named}); give each server's dumps "
                        f"a directory of their own (a dump file can also be named alone)")
