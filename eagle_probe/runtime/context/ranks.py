"""Where this process sits in SGLang's parallel groups, read only once SGLang has set them up.

0.5.23 publishes them in sglang.srt.runtime_context.get_parallel(); older releases expose getters in
sglang.srt.distributed. Reading before initialisation returns None (the main process never has ranks).
"""

import sys
from typing import Optional

from ...observations import Ranks
from . import sglang_context


def _from_runtime_context() -> Optional[Ranks]:
    parallel = sglang_context.parallel()
    try:
        tp_rank = parallel.tp_rank
    except Exception:  # not published yet
        return None

    def field(name):
        try:
            value = getattr(parallel, name)
        except Exception:
            return None
        return value if isinstance(value, int) else None

    tp_size = field("tp_size")
    if tp_size is None:
        try:
            from sglang.srt.distributed import get_tensor_model_parallel_world_size
            tp_size = get_tensor_model_parallel_world_size()
        except Exception:
            tp_size = None
    return Ranks(tp_rank=tp_rank, tp_size=tp_size, pp_rank=field("pp_rank"), dp_rank=field("dp_rank"))


def _from_parallel_state() -> Optional[Ranks]:
    module = sys.modules.get("sglang.srt.distributed.parallel_state")
    if module is None:
        return None
    try:
        if not module.model_parallel_is_initialized():
            return None
        tp_rank = module.get_tensor_model_parallel_rank()
        tp_size = module.get_tensor_model_parallel_world_size()
        pp_rank = module.get_pp_group().rank_in_group
    except Exception:
        return None
    dp_rank = None
    dp_attention = sys.modules.get("sglang.srt.layers.dp_attention")
    if dp_attention is not None and hasattr(dp_attention, "get_attention_dp_rank"):
        try:
            dp_rank = dp_attention.get_attention_dp_rank()
        except Exception:
            dp_rank = None
    return Ranks(tp_rank=tp_rank, tp_size=tp_size, pp_rank=pp_rank, dp_rank=dp_rank)


def read_ranks() -> Optional[Ranks]:
    return _from_runtime_context() or _from_parallel_state()
