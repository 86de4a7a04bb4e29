"""What the offline commands do with a block-diffusion draft (DFlash, DSpark): `replay` runs a DFlash draft's block
forward (commands/replay/block_draft.py) instead of EAGLE-3's one-token forward, `parity` compares its served states
like any other; both give the fix as `dflash_config.target_layer_ids`. One place for the detection and the fix."""

import os

from ..analysis import dflash_layers
from .json_files import MAX_CONFIG_BYTES, read_json_object

FIX_KEY = "dflash_config.target_layer_ids"


class _Unread(Exception):
    pass


def block_draft(path: str) -> tuple[str, dict] | None:
    """(config file, config) when `path` (a directory or its config.json) holds a DFlash/DSpark draft's config;
    None otherwise, also when it cannot be read (the command's own reader then names the problem)."""
    file = os.path.join(path, "config.json") if os.path.isdir(path) else path
    try:
        data = read_json_object(file, "draft config", _Unread, MAX_CONFIG_BYTES)
    except (_Unread, OSError):
        return None
    return (file, data) if dflash_layers.is_block_draft_config(data) else None


def ids_to_set(trained: list[int], num_layers: int, release_text: str | None) -> dict:
    """parity's fix for a block draft: the target_layer_ids that capture the HF indices `trained` (id i captures HF
    hidden_states[i + 1]; the embedding output and the final layer's output are out of reach)."""
    bad = dflash_layers.unreachable(trained, num_layers)
    ids = None if bad else list(dflash_layers.ids_for_positions(trained))
    why = (f"no target_layer_ids captures HF hidden_states {list(bad)} (id i captures HF hidden_states[i + 1], "
           f"i from 0 to {num_layers - 2})") if bad else None
    return {"trained_hf": list(trained), "sglang_version": release_text, "ids": ids, "impossible": why,
            "family": "block-diffusion draft: the target captures HF hidden_states[id + 1]", "key": FIX_KEY}
