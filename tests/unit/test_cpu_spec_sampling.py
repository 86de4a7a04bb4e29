"""sglang_cpu's CPU stand-ins for SGLang's tree speculation (test-only support, not the probe): the torch
target-only tree sampling rule (sglang_cpu.spec_sampling) on hand-made trees, and the torch_native tree attention of
sglang_cpu.spec_shims (tree verify mask, tree draft decode slots) against plain per-path attention."""

from types import SimpleNamespace

import pytest
import torch

from sglang_cpu.spec_sampling import (
    accept_length_distribution,
    sample_from_residual,
    tree_speculative_sampling_target_only,
)

VOCAB = 8


def _chain(tokens):
    """A chain tree root -> tokens[1] -> tokens[2] ...: candidates, next_token, next_sibling (one request)."""
    n = len(tokens)
    nxt = [i + 1 if i + 1 < n else -1 for i in range(n)]
    return tokens, nxt, [-1] * n


def _star(root, children):
    """root with children in sibling order (depth 1 only)."""
    n = 1 + len(children)
    nxt = [1] + [-1] * len(children)
    sib = [i + 1 if i + 1 < n else -1 for i in range(1, n)]
    return [root, *children], nxt, [-1, *sib]


def _run(tree, probs, coins, final_coins, num_spec):
    """Run the rule for len(coins) requests sharing one tree and one (n, vocab) target distribution table."""
    cand, nxt, sib = tree
    bs, n = len(coins), len(cand)
    predicts = torch.zeros(bs * n, dtype=torch.int32)
    accept_index = torch.full((bs, num_spec), -1, dtype=torch.int32)
    accept_num = torch.zeros(bs, dtype=torch.int32)
    base = torch.arange(bs).view(bs, 1) * n
    tree_speculative_sampling_target_only(
        predicts=predicts, accept_index=accept_index, accept_token_num=accept_num,
        candidates=torch.tensor([cand] * bs), retrive_index=base + torch.arange(n),
        retrive_next_token=torch.tensor([nxt] * bs), retrive_next_sibling=torch.tensor([sib] * bs),
        uniform_samples=_coins(coins, bs, n),
        uniform_samples_for_final_sampling=torch.tensor(final_coins, dtype=torch.float32),
        target_probs=probs.unsqueeze(0).expand(bs, -1, -1).contiguous(),
        draft_probs=torch.zeros(bs, n, probs.shape[-1]), threshold_single=1.0, threshold_acc=1.0)
    return predicts.view(bs, n), accept_index, accept_num


def _coins(coins, bs, n):
    c = torch.tensor(coins, dtype=torch.float32)
    return c.view(bs, 1).expand(bs, n).contiguous() if c.dim() == 1 else c


def _one_hot(token, vocab=VOCAB):
    row = torch.zeros(vocab)
    row[token] = 1.0
    return row


def test_all_mass_on_the_drafts_accepts_every_depth_and_bonus_is_the_targets():
    tree = _chain([5, 2, 3])  # root 5, drafts 2 then 3
    probs = torch.stack([_one_hot(2), _one_hot(3), _one_hot(7)])
    coins = torch.rand(200).tolist()
    predicts, accept_index, accepted = _run(tree, probs, coins, torch.rand(200).tolist(), num_spec=3)
    assert accepted.tolist() == [2] * 200
    assert accept_index[0].tolist() == [0, 1, 2]
    # predicts[node] = the token that follows it on the accepted path; the bonus comes from the last row
    assert predicts[:, :3].tolist() == [[2, 3, 7]] * 200


def test_zero_mass_is_never_accepted_and_the_bonus_avoids_it():
    tree = _star(5, [2])
    probs = torch.stack([torch.tensor([0.5, 0.5, 0, 0, 0, 0, 0, 0]), _one_hot(0)])
    n = 2000
    predicts, accept_index, accepted = _run(tree, probs, torch.rand(n).tolist(), torch.rand(n).tolist(), num_spec=2)
    assert accepted.sum().item() == 0 and (accept_index[:, 1] == -1).all()
    bonus = predicts[:, 0]
    assert set(bonus.tolist()) <= {0, 1}
    share = (bonus == 0).float().mean().item()
    assert abs(share - 0.5) < 4 * (0.25 / n) ** 0.5, f"bonus token 0 in {share:.3f} of {n} draws, expected 0.5"


def test_a_child_with_mass_point_three_is_accepted_three_times_in_ten():
    tree = _star(5, [4])
    probs = torch.stack([torch.tensor([0.1, 0.1, 0.2, 0.1, 0.3, 0.1, 0.1, 0.0]), _one_hot(1)])
    n = 4000
    _, _, accepted = _run(tree, probs, torch.rand(n, generator=torch.Generator().manual_seed(1)).tolist(),
                          torch.rand(n).tolist(), num_spec=2)
    rate = accepted.float().mean().item()
    sigma = (0.3 * 0.7 / n) ** 0.5
    assert abs(rate - 0.3) < 4 * sigma, f"accepted {rate:.4f} of {n} coins, expected 0.3 +- {4 * sigma:.4f}"


def test_siblings_share_one_coin_over_the_running_mass():
    tree = _star(5, [4, 2])  # sibling order: 4 first, then 2
    probs = torch.stack([torch.tensor([0.1, 0.1, 0.2, 0.1, 0.3, 0.1, 0.1, 0.0]), _one_hot(1), _one_hot(6)])
    coins = [0.1, 0.29, 0.31, 0.49, 0.51, 0.99]
    predicts, accept_index, accepted = _run(tree, probs, [[c, 0.0, 0.0] for c in coins], [0.5] * 6, num_spec=2)
    # coin < 0.3: first child; 0.3 <= coin < 0.5: second child; else neither
    assert accepted.tolist() == [1, 1, 1, 1, 0, 0]
    assert [row[1] % 3 for row in accept_index.tolist()] == [1, 1, 2, 2, -1 % 3, -1 % 3]
    assert [predicts[i, 0].item() for i in range(4)] == [4, 4, 2, 2]
    # bonus after the accepted child comes from that child's row
    assert [predicts[i, 1].item() for i in range(2)] == [1, 1] and [predicts[i, 2].item() for i in (2, 3)] == [6, 6]


def test_bonus_after_rejection_follows_the_normalised_residual():
    tree = _star(5, [4, 2])
    q = torch.tensor([0.1, 0.1, 0.2, 0.1, 0.3, 0.1, 0.1, 0.0])
    probs = torch.stack([q, _one_hot(1), _one_hot(6)])
    n = 6000
    g = torch.Generator().manual_seed(3)
    coins = (0.5 + 0.5 * torch.rand(n, generator=g)).tolist()  # every coin above the siblings' mass: rejected
    predicts, _, accepted = _run(tree, probs, coins, torch.rand(n, generator=g).tolist(), num_spec=2)
    assert accepted.sum().item() == 0
    residual = q.clone()
    residual[[4, 2]] = 0
    expected = residual / residual.sum()
    observed = torch.bincount(predicts[:, 0].long(), minlength=VOCAB).float() / n
    tv = 0.5 * (observed - expected).abs().sum().item()
    assert observed[[2, 4, 7]].sum() == 0
    assert tv < 0.03, f"total variation {tv:.4f} between {n} bonus draws and the residual {expected.tolist()}"


def test_sample_from_residual_edges():
    assert sample_from_residual(torch.tensor([0.0, 0.2, 0.0, 0.8]), 0.0) == 1
    assert sample_from_residual(torch.tensor([0.0, 0.2, 0.0, 0.8]), 0.1999) == 1
    assert sample_from_residual(torch.tensor([0.0, 0.2, 0.0, 0.8]), 0.26) == 3
    assert sample_from_residual(torch.tensor([0.0, 0.2, 0.0, 0.8]), 1.0) == 3  # rounding: last positive id
    assert sample_from_residual(torch.zeros(4), 0.5) == 3


def test_exact_accept_length_distribution_matches_the_rule_on_a_random_tree():
    # root(0) -> children 1, 2; 1 -> 3, 4; 2 -> 5; 3 -> 6 (depth 3, S = 4)
    cand = [0, 1, 2, 3, 4, 5, 6]
    nxt = [1, 3, 5, 6, -1, -1, -1]
    sib = [-1, 2, -1, 4, -1, -1, -1]
    g = torch.Generator().manual_seed(7)
    probs = torch.softmax(torch.randn(7, VOCAB, generator=g) * 1.5, dim=-1)
    expected = accept_length_distribution(probs, cand, nxt, sib, 4)
    assert sum(expected) == pytest.approx(1.0)
    n = 6000
    coins = torch.rand(n, 7, generator=g)
    _, _, accepted = _run((cand, nxt, sib), probs, coins.tolist(), torch.rand(n, generator=g).tolist(), num_spec=4)
    observed = torch.bincount(accepted.long(), minlength=4).float() / n
    tv = 0.5 * (observed - torch.tensor(expected)).abs().sum().item()
    assert tv < 0.03, f"total variation {tv:.4f} over {n} walks: observed {observed.tolist()}, exact {expected}"


# --------------------------------------------------------------------------- tree attention (spec_shims)


class _Pool:
    def __init__(self, size, heads, dim_k, dim_v, seed):
        g = torch.Generator().manual_seed(seed)
        self.k = torch.randn(size, heads, dim_k, generator=g)
        self.v = torch.randn(size, heads, dim_v, generator=g)

    def set_kv_buffer(self, layer, loc_info, k, v):
        loc = loc_info.loc
        self.k[loc] = k.view(len(loc), *self.k.shape[1:])
        self.v[loc] = v.view(len(loc), *self.v.shape[1:])

    def get_key_buffer(self, layer_id):
        return self.k

    def get_value_buffer(self, layer_id):
        return self.v


def _backend(pool, req_to_token):
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

    def decode(*args, **kwargs):
        return TorchNativeAttnBackend._run_sdpa_forward_decode(None, *args, **kwargs)

    return SimpleNamespace(token_to_kv_pool=pool, req_to_token_pool=SimpleNamespace(req_to_token=req_to_token),
                           swa_out_cache_loc=None, _run_sdpa_forward_decode=decode)


def _layer(heads, kv_heads, dim):
    return SimpleNamespace(tp_q_head_num=heads, tp_k_head_num=kv_heads, qk_head_dim=dim, v_head_dim=dim,
                           scaling=dim ** -0.5, layer_id=0)


def _attend(q, keys, values, scale):
    """One query row [heads, dim] over keys/values [L, kv_heads, dim] (kv heads repeated)."""
    rep = q.shape[0] // keys.shape[1]
    k = keys.repeat_interleave(rep, dim=1).movedim(0, 1)
    v = values.repeat_interleave(rep, dim=1).movedim(0, 1)
    w = torch.softmax((q.unsqueeze(1) @ k.transpose(1, 2)).squeeze(1) * scale, dim=-1)
    return (w.unsqueeze(1) @ v).squeeze(1)


@pytest.mark.parametrize("full_mask", [True, False])
def test_tree_verify_rows_attend_prefix_ancestors_and_themselves(full_mask):
    from sglang_cpu.spec_shims import _tree_verify_extend

    heads, kv_heads, dim, n = 4, 2, 8, 5
    parents = [-1, 0, 0, 1, 2]  # node -> parent within the tree (0 is the root)
    seq_lens = [3, 6]
    req_to_token = torch.zeros(4, 32, dtype=torch.long)
    slots = iter(range(1, 64))
    for pool_row, seq_len in zip((2, 0), seq_lens):
        for i in range(seq_len + n):
            req_to_token[pool_row, i] = next(slots)
    pool = _Pool(64, kv_heads, dim, dim, seed=0)
    tree = torch.zeros(n, n, dtype=torch.bool)
    for x in range(n):
        y = x
        while y != -1:
            tree[x, y] = True
            y = parents[y]
    if full_mask:
        mask = torch.cat([torch.cat([torch.ones(n, s, dtype=torch.bool), tree], 1).flatten() for s in seq_lens])
    else:
        mask = torch.cat([tree.flatten()] * len(seq_lens))
    out_loc = torch.cat([req_to_token[p, s:s + n] for p, s in zip((2, 0), seq_lens)])
    batch = SimpleNamespace(out_cache_loc=out_loc, seq_lens=torch.tensor(seq_lens),
                            req_pool_indices=torch.tensor([2, 0]), spec_info=SimpleNamespace(custom_mask=mask))
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2 * n, heads * dim, generator=g)
    k = torch.randn(2 * n, kv_heads, dim, generator=g)
    v = torch.randn(2 * n, kv_heads, dim, generator=g)
    layer = _layer(heads, kv_heads, dim)
    out = _tree_verify_extend(_backend(pool, req_to_token), q, k, v, layer, batch).view(2 * n, heads, dim)
    for b, (p, s) in enumerate(zip((2, 0), seq_lens)):
        for x in range(n):
            path = [y for y in range(n) if tree[x, y]]
            rows = torch.cat([req_to_token[p, :s], req_to_token[p, s + torch.tensor(path)]])
            want = _attend(q[b * n + x].view(heads, dim), pool.k[rows], pool.v[rows], layer.scaling)
            torch.testing.assert_close(out[b * n + x], want, rtol=1e-5, atol=1e-5)


def test_tree_draft_decode_rows_read_their_branch_slots():
    from sglang_cpu.spec_shims import _tree_draft_decode

    heads, dim, topk, num_steps, step = 2, 8, 3, 4, 2
    seq_lens = [4, 2]
    req_to_token = torch.arange(1, 1 + 3 * 40).view(3, 40)
    pool = _Pool(200, heads, dim, dim, seed=2)
    out_loc = torch.cat([req_to_token[p, s + torch.arange(topk) * num_steps + step] for p, s in zip((1, 2), seq_lens)])
    batch = SimpleNamespace(out_cache_loc=out_loc, seq_lens=torch.tensor(seq_lens),
                            req_pool_indices=torch.tensor([1, 2]))
    g = torch.Generator().manual_seed(4)
    rows = len(seq_lens) * topk
    q = torch.randn(rows, heads * dim, generator=g)
    k = torch.randn(rows, heads, dim, generator=g)
    v = torch.randn(rows, heads, dim, generator=g)
    layer = _layer(heads, heads, dim)
    out = _tree_draft_decode(_backend(pool, req_to_token), q, k, v, layer, batch, True, step, topk, num_steps)
    out = out.view(rows, heads, dim)
    for b, (p, s) in enumerate(zip((1, 2), seq_lens)):
        for j in range(topk):
            slots = torch.cat([req_to_token[p, :s], req_to_token[p, s + j * num_steps + torch.arange(step + 1)]])
            want = _attend(q[b * topk + j].view(heads, dim), pool.k[slots], pool.v[slots], layer.scaling)
            torch.testing.assert_close(out[b * topk + j], want, rtol=1e-5, atol=1e-5)


def test_top_k_and_top_p_renormalise_each_row_by_its_own_setting():
    from sglang_cpu.spec_sampling import top_k_renorm_prob, top_p_renorm_prob

    probs = torch.tensor([[0.5, 0.2, 0.2, 0.1], [0.1, 0.6, 0.3, 0.0], [0.25, 0.25, 0.25, 0.25]])
    # top_k 1 (a greedy request in a sampled batch) keeps the largest; ties at the pivot are all kept
    got = top_k_renorm_prob(probs, torch.tensor([1, 2, 2]))
    assert torch.allclose(got, torch.tensor([[1.0, 0, 0, 0], [0, 2 / 3, 1 / 3, 0], [0.25, 0.25, 0.25, 0.25]]))
    # top_p keeps the largest whose mass before them is under p (at least one)
    got = top_p_renorm_prob(probs, torch.tensor([0.6, 0.95, 0.1]))
    assert torch.allclose(got.sum(dim=-1), torch.ones(3))
    assert got[0, 2:].sum() == 0 and got[0, 0] == pytest.approx(0.5 / 0.7)
    assert torch.allclose(got[1], torch.tensor([0.1, 0.6, 0.3, 0.0]))
    assert (got[2] > 0).sum() == 1
