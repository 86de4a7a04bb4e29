"""Vocabulary coverage of sampled verify steps: how many of the tokens the target committed the draft could propose.

Sampling takes the first verify step once EAGLE_PROBE_COVERAGE_INTERVAL_S has passed since the last sample (no
wall-clock buckets as the fingerprints have: nothing here needs the ranks to sample the same step, and a floor
division costs the sampled step 40 ns). The hot path reads the clock once a step, compares it with next_due and, on a
sampled step, makes one call with that reading. Nothing is counted on the hot path:
- where SGLang has already brought the step's tokens to the host (every spec-v2 resolver returns them as lists of
  ints, after its own copy and wait), the sampled step's lists are queued as they are (one append) and counted on the
  flush thread against a byte table of the hot ids;
- where they are still on the device (the v1 worker's `verified_id`), the count is queued on their device: one
  clamp, one gather from a bool mask built once on that device, one sum into a preallocated buffer, copied
  non-blocking into pinned host memory and read on the flush thread once a CUDA event says the copy is done (query(),
  never synchronize()). The number of tokens is the tensor's shape, known on the host.
"""

from collections import deque
from collections.abc import Sequence
from threading import Lock

SLOTS = 64  # device counts on their way at most; a sample finding them all busy is skipped
MAX_QUEUED = 4096  # sampled steps held uncounted at most (the flush thread counts them every second): the oldest go


class VocabCoverage:
    def __init__(self, interval_s: float):
        self.interval = interval_s
        self.next_due = float("inf")  # nothing is sampled until the draft's vocabulary is known
        self.table: bytearray | None = None  # 1 per target id the draft can propose; None: every id
        self.known = False
        self.in_vocab = 0  # counted so far (on the flush thread)
        self.total = 0
        self.samples = 0  # sampled steps counted so far
        self._lists = deque(maxlen=MAX_QUEUED)  # [per-request token lists of one sampled step] not counted yet
        self._pending = deque()  # [(event or None, device, slot, tokens)] device counts on their way
        self._device = {}  # device -> (mask, device counts, host counts, free slots)
        self._counting = Lock()  # the flush thread and a periodic tick on the hot path may count at once

    def set_vocabulary(self, hot_ids: Sequence[int] | None, table: bytearray | None) -> None:
        """The draft's hot ids (None: its vocabulary is the target's); sampling starts."""
        self.table = None if hot_ids is None else table
        self._device.clear()
        self.known = True
        self.next_due = 0.0

    def sample_lists(self, now: float, token_lists) -> None:
        """A sampled verify step (the caller's clock reading `now` reached next_due): its committed tokens per live
        request, as SGLang made them (host lists of ints), queued as they are."""
        self.next_due = now + self.interval
        self._lists.append(token_lists)

    def sample_device(self, now: float, ids) -> bool:
        """A sampled verify step whose committed tokens are a 1-D tensor on their device; False when every slot is
        busy (this step is skipped)."""
        self.next_due = now + self.interval
        if self.table is None:  # every id is hot: only the number of tokens counts (a range has that length)
            self._lists.append((range(ids.shape[0]),))
            return True
        import torch

        state = self._device.get(ids.device)
        if state is None:
            state = self._device[ids.device] = self._device_state(ids.device)
        mask, counts, host, free = state
        if not free:
            return False
        slot = free.pop()
        # ids outside [0, V) land on the mask's two False ends: -1 -> 0, V and above -> V + 1
        index = torch.clamp(ids, -1, mask.shape[0] - 2).add_(1)
        torch.sum(mask[index], dim=0, dtype=torch.int64, out=counts[slot])
        cuda = ids.device.type == "cuda"
        host[slot].copy_(counts[slot], non_blocking=cuda)
        event = None
        if cuda:
            event = torch.cuda.Event()
            event.record()
        self._pending.append((event, ids.device, slot, int(ids.shape[0])))
        return True

    def _device_state(self, device):
        """(bool mask [V + 2] with False ends, device counts, host counts, free slots) for one device, built once."""
        import torch

        cuda = device.type == "cuda"
        host_mask = torch.zeros(len(self.table) + 2, dtype=torch.bool, pin_memory=cuda)
        host_mask[1:-1] = torch.frombuffer(bytearray(self.table), dtype=torch.uint8).bool()
        mask = host_mask.to(device, non_blocking=cuda)  # from pinned memory: no wait for the device
        counts = torch.zeros(SLOTS, dtype=torch.int64, device=device)
        host = torch.zeros(SLOTS, dtype=torch.int64, pin_memory=cuda)
        return mask, counts, host, list(range(SLOTS))

    def count(self) -> tuple[int, int]:
        """Count what was queued (the flush thread; also at exit); (in the vocabulary, all) so far."""
        with self._counting:
            self._count()
            return self.in_vocab, self.total

    def _count(self) -> None:
        table = self.table
        lists = self._lists
        while lists:
            self.samples += 1
            for tokens in lists.popleft():
                self.total += len(tokens)
                if table is None:
                    self.in_vocab += len(tokens)
                    continue
                try:
                    self.in_vocab += sum(map(table.__getitem__, tokens))
                except IndexError:  # an id beyond the table: not a token the draft can propose
                    self.in_vocab += sum(table[t] for t in tokens if 0 <= t < len(table))
        pending = self._pending
        while pending and (pending[0][0] is None or pending[0][0].query()):
            _, device, slot, tokens = pending.popleft()
            self.samples += 1
            _, _, host, free = self._device[device]
            self.in_vocab += int(host[slot])  # pinned host memory, already written
            self.total += tokens
            free.append(slot)
