"""Dumps of target verify forwards (EAGLE_PROBE_DUMP_MODES=...,target_verify): which rows were committed.

At the forward only the device copies are queued, with the batch's request ids (a CPU list SGLang already holds).
The verify step's resolution (integrations/acceptance.py, after SGLang read its accepted counts on the CPU) hands each
request still awaited its committed length, its accepted count and references to its token lists: only while a
dumped verify forward waits, and only for its requests. The writer thread then matches each request to the step
whose committed length agrees with the dumped row 0's position (the overlap scheduler resolves the previous step
after the next forward ran; a step of another forward cannot match), and writes per request the accepted drafts
(-1: not known within the wait) and the committed tokens before row 0, the prefix `consistency` re-sends.
"""

import time

from ...dump_format import ACCEPTED, POSITIONS, PREFIX_COUNTS, PREFIX_IDS
from .dumps import DumpJob

WAIT_S = 10.0  # how long the writer waits for a dumped verify forward's resolution
MAX_WAITING = 4  # dumped verify forwards awaiting resolution at once (more are skipped)
# Committed length L (prompt + outputs) at the resolution of the step whose chain starts at position p0: before
# the step's tokens are appended (spec-v2 resolvers) L = p0 + 1; after (the v1 worker's verify) L = p0 + a + 2.
V1, V2 = "v1", "v2"


def unmatched_verify(waiting: list, rows: int, req_ids) -> bool:
    """A verify forward cannot be dumped: no request ids, rows that are not one chain per request, or too many
    dumped verify forwards already awaiting resolution."""
    return not req_ids or rows % len(req_ids) != 0 or len(waiting) >= MAX_WAITING


def _row0_matches(worker: str, length: int, accepted: int, p0: int) -> bool:
    return length - 1 == p0 if worker == V2 else length - accepted - 2 == p0


class VerifyDumpJob(DumpJob):
    """A verify forward's host copies, held until its requests' resolution is known (or WAIT_S passed)."""

    def __init__(self, tensors: dict, metadata: dict, req_ids, rows_per_request: int, wait_s: float = WAIT_S):
        super().__init__(tensors, metadata)
        self.req_ids = tuple(req_ids)
        self.wanted = frozenset(self.req_ids)
        self.rows_per_request = rows_per_request
        self.seen = {}  # rid -> [(worker, committed length, accepted, prompt list, output list)], scheduler thread
        self.deadline = time.monotonic() + wait_s
        self.found = None  # rid -> (accepted, prefix ids), set on the writer thread
        self.done = False

    def note(self, rid, worker, length, accepted, prompt, output):
        """From the scheduler thread: one resolution of a step of request `rid`."""
        self.seen.setdefault(rid, []).append((worker, length, accepted, prompt, output))

    def ready(self) -> bool:
        if not super().ready():
            return False
        self.found = self._match()
        return len(self.found) == len(self.wanted) or time.monotonic() >= self.deadline

    def _match(self) -> dict:
        positions = self.tensors[POSITIONS]
        found = {}
        for j, rid in enumerate(self.req_ids):
            p0 = int(positions[j * self.rows_per_request])
            for worker, length, accepted, prompt, output in list(self.seen.get(rid, ())):
                if _row0_matches(worker, length, int(accepted), p0):
                    prefix = list(prompt)[:p0]
                    prefix += list(output)[:p0 - len(prefix)]
                    if len(prefix) == p0:  # a retraction may have cleared the outputs since
                        found[rid] = (int(accepted), prefix)
                    break
        return found

    def finish(self):
        """On the writer thread, once ready: the per-request tensors and the metadata's count of known requests."""
        import torch

        found = self.found or {}
        accepted, counts, ids = [], [], []
        for rid in self.req_ids:
            a, prefix = found.get(rid, (-1, []))
            accepted.append(a)
            counts.append(len(prefix))
            ids.extend(prefix)
        self.tensors[ACCEPTED] = torch.tensor(accepted, dtype=torch.int64)
        self.tensors[PREFIX_COUNTS] = torch.tensor(counts, dtype=torch.int64)
        self.tensors[PREFIX_IDS] = torch.tensor(ids, dtype=torch.int64)
        self.metadata["accepted_known"] = len(found)
        self.seen = {}
        self.done = True


def note_step(waiting: list, reqs, counts, worker: str) -> None:
    """From a verify step's resolution, while dumped verify forwards wait: hand each its requests' figures."""
    waiting[:] = [job for job in waiting if not job.done]
    for req, accepted in zip(reqs, counts):
        rid = req.rid
        for job in waiting:
            if rid in job.wanted:
                job.note(rid, worker, len(req.origin_input_ids) + len(req.output_ids), accepted,
                         req.origin_input_ids, req.output_ids)
