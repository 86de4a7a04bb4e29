"""Ranks past the draft's swapped-in group, on SGLang's real ParallelContext (runtime_context, 0.5.23).

A fresh ParallelContext (not the process's published one) is given the places of the second scheduler of a
`--tp-size 2 --dp-size 2 --enable-dp-attention` launch on node 1 of 2, as SGLang stamps them; then the scoped
override that parallel_state.patch_tensor_parallel_group(owns_attention=True) applies for the draft (size-1
attention-TP group) is entered with SGLang's own ParallelContext.override. The probe must read the process's places
inside it, as outside."""

import pytest

from eagle_probe.observations import Ranks
from eagle_probe.runtime.context.ranks import host, ranks_of

TRUE = dict(tp_rank=1, tp_size=2, attn_tp_rank=0, attn_tp_size=1, attn_dp_rank=1, attn_dp_size=2, dp_rank=1,
            node_rank=1, nnodes=2, pp_rank=0, pp_size=1)
# what patch_tensor_parallel_group(tp_group of world size 1, owns_attention=True) overrides (0.5.23)
DRAFT_SWAP = dict(tp_size=1, tp_rank=0, attn_tp_size=1, attn_tp_rank=0, attn_dp_size=1, attn_dp_rank=0,
                  attn_cp_size=1, attn_cp_rank=0, moe_ep_size=1, moe_ep_rank=0, moe_dp_size=1, moe_tp_size=1,
                  moe_tp_rank=0)


@pytest.fixture
def context():
    from sglang.srt.runtime_context import ParallelContext

    ctx = ParallelContext()
    ctx.override_permanently(**TRUE)
    return ctx


def test_ranks_outside_the_swap(context):
    assert ranks_of(context) == Ranks(host=host(), **TRUE)


def test_ranks_inside_the_draft_swap_are_the_process_places(context):
    with context.override(**DRAFT_SWAP):
        assert context.tp_size == 1 and context.attn_dp_size == 1  # what a plain read sees there
        assert ranks_of(context) == Ranks(host=host(), **TRUE)
    assert ranks_of(context) == Ranks(host=host(), **TRUE)


def test_only_the_scoped_value_exists_then_not_read(context):
    """A field the process never set, known only inside the swap, is not taken for the process's."""
    from sglang.srt.runtime_context import ParallelContext

    bare = ParallelContext()
    bare.override_permanently(tp_rank=1, tp_size=2)
    with bare.override(attn_tp_rank=0, attn_tp_size=1):
        ranks = ranks_of(bare)
    assert (ranks.tp_rank, ranks.tp_size, ranks.attn_tp_rank, ranks.attn_tp_size) == (1, 2, None, None)


def test_unpublished_context_has_no_ranks():
    from sglang.srt.runtime_context import ParallelContext

    assert ranks_of(ParallelContext()) is None
