"""Where this process sits: its node and host, and its place in SGLang's parallel groups, read only once SGLang has
set them up.

0.5.23 publishes them in sglang.srt.runtime_context.get_parallel(); older releases expose getters in
sglang.srt.distributed. Reading before initialisation returns None (the main process never has ranks).

The ranks are the process's own, those of the target model's groups. While the EAGLE worker builds or runs its draft
it swaps in the draft's group (speculative/spec_utils.draft_tp_context -> parallel_state.patch_tensor_parallel_group:
a scoped override of tp_rank/tp_size and, under DP attention, of the attention ranks, size 1 and rank 0). A read
there looks past the scoped override to the values SGLang published for the process; where it cannot (a release that
keeps them elsewhere), it answers None, so that the recorder does not keep ranks read inside the swap and reads again
at its next observation.
"""

import socket
import sys

from ...observations import Ranks
from . import sglang_context

PARALLEL_STATE = "sglang.srt.distributed.parallel_state"
# (Ranks field, runtime_context name) read from get_parallel(); attn_dp_* is the attention-DP place under DP attention
_CONTEXT_FIELDS = (("tp_rank", "tp_rank"), ("tp_size", "tp_size"), ("pp_rank", "pp_rank"), ("pp_size", "pp_size"),
                   ("dp_rank", "dp_rank"), ("attn_tp_rank", "attn_tp_rank"), ("attn_tp_size", "attn_tp_size"),
                   ("attn_dp_rank", "attn_dp_rank"), ("attn_dp_size", "attn_dp_size"),
                   ("node_rank", "node_rank"), ("nnodes", "nnodes"))
_HOST = None


def host() -> str:
    global _HOST
    if _HOST is None:
        try:
            _HOST = socket.gethostname()
        except Exception:
            _HOST = ""
    return _HOST


def _int_or_none(value):
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def process_reader(parallel):
    """A reader of `parallel`'s values as published for the process, past any scoped override (the draft's swap):
    SGLang's ParallelContext reads scoped overrides first, then what the process stamped, then the published
    configuration. None when an override is active and the process's own values cannot be told apart."""
    scoped = getattr(parallel, "_overrides", None)
    if not scoped:
        return lambda name: getattr(parallel, name)
    stamp, config = getattr(parallel, "_stamp", None), getattr(parallel, "_config", None)
    if not isinstance(scoped, dict) or not isinstance(stamp, dict):
        return None
    fields = getattr(config, "_fields", ()) if config is not None else ()

    def read(name):
        if name not in scoped:
            return getattr(parallel, name)
        if name in stamp:
            return stamp[name]
        if name in fields:
            return getattr(config, name)
        raise LookupError(name)  # only the scoped value exists: not the process's

    return read


def ranks_of(parallel) -> Ranks | None:
    """Ranks from a runtime_context ParallelContext (None: not published yet, or hidden by an override)."""
    if parallel is None:
        return None
    read = process_reader(parallel)
    if read is None:
        return None
    try:
        tp_rank = read("tp_rank")
    except Exception:  # not published yet
        return None
    values = {}
    for field, name in _CONTEXT_FIELDS[1:]:
        try:
            values[field] = _int_or_none(read(name))
        except Exception:
            values[field] = None
    if values["tp_size"] is None and not getattr(parallel, "_overrides", None):
        try:
            from sglang.srt.distributed import get_tensor_model_parallel_world_size
            values["tp_size"] = get_tensor_model_parallel_world_size()
        except Exception:
            pass
    return Ranks(tp_rank=_int_or_none(tp_rank), host=host(), **values)


def _from_runtime_context() -> Ranks | None:
    return ranks_of(sglang_context.parallel())


def _node_rank_058():
    try:
        server_args = sys.modules["sglang.srt.server_args"].get_global_server_args()
        return int(getattr(server_args, "node_rank", 0) or 0), int(getattr(server_args, "nnodes", 1) or 1)
    except Exception:
        return None, None


def _from_parallel_state() -> Ranks | None:
    module = sys.modules.get(PARALLEL_STATE)
    if module is None:
        return None
    try:
        if not module.model_parallel_is_initialized():
            return None
        if getattr(module, "_TP_STATE_PATCHED", False):  # the draft's TP group is swapped in: not this process's
            return None
        tp_rank = module.get_tensor_model_parallel_rank()
        tp_size = module.get_tensor_model_parallel_world_size()
        pp_group = module.get_pp_group()
        pp_rank, pp_size = pp_group.rank_in_group, pp_group.world_size
    except Exception:
        return None
    dp_rank = attn = None
    dp_attention = sys.modules.get("sglang.srt.layers.dp_attention")
    if dp_attention is not None and hasattr(dp_attention, "get_attention_dp_rank"):
        try:
            dp_rank = dp_attention.get_attention_dp_rank()
            attn = (dp_attention.get_attention_tp_rank(), dp_attention.get_attention_tp_size(),
                    dp_attention.get_attention_dp_size())
        except Exception:
            attn = attn or None
    node_rank, nnodes = _node_rank_058()
    extra = {} if attn is None else dict(attn_tp_rank=attn[0], attn_tp_size=attn[1], attn_dp_rank=dp_rank,
                                         attn_dp_size=attn[2])
    return Ranks(tp_rank=tp_rank, tp_size=tp_size, pp_rank=pp_rank, pp_size=pp_size, dp_rank=dp_rank,
                 node_rank=node_rank, nnodes=nnodes, host=host(), **extra)


def read_ranks() -> Ranks | None:
    return _from_runtime_context() or _from_parallel_state()
