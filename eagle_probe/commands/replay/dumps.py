"""The probe's dump files (read and checked by commands/dump_files.py) as replay's rows.

A dumped row t is evaluated when row t + 1 belongs to the same request: the draft gets (aux state of t, token at
t + 1) and its proposal is compared with the target's greedy token at t + 1 (the token after t + 1). The last row of
each request has no next token in the dump and is left out. Forwards written by several tensor-parallel ranks (the
same step, dp rank and tokens) are read once.

Labels: prefill (EXTEND) dumps with the final hidden state (eager forwards; the target's lm_head over it gives the
greedy token), requests split with extend_seq_lens. Where none has it (every forward replayed from a CUDA graph, whose
prefill dumps the EAGLE worker boundary took without it), verify dumps with the target's greedy ids (target_next_ids)
instead, one request per verify chain: those rows follow the committed tokens, which the dump does not hold as aux
states, so the draft's attention sees the chain only.
"""

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ...dump_format import AUX, EXTEND_MODE, FINAL, INPUT_IDS, POSITIONS, PREFIX_COUNTS, TARGET_IDS, VERIFY_MODE
from ..dump_files import Dump, DumpError, read_dump_dir


@dataclass
class DumpRows:
    """Every evaluated row of every dump, concatenated."""

    directory: str
    files: list[str]
    duplicates: list[str]
    meta: dict  # the first file's eagle_probe.meta
    served: tuple[int, ...]  # HF index per aux slot, as served
    hidden_size: int
    num_layers: int
    next_tokens: torch.Tensor  # [N] the token at t + 1
    positions: torch.Tensor  # [N] t's position in its request
    segments: list[tuple[int, int]]  # (first row, rows) per request
    aux: torch.Tensor  # [N, K*H] served aux states at t
    label_states: torch.Tensor | None  # [N, H] the target's final hidden state at t + 1 (prefill dumps)
    label_ids: torch.Tensor | None  # [N] the target's greedy token after t + 1 (verify dumps without the above)
    layers: dict[int, torch.Tensor]  # HF index -> [N, H] (all-layer dumps; loaded only when asked)
    layer_indices: list[int]  # the indices every file holds
    requests: int
    dumped_rows: int
    cached_prefix_requests: int  # requests whose forward started after cached tokens (chunked prefill, prefix cache)
    versions: list[str] = field(default_factory=list)
    unlabelled: list[str] = field(default_factory=list)  # dumps left out: no final hidden state, or not the labels used

    @property
    def evaluated_positions(self) -> int:
        """The positions the draft is scored on (a dump's rows less those without a label)."""
        return int(self.next_tokens.shape[0])

    def wiring_aux(self, wiring: Sequence[int]) -> torch.Tensor:
        return torch.cat([self.layers[i] for i in wiring], dim=-1)


def _forward_key(dump: Dump) -> tuple:
    """What makes two files the same forward written by two tensor-parallel ranks."""
    tokens = dump.tensors[INPUT_IDS].to(torch.int64).numpy().tobytes()
    positions = dump.tensors[POSITIONS].to(torch.int64).numpy().tobytes()
    return (dump.meta.get("step"), dump.meta.get("dp_rank"), dump.meta.get("pp_rank"), dump.rows,
            hashlib.sha1(tokens + positions).hexdigest())


def _distinct(dumps) -> tuple[list, list[str]]:
    """(the dumps of distinct forwards, the paths of repeats); all must share slots and width."""
    seen, duplicates, used = set(), [], []
    for dump in dumps:
        key = _forward_key(dump)
        if key in seen:
            duplicates.append(dump.path)
            continue
        seen.add(key)
        first = used[0] if used else dump
        if (dump.hf_indices, dump.hidden_size) != (first.hf_indices, first.hidden_size):
            raise DumpError(
                f"dump {dump.path}: slots {list(dump.hf_indices)} of width {dump.hidden_size}, but {first.path} has "
                f"{list(first.hf_indices)} of width {first.hidden_size}: the dumps come from differently "
                f"configured servers; replay one set at a time")
        used.append(dump)
    return used, duplicates


def _labelled(used, path: str) -> tuple[list, bool]:
    """(the dumps that hold labels, whether the labels are the verify dumps' target ids)."""
    labelled = [d for d in used if d.meta.get("mode", EXTEND_MODE) == EXTEND_MODE and d.has_final]
    by_ids = not labelled
    if by_ids:
        labelled = [d for d in used if d.meta.get("mode") == VERIFY_MODE and TARGET_IDS in d.tensors]
    if not labelled:
        no_final = [d.path for d in used if d.meta.get("mode", EXTEND_MODE) == EXTEND_MODE]
        raise DumpError(
            f"--dump-dir {path}: no dump holds labels: {len(no_final)} prefill dump(s) hold no {FINAL} (e.g. "
            f"{no_final[0] if no_final else 'none'}; taken at the EAGLE worker boundary from forwards replayed from "
            f"CUDA graphs) and no verify dump holds {TARGET_IDS} (EAGLE_PROBE_DUMP_MODES=...,target_verify). Dump "
            f"eager forwards (--disable-cuda-graph) or verify forwards, or use parity/consistency, which read these "
            f"files")
    return labelled, by_ids


def read_dumps(path: str, want_layers: bool) -> DumpRows:
    found = read_dump_dir(path, layers=want_layers, strict=True, modes=(EXTEND_MODE, VERIFY_MODE))
    used, duplicates = _distinct(found.dumps)
    labelled, by_ids = _labelled(used, path)
    unlabelled = [d.path for d in used if all(d is not kept for kept in labelled)]  # (a Dump's == compares tensors)
    used = labelled
    parts = {"next": [], "pos": [], "aux": [], "label": []}
    layer_parts: dict[int, list[torch.Tensor]] = {}
    segments: list[tuple[int, int]] = []
    offset = 0
    requests_of = {id(dump): verify_chains(dump) if by_ids else dump.requests for dump in used}
    for dump in used:
        requests = requests_of[id(dump)]
        keep = torch.tensor([r for start, end, _ in requests for r in range(start, end - 1)], dtype=torch.long)
        for start, end, _ in requests:
            if end - start > 1:
                segments.append((offset, end - start - 1))
                offset += end - start - 1
        parts["next"].append(dump.tensors[INPUT_IDS].to(torch.long)[keep + 1])
        parts["pos"].append(dump.tensors[POSITIONS].to(torch.long)[keep])
        parts["aux"].append(dump.tensors[AUX][keep])
        parts["label"].append(dump.tensors[TARGET_IDS].to(torch.long)[keep + 1] if by_ids
                              else dump.tensors[FINAL][keep + 1])
        for index, tensor in dump.layers.items():
            layer_parts.setdefault(index, []).append(tensor[keep])
    if not offset:
        raise DumpError(f"--dump-dir {path}: no request in the dumps has two or more rows, so no position has its next "
                        f"token dumped")
    common = sorted(set.intersection(*(set(d.layer_indices) for d in used)))
    first = used[0]
    return DumpRows(
        directory=found.directory, files=[d.path for d in used], duplicates=duplicates, meta=first.meta,
        served=first.hf_indices, hidden_size=first.hidden_size, num_layers=first.num_layers,
        next_tokens=torch.cat(parts["next"]), positions=torch.cat(parts["pos"]), segments=segments,
        aux=torch.cat(parts["aux"]), label_states=None if by_ids else torch.cat(parts["label"]),
        label_ids=torch.cat(parts["label"]) if by_ids else None, unlabelled=unlabelled,
        layers={i: torch.cat(layer_parts[i]) for i in common} if want_layers else {}, layer_indices=common,
        requests=sum(len(r) for r in requests_of.values()), dumped_rows=sum(d.rows for d in used),
        cached_prefix_requests=sum(1 for r in requests_of.values() for _, _, before in r if before > 0),
        versions=sorted({str(d.meta.get("sglang_version")) for d in used}))


def verify_chains(dump: Dump) -> list[tuple[int, int, int]]:
    """(first row, end row, committed tokens before it) per request of a verify dump: rows_per_request rows each."""
    per = dump.meta.get("rows_per_request")
    if isinstance(per, bool) or not isinstance(per, int) or per < 1 or dump.rows % per:
        raise DumpError(f"dump {dump.path}: metadata 'rows_per_request' is {per!r}, which does not divide its "
                        f"{dump.rows} rows")
    counts = dump.tensors.get(PREFIX_COUNTS)
    committed = [int(c) for c in counts.tolist()] if counts is not None and len(counts) == dump.rows // per else None
    return [(i * per, (i + 1) * per, committed[i] if committed else 1) for i in range(dump.rows // per)]
