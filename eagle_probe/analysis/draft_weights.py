"""Which checkpoint tensors of an EAGLE-3 draft SGLang's loader consumes, from names alone.

SGLang's llama_eagle3 loader renames legacy names (midlayer -> layers.0, aux_norm_* -> fc_norm.*), fuses
q/k/v and gate/up shards, tries the name with and without a "model." prefix, and drops anything else
without a word. d2t becomes the hot-token map; t2d is skipped on purpose.

Kimi-K2.5's MLA draft (kimi_k25_eagle3's Eagle3DeepseekV2ForCausalLM.load_weights, naming "kimi") renames
layers.0. -> midlayer., prefixes every name but lm_head.* with "model." (so a name that already has it is
dropped), fuses gate/up, and fuses q_a_proj with kv_a_proj_with_mqa only when both are in the checkpoint (a
lone half is dropped without a word); only 'd2t' / '*.d2t' is the map, 't2d' / '*.t2d' is skipped.
"""

import re
from collections.abc import Iterable, Sequence

_LEGACY = (("midlayer", "layers.0"), ("aux_norm_low", "fc_norm.0"), ("aux_norm_mid", "fc_norm.1"),
           ("aux_norm_high", "fc_norm.2"))
_FUSED = ((".q_proj", ".qkv_proj"), (".k_proj", ".qkv_proj"), (".v_proj", ".qkv_proj"),
          (".gate_proj", ".gate_up_proj"), (".up_proj", ".gate_up_proj"))
_CONSUMED_SPECIALLY = ("d2t",)
_IGNORED_ON_PURPOSE = ("t2d",)


def _candidates(name: str):
    names = {name}
    legacy = name
    for old, new in _LEGACY:
        legacy = legacy.replace(old, new)
    names.add(legacy)
    for base in list(names):
        for old, new in _FUSED:
            if old in base:
                names.add(base.replace(old, new))
    return names | {"model." + n for n in names}


_KIMI_A_PAIR = ("q_a_proj", "kv_a_proj_with_mqa")


def _kimi_consumed(name: str, names: set, params: set) -> bool:
    mapped = re.sub(r"^layers\.0\.", "midlayer.", name)
    if not mapped.startswith("lm_head."):
        mapped = "model." + mapped
    for half, other in (_KIMI_A_PAIR, _KIMI_A_PAIR[::-1]):
        if half in mapped:
            partner = name.replace(half, other)
            fused = mapped.replace(half, "fused_qkv_a_proj_with_mqa")
            return partner in names and fused in params
    return mapped in params or mapped.replace(".gate_proj", ".gate_up_proj").replace(".up_proj", ".gate_up_proj") \
        in params


def _kimi_unconsumed(names: Sequence[str], params: set) -> tuple[tuple, tuple]:
    present = set(names)
    dropped, ignored = [], []
    for name in names:
        if name == "d2t" or name.endswith(".d2t"):
            continue
        if name == "t2d" or name.endswith(".t2d"):
            ignored.append(name)
        elif not _kimi_consumed(name, present, params):
            dropped.append(name)
    return tuple(dropped), tuple(ignored)


def unconsumed_weights(checkpoint_names: Iterable[str], param_names: Sequence[str], naming: str = "llama"
                       ) -> tuple[tuple, tuple]:
    """(dropped, ignored_on_purpose) checkpoint names, by the loader `naming` ("llama" or "kimi")."""
    params = set(param_names)
    if naming == "kimi":
        return _kimi_unconsumed(list(checkpoint_names), params)
    dropped, ignored = [], []
    for name in checkpoint_names:
        if any(tag in name for tag in _CONSUMED_SPECIALLY):
            continue
        if any(tag in name for tag in _IGNORED_ON_PURPOSE):
            ignored.append(name)
        elif not _candidates(name) & params:
            dropped.append(name)
    return tuple(dropped), tuple(ignored)
