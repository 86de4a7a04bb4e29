"""The offline reference (`--target DIR`): the target checkpoint's own prefill in transformers, on this machine, where
the model fits its memory. The states SpecForge's HF backend captures as training data come from the same forward;
no server is needed, so it also checks dumps of a server that is gone.

HuggingFace's hidden_states[i] is the input of decoder layer i (0: the embedding output), the same index the dumps
name each aux slot by (`hf_indices`), so a slot is compared with the same layer's states whatever the release's
capture-id rule."""

import os
from collections.abc import Sequence

from ..json_files import MAX_CONFIG_BYTES, read_json_object
from ..target_family import architectures
from .compare import Reference

FIT_SHARE = 0.8  # of the memory available now: weights beyond it leave too little for activations and the dumps
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")


class TargetError(ValueError):
    """A --target that cannot serve as the reference; the message names the directory and what is wrong."""


def weight_bytes(directory: str) -> int:
    """Bytes of the checkpoint's weight files (what loading it takes, at the stored dtype)."""
    try:
        names = os.listdir(directory)
    except OSError as exc:
        raise TargetError(f"--target {directory}: cannot be listed ({exc.strerror or exc})") from None
    sizes = [os.path.getsize(os.path.join(directory, n)) for n in names if n.endswith(WEIGHT_SUFFIXES)]
    if not sizes:
        raise TargetError(f"--target {directory}: no weight files (*{', *'.join(WEIGHT_SUFFIXES)}) in it")
    return sum(sizes)


def available_bytes() -> int | None:
    """MemAvailable of this machine (Linux); None where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_fits(directory: str, available: int | None = None) -> int:
    """The weights' size in bytes; TargetError when they do not fit FIT_SHARE of the memory available."""
    needed = weight_bytes(directory)
    available = available_bytes() if available is None else available
    if available is not None and needed > FIT_SHARE * available:
        raise TargetError(f"--target {directory}: its weights take {needed / 2**30:.1f} GiB, more than "
                          f"{FIT_SHARE:.0%} of the {available / 2**30:.1f} GiB this machine has available: use "
                          f"--server (the server that served the dumps as its own reference, at any size)")
    return needed


def _architecture(directory: str) -> str:
    """The class config.json names (for messages), read by the commands' one JSON reader."""
    path = os.path.join(directory, "config.json")
    if not os.path.lexists(path):
        raise TargetError(f"--target {directory}: no config.json (a HuggingFace checkpoint directory is needed)")
    names = architectures(read_json_object(path, "--target config", TargetError, MAX_CONFIG_BYTES))
    return names[0] if names else "unknown architecture"


class OfflineTarget:
    """The target loaded once in the served dtype; `reference(tokens, hf_indices)` is its prefill of tokens."""

    def __init__(self, directory: str, dtype: str):
        self.directory = directory
        if not os.path.isdir(directory):
            raise TargetError(f"--target {directory}: not a directory")
        architecture = _architecture(directory)
        check_fits(directory)
        try:
            import torch
            import transformers
        except ImportError as exc:
            raise TargetError(f"--target needs transformers and torch installed ({exc}); or use --server") from None
        self._torch = torch
        torch_dtype = getattr(torch, dtype, None) if dtype else None
        if not isinstance(torch_dtype, torch.dtype):
            raise TargetError(f"--target {directory}: the dumps name no usable dtype ({dtype!r}) to load it in")
        major = int(transformers.__version__.split(".")[0])
        dtype_arg = {"dtype": torch_dtype} if major >= 5 else {"torch_dtype": torch_dtype}
        try:
            model = transformers.AutoModelForCausalLM.from_pretrained(directory, local_files_only=True, **dtype_arg)
        except Exception as exc:  # transformers raises many kinds for a checkpoint it cannot load
            raise TargetError(f"--target {directory}: transformers {transformers.__version__} cannot load it "
                              f"({architecture}): {type(exc).__name__}: {str(exc)[:300]}; or use --server") from None
        self.model = model.eval()
        self.num_layers = int(getattr(model.config, "num_hidden_layers", 0) or 0)

    def reference(self, tokens: Sequence[int], hf_indices: Sequence[int], hidden_size: int) -> Reference:
        torch = self._torch
        width = int(getattr(self.model.config, "hidden_size", 0) or 0)
        if width != hidden_size or any(not 0 <= i <= self.num_layers for i in hf_indices):
            raise TargetError(f"--target {self.directory}: {self.num_layers} layers of hidden size {width}, but the "
                              f"dumps hold hidden_states {list(hf_indices)} of size {hidden_size}: not the model "
                              f"that served them")
        with torch.no_grad():
            out = self.model(input_ids=torch.tensor([list(tokens)]), output_hidden_states=True, use_cache=False)
        states = out.hidden_states
        aux = torch.cat([states[i][0] for i in hf_indices], dim=-1)
        return Reference(f"{self.directory} (transformers prefill of {len(tokens)} tokens)",
                         list(range(len(tokens))), aux, tuple(hf_indices))
