"""Fingerprints of aux hidden states, queued on the device and read back without a synchronisation.

For K slots of width H over T real tokens, one fingerprint per slot: rms, mean, absolute max, the count of
non-finite values, and a signature (the per-channel mean projected by a seeded Gaussian matrix to SIGNATURE_SIZE
numbers; two fingerprints of the same layer compare with cosine near 1). The reductions run on the tensor's own
device and stream into a preallocated buffer, which is copied with non_blocking=True into pinned host memory and
read once a CUDA event recorded after the copy reports done (query(), never synchronize()): SGLang's overlap
scheduler reads its results the same way. On the CPU the values are there at once. Nothing here calls .item(),
.cpu() or .tolist() on a device tensor; only the host buffer is read.
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
    """Per (slots, width, device): the projection, one flat device buffer that every reduction writes into (out=, no
    temporaries to gather, one copy to the host) and two pinned host buffers used in turn. Few device ops: each costs
    a kernel launch on a GPU and microseconds on a CPU, so the division by the token count is done on the host, in
    read(). Each slot's numbers come from the same operations in the same order as every other slot's, so two slots
    holding the same states give bit-identical fingerprints."""

    def __init__(self, slots: int, width: int, device):
        import torch

        self.slots, self.width, self.device = slots, width, device
        self._torch = torch
        self._projection = projection(width, device)
        self._cuda = device.type == "cuda"
        self._flat = torch.empty(slots * (4 + SIGNATURE_SIZE), dtype=torch.float32, device=device)
        # Views of the flat buffer, made once: per slot the 2-norm, the absolute max, the finite count and the sum of
        # the per-channel sums, then per slot the signature (one fixed output each: a matmul into alternating
        # outputs costs milliseconds on the CPU).
        self._views = tuple(self._flat[i * slots:(i + 1) * slots] for i in range(4)) + (
            self._flat[4 * slots:].view(slots, SIGNATURE_SIZE),)
        self.host_buffers = [torch.empty(self._flat.shape, dtype=torch.float32, pin_memory=self._cuda)
                             for _ in range(2)]
        self._channel_sum = torch.empty(slots, width, dtype=torch.float32, device=device)
        self._largest = {}  # dtype -> its largest finite value, a 0-dim tensor on the device (made once)
        self._free = list(self.host_buffers)

    def queue(self, states):
        """states: [T, slots * width] or [T, slots, width] on the device, real tokens only. Returns a PendingRead,
        or None when both host buffers still wait to be read (this sample is then skipped)."""
        if not self._free:
            return None
        torch = self._torch
        norm, absmax, finite, sum_of_sums, signature = self._views
        tokens = states.shape[0]
        x = states.reshape(tokens, self.slots, self.width)
        channel_sum = self._channel_sum
        torch.sum(x, dim=0, dtype=torch.float32, out=channel_sum)
        torch.linalg.vector_norm(x, 2, dim=(0, 2), dtype=torch.float32, out=norm)
        magnitude = torch.abs(x)
        if x.dtype == torch.float32:
            torch.amax(magnitude, dim=(0, 2), out=absmax)
        else:
            absmax.copy_(torch.amax(magnitude, dim=(0, 2)))
        largest = self._largest.get(x.dtype)
        if largest is None:
            largest = self._largest[x.dtype] = torch.tensor(torch.finfo(x.dtype).max, dtype=x.dtype,
                                                            device=x.device)
        # NaN compares false and inf exceeds the dtype's largest value: both fall outside this count (1.0 per finite
        # value, written over the magnitudes, which are read by now).
        torch.sum(magnitude.le_(largest), dim=(0, 2), dtype=torch.float32, out=finite)
        torch.sum(channel_sum, dim=1, out=sum_of_sums)
        torch.matmul(channel_sum, self._projection, out=signature)
        host = self._free.pop()
        host.copy_(self._flat, non_blocking=self._cuda)
        event = None
        if self._cuda:
            event = torch.cuda.Event()
            event.record()
        return PendingRead(self, host, event, tokens)

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
        values = self.host.tolist()  # pinned host memory, already written: no device access
        self.owner.release(self.host)
        slots, width = self.owner.slots, self.owner.width
        tokens = max(self.tokens, 1)
        count = self.tokens * width
        scale = 1.0 / math.sqrt(max(count, 1))
        per_token = 1.0 / tokens  # the signature is the projection of the per-channel means: sums / tokens
        signatures = values[4 * slots:]
        return [(values[slot] * scale, values[3 * slots + slot] / tokens / width, values[slots + slot],
                 count - int(values[2 * slots + slot]),
                 tuple([v * per_token for v in signatures[slot * SIGNATURE_SIZE:(slot + 1) * SIGNATURE_SIZE]]))
                for slot in range(slots)]
