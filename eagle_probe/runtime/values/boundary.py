"""Values at the EAGLE worker boundary: the packed aux states [T, K*H] the target hands the worker after each forward
(prefill and verify), on every path, replayed graph or eager. The worker's Python runs whatever ran the target's
forward, so fingerprints and dumps taken here exist under CUDA graphs too, where the inner-forward wrappers never
run (a replay runs no Python of the model).

What is read: CPU lists SGLang already holds (request ids, extend and prefix lengths, committed lengths), the
tensors' shapes, and device tensors handed on by reference to the same sync-free machinery as the inner forward's
(values/fingerprint.py reductions, values/dumps.py non-blocking host copies). Nothing is synchronised.

Which source feeds values in a process (`source_of_values`): the worker, once an EAGLE draft is loaded in the process
and both worker hooks are wrapped; else the inner forward (target-only servers, releases without the hook). The
inner forward keeps only what it alone sees: all-layer dumps (EAGLE_PROBE_DUMP_LAYERS=all), the TBO split, forwards
at capture. `KEEP_INNER_VALUES` (tests only) keeps both, so that the two can be compared.
"""

import os
import time
from dataclasses import dataclass
from typing import Any

from ... import __version__
from ...analysis.layers import capture_label
from ...dump_format import (
    AUX,
    FINAL,
    FORMAT_VERSION,
    INPUT_IDS,
    POSITIONS,
    PREFIX_LENS,
    SEQ_LENS,
    TARGET_IDS,
    VERIFY_MODE,
)
from .dumps import DumpJob
from .sampler import SampleContext, deliver_ready, draft_input_slots
from .verify_dumps import VerifyDumpJob, unmatched_verify

WORKER, FORWARD = "worker", "forward"  # the `source` of a fingerprint or a dump

# [live]: an EAGLE draft is loaded in this process and the worker hooks are wrapped (integrations/model_runner.py)
LIVE = [False]
KEEP_INNER_VALUES = [False]  # tests only: the inner forward samples and dumps too, with source "forward"
# The last eager target forward's (hidden, aux) while dumps are on: its final hidden state rows go into the worker's
# dump of the same forward (matched by the aux tensor's storage). A replayed forward leaves nothing here.
LAST_FORWARD = [None]


def reset():
    LIVE[0] = False
    LAST_FORWARD[0] = None


def wanted(recorder, clock=time.time) -> bool:
    """Whether a hand-off is read at all: dumps are on (the planner counts every forward), or a fingerprint is due
    (one clock read and a comparison), or finished fingerprints wait to be read on this thread. Otherwise the hand-off
    only counts: no per-request work on the step."""
    if recorder.dumps is not None and recorder.dumps.worker_planner is not None:
        return True
    sampler = recorder.fingerprints
    return sampler is not None and (clock() >= sampler.due_cell(WORKER)[0]
                                    or (sampler.inline and bool(sampler.pending)))


def source_of_values() -> str:
    return WORKER if LIVE[0] else FORWARD


def inner_values_on() -> bool:
    """Whether the inner forward wrapper samples fingerprints and dumps aux states itself."""
    return not LIVE[0] or KEEP_INNER_VALUES[0]


@dataclass(slots=True, eq=False)
class Handoff:
    """One target forward's hand-off, read from the worker's arguments before it runs the draft."""

    mode: str
    aux: Any
    input_ids: Any
    positions: Any  # a tensor, or a callable making it (only for a dumped forward)
    rows: int
    reqs: Any  # SGLang's Req list
    seq_lens: Any
    prefix_lens: Any
    layers: Any
    num_layers: Any
    model_class: str
    logits: Any  # the verify forward's per-row logits (None for a prefill, whose logits are its last rows' only)


@dataclass(frozen=True)
class DumpedForward:
    """What a dump file's metadata says of its forward (dump_metadata), whichever source wrote it."""

    model_class: str
    dtype: Any
    mode: str
    step: int
    dump_index: int
    rows: int
    requests: int
    hidden_size: int
    num_layers: Any
    captured: list
    kept: Any  # HF index -> tensor of the all-layer dump's layers (empty: none)


def slot_layout(aux, layers):
    """(slots, width, capture indices per slot) of packed aux states, or None when they do not split evenly."""
    slots = len(set(layers))
    if aux is None or aux.dim() != 2 or not slots or aux.shape[-1] % slots:
        return None
    return slots, aux.shape[-1] // slots, tuple(sorted(set(layers)))


def sample(sampler, recorder, handoff: Handoff, step: int, draft_view=None) -> None:
    """Queue the fingerprints of this hand-off on the first forward of a sampling interval: role target, and role
    draft for the same tensor as the draft takes it (draft_view: its (num_aux, embed width), None without a draft
    model read). Where the two views split the states alike, one reduction serves both."""
    if sampler.inline and sampler.pending:
        deliver_ready(sampler, recorder)
    layout = slot_layout(handoff.aux, handoff.layers)
    if layout is None or not handoff.rows:
        return
    wall = sampler.due(WORKER)  # its own interval cell: the inner forward's (role "target") is another
    if wall is None:
        return
    slots, width, indices = layout
    context = SampleContext(role="target", mode=handoff.mode, step=step, tokens=handoff.rows,
                            capture_indices=indices, widths=(width,) * slots, num_layers=handoff.num_layers,
                            wall=wall, source=WORKER)
    states = handoff.aux[:handoff.rows]
    also, queued = (), False
    if draft_view is not None:
        draft_slots, draft_width = draft_input_slots(states.shape[-1], *draft_view)
        draft = context._replace(role="draft", capture_indices=(None,) * draft_slots,
                                 widths=(draft_width,) * draft_slots, num_layers=None)
        if (draft_slots, draft_width) == (slots, width):
            also = (draft,)
        else:  # the draft splits them otherwise (fc skipped, another slot count): its own reduction
            queued = sampler.queue(states, draft_slots, draft_width, draft)
    queued = sampler.queue(states, slots, width, context, *also) or queued
    if queued and sampler.inline:
        deliver_ready(sampler, recorder)


def _final_rows(aux, rows):
    """The final hidden state of the eager forward that returned `aux` (None after a replay)."""
    last = LAST_FORWARD[0]
    LAST_FORWARD[0] = None
    if last is None:
        return None
    hidden, served = last
    if served is None or served.data_ptr() != aux.data_ptr() or hidden.shape[0] < rows:
        return None
    return hidden[:rows]


def submit_dump(recorder, planner, handoff: Handoff, step: int) -> None:
    """Queue a dump of this hand-off when the planner picks it (counts equal on every rank)."""
    import torch

    dumps = recorder.dumps
    final = _final_rows(handoff.aux, handoff.rows)
    layout = slot_layout(handoff.aux, handoff.layers)
    if layout is None or handoff.mode not in planner.modes:
        return
    ranks = recorder.ensure_ranks() and recorder.ranks
    plan = planner.pick(ranks.tp_rank if ranks else 0, dumps.writer.usable(), handoff.mode)
    if plan is None or not plan.write:
        return
    rows = handoff.rows
    req_ids = [req.rid for req in handoff.reqs] if handoff.mode == VERIFY_MODE else None
    if handoff.mode == VERIFY_MODE and unmatched_verify(dumps.waiting, rows, req_ids):
        dumps.skipped("verify_unmatched")
        return
    positions = handoff.positions() if callable(handoff.positions) else handoff.positions
    tensors = {AUX: handoff.aux[:rows], INPUT_IDS: handoff.input_ids[:rows], POSITIONS: positions[:rows]}
    if final is not None:
        tensors[FINAL] = final
    logits = handoff.logits
    if logits is not None and logits.dim() == 2 and logits.shape[0] == rows:
        tensors[TARGET_IDS] = torch.argmax(logits, -1)  # on the device, copied like the rest: no synchronisation
    for name, values in ((SEQ_LENS, handoff.seq_lens), (PREFIX_LENS, handoff.prefix_lens)):
        if values is not None:
            tensors[name] = torch.tensor(values, dtype=torch.int64)
    slots, width, indices = layout
    metadata = dump_metadata(recorder, DumpedForward(
        handoff.model_class, handoff.aux.dtype, handoff.mode, step, plan.step, rows, len(handoff.seq_lens or ()),
        width, handoff.num_layers, list(indices), []), planner)
    metadata.update(source=WORKER, final_hidden_state=final is not None, target_next_ids=TARGET_IDS in tensors)
    if req_ids is None:
        job = DumpJob(tensors, metadata)
    else:
        per = rows // len(req_ids)
        metadata.update(req_ids=list(req_ids), rows_per_request=per, requests=len(req_ids))
        job = VerifyDumpJob(tensors, metadata, req_ids, per)
    if not dumps.writer.submit(job):
        dumps.skipped("writer_behind")
    elif req_ids is not None:
        dumps.waiting.append(job)


def dump_metadata(recorder, forward: DumpedForward, planner) -> dict:
    """The metadata of a dump file (docs/values.md), whichever source wrote it."""
    ranks, f = recorder.ranks, forward
    return {
        "format_version": FORMAT_VERSION, "probe_version": __version__, "sglang_version": recorder.sglang_version,
        "model_class": f.model_class, "dtype": str(f.dtype).replace("torch.", ""), "mode": f.mode, "step": f.step,
        "dump_index": f.dump_index, "tokens": f.rows, "requests": f.requests, "hidden_size": int(f.hidden_size),
        "num_layers": f.num_layers, "capture_indices": f.captured, "hf_indices": f.captured,
        "labels": [capture_label(i, f.num_layers) for i in f.captured],
        "layer_indices": sorted(f.kept), "all_layers": bool(f.kept),
        "tp_rank": None if ranks is None else ranks.tp_rank, "tp_size": None if ranks is None else ranks.tp_size,
        "pp_rank": None if ranks is None else ranks.pp_rank, "dp_rank": None if ranks is None else ranks.dp_rank,
        "pid": os.getpid(), "time": time.time(),
        "dump_every": planner.every, "dump_modes": sorted(planner.modes),
    }
