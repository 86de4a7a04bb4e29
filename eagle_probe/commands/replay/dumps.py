"""The probe's dump files (README "Dump files") as replay's rows.

A dumped row t is evaluated when row t + 1 belongs to the same request: the draft gets (aux state of t, token at
t + 1) and its proposal is compared with the target's greedy token at t + 1 (the token after t + 1). The last row of
each request has no next token in the dump and is left out. Requests are split with extend_seq_lens. Forwards
written by several tensor-parallel ranks (the same step, dp rank and tokens) are read once.
"""

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from ...runtime.values.dumps import FORMAT_KEY, FORMAT_VERSION, LAYER_PREFIX, META_KEY, REQUIRED, SUFFIX
from .checkpoints import open_safetensors, read_tensor
from .spec import ReplayInputError


@dataclass
class DumpRows:
    """Every evaluated row of every dump, concatenated."""

    directory: str
    files: List[str]
    duplicates: List[str]
    meta: dict  # the first file's eagle_probe.meta
    served: Tuple[int, ...]  # HF index per aux slot, as served
    hidden_size: int
    num_layers: int
    next_tokens: torch.Tensor  # [N] the token at t + 1
    positions: torch.Tensor  # [N] t's position in its request
    segments: List[Tuple[int, int]]  # (first row, rows) per request
    aux: torch.Tensor  # [N, K*H] served aux states at t
    label_states: torch.Tensor  # [N, H] the target's final hidden state at t + 1
    layers: Dict[int, torch.Tensor]  # HF index -> [N, H] (all-layer dumps; loaded only when asked)
    layer_indices: List[int]  # the indices every file holds
    requests: int
    dumped_rows: int
    cached_prefix_requests: int  # requests whose forward started after cached tokens (chunked prefill, prefix cache)
    versions: List[str] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return int(self.next_tokens.shape[0])

    def wiring_aux(self, wiring: Sequence[int]) -> torch.Tensor:
        return torch.cat([self.layers[i] for i in wiring], dim=-1)


def dump_files(path: str) -> Tuple[str, List[str]]:
    if os.path.isfile(path):
        return os.path.dirname(path) or ".", [path]
    if not os.path.isdir(path):
        raise ReplayInputError(f"--dump {path}: no such file or directory")
    try:
        names = sorted(n for n in os.listdir(path) if n.endswith(SUFFIX))
    except OSError as exc:
        raise ReplayInputError(f"--dump {path}: cannot be listed ({exc.strerror or exc})") from None
    if not names:
        raise ReplayInputError(f"--dump {path}: no dump files (*{SUFFIX}) in this directory; the probe writes them "
                               f"when EAGLE_PROBE_DUMP_DIR is set (EAGLE_PROBE_DUMP_LAYERS=all for --search)")
    return path, [os.path.join(path, n) for n in names]


def _meta(handle, path: str) -> dict:
    header = handle.metadata() or {}
    if header.get(FORMAT_KEY) != FORMAT_VERSION:
        raise ReplayInputError(f"dump {path}: not an eagle-probe dump (its metadata has no {FORMAT_KEY} = "
                               f"{FORMAT_VERSION})")
    try:
        meta = json.loads(header.get(META_KEY) or "")
    except json.JSONDecodeError as exc:
        raise ReplayInputError(f"dump {path}: its eagle_probe.meta metadata is not JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise ReplayInputError(f"dump {path}: its eagle_probe.meta metadata is not a JSON object")
    return meta


def _int_list(meta: dict, key: str, path: str) -> List[int]:
    value = meta.get(key)
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise ReplayInputError(f"dump {path}: metadata '{key}' is {value!r}, expected a list of integers")
    return value


def _segments(lens: Optional[torch.Tensor], rows: int, path: str) -> List[Tuple[int, int]]:
    if lens is None:
        return [(0, rows)]
    values = [int(v) for v in lens.tolist()]
    if any(v < 0 for v in values) or sum(values) != rows:
        raise ReplayInputError(f"dump {path}: extend_seq_lens {values} do not add up to its {rows} rows")
    out, start = [], 0
    for n in values:
        out.append((start, n))
        start += n
    return out


def read_dumps(path: str, want_layers: bool) -> DumpRows:
    directory, files = dump_files(path)
    seen: Dict[tuple, str] = {}
    duplicates, used = [], []
    metas, served, hidden, layer_sets = [], None, None, []
    parts = {"next": [], "pos": [], "aux": [], "label": []}
    layer_parts: Dict[int, List[torch.Tensor]] = {}
    segments: List[Tuple[int, int]] = []
    requests = dumped = cached = offset = 0
    for file in files:
        with open_safetensors(file, "dump") as handle:
            meta = _meta(handle, file)
            names = set(handle.keys())
            missing = [n for n in REQUIRED if n not in names]
            if missing:
                raise ReplayInputError(f"dump {file}: lacks the tensor(s) {', '.join(missing)}")
            t = {n: read_tensor(handle, file, n, "dump") for n in REQUIRED + ("extend_seq_lens", "extend_prefix_lens")
                 if n in names}
            layer_names = sorted((n for n in names if n.startswith(LAYER_PREFIX)), key=lambda n: int(n.split(".")[1])
                                 if n.split(".")[1].isdigit() else -1)
            indices = []
            for name in layer_names:
                suffix = name[len(LAYER_PREFIX):]
                if not suffix.isdigit():
                    raise ReplayInputError(f"dump {file}: tensor {name} is not named hidden_states.<index>")
                indices.append(int(suffix))
            rows = int(t["input_ids"].shape[0])
            shapes = {n: tuple(t[n].shape) for n in REQUIRED}
            if any(s[0] != rows for s in shapes.values()) or t["input_ids"].dim() != 1 or t["positions"].dim() != 1:
                raise ReplayInputError(f"dump {file}: tensors disagree on the number of rows: {shapes}")
            if t["aux_hidden_states"].dim() != 2 or t["final_hidden_state"].dim() != 2:
                raise ReplayInputError(f"dump {file}: aux_hidden_states and final_hidden_state must be 2-D: {shapes}")
            h = int(t["final_hidden_state"].shape[1])
            slots = tuple(_int_list(meta, "hf_indices", file))
            width = int(t["aux_hidden_states"].shape[1])
            if width != len(slots) * h:
                raise ReplayInputError(f"dump {file}: aux_hidden_states is {width} wide, but its metadata names "
                                       f"{len(slots)} slots {list(slots)} of hidden size {h} ({len(slots) * h})")
            if served is None:
                served, hidden = slots, h
            elif slots != served or h != hidden:
                raise ReplayInputError(
                    f"dump {file}: slots {list(slots)} of width {h}, but {used[0]} has {list(served)} of width "
                    f"{hidden}: the dumps come from differently configured servers; replay one set at a time")
            key = (meta.get("step"), meta.get("dp_rank"), meta.get("pp_rank"), rows,
                   hashlib.sha1(t["input_ids"].to(torch.int64).numpy().tobytes()
                                + t["positions"].to(torch.int64).numpy().tobytes()).hexdigest())
            if key in seen:  # the same forward from another tensor-parallel rank
                duplicates.append(file)
                continue
            seen[key] = file
            used.append(file)
            metas.append(meta)
            layer_sets.append(set(indices))
            segs = _segments(t.get("extend_seq_lens"), rows, file)
            prefixes = t.get("extend_prefix_lens")
            if prefixes is not None:
                cached += sum(1 for v in prefixes.tolist() if int(v) > 0)
            requests += len(segs)
            dumped += rows
            keep = torch.tensor([r for s, n in segs for r in range(s, s + n - 1)], dtype=torch.long)
            for s, n in segs:
                if n > 1:
                    segments.append((offset, n - 1))
                    offset += n - 1
            ids = t["input_ids"].to(torch.long)
            parts["next"].append(ids[keep + 1])
            parts["pos"].append(t["positions"].to(torch.long)[keep])
            parts["aux"].append(t["aux_hidden_states"][keep])
            parts["label"].append(t["final_hidden_state"][keep + 1])
            if want_layers:
                for index, name in zip(indices, layer_names):
                    tensor = read_tensor(handle, file, name, "dump")
                    if tuple(tensor.shape) != (rows, h):
                        raise ReplayInputError(f"dump {file}: {name} is {list(tensor.shape)}, expected [{rows}, {h}]")
                    layer_parts.setdefault(index, []).append(tensor[keep])
    common = sorted(set.intersection(*layer_sets)) if layer_sets else []
    if not offset:
        raise ReplayInputError(f"--dump {path}: no request in the dumps has two or more rows, so no position has its "
                               f"next token dumped")
    meta = metas[0]
    num_layers = meta.get("num_layers")
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
        raise ReplayInputError(f"dump {used[0]}: metadata 'num_layers' is {num_layers!r}, expected an integer >= 1")
    layers = {i: torch.cat(layer_parts[i]) for i in common} if want_layers else {}
    return DumpRows(
        directory=directory, files=used, duplicates=duplicates, meta=meta, served=served, hidden_size=hidden,
        num_layers=num_layers, next_tokens=torch.cat(parts["next"]), positions=torch.cat(parts["pos"]),
        segments=segments, aux=torch.cat(parts["aux"]), label_states=torch.cat(parts["label"]), layers=layers,
        layer_indices=common, requests=requests, dumped_rows=dumped, cached_prefix_requests=cached,
        versions=sorted({str(m.get("sglang_version")) for m in metas}))
