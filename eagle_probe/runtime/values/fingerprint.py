"""Fingerprints of aux hidden states, queued on the device and read back without a synchronisation.

For K slots of width H over T real tokens, one fingerprint per slot: rms, mean, absolute max, the count of
non-finite values, and a signature (the per-channel mean projected by a seeded Gaussian matrix to SIGNATURE_SIZE
numbers; two fingerprints of the same layer compare with cosine near 1). The reductions over the tokens (per-channel
sums, 2-norm, absolute max, finite count: five device operations) run on the tensor's own device and stream into a
preallocated buffer, which is copied with non_blocking=True into pinned host memory and
read once a CUDA event recorded after the copy reports done (query(), never synchronize()): SGLang's overlap
scheduler reads its results the same way. On the CPU the values are there at once. Nothing here calls .item(),
.cpu() or .tolist() on a device tensor; only the host buffer is read. The total of the sums and the signature are
computed from the host copy when it is read (the flush thread), not on the forward.
"""

import math

SIGNATURE_SIZE = 32
SIGNATURE_SEED = 20261201  # fixed, so signatures compare across ranks, processes and the offline commands


def projection(width: int, device, seed: int = SIGNATURE_SEED):
    """The [width, SIGNATURE_SIZE] float32 projection, generated on the CPU (the same on every machine)."""
    import torch

    generator = torch.Generator().manual_seed(seed + width)
    matrix = torch.randn(width, SIGNATURE_SIZE, generator=generator, dtype=torch.float32) / math.sqrt(width)
    return matrix.to(device)


class Fingerprinter:
    """Per (slots, width, device): one flat device buffer that every reduction writes into (out=, no temporaries to
    gather, one copy to the host) and two pinned host buffers used in turn. Few device ops: each costs a kernel launch
    on a GPU and microseconds on a CPU, so only the reductions over the tokens run on the device (per-channel sums,
    2-norm, absolute max, finite count); what follows from the per-channel sums (their total, the signature) is done
    on the host, in read(), off the forward. Each slot's numbers come from the same operations in the same order as
    every other slot's, so two slots holding the same states give bit-identical fingerprints."""

    def __init__(self, slots: int, width: int, device):
        import torch

        self.slots, self.width, self.device = slots, width, device
        self._torch = torch
        self._cuda = device.type == "cuda"
        self._flat = torch.empty(slots * (3 + width), dtype=torch.float32, device=device)
        # Views of the flat buffer, made once: per slot the 2-norm, the absolute max and the finite count, then the
        # per-channel sums [slots, width].
        self._views = tuple(self._flat[i * slots:(i + 1) * slots] for i in range(3)) + (
            self._flat[3 * slots:].view(slots, width),)
        # Host buffers: the device buffer's copy, then (written in read(), on the host) one slot's sums as a row and
        # per slot the total of its sums and its signature. A buffer belongs to one pending read at a time.
        self.copied = self._flat.numel()
        size = self.copied + width + slots * (1 + SIGNATURE_SIZE)
        self.host_buffers = [torch.empty(size, dtype=torch.float32, pin_memory=self._cuda) for _ in range(2)]
        self.projection = projection(width, torch.device("cpu"))  # used on the host copy only
        self._free = list(self.host_buffers)

    def queue(self, states):
        """states: [T, slots * width] or [T, slots, width] on the device, real tokens only. Returns a PendingRead,
        or None when both host buffers still wait to be read (this sample is then skipped)."""
        if not self._free:
            return None
        torch = self._torch
        norm, absmax, finite, channel_sum = self._views
        tokens = states.shape[0]
        x = states.reshape(tokens, self.slots, self.width)
        torch.sum(x, dim=0, dtype=torch.float32, out=channel_sum)
        torch.linalg.vector_norm(x, 2, dim=(0, 2), dtype=torch.float32, out=norm)
        # the largest |x|: NaN if any value is NaN, inf if any is infinite (as amax of the magnitudes)
        torch.linalg.vector_norm(x, math.inf, dim=(0, 2), dtype=torch.float32, out=absmax)
        torch.sum(torch.isfinite(x), dim=(0, 2), dtype=torch.float32, out=finite)
        host = self._free.pop()
        host[:self.copied].copy_(self._flat, non_blocking=self._cuda)
        event = None
        if self._cuda:
            event = torch.cuda.Event()
            event.record()
        return PendingRead(self, host, event, tokens)

    def summarise(self, host):
        """On the host copy: per slot the total of its per-channel sums and their projection to SIGNATURE_SIZE
        numbers, written into the buffer's tail. Every slot is copied into the same row of the buffer and goes
        through the same operations, so identical sums give bit-identical results (a product over several rows
        may take another path per row)."""
        torch, slots, width, start = self._torch, self.slots, self.width, self.copied
        sums = host[3 * slots:start].view(slots, width)
        row = host[start:start + width].view(1, width)
        totals = host[start + width:start + width + slots].view(slots, 1)
        signatures = host[start + width + slots:].view(slots, SIGNATURE_SIZE)
        for slot in range(slots):
            row.copy_(sums[slot])
            torch.sum(row, dim=1, out=totals[slot])
            torch.matmul(row, self.projection, out=signatures[slot:slot + 1])

    def release(self, host):
        self._free.append(host)


class PendingRead:
    """A fingerprint on its way to the host; ready() asks the event, read() returns plain floats per slot."""

    __slots__ = ("owner", "host", "event", "tokens")

    def __init__(self, owner: Fingerprinter, host, event, tokens: int):
        self.owner, self.host, self.event, self.tokens = owner, host, event, tokens

    def ready(self) -> bool:
        return self.event is None or self.event.query()

    def read(self):
        """[(rms, mean, absmax, nonfinite, signature tuple)] per slot; the host buffer is free again after."""
        owner = self.owner
        owner.summarise(self.host)  # pinned host memory, already written: no device access
        values = self.host.tolist()
        owner.release(self.host)
        slots, width = owner.slots, owner.width
        totals = values[owner.copied + width:]
        signatures = totals[slots:]
        tokens = max(self.tokens, 1)
        count = self.tokens * width
        scale = 1.0 / math.sqrt(max(count, 1))
        per_token = 1.0 / tokens  # the signature is the projection of the per-channel means: sums / tokens
        return [(values[slot] * scale, totals[slot] / tokens / width, values[slots + slot],
                 count - int(values[2 * slots + slot]),
                 tuple([v * per_token for v in signatures[slot * SIGNATURE_SIZE:(slot + 1) * SIGNATURE_SIZE]]))
                for slot in range(slots)]
