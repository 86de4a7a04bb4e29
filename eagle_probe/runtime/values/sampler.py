"""When to fingerprint, and handing finished fingerprints to the recorder.

Sampling follows wall-clock buckets of EAGLE_PROBE_FINGERPRINT_INTERVAL_S: the first eligible forward in each
bucket is sampled. Tensor-parallel ranks run the same forwards in lockstep on one clock, so they sample the same
forward (its `step`, the count of the model's forwards) without any communication, and `summarize` can compare
their fingerprints step by step (except in a bucket whose boundary falls within the ranks' lag: then they sample
neighbouring forwards, and nothing compares them). The forward's thread only queues the reductions; the flush
thread reads the results once their copy is done and hands them to the recorder (on the forward's thread only where
no flush thread runs).
"""

import threading
import time
from typing import NamedTuple

from .fingerprint import Fingerprinter

# Rows a fingerprint reduces at most: the reductions' temporaries on the device are a few times rows x slots x width
# float32 values (3 x 7168 channels: 22 MB each at 256 rows, where a whole 8192-token prefill chunk would take 704 MB
# each, out of the memory a server leaves for activations).
MAX_ROWS = 256


class SampleContext(NamedTuple):
    """What the recorder needs besides the numbers: whose states, which forward, which layers."""

    role: str
    mode: str
    step: int
    tokens: int
    capture_indices: tuple[int | None, ...]  # per slot; None where unknown (the draft's input)
    widths: tuple[int, ...]  # per slot
    num_layers: int | None
    wall: float  # time.time() of the sampled forward
    source: str = "forward"  # where they were read: "forward" (the inner model's) or "worker" (values/boundary.py)


class FingerprintSampler:
    def __init__(self, interval_s: float, clock=time.time):
        self.interval = interval_s
        self._clock = clock
        self.next_due = {}  # role -> [wall time when its next bucket begins] (wrappers keep the cell, compare it first)
        self._fingerprinters = {}  # (slots, width, device) -> Fingerprinter
        self.pending = []  # [(PendingRead, (SampleContext, ...))], oldest first
        self.inline = True  # read on the forward's thread (until a flush thread runs: Values.flush_thread_started)
        self._reading = threading.Lock()  # the flush thread and the final flush may read at once

    def due(self, role: str) -> float | None:
        """The wall time when this role's next forward should be sampled now, else None."""
        now = self._clock()
        cell = self.due_cell(role)
        if now < cell[0]:  # the hot path: one clock read, one comparison
            return None
        cell[0] = (now // self.interval + 1) * self.interval  # the start of the next bucket
        return now

    def due_cell(self, role: str) -> list:
        """The one-element list holding the role's next due time (a wrapper keeps it for its per-forward check)."""
        cell = self.next_due.get(role)
        if cell is None:
            cell = self.next_due[role] = [0.0]
        return cell

    def queue(self, states, slots: int, width: int, context: SampleContext, *also: SampleContext) -> bool:
        """Queue the reductions of states [T, slots * width] (real tokens only) on their device, over its first
        MAX_ROWS rows. `also`: further contexts of the same states and layout (another role handed the same tensor),
        delivered with the same figures: one reduction, not two."""
        contexts = (context,) + also
        if states.shape[0] > MAX_ROWS:
            states = states[:MAX_ROWS]
            contexts = tuple(c._replace(tokens=MAX_ROWS) for c in contexts)
        key = (slots, width, states.device)
        fingerprinter = self._fingerprinters.get(key)
        if fingerprinter is None:
            fingerprinter = self._fingerprinters[key] = Fingerprinter(slots, width, states.device)
        pending = fingerprinter.queue(states)
        if pending is None:
            return False
        self.pending.append((pending, contexts))
        return True

    def take_ready(self):
        """[(SampleContext, per-slot values)] whose copies are done, in order; the rest stay pending."""
        done = []
        with self._reading:
            while self.pending and self.pending[0][0].ready():
                pending, contexts = self.pending.pop(0)
                values = pending.read()
                done.extend((context, values) for context in contexts)
        return done


SAMPLED_TARGET_MODES = ("EXTEND", "TARGET_VERIFY")  # eager forwards whose aux states feed the draft
_members = {}  # (ForwardMode type, names) -> the members with those names (read once)


def reset() -> None:
    """Forget the mode names read (uninstall)."""
    _members.clear()


def sampled_members(mode_type, names=SAMPLED_TARGET_MODES) -> frozenset:
    """The members of SGLang's ForwardMode named in `names`, for a membership test per forward."""
    members = _members.get((mode_type, names))
    if members is None:
        members = _members[(mode_type, names)] = frozenset(m for m in mode_type if m.name in names)
    return members


def sampled_mode(mode, names=SAMPLED_TARGET_MODES) -> bool:
    """Whether a ForwardMode member is one of `names` (for callers off the per-forward path)."""
    return mode in sampled_members(type(mode), names)


def real_tokens(forward_batch, rows: int) -> int:
    """Rows that are real tokens: an EXTEND batch says how many it extends; other eager batches have no padding."""
    lens = getattr(forward_batch, "extend_seq_lens_cpu", None)
    if isinstance(lens, list) and lens:
        total = sum(lens)
        if 0 < total <= rows:
            return total
    return rows


def deliver_ready(sampler: FingerprintSampler, recorder) -> None:
    for context, values in sampler.take_ready():
        recorder.aux_sampled(context, values)


def draft_input_slots(width_in: int, num_aux, embed_width):
    """(slots, width) of the states a draft receives, as its fc takes them: num_aux slots where they split evenly,
    one slot when the width equals the embedding width (SGLang then skips fc and takes the state as it is)."""
    slots = num_aux if num_aux and width_in % num_aux == 0 else 1
    if width_in == embed_width:
        slots = 1
    return slots, width_in // slots


def packed_aux(aux):
    """The aux states as the draft receives them: a list-format release's list packed into one [T, K*H] tensor."""
    if isinstance(aux, (list, tuple)):
        import torch

        return torch.cat(tuple(aux), dim=-1)
    return aux


def sample_target_forward(sampler, recorder, static, mode, forward_batch, result, layers):
    """Read finished fingerprints (where no flush thread does); on the first forward of a sampling interval, queue the
    reductions of the aux states this target forward returns (as the draft receives them). The caller has checked
    that the forward is eager and of a sampled mode (SAMPLED_TARGET_MODES)."""
    if sampler.inline and sampler.pending:
        deliver_ready(sampler, recorder)
    if type(result) is not tuple or len(result) != 2:
        return
    wall = sampler.due(static.role)
    if wall is None:
        return
    hidden, aux = result
    if isinstance(aux, (list, tuple)) and not aux:
        return
    aux = packed_aux(aux)
    width = hidden.shape[-1]
    slots = aux.shape[-1] // width if width else 0
    if not slots or aux.shape[-1] != slots * width:
        return
    tokens = real_tokens(forward_batch, aux.shape[0])
    indices = tuple(sorted(set(layers)))[:slots]  # SGLang captures in layer order, each layer once
    if len(indices) != slots:
        indices = (None,) * slots
    context = SampleContext(role=static.role, mode=mode.name, step=static.forwards, tokens=tokens,
                            capture_indices=indices, widths=(width,) * slots, num_layers=static.num_layers, wall=wall)
    if sampler.queue(aux[:tokens], slots, width, context) and sampler.inline:
        deliver_ready(sampler, recorder)  # on the CPU the values are there at once; on a GPU, on a later forward
