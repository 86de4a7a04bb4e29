"""The trained-layers notation (`hf:0,3,31`, `sglang:-1,2,30`) that EAGLE_PROBE_TRAINED_LAYERS, `run` and
`doctor` accept. Vocabulary: config.py validates with it, so it imports nothing of analysis/."""



def parse_trained_layers(spec: str) -> tuple[int, ...]:
    """'hf:0,3,31' or 'sglang:-1,2,30' (== 'layer:...') -> HF hidden_states indices.

    Raises ValueError naming what is wrong. The same layers in both conventions: hf = layer number + 1.
    """
    if ":" not in spec:
        raise ValueError("name the convention, e.g. 'hf:0,3,31' or 'sglang:-1,2,30'")
    convention, _, body = spec.partition(":")
    convention = convention.strip().lower()
    if convention not in ("hf", "sglang", "layer"):
        raise ValueError(f"unknown convention {convention!r}; accepted: hf, sglang (or layer)")
    out = []
    for token in (t.strip() for t in body.split(",")):
        if token.lower() in ("embedding", "emb", "embed"):
            out.append(0)
            continue
        try:
            value = int(token)
        except ValueError:
            raise ValueError(f"{token!r} is not an integer or 'embedding'") from None
        hf = value if convention == "hf" else value + 1
        if hf < 0:
            raise ValueError(f"{token!r} is below the embedding output "
                             f"({'0' if convention == 'hf' else '-1'} in this convention)")
        out.append(hf)
    if not out:
        raise ValueError("no layers given")
    return tuple(out)
