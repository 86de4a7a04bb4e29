"""Test-only stand-ins for the two CUDA-only speculative kernels of SGLang 0.5.8 (chain drafts only).

0.5.23 ships Triton versions of the draft-tree build and the greedy verify (``spec_shims`` routes to them and
Triton's interpreter runs them on the CPU); 0.5.8 has only sgl_kernel's CUDA builds: ``eagle_utils``
calls ``sgl_build_tree_kernel_efficient`` (imported only on CUDA) and ``verify_tree_greedy_func`` does nothing
off CUDA. For ``--speculative-eagle-topk 1`` both reduce to a chain, written here from their contracts:

- build: request b's draft tokens sit at positions prefix_b + i; token i's next is i + 1 (the last has none),
  no siblings; flat index b * n + i; in the full tree mask (per request n rows of prefix_b + n columns) draft
  token i sees draft tokens 0..i.
- greedy verify: walk the chain from the verified token, accepting draft token i while it equals the target's
  prediction at the previously accepted token; ``predicts`` holds the target's token at every accepted index
  and at the last one (the bonus); ``accept_index`` lists the accepted flat indices; ``accept_token_num``
  counts accepted drafts.

With SGLANG_ENABLE_SPEC_V2=1, 0.5.8's verify cache-slot assignment is routed to its own Triton kernel
(interpreted), which it otherwise launches only on CUDA.

Everything else on 0.5.8's speculative path (draft and target forwards, KV bookkeeping, the Triton helpers
run by the interpreter, acceptance accounting, the verify step the probe wraps) is SGLang's own code.
The expected acceptance of the test cases comes from ``draft_models.simulate_chain``, not from these.
"""

from __future__ import annotations

import wrapt

_applied = False


def build_chain_tree(parent_list, top_scores_index, seq_lens, tree_mask, positions, retrive_index,
                     retrive_next_token, retrive_next_sibling, topk, spec_steps, num_verify_tokens,
                     tree_mask_mode=0):
    if int(topk) != 1:
        raise ValueError("CPU spec shims (0.5.8): the tree build stand-in supports --speculative-eagle-topk 1 only")
    n = int(num_verify_tokens)
    prefix_lens = [int(x) for x in seq_lens.tolist()]
    full_mask = int(tree_mask_mode) == 0
    offset = 0
    for b, prefix in enumerate(prefix_lens):
        for i in range(n):
            positions[b * n + i] = prefix + i
            retrive_index[b, i] = b * n + i
            retrive_next_token[b, i] = i + 1 if i + 1 < n else -1
            retrive_next_sibling[b, i] = -1
            if full_mask:
                row = offset + i * (prefix + n) + prefix
                tree_mask[row: row + n] = False
                tree_mask[row: row + i + 1] = True
        offset += n * (prefix + n)


def verify_chain_greedy(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
                        retrive_next_sibling, target_predict, topk=-1):
    target = target_predict.reshape(-1)
    steps = accept_index.shape[1]
    for b in range(candidates.shape[0]):
        last = int(retrive_index[b, 0])
        accept_index[b, 0] = last
        accepted = 0
        current = 0
        for _ in range(1, steps):
            current = int(retrive_next_token[b, current])
            if current == -1 or int(candidates[b, current]) != int(target[last]):
                break
            predicts[last] = target[last]
            accepted += 1
            last = int(retrive_index[b, current])
            accept_index[b, accepted] = last
        accept_token_num[b] = accepted
        predicts[last] = target[last]
    return predicts, accept_index, accept_token_num


def _install(module):
    module.sgl_build_tree_kernel_efficient = build_chain_tree

    def verify_tree_greedy_func(wrapped, instance, args, kwargs):
        return verify_chain_greedy(*args, **kwargs)

    wrapt.wrap_function_wrapper(module, "verify_tree_greedy_func", verify_tree_greedy_func)


def _route_verify_cache_locs_to_triton(module):
    # Spec v2 (SGLANG_ENABLE_SPEC_V2): assign_extend_cache_locs_func runs its Triton kernel only on CUDA
    # and returns None elsewhere; the flag is read nowhere else in the module, and the interpreter runs it.
    module._is_cuda = True


def apply() -> None:
    global _applied
    if _applied:
        return
    _applied = True
    wrapt.register_post_import_hook(_install, "sglang.srt.speculative.eagle_utils")
    wrapt.register_post_import_hook(_route_verify_cache_locs_to_triton, "sglang.srt.speculative.eagle_info_v2")
