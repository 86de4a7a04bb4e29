"""Test-only shims that let SGLang 0.5.23's EAGLE-3 speculative server run on the CPU.

Scope: greedy sampling, ``--speculative-eagle-topk 1`` (chain drafts), ``--attention-backend
torch_native``. Never part of the probe. Applied in every SGLang process by
``sglang_cpu/site/sitecustomize.py`` when ``SGLANG_CPU_SPEC=1`` is in the environment
(``SGLangServer(..., env=SPEC_ENV)`` / ``sglang_cpu.spec_shims.SPEC_ENV``); that variable also
sets ``TRITON_INTERPRET=1`` before Triton is imported, so every Triton kernel SGLang's
speculative path launches (request-to-token slots, draft cache locations, tree build, greedy
verify) runs on CPU tensors through Triton's interpreter: SGLang's own kernel logic stays in
the loop instead of being rewritten here.

What is patched (see shared/notes/sglang-on-cpu.md, "A speculative EAGLE-3 server on the CPU"):

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


class TorchNativeMultiStepDraftBackend:
    """``speculative_num_steps - 1`` torch_native backends, one per draft decode step (chain only)."""

    def __init__(self, model_runner, topk: int, speculative_num_steps: int):
        from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

        if topk != 1:
            raise ValueError("CPU spec shims: torch_native draft decode supports --speculative-eagle-topk 1 only")
        self.topk = topk
        self.speculative_num_steps = speculative_num_steps
        self.attn_backends = [
            _draft_step_backend(TorchNativeAttnBackend, i)(model_runner) for i in range(speculative_num_steps - 1)
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


def apply() -> None:
    """Install the post-import hooks (idempotent). Call before SGLang is imported."""
    global _applied
    if _applied:
        return
    _applied = True
    wrapt.register_post_import_hook(_patch_torch_native, "sglang.srt.layers.attention.torch_native_backend")
    wrapt.register_post_import_hook(_patch_draft_backend_factory, "sglang.srt.speculative.draft_utils")
    wrapt.register_post_import_hook(_route_spec_tree_to_triton, "sglang.kernels.ops.speculative.spec_tree")
    from sglang_cpu.shims import installed_sglang

    if installed_sglang().startswith("0.5.8"):
        from sglang_cpu import spec_shims_058

        spec_shims_058.apply()
