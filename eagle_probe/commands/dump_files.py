"""Reading the probe's dump files (README: "Dump files"), for the offline commands. A file that is not a readable
dump is named with what is wrong, never a traceback."""

import json
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from ..runtime.values.dumps import FORMAT_KEY, FORMAT_VERSION, LAYER_PREFIX, META_KEY, REQUIRED, SUFFIX


class DumpError(ValueError):
    """A dump directory or file that cannot be used; the message names it and what is wrong."""


@dataclass
class Dump:
    path: str
    meta: dict
    tensors: Dict[str, object]  # name -> torch.Tensor

    @property
    def hidden_size(self) -> int:
        return int(self.tensors["final_hidden_state"].shape[-1])

    @property
    def capture_indices(self) -> List[int]:
        return list(self.meta.get("capture_indices") or [])

    def layer(self, index: int):
        """HF hidden_states[index] of this forward, or None when the dump does not hold it."""
        return self.tensors.get(f"{LAYER_PREFIX}{index}")

    def layer_indices(self) -> List[int]:
        return sorted(int(name[len(LAYER_PREFIX):]) for name in self.tensors if name.startswith(LAYER_PREFIX))

    def requests(self) -> List[Tuple[int, int, int]]:
        """(first row, end row, tokens cached before the first row) per request in this forward."""
        rows = int(self.tensors["input_ids"].shape[0])
        lens = self.tensors.get("extend_seq_lens")
        prefixes = self.tensors.get("extend_prefix_lens")
        if lens is None:
            return [(0, rows, 0)]
        out, start = [], 0
        for i, n in enumerate(lens.tolist()):
            out.append((start, start + int(n), int(prefixes[i]) if prefixes is not None else 0))
            start += int(n)
        return out


@dataclass
class DumpSet:
    dumps: List[Dump] = field(default_factory=list)
    skipped: List[Tuple[str, str]] = field(default_factory=list)  # (path, why)


def read_dump(path: str) -> Dump:
    try:
        from safetensors import SafetensorError, safe_open
    except ImportError:  # older safetensors spell it differently
        from safetensors import safe_open
        SafetensorError = Exception
    try:
        with safe_open(path, "pt") as handle:
            header = handle.metadata() or {}
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}
    except (OSError, SafetensorError, ValueError, RuntimeError) as exc:
        raise DumpError(f"{path}: not a readable safetensors file ({type(exc).__name__}: {exc})") from None
    if header.get(FORMAT_KEY) != FORMAT_VERSION:
        raise DumpError(f"{path}: not an eagle-probe dump (no {FORMAT_KEY}={FORMAT_VERSION} in its metadata)")
    try:
        meta = json.loads(header.get(META_KEY, ""))
    except json.JSONDecodeError as exc:
        raise DumpError(f"{path}: its eagle_probe.meta metadata is not JSON ({exc})") from None
    missing = [name for name in REQUIRED if name not in tensors]
    if missing:
        raise DumpError(f"{path}: lacks the tensors {', '.join(missing)}")
    rows = {name: int(tensors[name].shape[0]) for name in REQUIRED}
    if len(set(rows.values())) != 1:
        raise DumpError(f"{path}: tensors disagree on the number of tokens ({rows})")
    hidden = int(tensors["final_hidden_state"].shape[-1])
    if tensors["aux_hidden_states"].shape[-1] % hidden:
        raise DumpError(f"{path}: aux width {tensors['aux_hidden_states'].shape[-1]} is not a multiple of the hidden "
                        f"size {hidden}")
    return Dump(path, meta, tensors)


def read_dump_dir(directory: str, limit: Optional[int] = None) -> DumpSet:
    """Every dump under `directory` (sorted by name); unreadable files are listed as skipped."""
    if not os.path.isdir(directory):
        raise DumpError(f"{directory}: not a directory")
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(SUFFIX))
    except OSError as exc:
        raise DumpError(f"{directory}: cannot be listed ({exc.strerror})") from None
    found = DumpSet()
    for name in names[:limit]:
        path = os.path.join(directory, name)
        try:
            found.dumps.append(read_dump(path))
        except DumpError as exc:
            found.skipped.append((path, str(exc)))
    if not found.dumps:
        why = "; ".join(reason for _, reason in found.skipped[:3]) or f"no *{SUFFIX} files"
        raise DumpError(f"{directory}: no readable eagle-probe dumps ({why})")
    return found
