"""Is the EAGLE-3 draft's own embedding the target's? SGLang replaces it with the target's in every case; that is
harmless when the draft was trained with the target's frozen embedding (the usual case) and ruinous otherwise.

At draft load time, the checkpoint's embed_tokens tensor (on the host, as the loader yields it) is compared with
the target checkpoint's, read alone from its safetensors files on local disk: a fixed sample of rows (never the
whole table), relative difference sum((x - y)^2) / (sum(x^2) + sum(y^2)). No device tensor is touched.
"""

import json
import os
import sys

from ..context import sglang_context

EMBED_NAMES = ("model.embed_tokens.weight", "embed_tokens.weight")
SAMPLED_ROWS = 256


def target_model_path() -> str | None:
    """The served target's checkpoint directory (ServerArgs.model_path; the draft's is another field), from SGLang's
    published runtime context, or its global server args before 0.5.14 (None if neither is published)."""
    args = sglang_context.server_args()
    if args is None:
        module = sys.modules.get("sglang.srt.server_args")
        getter = getattr(module, "get_global_server_args", None)
        try:
            args = getter() if getter is not None else None
        except Exception:  # 0.5.23 keeps the name only to raise a migration error
            args = None
    path = getattr(args, "model_path", None)
    return path if isinstance(path, str) else None


def _embedding_file(directory: str) -> tuple[str | None, str | None]:
    """(file, tensor name) holding the target's embedding in a local safetensors checkpoint."""
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as handle:
            weight_map = json.load(handle).get("weight_map", {})
        for name in EMBED_NAMES:
            if name in weight_map:
                return os.path.join(directory, weight_map[name]), name
        return None, None
    single = os.path.join(directory, "model.safetensors")
    if os.path.isfile(single):
        from safetensors import safe_open

        with safe_open(single, "pt") as handle:
            names = set(handle.keys())
        for name in EMBED_NAMES:
            if name in names:
                return single, name
    return None, None


def compare_with_target(draft_embedding) -> tuple[float | None, str]:
    """(relative difference over sampled rows, or None when no comparison was possible, and why)."""
    if draft_embedding.device.type != "cpu":
        return None, "the loader gave the draft's embedding on the device; not compared (no device read at load)"
    directory = target_model_path()
    if directory is None or not os.path.isdir(directory):
        return None, f"the target checkpoint is not a local directory ({directory!r}), so the draft's embedding " \
                     f"cannot be compared with it here; `eagle-probe replay --draft-embedding own` can"
    path, name = _embedding_file(directory)
    if path is None:
        return None, f"no embed_tokens weight found in the safetensors files of {directory}"
    import torch
    from safetensors import safe_open

    with safe_open(path, "pt") as handle:
        rows_total = handle.get_slice(name).get_shape()[0]
        if tuple(draft_embedding.shape) != (rows_total, handle.get_slice(name).get_shape()[1]):
            return float("inf"), (f"shapes differ: draft {tuple(draft_embedding.shape)}, target "
                                  f"{tuple(handle.get_slice(name).get_shape())}")
        step = max(1, rows_total // SAMPLED_ROWS)
        rows = list(range(0, rows_total, step))[:SAMPLED_ROWS]
        target_rows = torch.cat([handle.get_slice(name)[r:r + 1] for r in rows]).float()
    draft_rows = draft_embedding.detach()[rows].float()
    total = float((draft_rows ** 2).sum() + (target_rows ** 2).sum())
    diff = float(((draft_rows - target_rows) ** 2).sum())
    return (diff / total if total else 0.0), f"{len(rows)} sampled rows of {path}"
