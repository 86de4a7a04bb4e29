"""Run an EAGLE-3 draft through SGLang 0.5.23's real ``LlamaForCausalLMEagle3``, in-process, on the CPU.

Test support (never part of the probe), next to ``runtime.TinyBatchRunner`` (which owns MLA pools for DeepSeek
targets): the draft is a Llama-style model, so its KV lives in an ``MHATokenToKVPool``. ``extend`` runs the
draft-extend forward of a first draft step: ``spec_info.hidden_states`` carries the aux states row for row and
``input_ids`` the tokens the draft embeds (in SGLang: each request's ids shifted left by one). It returns the
draft model's normalised hidden states for every row, so that logits can be compared at every position
(SGLang's logits processor keeps one row per request).
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

from sglang_cpu import shims

shims.apply()

import torch  # noqa: E402

from sglang_cpu.runtime import TinyBatchRunner, init_runtime  # noqa: E402


def build_sglang_draft(path: str, embedding=None, lm_head=None):
    """SGLang's real LlamaForCausalLMEagle3 from a checkpoint directory (config.json + model.safetensors), its weights
    passed through SGLang's own load_weights. ``embedding`` / ``lm_head``: what the EAGLE worker would install
    from the target (set_embed / set_embed_and_head), when given."""
    init_runtime()
    from safetensors.torch import load_file
    from sglang.srt.models.llama_eagle3 import LlamaForCausalLMEagle3
    from transformers import LlamaConfig

    with open(os.path.join(path, "config.json")) as handle:
        config = LlamaConfig(**json.load(handle))
    model = LlamaForCausalLMEagle3(config, quant_config=None).eval()
    model.load_weights(load_file(os.path.join(path, "model.safetensors")).items())
    if lm_head is not None:
        model.set_embed_and_head(embedding, lm_head)
    elif embedding is not None:
        model.set_embed(embedding)
    return model


class DraftBatchRunner(TinyBatchRunner):
    """TinyBatchRunner's bookkeeping with an MHA KV pool; ``_run`` returns the draft model's hidden states."""

    def __init__(self, model, max_requests: int = 32, max_context_len: int = 512, max_tokens: int = 8192):
        from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
        from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool

        config = model.config
        self.model = model
        self.device = torch.device("cpu")
        self.req_to_token_pool = ReqToTokenPool(
            size=max_requests, max_context_len=max_context_len, device="cpu", enable_memory_saver=False)
        self.token_to_kv_pool = MHATokenToKVPool(
            size=max_tokens, page_size=1, dtype=torch.float32, head_num=config.num_key_value_heads,
            head_dim=getattr(config, "head_dim", config.hidden_size // config.num_attention_heads),
            layer_num=config.num_hidden_layers, device="cpu", enable_memory_saver=False)
        fake_runner = SimpleNamespace(
            device="cpu", req_to_token_pool=self.req_to_token_pool, token_to_kv_pool=self.token_to_kv_pool)
        self.attn_backend = TorchNativeAttnBackend(fake_runner)
        self.max_tokens = max_tokens
        self.last_forward_batch = None
        self._generation = 0
        self.reset()

    def draft_extend(self, token_lists, aux):
        """The draft-extend forward of ``token_lists`` (one list per request) with ``aux`` [rows, K*H] as the
        target's hidden states: the normalised hidden states [rows, H] the draft's lm_head reads."""
        from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        self.reset()
        spec_info = EagleDraftExtendInput(hidden_states=aux, num_tokens_per_req=1, num_tokens_for_logprob_per_req=1)
        return self.extend(token_lists, spec_info=spec_info, spec_algorithm=SpeculativeAlgorithm.EAGLE3)

    def _run(self, batch):
        from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

        self.last_forward_batch = batch
        self.attn_backend.init_forward_metadata(batch)
        with torch.no_grad(), forward_context(ForwardContext(attn_backend=self.attn_backend), forward_batch=batch):
            hidden, _aux = self.model.model(batch.input_ids, batch.positions, batch)
        return hidden
