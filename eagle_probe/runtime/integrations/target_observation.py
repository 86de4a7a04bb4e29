"""A target forward as an observation (TargetForward): what the wrapper builds for a forward it had not just seen,
off the repeated-forward path (integrations/target_forward.py)."""

from ...observations import TargetForward

_dtype_names = {}


def _dtype_name(dtype):
    name = _dtype_names.get(dtype)
    if name is None:
        name = _dtype_names[dtype] = str(dtype).replace("torch.", "")
    return name


def result_key(result):
    """The result's shape facts, cheaply: (aux container, aux width(s), hidden width, dtype)."""
    if type(result) is tuple and len(result) == 2:
        hidden, aux = result
        if isinstance(aux, (list, tuple)):  # AuxHiddenStateList (Llama, Qwen, ...) is a list
            return "list", tuple(t.shape[-1] for t in aux), hidden.shape[-1], hidden.dtype
        return "packed", aux.shape[-1], hidden.shape[-1], hidden.dtype
    if hasattr(result, "shape"):
        return "none", None, result.shape[-1], result.dtype
    return "pp_proxy", None, None, None  # not the last pipeline stage: nothing is captured here


def observation(static, mode, layers, can_run_tbo, capturing, input_ids, result, error) -> TargetForward:
    aux_shape, slot_widths, dtype, aux_returned, aux_format = None, (), None, None, "error"
    if error is None:
        if type(result) is tuple and len(result) == 2:
            hidden, aux = result
            dtype = _dtype_name(hidden.dtype)
            if isinstance(aux, (list, tuple)):
                aux_format, aux_returned = "list", len(aux)
                slot_widths = tuple(t.shape[-1] for t in aux)
            else:
                aux_format, aux_shape = "packed", tuple(aux.shape)
                width = hidden.shape[-1]
                aux_returned = aux_shape[-1] // width if width else None
                slot_widths = (width,) * (aux_returned or 0)
        elif hasattr(result, "shape"):
            aux_format, aux_returned, dtype = "none", 0, _dtype_name(result.dtype)
        else:
            aux_format = "pp_proxy"  # not the last pipeline stage: nothing is captured here
    split = static.splits[can_run_tbo]
    return TargetForward(
        static.model_class, static.role, mode, capturing, can_run_tbo, layers, static.num_layers, split.normal,
        split.tbo, split.lost(layers), input_ids.shape[0] if input_ids is not None else 0, len(layers),
        aux_returned, aux_format, aux_shape, slot_widths, dtype,
        None if error is None else f"{type(error).__name__}: {error}"[:300])


def reset():
    _dtype_names.clear()
