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
STATS = ("rms", "mean", "absmax", "nonfinite")  # the columns before the signature


def projection(width: int, device, seed: int = SIGNATURE_SEED):
    """The [width, SIGNATURE_SIZE] float32 projection, generated on the CPU (the same on every machine)."""
    import torch

    generator = torch.Generator().manual_seed(seed + width)
    matrix = torch.randn(width, SIGNATURE_SIZE, generator=generator, dtype=torch.float32) / math.sqrt(width)
    return matrix.to(device)


class Fingerprinter:
    """Per (slots, width, device): the projection, a device buffer and two host buffers used in turn."""

    def __init__(self, slots: int, width: int, device):
        import torch

        self.slots, self.width, self.device = slots, width, device
        self._projection = projection(width, device)
        columns = len(STATS) + SIGNATURE_SIZE
        self._out = torch.empty(slots, columns, dtype=torch.float32, device=device)
        self._cuda = device.type == "cuda"
        pin = self._cuda
        self.host_buffers = [torch.empty(slots, columns, dtype=torch.float32, pin_memory=pin) for _ in range(2)]
        self._free = list(self.host_buffers)

    def queue(self, states):
        """states: [T, slots * width] or [T, slots, width] on the device, real tokens only. Returns a PendingRead,
        or None when both host buffers still wait to be read (this sample is then skipped)."""
        import torch

        if not self._free:
            return None
        tokens = states.shape[0]
        x = states.reshape(tokens, self.slots, self.width)
        out = self._out
        count = float(max(tokens * self.width, 1))
        channel_sum = torch.sum(x, dim=0, dtype=torch.float32)  # [slots, width]
        out[:, 0] = torch.linalg.vector_norm(x, ord=2, dim=(0, 2), dtype=torch.float32) / math.sqrt(count)
        out[:, 1] = channel_sum.sum(dim=1) / count
        out[:, 2] = torch.maximum(torch.amax(x, dim=(0, 2)).abs(), torch.amin(x, dim=(0, 2)).abs()).float()
        out[:, 3] = torch.logical_not(torch.isfinite(x)).sum(dim=(0, 2)).float()
        out[:, len(STATS):] = torch.matmul(channel_sum / float(max(tokens, 1)), self._projection)
        host = self._free.pop()
        host.copy_(out, non_blocking=self._cuda)
        event = None
        if self._cuda:
            event = torch.cuda.Event()
            event.record()
        return PendingRead(self, host, event)

    def release(self, host):
        self._free.append(host)


class PendingRead:
    """A fingerprint on its way to the host; ready() asks the event, read() returns plain floats per slot."""

    __slots__ = ("owner", "host", "event")

    def __init__(self, owner: Fingerprinter, host, event):
        self.owner, self.host, self.event = owner, host, event

    def ready(self) -> bool:
        return self.event is None or self.event.query()

    def read(self):
        """[(rms, mean, absmax, nonfinite, signature tuple)] per slot; the host buffer is free again after."""
        rows = self.host.tolist()  # pinned host memory, already written: no device access
        self.owner.release(self.host)
        return [(row[0], row[1], row[2], int(row[3]), tuple(row[len(STATS):])) for row in rows]
