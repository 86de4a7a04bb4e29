"""All-layer dumps: for one target forward, every decoder layer is handed a collector that keeps a copy of what the
layer captures (the residual stream entering it), through the keyword SGLang hands its own capture collector in;
SGLang's own collector gets the same calls."""


class LayerTee:
    """Stands where SGLang passes a decoder layer its capture collector: keeps a copy of what the layer captures
    (the residual stream entering it) and hands the same call on to SGLang's own collector, if any."""

    def __init__(self, own, index: int, kept: dict, keep: bool):
        self._own, self._index, self._kept, self._keep = own, index, kept, keep

    def _take(self, value):
        if self._keep:
            self._kept[self._index] = value.detach().clone()

    def capture(self, value, owned=False):
        self._take(value)
        if self._own is not None:
            self._own.capture(value, owned=owned)

    def append(self, value):
        self._take(value)
        if self._own is not None:
            self._own.append(value)

    def extend(self, values):
        for value in values:
            self.append(value)

    def __len__(self):
        return len(self._own) if self._own is not None else 0


def tap_layers(model, start: int, end: int, kwarg: str, keep: bool):
    """Shadow each decoder layer's forward for one model forward. Returns (kept {layer index: tensor}, untap)."""
    kept, tapped = {}, []
    for index in range(start, end):
        layer = model.layers[index]
        original = layer.forward

        def forward(*args, _original=original, _index=index, **kwargs):
            kwargs[kwarg] = LayerTee(kwargs.get(kwarg), _index, kept, keep)
            return _original(*args, **kwargs)

        layer.forward = forward
        tapped.append((layer, forward))

    def untap():
        for layer, forward in tapped:
            if vars(layer).get("forward") is forward:
                del layer.forward

    return kept, untap
