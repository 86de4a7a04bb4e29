"""Run tiny DeepSeek-V3 models through SGLang 0.5.23's real classes, in-process, on the CPU.

What this sets up, and why:

- `init_runtime()`: SGLang's layers read their configuration from a process-wide
  runtime context and their TP/PP groups from `sglang.srt.distributed`, even at TP=1.
  So: publish a `ServerArgs(device="cpu", attention_backend="torch_native", ...)`
  through `sglang.srt.runtime_context.publish`, create a one-process gloo world with
  SGLang's own `init_distributed_environment` / `initialize_model_parallel`, and seed
  the MoE flags with `initialize_moe_config()` as the scheduler does. (SGLang's
  `sglang.test.layer_ut_utils.init_single_process_dist` does the same, but importing it
  pulls in `datasets`.) Idempotent: the second call returns at once.
- `build_deepseek(config)`: the real `sglang.srt.models.deepseek_v2.DeepseekV3ForCausalLM`
  with the weights of transformers' `DeepseekV3ForCausalLM(config)` passed through
  SGLang's own `load_weights` (which also runs `post_load_weights`, creating the MLA
  `w_kc`/`w_vc`). The transformers model is kept as `model.hf_model` for comparisons.
- `TinyBatchRunner(model)`: owns a `ReqToTokenPool`, an `MLATokenToKVPool` and a
  `TorchNativeAttnBackend`, hand-builds `ForwardBatch`es with the fields
  `ForwardBatch.init_new` fills for EXTEND, DECODE and TARGET_VERIFY, and calls the model's real outer
  `forward(input_ids, positions, forward_batch)` inside SGLang's `forward_context`.
  Every call returns that forward's real `LogitsProcessorOutput`.

The CPU shims (`sglang_cpu.shims.apply()`) must be applied before anything imports
sglang; importing this module applies them, so it is safe to import it first.

Two-batch overlap: pass `tbo_split_seq_index=` to any mode and `forward_batch.can_run_tbo`
is True. On an all-dense model the whole stack still runs SGLang's normal layer loop. On a
MoE model the layers from `first_k_dense_replace` on go to SGLang's TBO stage executor,
which does not run on the CPU (EXTEND probes CUDA device properties; DECODE and
TARGET_VERIFY need the TBO child batches that only SGLang's model runner builds): the
forward raises, which is what a test of "TBO was entered" can rely on.

TARGET_VERIFY: SGLang's `torch_native` backend has no verify support. A verify batch keeps
`seq_lens` = committed prefix (as the EAGLE worker builds it), and `_ChainVerifyBackend`
lends `torch_native` the extend view (prefix = seq_lens, extend = draft tokens) for the
duration of each attention call. That is exact for chain drafts (topk 1), where the tree
mask is the causal mask; trees are out of scope on the CPU anyway (see the note).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sglang_cpu import shims
from sglang_cpu.ports import process_port

shims.apply()

import torch  # noqa: E402

_initialized = False




def init_runtime(torch_compile: bool = False, **server_args_overrides) -> None:
    """Publish CPU ServerArgs and build a single-process gloo world; cheap after the first call.

    SGLang wraps its MoE top-k helpers in `torch.compile(dynamic=True)`; on the CPU inductor
    spends 20-40 s building C++ for them on the first MoE forward. Unless `torch_compile`
    is True, dynamo is switched off for the process, so those same Python functions run
    eagerly (same results, a MoE forward then takes milliseconds).

    Arguments apply on the first call only (the runtime is process-wide)."""
    global _initialized
    if _initialized:
        return
    if not torch_compile:
        torch._dynamo.config.disable = True
    from sglang.srt.distributed.parallel_state import (
        init_distributed_environment,
        initialize_model_parallel,
        model_parallel_is_initialized,
    )
    from sglang.srt.layers.moe import initialize_moe_config
    from sglang.srt.runtime_context import SpawnRanks, publish
    from sglang.srt.server_args import ServerArgs

    args = dict(
        model_path="dummy",  # only read by the server's own model loading
        tp_size=1,
        device="cpu",
        attention_backend="torch_native",
        dtype="float32",
        disable_cuda_graph=True,
        skip_tokenizer_init=True,
    )
    args.update(server_args_overrides)
    publish(ServerArgs(**args), role="test", ranks=SpawnRanks(world_rank=0))
    if not torch.distributed.is_initialized():
        init_distributed_environment(
            world_size=1,
            rank=0,
            local_rank=0,
            backend="gloo",
            # a port held for this process, outside the ephemeral range: several test processes run side by side
            distributed_init_method=f"tcp://127.0.0.1:{process_port()}",
        )
    if not model_parallel_is_initialized():
        initialize_model_parallel(backend="gloo")
    # The scheduler calls this for any config with a per-token expert count (DeepSeek has one).
    initialize_moe_config()
    _initialized = True


def build_deepseek(config, seed: int = 0):
    """The real SGLang DeepseekV3ForCausalLM with transformers' random weights for `config`.

    The transformers reference model (same weights, eval mode) is `model.hf_model`."""
    init_runtime()
    from sglang.srt.models.deepseek_v2 import DeepseekV3ForCausalLM

    from sglang_cpu.tiny_models import random_deepseek_v3

    hf_model = random_deepseek_v3(config, seed)
    model = DeepseekV3ForCausalLM(config, quant_config=None).eval()
    model.load_weights((name, t.detach().clone()) for name, t in hf_model.state_dict().items())
    # object.__setattr__: keep the reference out of the sglang module's submodules
    # (and its state_dict / parameters).
    object.__setattr__(model, "hf_model", hf_model)
    return model


def clear_aux_capture(model) -> None:
    """Undo `set_eagle3_layers_to_capture` (SGLang has no call for it): back to a fresh
    model's state, so models shared between tests do not leak capture settings."""
    model.capture_aux_hidden_states = False
    model.model.layers_to_capture = []


def aux_slots(output, hidden_size: int) -> list[torch.Tensor]:
    """Split a FULL-capture LogitsProcessorOutput.hidden_states ([T, K*H], SGLang 0.5.23's
    packed aux layout for DeepSeek) into the K per-layer tensors [T, H], in capture order."""
    return list(output.hidden_states.split(hidden_size, dim=-1))


def _capture_mode(mode):
    # Accept "full" / "last" / "null" so tests need not import SGLang's enum.
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    if mode is None:
        return None
    return CaptureHiddenMode[mode.upper()] if isinstance(mode, str) else CaptureHiddenMode(mode)


@dataclass
class Request:
    """One request of a runner: its ReqToTokenPool row and committed tokens."""

    pool_index: int
    generation: int  # the runner's reset count when it was made; stale after a reset
    tokens: list[int] = field(default_factory=list)

    @property
    def seq_len(self) -> int:
        return len(self.tokens)


def _chain_verify_backend_class():
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

    class _ChainVerifyBackend(TorchNativeAttnBackend):
        # torch_native has no TARGET_VERIFY path; lend it the extend view per call.
        def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True):
            if not forward_batch.forward_mode.is_target_verify():
                return super().forward_extend(q, k, v, layer, forward_batch, save_kv_cache)
            n = forward_batch.spec_info.draft_token_num
            saved = (
                forward_batch.seq_lens,
                forward_batch.extend_prefix_lens,
                forward_batch.extend_seq_lens,
            )
            forward_batch.extend_prefix_lens = saved[0]
            forward_batch.extend_seq_lens = torch.full_like(saved[0], n)
            forward_batch.seq_lens = saved[0] + n
            try:
                return super().forward_extend(q, k, v, layer, forward_batch, save_kv_cache)
            finally:
                (
                    forward_batch.seq_lens,
                    forward_batch.extend_prefix_lens,
                    forward_batch.extend_seq_lens,
                ) = saved

    return _ChainVerifyBackend


class TinyBatchRunner:
    """KV pools + torch_native attention for one SGLang model; runs its real outer forward.

    Requests live until `reset()`; KV slots are handed out in order and never reused
    before a reset, which keeps every batch's layout simple and obviously valid. When an
    EXTEND does not fit any more the runner resets itself; requests from before a reset
    are refused by DECODE / TARGET_VERIFY instead of silently reading overwritten KV.
    """

    def __init__(self, model, max_requests: int = 32, max_context_len: int = 256, max_tokens: int = 8192):
        from types import SimpleNamespace

        from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool, ReqToTokenPool

        self.model = model
        config = model.config
        self.device = torch.device("cpu")
        self.req_to_token_pool = ReqToTokenPool(
            size=max_requests, max_context_len=max_context_len, device="cpu", enable_memory_saver=False
        )
        if getattr(config, "kv_lora_rank", None) is None:  # MHA / GQA targets (Llama, Qwen, GPT-OSS, GLM-4-MoE)
            text = getattr(config, "text_config", config)
            self.token_to_kv_pool = MHATokenToKVPool(
                size=max_tokens,
                page_size=1,
                dtype=torch.float32,
                head_num=text.num_key_value_heads,
                head_dim=getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads,
                layer_num=text.num_hidden_layers,
                device="cpu",
                enable_memory_saver=False,
            )
        else:
            self.token_to_kv_pool = None
        self.token_to_kv_pool = self.token_to_kv_pool or MLATokenToKVPool(
            size=max_tokens,
            page_size=1,
            dtype=torch.float32,
            kv_lora_rank=config.kv_lora_rank,
            qk_rope_head_dim=config.qk_rope_head_dim,
            layer_num=config.num_hidden_layers,
            device="cpu",
            enable_memory_saver=False,
        )
        # TorchNativeAttnBackend only reads these three fields of its ModelRunner.
        fake_runner = SimpleNamespace(
            device="cpu", req_to_token_pool=self.req_to_token_pool, token_to_kv_pool=self.token_to_kv_pool
        )
        self.attn_backend = _chain_verify_backend_class()(fake_runner)
        self.max_tokens = max_tokens
        self.last_forward_batch = None
        self._generation = 0
        self.reset()

    # ---- bookkeeping -------------------------------------------------------------

    def reset(self) -> None:
        """Forget every request and KV slot (the KV tensors are simply overwritten later)."""
        self._generation += 1
        self.requests: list[Request] = []
        self.last_requests: list[Request] = []
        self._next_pool_index = 1  # row 0 is ReqToTokenPool's padding row
        self._next_slot = 1  # slot 0 is the KV pool's dummy slot for padded tokens

    def _alloc_slots(self, n: int) -> torch.Tensor:
        if self._next_slot + n > self.max_tokens + 1:
            raise RuntimeError("TinyBatchRunner: KV pool exhausted, call reset()")
        slots = torch.arange(self._next_slot, self._next_slot + n, dtype=torch.int64)
        self._next_slot += n
        return slots

    def _new_request(self) -> Request:
        if self._next_pool_index > self.req_to_token_pool.size:
            raise RuntimeError("TinyBatchRunner: request pool exhausted, call reset()")
        req = Request(pool_index=self._next_pool_index, generation=self._generation)
        self._next_pool_index += 1
        self.requests.append(req)
        return req

    def _live(self, requests) -> list[Request]:
        reqs = list(requests if requests is not None else self.last_requests)
        if not reqs or any(r.generation != self._generation for r in reqs):
            raise RuntimeError("TinyBatchRunner: no live requests (run extend() after reset())")
        return reqs

    # ---- forward modes ----------------------------------------------------------

    def extend(
        self,
        token_lists: Sequence[Sequence[int]],
        *,
        capture_hidden_mode=None,
        tbo_split_seq_index: int | None = None,
        **forward_batch_fields,
    ):
        """EXTEND: fresh prefill of new requests (no cached prefix). Returns the model's
        LogitsProcessorOutput; the new requests are `self.last_requests`."""
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        lens = [len(t) for t in token_lists]
        if (
            self._next_pool_index + len(lens) > self.req_to_token_pool.size + 1
            or self._next_slot + sum(lens) > self.max_tokens + 1
        ):
            self.reset()
        reqs = [self._new_request() for _ in token_lists]
        slots = self._alloc_slots(sum(lens))
        input_ids, positions, start = [], [], 0
        for req, toks in zip(reqs, token_lists):
            n = len(toks)
            self.req_to_token_pool.req_to_token[req.pool_index, :n] = slots[start : start + n].to(torch.int32)
            start += n
            input_ids += list(toks)
            positions += list(range(n))
            req.tokens = list(toks)
        zeros = [0] * len(reqs)
        batch = self._forward_batch(
            ForwardMode.EXTEND,
            reqs,
            input_ids,
            positions,
            slots,
            seq_lens=lens,
            extend_prefix_lens=zeros,
            extend_seq_lens=lens,
            capture_hidden_mode=capture_hidden_mode,
            tbo_split_seq_index=tbo_split_seq_index,
            **forward_batch_fields,
        )
        self.last_requests = reqs
        return self._run(batch)

    def decode(
        self,
        next_tokens: Sequence[int],
        requests: Sequence[Request] | None = None,
        *,
        capture_hidden_mode=None,
        tbo_split_seq_index: int | None = None,
        **forward_batch_fields,
    ):
        """DECODE: one new token per request (default: the last EXTEND's requests);
        the token is committed to the request."""
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        reqs = self._live(requests)
        assert len(next_tokens) == len(reqs)
        slots = self._alloc_slots(len(reqs))
        positions = []
        for req, tok, slot in zip(reqs, next_tokens, slots):
            self.req_to_token_pool.req_to_token[req.pool_index, req.seq_len] = int(slot)
            positions.append(req.seq_len)
            req.tokens.append(int(tok))
        batch = self._forward_batch(
            ForwardMode.DECODE,
            reqs,
            list(next_tokens),
            positions,
            slots,
            seq_lens=[r.seq_len for r in reqs],  # includes the new token, as in SGLang
            capture_hidden_mode=capture_hidden_mode,
            tbo_split_seq_index=tbo_split_seq_index,
            **forward_batch_fields,
        )
        return self._run(batch)

    def _verify_input(self, **fields):
        from sglang.srt.speculative.eagle_info import EagleVerifyInput

        return EagleVerifyInput(**fields)

    def target_verify(
        self,
        draft_tokens: Sequence[Sequence[int]],
        requests: Sequence[Request] | None = None,
        *,
        capture_hidden_mode=None,
        tbo_split_seq_index: int | None = None,
        **forward_batch_fields,
    ):
        """TARGET_VERIFY of a chain draft: `draft_tokens[i]` (n tokens, the same n for every
        request; in EAGLE the first is the token sampled last, not yet in the KV cache) run
        after request i's committed tokens, with FULL hidden capture unless told otherwise.
        Nothing is committed: the verify KV slots are written, the requests keep their length."""
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        reqs = self._live(requests)
        assert len(draft_tokens) == len(reqs)
        n = len(draft_tokens[0])
        assert n >= 1 and all(len(d) == n for d in draft_tokens), "chain drafts of one length"
        slots = self._alloc_slots(n * len(reqs))
        input_ids, positions = [], []
        for i, (req, toks) in enumerate(zip(reqs, draft_tokens)):
            self.req_to_token_pool.req_to_token[req.pool_index, req.seq_len : req.seq_len + n] = slots[
                i * n : (i + 1) * n
            ].to(torch.int32)
            input_ids += list(toks)
            positions += list(range(req.seq_len, req.seq_len + n))
        bs = len(reqs)
        prefix = [r.seq_len for r in reqs]
        # The EAGLE worker verifies with FULL capture: the draft needs every token's aux state.
        mode = CaptureHiddenMode.FULL if capture_hidden_mode is None else _capture_mode(capture_hidden_mode)
        # A chain is a tree whose node j's only child is j+1 (EAGLE's retrieve_* layout).
        next_token = torch.arange(1, n + 1, dtype=torch.long).repeat(bs, 1)
        next_token[:, -1] = -1
        mask = []
        for p in prefix:
            rows = torch.ones(n, p + n, dtype=torch.bool)
            rows[:, p:] = torch.tril(torch.ones(n, n, dtype=torch.bool))
            mask.append(rows.flatten())
        spec_info = self._verify_input(
            draft_token=torch.tensor(input_ids, dtype=torch.long),
            custom_mask=torch.cat(mask),
            positions=torch.tensor(positions, dtype=torch.long),
            retrieve_index=torch.arange(bs * n, dtype=torch.long).view(bs, n),
            retrieve_next_token=next_token,
            retrieve_next_sibling=torch.full((bs, n), -1, dtype=torch.long),
            retrieve_cum_len=None,
            spec_steps=n - 1,
            topk=1,
            draft_token_num=n,
            capture_hidden_mode=mode,
            seq_lens_sum=sum(prefix),
            seq_lens_cpu=torch.tensor(prefix, dtype=torch.int64),
        )
        batch = self._forward_batch(
            ForwardMode.TARGET_VERIFY,
            reqs,
            input_ids,
            positions,
            slots,
            seq_lens=prefix,  # committed prefix only, as the EAGLE worker passes it
            capture_hidden_mode=mode,
            tbo_split_seq_index=tbo_split_seq_index,
            spec_info=spec_info,
            spec_algorithm=SpeculativeAlgorithm.EAGLE3,
            **forward_batch_fields,
        )
        return self._run(batch)

    # ---- plumbing --------------------------------------------------------------

    def _forward_batch(
        self,
        mode,
        reqs,
        input_ids,
        positions,
        slots,
        *,
        seq_lens,
        extend_prefix_lens=None,
        extend_seq_lens=None,
        capture_hidden_mode=None,
        tbo_split_seq_index=None,
        **fields,
    ):
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        i64 = dict(dtype=torch.int64)
        seq_lens_t = torch.tensor(seq_lens, **i64)
        fields.setdefault("spec_algorithm", SpeculativeAlgorithm.NONE)
        # Set by SGLang's MLP-sync / DP-attention preparation; the TBO stage executor
        # picks its per-mode strategy from it.
        fields.setdefault("global_forward_mode", mode)
        capture_hidden_mode = _capture_mode(capture_hidden_mode)
        batch = ForwardBatch(
            forward_mode=mode,
            batch_size=len(reqs),
            input_ids=torch.tensor(input_ids, **i64),
            req_pool_indices=torch.tensor([r.pool_index for r in reqs], **i64),
            seq_lens=seq_lens_t,
            out_cache_loc=slots,
            seq_lens_sum=int(sum(seq_lens)),
            seq_lens_cpu=seq_lens_t.clone(),
            positions=torch.tensor(positions, **i64),
            capture_hidden_mode=capture_hidden_mode if capture_hidden_mode is not None else CaptureHiddenMode.NULL,
            # not None => forward_batch.can_run_tbo (a property) is True
            tbo_split_seq_index=tbo_split_seq_index,
            **fields,
        )
        if extend_seq_lens is not None:
            batch.extend_num_tokens = int(sum(extend_seq_lens))
            batch.extend_seq_lens = torch.tensor(extend_seq_lens, **i64)
            batch.extend_prefix_lens = torch.tensor(extend_prefix_lens, **i64)
            batch.extend_start_loc = torch.cumsum(batch.extend_seq_lens, 0) - batch.extend_seq_lens
            batch.extend_seq_lens_cpu = list(extend_seq_lens)
            batch.extend_prefix_lens_cpu = list(extend_prefix_lens)
            batch.extend_logprob_start_lens_cpu = list(extend_seq_lens)
        return batch

    def _run(self, batch):
        from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

        self.last_forward_batch = batch
        self.attn_backend.init_forward_metadata(batch)
        with torch.no_grad(), forward_context(ForwardContext(attn_backend=self.attn_backend), forward_batch=batch):
            return self.model.forward(batch.input_ids, batch.positions, batch)
