"""Fingerprints of aux hidden states, queued on the device and read back without a synchronisation.

For K slots of width H over T real tokens, one fingerprint per slot: rms, mean, absolute max, the count of
non-finite values, and a signature (the per-channel mean projected by a seeded Gaussian matrix to SIGNATURE_SIZE
numbers; two fingerprints of the same layer compare with cosine near 1). The device reduces over the tokens only,
per channel (sum, sum of squares, absolute max, finite count): a few kernels whatever K, into one preallocated
buffer copied with non_blocking=True into pinned host memory. The per-slot figures and the signature are made from
that host copy in read(), on the flush thread, once a CUDA event recorded after the copy reports done (query(),
never synchronize()): SGLang's overlap scheduler reads its results the same way. On the CPU the values are there at
once. Nothing here calls .item(), .cpu() or .tolist() on a device tensor; only the host buffer is read.
"""

import math

SIGNATURE_SIZE = 32
SIGNATURE_SEED = 20261201  # fixed, so signatures compare across ranks, processes and the offline commands
HOST_BUFFERS = 8  # samples waiting for the flush thread at most (then skipped): 8 sampling intervals per flush


def projection(width: int, device, seed: int = SIGNATURE_SEED):
    """The [width, SIGNATURE_SIZE] float32 projection, generated on the CPU (the same on every machine)."""
    import torch

    generator = torch.Generator().manual_seed(seed + width)
    matrix = torch.randn(width, SIGNATURE_SIZE, generator=generator, dtype=torch.float32) / math.sqrt(width)
    return matrix.to(device)


class Fingerprinter:
    """Per (slots, width, device): one flat device buffer of four per-channel rows (sum, sum of squares, absolute
    max, finite count) that every reduction writes into (out=, no temporaries to gather, one copy to the host), and
    pinned host buffers used in turn. Few device ops: each costs a kernel launch on a GPU and microseconds on a CPU,
    so what needs the slots (their totals, the 2-norms, the projection) is done on the host. Each slot's numbers come
    from the same operations in the same order as every other slot's, so two slots holding the same states give
    bit-identical fingerprints (for widths that are a multiple of 8, as every served model's: a CPU's vector loop
    sums a column that starts off that grid in another order)."""

    ROWS = 4  # sum, sum of squares, absolute max, finite count: per channel

    def __init__(self, slots: int, width: int, device):
        import torch

        self.slots, self.width, self.device = slots, width, device
        self._torch = torch
        self._cuda = device.type == "cuda"
        channels = slots * width
        self._flat = torch.empty(self.ROWS * channels, dtype=torch.float32, device=device)
        self._rows = tuple(self._flat[i * channels:(i + 1) * channels] for i in range(self.ROWS))
        self.host_buffers = [torch.empty(self._flat.shape, dtype=torch.float32, pin_memory=self._cuda)
                             for _ in range(HOST_BUFFERS)]
        self._projection = None  # float64 [width, SIGNATURE_SIZE] in host memory, made on the first read (flush thread)
        self._largest = {}  # dtype -> its largest finite value, a 0-dim tensor on the device (made once)
        self._free = list(self.host_buffers)

    def queue(self, states):
        """states: [T, slots * width] or [T, slots, width] on the device, real tokens only. Returns a PendingRead,
        or None when every host buffer still waits to be read (this sample is then skipped)."""
        if not self._free:
            return None
        torch = self._torch
        total, squares, absmax, finite = self._rows
        tokens = states.shape[0]
        x = states if states.dim() == 2 else states.reshape(tokens, -1)
        largest = self._largest.get(x.dtype)
        if largest is None:
            largest = self._largest[x.dtype] = torch.tensor(torch.finfo(x.dtype).max, dtype=torch.float32,
                                                            device=x.device)
        if x.dtype != torch.float32:
            x = x.float()  # exact for bf16 and fp16: every figure accumulates in float32
        # Reductions over dim 0 of the 2-D states only: per channel they are the cheap ones on every device (a 2-norm
        # per slot over (tokens, channels) took three times a sum on the CPU); the slots' norms are summed on the host.
        torch.sum(x, 0, out=total)
        torch.sum(torch.mul(x, x), 0, out=squares)
        magnitude = torch.abs(x)
        torch.amax(magnitude, 0, out=absmax)
        # NaN compares false and inf exceeds the dtype's largest value: both fall outside this count (1.0 per finite
        # value, written over the magnitudes, which are read by now).
        torch.sum(magnitude.le_(largest), 0, dtype=torch.float32, out=finite)
        host = self._free.pop()
        host.copy_(self._flat, non_blocking=self._cuda)
        event = None
        if self._cuda:
            event = torch.cuda.Event()
            event.record()
        return PendingRead(self, host, event, tokens)

    def release(self, host):
        self._free.append(host)

    def host_projection(self):
        """The projection as a float64 numpy array (a host tensor of the probe's own, never on the device)."""
        if self._projection is None:
            import torch

            self._projection = projection(self.width, torch.device("cpu")).double()
        return self._projection.numpy()

    def host_tensors(self):
        """The only tensors the probe reads values from: its host buffers and its host projection."""
        return [*self.host_buffers, *([] if self._projection is None else [self._projection])]


class PendingRead:
    """A fingerprint on its way to the host; ready() asks the event, read() returns plain floats per slot."""

    __slots__ = ("owner", "host", "event", "tokens")

    def __init__(self, owner: Fingerprinter, host, event, tokens: int):
        self.owner, self.host, self.event, self.tokens = owner, host, event, tokens

    def ready(self) -> bool:
        return self.event is None or self.event.query()

    def read(self):
        """[(rms, mean, absmax, nonfinite, signature tuple)] per slot; the host buffer is free again after."""
        import numpy

        owner = self.owner
        slots, width = owner.slots, owner.width
        # pinned host memory, already written: no device access; float64 copies, then the buffer is free again
        rows = self.host.numpy().astype(numpy.float64).reshape(owner.ROWS, slots, width)
        owner.release(self.host)
        tokens = max(self.tokens, 1)
        count = self.tokens * width
        per_value = 1.0 / max(count, 1)
        matrix = owner.host_projection()
        out = []
        for slot in range(slots):
            total, squares, absmax, finite = rows[0, slot], rows[1, slot], rows[2, slot], rows[3, slot]
            signature = numpy.dot(total / tokens, matrix)  # the projection of the per-channel means
            out.append((math.sqrt(float(squares.sum()) * per_value), float(total.sum()) * per_value,
                        float(absmax.max()), count - int(finite.sum()), tuple(signature.tolist())))
        return out
