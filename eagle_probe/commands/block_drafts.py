"""What the offline commands do with a block-diffusion draft (DFlash, DSpark): `replay` refuses it (its torch draft is
EAGLE-3's one-token forward), `parity` compares its served states like any other and gives the fix as
`dflash_config.target_layer_ids`. One place for the detection and the words."""

import os

from ..analysis import dflash_layers
from .json_files import MAX_CONFIG_BYTES, read_json_object

FIX_KEY = "dflash_config.target_layer_ids"
INSTEAD = (
    "`eagle-probe doctor --target T --draft D --trained-layers hf:...` names the target_layer_ids SGLang uses (given, "
    "or its silent default), the HF hidden_states they capture and layer_mismatch with the fix; the running probe's "
    "lines eagle_probe.block_draft.capture (ids, source, HF indices), eagle_probe.block_draft.loaded and "
    "eagle_probe.block_draft.fed (the widths its fc takes and is fed) show what the server does; set "
    "EAGLE_PROBE_TRAINED_LAYERS=hf:... to have the probe name a mismatch; `eagle-probe parity --draft D` compares the "
    "served states with training data for any draft")


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


def describe(data: dict) -> str:
    archs = data.get("architectures")
    keys = [k for k in ("dflash_config", "dspark_config", "dspark_target_layer_ids") if k in data]
    return "; ".join([f"architectures {archs}"] * bool(archs) + [f"key '{k}'" for k in keys])


def replay_refusal(path: str) -> str | None:
    """replay's message for a block draft (None: not one)."""
    found = block_draft(path)
    if found is None:
        return None
    file, data = found
    return (f"--draft {file} is a block-diffusion draft (DFlash/DSpark: {describe(data)}), and replay (with --search "
            f"and --wiring alike) cannot judge it: replay runs an EAGLE-3 draft's one-token forward (fc over one "
            f"position's aux states plus the next token's embedding), while a block draft fills a block of mask "
            f"tokens attending to a KV context of the target's projected states over the whole prefix, which replay "
            f"does not implement; its agreement would mean nothing. Instead: {INSTEAD}")


def ids_to_set(trained: list[int], num_layers: int, release_text: str | None) -> dict:
    """parity's fix for a block draft: the target_layer_ids that capture the HF indices `trained` (id i captures HF
    hidden_states[i + 1]; the embedding output and the final layer's output are out of reach)."""
    bad = dflash_layers.unreachable(trained, num_layers)
    ids = None if bad else list(dflash_layers.ids_for_positions(trained))
    why = (f"no target_layer_ids captures HF hidden_states {list(bad)} (id i captures HF hidden_states[i + 1], "
           f"i from 0 to {num_layers - 2})") if bad else None
    return {"trained_hf": list(trained), "sglang_version": release_text, "ids": ids, "impossible": why,
            "family": "block-diffusion draft: the target captures HF hidden_states[id + 1]", "key": FIX_KEY}
