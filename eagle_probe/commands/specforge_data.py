"""Reading SpecForge's offline EAGLE-3 training data: one torch.save'd dict per sample, `.ckpt` or `.ckpt.gz`
(see shared notes: input_ids [seq], loss_mask [seq], hidden_state [1, seq, H], aux_hidden_state [1, seq, K*H]).
Loaded with weights_only=True (no code runs); a file that is not such a dict is named and skipped."""

import gzip
import io
import os
from dataclasses import dataclass, field

KEYS = ("input_ids", "loss_mask", "hidden_state", "aux_hidden_state")
SUFFIXES = (".ckpt", ".ckpt.gz")


class DataError(ValueError):
    """A SpecForge data directory that cannot be used at all."""


@dataclass
class Sample:
    path: str
    input_ids: object  # torch.Tensor [seq]
    loss_mask: object  # [seq]
    hidden_state: object  # [seq, H] (the leading 1 dropped)
    aux_hidden_state: object  # [seq, K*H]

    @property
    def hidden_size(self) -> int:
        return int(self.hidden_state.shape[-1])

    @property
    def slots(self) -> int:
        return int(self.aux_hidden_state.shape[-1]) // self.hidden_size


@dataclass
class Samples:
    samples: list[Sample] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


def _load(path: str):
    import torch

    with open(path, "rb") as handle:
        raw = handle.read()
    if path.endswith(".gz"):
        raw = gzip.decompress(raw)
    return torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)


def read_sample(path: str) -> Sample:
    try:
        data = _load(path)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise DataError(f"{path}: cannot be read ({type(exc).__name__}: {exc})") from None
    except Exception as exc:  # torch's unpickler refuses anything but tensors and plain containers
        raise DataError(f"{path}: not a torch.save'd SpecForge sample ({type(exc).__name__}: {str(exc)[:200]})") \
            from None
    if not isinstance(data, dict):
        raise DataError(f"{path}: holds a {type(data).__name__}, not SpecForge's dict with {', '.join(KEYS)}")
    missing = [k for k in KEYS if k not in data]
    if missing:
        raise DataError(f"{path}: lacks the keys {', '.join(missing)} (has {', '.join(sorted(map(str, data)))})")
    ids, mask = data["input_ids"].reshape(-1), data["loss_mask"].reshape(-1)
    hidden, aux = data["hidden_state"], data["aux_hidden_state"]
    hidden = hidden[0] if hidden.dim() == 3 else hidden
    aux = aux[0] if aux.dim() == 3 else aux
    seq = int(ids.shape[0])
    if hidden.shape[0] != seq or aux.shape[0] != seq or mask.shape[0] != seq:
        raise DataError(f"{path}: lengths disagree (input_ids {seq}, loss_mask {mask.shape[0]}, hidden_state "
                        f"{hidden.shape[0]}, aux_hidden_state {aux.shape[0]})")
    if aux.shape[-1] % hidden.shape[-1]:
        raise DataError(f"{path}: aux_hidden_state width {aux.shape[-1]} is not a multiple of hidden_state width "
                        f"{hidden.shape[-1]}")
    return Sample(path, ids, mask, hidden, aux)


def find_files(directory: str) -> list[str]:
    out = []
    for root, _, names in os.walk(directory):
        out += [os.path.join(root, n) for n in names if n.endswith(SUFFIXES)]
    return sorted(out)


def read_samples(directory: str, limit: int | None = None) -> Samples:
    if not os.path.isdir(directory):
        raise DataError(f"{directory}: not a directory")
    files = find_files(directory)
    if not files:
        raise DataError(f"{directory}: no SpecForge sample files (*.ckpt, *.ckpt.gz) under it")
    found = Samples()
    for path in files[:limit]:
        try:
            found.samples.append(read_sample(path))
        except DataError as exc:
            found.skipped.append((path, str(exc)))
    if not found.samples:
        raise DataError(f"{directory}: no readable SpecForge samples ({found.skipped[0][1]})")
    widths = {(s.hidden_size, s.slots) for s in found.samples}
    if len(widths) > 1:
        raise DataError(f"{directory}: samples disagree on (hidden size, slots): {sorted(widths)}")
    return found
