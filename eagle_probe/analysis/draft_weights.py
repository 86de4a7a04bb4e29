"""Which checkpoint tensors of an EAGLE-3 draft SGLang's loader consumes, from names alone.

SGLang's llama_eagle3 loader renames legacy names (midlayer -> layers.0, aux_norm_* -> fc_norm.*), fuses
q/k/v and gate/up shards, tries the name with and without a "model." prefix, and drops anything else
without a word. d2t becomes the hot-token map; t2d is skipped on purpose.
"""

from typing import Iterable, Sequence, Tuple

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


def unconsumed_weights(checkpoint_names: Iterable[str], param_names: Sequence[str]) -> Tuple[tuple, tuple]:
    """(dropped, ignored_on_purpose) checkpoint names."""
    params = set(param_names)
    dropped, ignored = [], []
    for name in checkpoint_names:
        if any(tag in name for tag in _CONSUMED_SPECIALLY):
            continue
        if any(tag in name for tag in _IGNORED_ON_PURPOSE):
            ignored.append(name)
        elif not _candidates(name) & params:
            dropped.append(name)
    return tuple(dropped), tuple(ignored)
