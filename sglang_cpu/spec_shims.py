"""Test-only shims that let SGLang 0.5.23's EAGLE-3 speculative server run on the CPU.

Scope: ``--attention-backend torch_native --disable-cuda-graph``, page size 1; chain drafts
(``--speculative-eagle-topk 1``) and tree drafts (topk > 1, e.g. topk 2 / 3 steps / 4 draft tokens, topk 4 / 3
steps / 8 draft tokens); greedy and sampled (temperature > 0) verify. Never part of the probe. Applied in every
SGLang process by ``sglang_cpu/site/sitecustomize.py`` when ``SGLANG_CPU_SPEC=1`` is in the environment
(``SGLangServer(..., env=SPEC_ENV)`` / ``sglang_cpu.spec_shims.SPEC_ENV``); that variable also
sets ``TRITON_INTERPRET=1`` before Triton is imported, so every Triton kernel SGLang's
speculative path launches (request-to-token slots, draft cache locations, tree build, greedy
verify) runs on CPU tensors through Triton's interpreter: SGLang's own kernel logic stays in
the loop instead of being rewritten here.

What is patched:

1. ``speculative/draft_utils.DraftBackendFactory._create_backend`` gets a ``torch_native``
   entry: the multi-step draft decode backend is one ``TorchNativeAttnBackend`` per draft step
   (step i attends the committed prefix plus draft tokens 0..i, whose slots the draft planner
   already wrote into ``req_to_token`` after the prefix); draft extend uses a plain one.
2. ``kernels/ops/speculative/spec_tree._is_xpu = True``: routes ``build_tree_kernel_efficient``
   and ``verify_tree_greedy`` to their Triton (XPU) versions, run by the interpreter.
3. ``TorchNativeAttnBackend.forward_extend`` for TARGET_VERIFY and DRAFT_EXTEND_V2 batches, which
   carry no ``extend_prefix_lens`` / ``extend_seq_lens`` and whose ``seq_lens`` is the committed
   prefix: for the call, prefix = seq_lens, extend = tokens per request, seq_lens = prefix +
   extend (restored after). For a chain the causal mask equals the tree mask, so this is exact.
   Batches that already carry extend fields are left alone, except the v1 worker's DRAFT_EXTEND (SGLang
   0.5.8's default worker), whose stale prefix lengths are replaced by seq_lens - extend_seq_lens.
4. SGLang 0.5.8 only: ``spec_shims_058`` (chain stand-ins for its CUDA-only tree build and greedy verify) and
   the 0.5.8 spelling of the draft backend factory.
5. Tree drafts (topk > 1): the draft decode step i runs bs * topk query rows; row (b, j) attends the prefix plus
   branch j's slots ``req_to_token[seq_len + j * num_steps + 0..i]`` (SGLang's own layout and what its GPU draft
   backends read: ``cache_locs.generate_draft_decode_kv_indices``; the slots hold branch j's tokens of earlier
   steps, which SGLang does not re-order to the row's tree ancestors). TARGET_VERIFY with ``spec_info.topk > 1``
   applies the tree mask of ``spec_info.custom_mask`` (FULL_MASK or QLEN_ONLY layout of
   ``build_tree_kernel_efficient``): each of the n rows attends the prefix, its tree ancestors and itself.
   DRAFT_EXTEND_V2 after a tree verify stays causal (item 3): ``_finalize_accept_tree_path`` has moved the
   accepted path to the front of the window. ``cache_locs.assign_extend_cache_locs_func`` returns None on this
   platform (no CUDA, no CPU engine); the verify window ``req_to_token[seq_len:seq_len + n]`` is gathered in torch
   instead (a chain verify never calls it: its window comes from the draft's plan).
6. Sampled verify: ``eagle_utils.tree_speculative_sampling_target_only`` (None off CUDA) becomes the torch rule of
   ``sglang_cpu.spec_sampling``, and so do ``top_k_renorm_prob`` / ``top_p_renorm_prob`` (None off CUDA too; a
   batch of greedy and sampled requests calls them); ``SGLANG_CPU_SPEC_SAMPLING_DUMP=FILE`` also records each tree
   sampling call's tree and probabilities. ``murmur_hash32`` on CPU tensors (seeded coins) runs SGLang's Triton
   kernel when the CPU engine's op is missing; a server only seeds coins with
   ``--enable-deterministic-inference``, which 0.5.23 refuses for torch_native, so sampled CPU servers use
   torch.rand coins.
7. DFLASH (``--speculative-algorithm DFLASH``, a ``DFlashDraftModel`` draft, SGLang 0.5.23): ``apply()`` also applies
   ``sglang_cpu.dflash_shims`` (the platform gate, ``torch_native`` as a draft attention backend, ``record_stream`` on
   CPU tensors, float32 ``input_embeds``); its verify window's slots come from item 5's ``assign_extend_cache_locs``.
(``MHATokenToKVPool._init_kv_copy_and_warmup`` is already a no-op through ``shims.apply()``.)
"""

from __future__ import annotations

import inspect
import os

import wrapt

ENV_FLAG = "SGLANG_CPU_SPEC"
# Environment a speculative CPU server needs (pass as SGLangServer(env=...)).
SPEC_ENV = {ENV_FLAG: "1", "TRITON_INTERPRET": "1"}

_applied = False


def enabled() -> bool:
    return os.environ.get(ENV_FLAG, "") == "1"


# --------------------------------------------------------------------------- attention


def _tokens_per_request(forward_batch) -> int:
    bs = int(forward_batch.batch_size)
    return int(forward_batch.input_ids.shape[0]) // max(bs, 1)


def _draft_extend_v1(wrapped, forward_batch, args, kwargs):
    # The v1 worker's draft extend (0.5.8's default) sets seq_lens to the committed length including the
    # accepted tokens and extend_seq_lens to accepted + 1, but leaves the prefill's stale extend_prefix_lens;
    # SGLang's GPU backends take the prefix as seq_lens - extend_seq_lens, and so does this call.
    saved = forward_batch.extend_prefix_lens
    forward_batch.extend_prefix_lens = forward_batch.seq_lens - forward_batch.extend_seq_lens
    try:
        return wrapped(*args, **kwargs)
    finally:
        forward_batch.extend_prefix_lens = saved


def _patch_torch_native(module):
    cls = module.TorchNativeAttnBackend
    if getattr(cls, "_sglang_cpu_spec_patched", False):
        return

    def forward_extend(wrapped, instance, args, kwargs):
        forward_batch = kwargs.get("forward_batch", args[4] if len(args) > 4 else None)
        mode = getattr(forward_batch, "forward_mode", None)
        if mode is not None and mode == getattr(type(mode), "DRAFT_EXTEND", None):  # no v1 worker in 0.5.13+
            return _draft_extend_v1(wrapped, forward_batch, args, kwargs)
        if (
            mode is None
            or not (mode.is_target_verify() or mode.is_draft_extend_v2())
            or forward_batch.extend_prefix_lens is not None
        ):
            return wrapped(*args, **kwargs)
        if mode.is_target_verify() and getattr(forward_batch.spec_info, "topk", 1) > 1:
            bound = dict(zip(("q", "k", "v", "layer", "forward_batch", "save_kv_cache"), args), **kwargs)
            return _tree_verify_extend(instance, **bound)
        import torch

        saved = (forward_batch.seq_lens, forward_batch.extend_prefix_lens, forward_batch.extend_seq_lens)
        n = _tokens_per_request(forward_batch)
        forward_batch.extend_prefix_lens = saved[0]
        forward_batch.extend_seq_lens = torch.full_like(saved[0], n)
        forward_batch.seq_lens = saved[0] + n
        try:
            return wrapped(*args, **kwargs)
        finally:
            forward_batch.seq_lens, forward_batch.extend_prefix_lens, forward_batch.extend_seq_lens = saved

    wrapt.wrap_function_wrapper(cls, "forward_extend", forward_extend)
    cls._sglang_cpu_spec_patched = True


def _tree_mask(spec_info, seq_lens, n):
    """(bs, n, n) bool: query node x may attend node y (its tree ancestors and itself), read from the verify
    input's ``custom_mask`` as ``build_tree_kernel_efficient`` lays it out: QLEN_ONLY, n * n per request; or
    FULL_MASK, per request n rows of (seq_len + n) columns, the tree part in the last n columns."""
    import torch

    mask = spec_info.custom_mask.reshape(-1)
    bs = len(seq_lens)
    if mask.numel() == bs * n * n:
        return mask.view(bs, n, n).bool()
    out, offset = [], 0
    for seq_len in seq_lens:
        rows = mask[offset:offset + n * (seq_len + n)].view(n, seq_len + n)
        out.append(rows[:, seq_len:].bool())
        offset += n * (seq_len + n)
    return torch.stack(out)


def _tree_verify_extend(backend, q, k, v, layer, forward_batch, save_kv_cache=True, **_unused):
    """TARGET_VERIFY of a draft tree (topk > 1): each of request b's n query rows attends the committed prefix
    req_to_token[:seq_len] and, among the n verify slots req_to_token[seq_len:seq_len + n] (the window
    EagleVerifyInput.generate_attn_arg_prefill hands SGLang's GPU backends), only its tree ancestors and itself."""
    import torch
    from sglang.srt.mem_cache.memory_pool import KVWriteLoc
    from torch.nn.functional import scaled_dot_product_attention

    o = (q.new_empty((q.shape[0], layer.tp_q_head_num * layer.v_head_dim)) if layer.qk_head_dim != layer.v_head_dim
         else torch.empty_like(q))
    if save_kv_cache and k is not None and v is not None:
        backend.token_to_kv_pool.set_kv_buffer(
            layer, KVWriteLoc(forward_batch.out_cache_loc, backend.swa_out_cache_loc), k, v)
    q_ = q.view(-1, layer.tp_q_head_num, layer.qk_head_dim)
    o_ = o.view(-1, layer.tp_q_head_num, layer.v_head_dim)
    k_cache = backend.token_to_kv_pool.get_key_buffer(layer.layer_id)
    v_cache = backend.token_to_kv_pool.get_value_buffer(layer.layer_id)
    req_to_token = backend.req_to_token_pool.req_to_token
    seq_lens = forward_batch.seq_lens.tolist()
    pools = forward_batch.req_pool_indices.tolist()
    n = q_.shape[0] // max(len(seq_lens), 1)
    tree = _tree_mask(forward_batch.spec_info, seq_lens, n)
    for b, (pool, seq_len) in enumerate(zip(pools, seq_lens)):
        slots = req_to_token[pool, :seq_len + n]
        query = q_[b * n:(b + 1) * n].movedim(0, 1)  # heads, n, dim
        key = k_cache[slots].movedim(0, 1).to(query.dtype)
        value = v_cache[slots].movedim(0, 1).to(query.dtype)
        allowed = torch.cat([torch.ones((n, seq_len), dtype=torch.bool, device=query.device), tree[b]], dim=1)
        out = scaled_dot_product_attention(query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0),
                                           attn_mask=allowed, scale=layer.scaling,
                                           enable_gqa=layer.tp_q_head_num != layer.tp_k_head_num)
        o_[b * n:(b + 1) * n] = out.squeeze(0).movedim(0, 1)
    return o


def _draft_step_backend(base_cls, step):
    class _DraftStepBackend(base_cls):
        # Draft decode step `step` (0-based) of a chain: its query token sits at prefix + step
        # and attends the prefix plus draft tokens 0..step.
        def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True):
            saved = forward_batch.seq_lens
            forward_batch.seq_lens = saved + (step + 1)
            try:
                return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache)
            finally:
                forward_batch.seq_lens = saved

    _DraftStepBackend.__name__ = f"TorchNativeDraftStep{step}Backend"
    return _DraftStepBackend


def _tree_draft_step_backend(base_cls, step, topk, num_steps):
    class _TreeDraftStepBackend(base_cls):
        # Draft decode step `step` (0-based) of a tree (topk > 1): bs * topk query rows, row b * topk + j
        # attends request b's committed prefix req_to_token[:seq_len] plus its branch j's draft slots
        # req_to_token[seq_len + j * num_steps + 0..step], the layout SGLang's draft planner writes and its
        # GPU draft backends read (kernels/ops/speculative/cache_locs.generate_draft_decode_kv_indices, page 1).
        def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True):
            return _tree_draft_decode(self, q, k, v, layer, forward_batch, save_kv_cache, step, topk, num_steps)

    _TreeDraftStepBackend.__name__ = f"TorchNativeTreeDraftStep{step}Backend"
    return _TreeDraftStepBackend


def _tree_draft_decode(backend, q, k, v, layer, forward_batch, save_kv_cache, step, topk, num_steps):
    import torch
    from sglang.srt.mem_cache.memory_pool import KVWriteLoc

    q = q.reshape(-1, layer.tp_q_head_num * layer.qk_head_dim)
    o = (q.new_empty((q.shape[0], layer.tp_q_head_num * layer.v_head_dim)) if layer.qk_head_dim != layer.v_head_dim
         else torch.empty_like(q))
    if save_kv_cache and k is not None and v is not None:
        backend.token_to_kv_pool.set_kv_buffer(
            layer, KVWriteLoc(forward_batch.out_cache_loc, backend.swa_out_cache_loc), k, v)
    req_to_token = backend.req_to_token_pool.req_to_token
    seq_lens = forward_batch.seq_lens.tolist()
    pools = forward_batch.req_pool_indices.tolist()
    own = torch.arange(step + 1, device=req_to_token.device)
    # One row per query: the slots it reads, padded; the stock per-row SDPA loop does the rest.
    width = max(seq_lens) + step + 1
    table = torch.zeros((len(seq_lens) * topk, width), dtype=req_to_token.dtype, device=req_to_token.device)
    for b, (pool, seq_len) in enumerate(zip(pools, seq_lens)):
        for j in range(topk):
            row = table[b * topk + j]
            row[:seq_len] = req_to_token[pool, :seq_len]
            row[seq_len:seq_len + step + 1] = req_to_token[pool, seq_len + j * num_steps + own]
    lens = torch.tensor(seq_lens, device=table.device).repeat_interleave(topk) + step + 1
    backend._run_sdpa_forward_decode(
        q.view(-1, layer.tp_q_head_num, layer.qk_head_dim),
        o.view(-1, layer.tp_q_head_num, layer.v_head_dim),
        backend.token_to_kv_pool.get_key_buffer(layer.layer_id),
        backend.token_to_kv_pool.get_value_buffer(layer.layer_id),
        table,
        torch.arange(table.shape[0], device=table.device),
        lens,
        None,
        scaling=layer.scaling,
        enable_gqa=layer.tp_q_head_num != layer.tp_k_head_num,
        causal=False,
    )
    return o


class TorchNativeMultiStepDraftBackend:
    """``speculative_num_steps - 1`` torch_native backends, one per draft decode step.

    topk 1 (chain): step i attends the prefix plus draft tokens 0..i (contiguous after the prefix).
    topk > 1 (tree): step i has bs * topk query rows; row (b, j) attends the prefix plus branch j's slots
    ``seq_len + j * num_steps + 0..i`` (see ``_tree_draft_step_backend``)."""

    def __init__(self, model_runner, topk: int, speculative_num_steps: int):
        from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

        self.topk = topk
        self.speculative_num_steps = speculative_num_steps
        if topk == 1:
            self.attn_backends = [
                _draft_step_backend(TorchNativeAttnBackend, i)(model_runner) for i in range(speculative_num_steps - 1)
            ]
        else:
            self.attn_backends = [
                _tree_draft_step_backend(TorchNativeAttnBackend, i, topk, speculative_num_steps)(model_runner)
                for i in range(speculative_num_steps - 1)
            ]

    def init_forward_metadata(self, forward_batch):
        for backend in self.attn_backends:
            backend.init_forward_metadata(forward_batch)

    def __getattr__(self, name):  # cuda-graph hooks etc.: never used with --disable-cuda-graph
        raise AttributeError(name)


def _patch_draft_backend_factory(module):
    cls = module.DraftBackendFactory
    if getattr(cls, "_sglang_cpu_spec_patched", False):
        return

    def _create_backend(wrapped, instance, args, kwargs):
        names = ("backend_name", "backend_map", "error_template", "stamps_children")
        bound = dict(zip(names, args))
        bound.update(kwargs)
        backend_map = dict(bound["backend_map"])
        runner = instance.draft_model_runner
        if bound.get("stamps_children"):
            backend_map["torch_native"] = lambda: (
                "torch_native",
                TorchNativeMultiStepDraftBackend(runner, instance.topk, instance.speculative_num_steps),
            )
        else:
            from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

            backend_map["torch_native"] = lambda: ("torch_native", TorchNativeAttnBackend(runner))
        bound["backend_map"] = backend_map
        return wrapped(**bound)

    if "stamps_children" in inspect.signature(cls._create_backend).parameters:
        wrapt.wrap_function_wrapper(cls, "_create_backend", _create_backend)
    else:  # 0.5.8: _create_backend returns the backend itself and cannot tell decode from extend
        wrapt.wrap_function_wrapper(cls, "create_decode_backend", _torch_native_decode_058)
        wrapt.wrap_function_wrapper(cls, "create_draft_extend_backend", _torch_native_extend_058)
    cls._sglang_cpu_spec_patched = True


def _resolves_to_torch_native(factory, backend_name):
    args = factory.server_args
    chosen = factory.draft_attn_backend or getattr(args, backend_name, None) or args.attention_backend
    return chosen == "torch_native"


def _torch_native_decode_058(wrapped, instance, args, kwargs):
    if instance.speculative_num_steps == 1 or not _resolves_to_torch_native(instance, "decode_attention_backend"):
        return wrapped(*args, **kwargs)
    return TorchNativeMultiStepDraftBackend(instance.draft_model_runner, instance.topk, instance.speculative_num_steps)


def _torch_native_extend_058(wrapped, instance, args, kwargs):
    name = ("decode_attention_backend" if instance.server_args.speculative_attention_mode == "decode"
            else "prefill_attention_backend")
    if not _resolves_to_torch_native(instance, name):
        return wrapped(*args, **kwargs)
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

    return TorchNativeAttnBackend(instance.draft_model_runner)


# --------------------------------------------------------------------------- tree kernels


def _route_spec_tree_to_triton(module):
    # build_tree_kernel_efficient / verify_tree_greedy: Triton versions (interpreted on the CPU).
    module._is_xpu = True


def _assign_extend_cache_locs(wrapped, instance, args, kwargs):
    # The verify window's slots req_to_token[start:end] per request, concatenated. SGLang has a Triton kernel
    # for CUDA/HIP/MUSA/XPU and a CPU op for its CPU engine and returns None on any other platform; a chain
    # verify never gets here (its window comes from the draft's plan), a tree verify (topk > 1) does.
    out = wrapped(*args, **kwargs)
    if out is not None:
        return out
    import torch

    names = ("req_pool_indices", "req_to_token", "start_offset", "end_offset", "batch_size", "draft_token_num")
    bound = dict(zip(names, args), **kwargs)
    req_to_token = bound["req_to_token"]
    rows = [req_to_token[pool, start:end] for pool, start, end in
            zip(bound["req_pool_indices"].tolist(), bound["start_offset"].tolist(), bound["end_offset"].tolist())]
    return torch.cat(rows).to(torch.int64) if rows else torch.empty((0,), dtype=torch.int64)


def _patch_cache_locs(module):
    if not getattr(module, "_sglang_cpu_spec_patched", False):
        wrapt.wrap_function_wrapper(module, "assign_extend_cache_locs_func", _assign_extend_cache_locs)
        module._sglang_cpu_spec_patched = True


def _murmur_hash32(wrapped, instance, args, kwargs):
    # Seeded verify coins (sampling_seed, with --enable-deterministic-inference): on CPU tensors SGLang calls its
    # CPU engine's op (sgl_kernel, not installed here); run its Triton kernel instead, through the interpreter.
    seed, positions, cols = (list(args) + [kwargs.get(k) for k in ("seed", "positions", "col_indices")][len(args):])
    if seed.device.type != "cpu":
        return wrapped(*args, **kwargs)
    try:
        import sgl_kernel  # noqa: F401
    except ImportError:
        import torch
        import triton

        module = inspect.getmodule(wrapped)
        n, m = seed.shape[0], cols.shape[0]
        hashed = torch.empty((n, m), dtype=torch.uint32)
        block = 1024
        module.murmur_hash32_kernel[(n, triton.cdiv(m, block))](seed, positions, cols, hashed, n, m, BLOCK_SIZE=block)
        return hashed
    return wrapped(*args, **kwargs)


def _patch_murmur_hash(module):
    if hasattr(module, "murmur_hash32_kernel") and not getattr(module, "_sglang_cpu_spec_patched", False):
        wrapt.wrap_function_wrapper(module, "murmur_hash32", _murmur_hash32)
        module._sglang_cpu_spec_patched = True


def _install_tree_sampling(module):
    # eagle_sample's sampled (temperature > 0) verify calls this name; None off CUDA.
    if getattr(module, "tree_speculative_sampling_target_only", None) is None:
        from sglang_cpu import spec_sampling

        fn = spec_sampling.tree_speculative_sampling_target_only
        dump = os.environ.get(spec_sampling.DUMP_ENV, "")
        module.tree_speculative_sampling_target_only = spec_sampling.recording(fn, dump) if dump else fn
    # a batch of greedy (top_k 1) and sampled requests renormalises by top-k / top-p first: None off CUDA too
    from sglang_cpu import spec_sampling

    for name in ("top_k_renorm_prob", "top_p_renorm_prob"):
        if hasattr(module, name) and getattr(module, name) is None:
            setattr(module, name, getattr(spec_sampling, name))


def apply() -> None:
    """Install the post-import hooks (idempotent). Call before SGLang is imported."""
    global _applied
    if _applied:
        return
    _applied = True
    wrapt.register_post_import_hook(_patch_torch_native, "sglang.srt.layers.attention.torch_native_backend")
    wrapt.register_post_import_hook(_patch_draft_backend_factory, "sglang.srt.speculative.draft_utils")
    wrapt.register_post_import_hook(_route_spec_tree_to_triton, "sglang.kernels.ops.speculative.spec_tree")
    wrapt.register_post_import_hook(_install_tree_sampling, "sglang.srt.speculative.eagle_utils")
    wrapt.register_post_import_hook(_patch_cache_locs, "sglang.kernels.ops.speculative.cache_locs")
    wrapt.register_post_import_hook(_patch_murmur_hash, "sglang.kernels.ops.sampling.murmur_hash")
    from sglang_cpu.shims import installed_sglang

    if installed_sglang().startswith("0.5.8"):
        from sglang_cpu import spec_shims_058

        spec_shims_058.apply()
    else:  # DFLASH (block-diffusion drafts) on the CPU: sglang_cpu.dflash_shims
        from sglang_cpu import dflash_shims

        dflash_shims.apply()
