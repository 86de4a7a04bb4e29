"""Tiny EAGLE-3 drafts (``LlamaForCausalLMEagle3``) and target/draft pairs with KNOWN acceptance.

Test-only support (never part of the probe). Everything here is written to disk as a real
checkpoint (config.json + model.safetensors with the names SGLang 0.5.23's
``llama_eagle3.LlamaForCausalLMEagle3.load_weights`` consumes: ``midlayer.*`` (remapped by SGLang to
``layers.0``), ``fc.weight``, ``norm.weight``, ``lm_head.weight``, ``embed_tokens.weight``) and
served by an unchanged ``python -m sglang.launch_server``.

Deliberate constructions ("map" models), used to know acceptance in advance:

- Target (tiny all-dense DeepSeek-V3, MLA): every attention ``o_proj`` and MLP ``down_proj`` is
  zero, so the residual stream at every layer is exactly the token embedding ``E[x]``; every
  captured aux hidden state is ``E[x]`` and the logits are ``W_t @ rmsnorm(E[x])``. Choosing
  ``W_t[j] = sum(nE[x] for x with T(x) == j)`` (``nE`` = RMS-normalised embeddings, nearly
  orthogonal) makes greedy decoding follow a chosen next-token map ``T`` (checked exactly at
  build time).
- Draft: ``o_proj`` and ``down_proj`` zero as well, ``fc = [I, 0, 0]`` (takes the first aux chunk
  = ``E[x]``), final norm weight 1, own ``lm_head`` (``draft_vocab_size`` = vocab, so SGLang keeps
  it instead of loading the target's; the embedding SGLang swaps in is irrelevant because the
  draft ignores its input token). Then the draft's proposal depends only on the token ``x``
  whose target aux state it was fed: ``D(x)``. Draft decode steps receive the draft's own
  pre-norm residual (width H, so SGLang skips ``fc``), which is still ``E[x]``: every draft step
  proposes the same token ``D(x)``.

Verify step (topk 1, steps s, draft tokens s+1): with ``x`` = last committed token whose aux the
draft saw and ``v = T(x)`` the pending verified token, the chain is ``[v, D(x), ..., D(x)]``.
Position 1 is accepted iff ``D(x) == T(v)``, position k>1 iff also ``T(D(x)) == D(x)``.
``simulate_chain`` replays this (independently of SGLang and of any probe) and gives the
expected output ids, verify count and per-position / histogram counts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence

import torch

from sglang_cpu.tiny_models import deepseek_v3_config, random_deepseek_v3

DEFAULT_LAYER_IDS = (1, 3, 4)


# --------------------------------------------------------------------------- draft config


def eagle3_draft_config(
    target_config,
    *,
    layer_ids: Sequence[int] | None = DEFAULT_LAYER_IDS,
    hidden_size: int | None = None,
    target_hidden_size: int | None = None,
    num_aux: int | None = None,
    draft_vocab_size: int | None = None,
    num_attention_heads: int = 4,
    intermediate_size: int = 128,
    **overrides,
) -> dict:
    """config.json contents for a one-layer ``LlamaForCausalLMEagle3`` draft of ``target_config``.

    - ``layer_ids``: ``eagle_config.eagle_aux_hidden_state_layer_ids`` (the target's capture ids;
      SGLang 0.5.23 adds 1 to DeepSeek ids when the first is 1). None leaves the key out.
    - ``hidden_size``: draft width (default: the target's).
    - ``target_hidden_size``: written only when given (SGLang falls back to ``hidden_size``).
    - ``num_aux``: top-level ``num_aux_hidden_states`` (fc input = target_hidden * num_aux);
      written only when given (SGLang then uses ``len(layer_ids)``, else 3).
    - ``draft_vocab_size``: None makes SGLang replace the draft's lm_head with the target's
      (``load_lm_head_from_target``); the vocab size keeps the draft's own lm_head.
    """
    h_t = int(target_config.hidden_size)
    h = int(hidden_size or h_t)
    cfg = dict(
        architectures=["LlamaForCausalLMEagle3"],
        model_type="llama",
        vocab_size=int(target_config.vocab_size),
        hidden_size=h,
        intermediate_size=intermediate_size,
        num_hidden_layers=1,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_attention_heads,
        head_dim=h // num_attention_heads,
        hidden_act="silu",
        max_position_embeddings=int(getattr(target_config, "max_position_embeddings", 512)),
        rms_norm_eps=float(getattr(target_config, "rms_norm_eps", 1e-6)),
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=1,
        torch_dtype="float32",
        draft_vocab_size=draft_vocab_size,
    )
    if layer_ids is not None:
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [int(i) for i in layer_ids]}
    if target_hidden_size is not None:
        cfg["target_hidden_size"] = int(target_hidden_size)
    if num_aux is not None:
        cfg["num_aux_hidden_states"] = int(num_aux)
    cfg.update(overrides)
    return cfg


def _fc_in(config: dict) -> int:
    h_in = config.get("target_hidden_size", config["hidden_size"])
    k = config.get("num_aux_hidden_states")
    if k is None:
        ids = (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
        k = len(ids) if ids else 3
    return int(h_in) * int(k)


def random_eagle3_draft_state(config: dict, seed: int = 0, zero_lm_head: bool = False) -> dict[str, torch.Tensor]:
    """Random weights with the on-disk names of a real EAGLE-3 draft checkpoint."""
    g = torch.Generator().manual_seed(seed)
    h = config["hidden_size"]
    heads, kv_heads, hd = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
    inter, vocab = config["intermediate_size"], config["vocab_size"]
    lm_rows = config.get("draft_vocab_size") or vocab

    def rnd(*shape, std=0.02):
        return torch.randn(*shape, generator=g) * std

    sd = {
        "embed_tokens.weight": rnd(vocab, h, std=1.0),
        "fc.weight": rnd(h, _fc_in(config)),
        "midlayer.hidden_norm.weight": torch.ones(h),
        "midlayer.input_layernorm.weight": torch.ones(h),
        "midlayer.post_attention_layernorm.weight": torch.ones(h),
        "midlayer.self_attn.q_proj.weight": rnd(heads * hd, 2 * h),
        "midlayer.self_attn.k_proj.weight": rnd(kv_heads * hd, 2 * h),
        "midlayer.self_attn.v_proj.weight": rnd(kv_heads * hd, 2 * h),
        "midlayer.self_attn.o_proj.weight": rnd(h, heads * hd),
        "midlayer.mlp.gate_proj.weight": rnd(inter, h),
        "midlayer.mlp.up_proj.weight": rnd(inter, h),
        "midlayer.mlp.down_proj.weight": rnd(h, inter),
        "norm.weight": torch.ones(h),
        "lm_head.weight": torch.zeros(lm_rows, h) if zero_lm_head else rnd(lm_rows, h, std=1.0),
    }
    return sd


def write_eagle3_draft_checkpoint(
    path,
    config: dict,
    seed: int = 0,
    zero_lm_head: bool = False,
    state: dict[str, torch.Tensor] | None = None,
) -> str:
    """config.json + model.safetensors of a draft; ``state`` overrides/extends the random weights."""
    from safetensors.torch import save_file

    os.makedirs(path, exist_ok=True)
    sd = random_eagle3_draft_state(config, seed, zero_lm_head)
    if state:
        sd.update(state)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    # weights in float32; integer tensors (a d2t map) keep their dtype, as SpecForge writes them
    save_file({k: v.contiguous().to(torch.float32) if v.is_floating_point() else v.contiguous() for k, v in sd.items()},
              os.path.join(path, "model.safetensors"))
    return str(path)


# --------------------------------------------------------------------------- targets


def spec_target_config(**overrides):
    """The tiny DeepSeek-V3 target used by the speculative cases: 6 dense MLA layers, vocab 256,
    hidden 64 (capture ids (1, 3, 4) become SGLang capture indices [2, 4, 5])."""
    kw = dict(num_hidden_layers=6, first_k_dense_replace=6)
    kw.update(overrides)
    return deepseek_v3_config(**kw)


def write_target_checkpoint(path, config, seed=0, zero_lm_head=False, next_token_map=None, embedding=None) -> str:
    """A tiny DeepSeek-V3 checkpoint: random, with zero lm_head, or a "map" target (see module doc); `embedding`
    replaces the random token embedding."""
    os.makedirs(path, exist_ok=True)
    model = random_deepseek_v3(config, seed)
    with torch.no_grad():
        if embedding is not None:
            model.model.embed_tokens.weight.copy_(embedding)
        if zero_lm_head:
            model.lm_head.weight.zero_()
        if next_token_map is not None:
            for name, p in model.named_parameters():
                if name.endswith("self_attn.o_proj.weight") or name.endswith("mlp.down_proj.weight"):
                    p.zero_()
                if "experts" in name or "shared_experts" in name:
                    raise ValueError("map targets must be all-dense (first_k_dense_replace >= layers)")
            model.model.norm.weight.fill_(1.0)
            emb = model.model.embed_tokens.weight
            model.lm_head.weight.copy_(_map_head(emb, next_token_map, config.rms_norm_eps))
            _check_map(emb, model.lm_head.weight, next_token_map, config.rms_norm_eps)
    model.config.architectures = ["DeepseekV3ForCausalLM"]
    model.save_pretrained(path, safe_serialization=True, max_shard_size="10GB")
    return str(path)


def _rms(x, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def _map_head(emb, mapping: Callable[[int], int], eps) -> torch.Tensor:
    n = _rms(emb.float(), eps)
    head = torch.zeros_like(n)
    for x in range(emb.shape[0]):
        head[mapping(x)] += n[x]
    return head


def _check_map(emb, head, mapping, eps, min_margin=4.0, hot=None):
    """Every token x whose mapping(x) has a head row gets that row as its clear top logit. hot: the target id of each
    row of a compact head (default: row j is target id j, every x checked)."""
    logits = _rms(emb.float(), eps) @ head.float().T
    top2 = logits.topk(2, dim=-1)
    row = {t: j for j, t in enumerate(range(head.shape[0]) if hot is None else hot)}
    xs = [x for x in range(emb.shape[0]) if mapping(x) in row]
    want = torch.tensor([row[mapping(x)] for x in xs])
    assert xs and torch.equal(top2.indices[xs, 0], want), "map head does not realise the map"
    margin = (top2.values[xs, 0] - top2.values[xs, 1]).min().item()
    assert margin > min_margin, f"map head margin too small: {margin}"


def write_map_draft_checkpoint(path, target_config, target_embedding, draft_map, layer_ids=DEFAULT_LAYER_IDS,
                               hot=None, attention=None, **config_overrides):
    """A draft whose every proposal is ``draft_map(x)``, x = token of the target aux it was fed.

    hot: a compact draft (SpecForge's form for large vocabularies): its vocabulary is these target ids
    (``draft_vocab_size`` len(hot), lm_head rows in this order, a valid ``d2t`` mapping draft id i to hot[i]); it
    proposes draft_map(x) where that is one of them, else some id of them (never draft_map(x)). `attention`: the
    attention weights to ship instead of a zero o_proj (position_draft's); `config_overrides` go to its config."""
    h = int(target_config.hidden_size)
    vocab = int(target_config.vocab_size) if hot is None else len(hot)
    cfg = eagle3_draft_config(target_config, layer_ids=layer_ids, draft_vocab_size=vocab, **config_overrides)
    k = len(layer_ids) if layer_ids else 3
    fc = torch.zeros(h, h * k)
    fc[:, :h] = torch.eye(h)  # first aux chunk (= E[x]) passes through
    head = _map_head(target_embedding, draft_map, cfg["rms_norm_eps"])
    extra = {}
    if hot is not None:
        ids = torch.tensor(hot, dtype=torch.long)
        head = head[ids].contiguous()
        extra["d2t"] = ids - torch.arange(len(hot), dtype=torch.long)  # draft id i -> target id i + d2t[i]
    _check_map(target_embedding, head, draft_map, cfg["rms_norm_eps"], hot=hot)
    state = {
        **extra,
        "fc.weight": fc,
        "midlayer.self_attn.o_proj.weight": torch.zeros(h, h),
        "midlayer.mlp.down_proj.weight": torch.zeros(h, cfg["intermediate_size"]),
        "lm_head.weight": head,
        # SGLang replaces it with the target's anyway; ship the same one.
        "embed_tokens.weight": target_embedding.clone(),
    }
    state.update(attention or {})
    return write_eagle3_draft_checkpoint(path, cfg, seed=1, state=state)


# --------------------------------------------------------------------------- expectations


def simulate_chain(T, D, prompt, max_new_tokens, num_steps=2):
    """Expected greedy EAGLE chain behaviour for map models (module doc), independent of SGLang.

    Returns dict(output_ids, verify_ct, num_correct_drafts, histogram, per_position, per_step).
    Counts follow SGLang 0.5.23's bookkeeping: every verify step that runs is counted with its
    full (untruncated) number of correct drafts; output ids are cut at ``max_new_tokens``.
    """
    x = prompt[-1]
    out = [T(x)]  # the prefill's token
    steps = []
    while len(out) < max_new_tokens:
        v, d = T(x), D(x)
        acc, last = 0, v
        for _ in range(num_steps):
            if d == T(last):
                acc += 1
                last = d
            else:
                break
        out += [d] * acc + [T(last)]
        steps.append(acc)
        x = last
    hist = [0] * (max(steps, default=0) + 1)
    for a in steps:
        hist[a] += 1
    return dict(
        output_ids=out[:max_new_tokens],
        verify_ct=len(steps),
        num_correct_drafts=sum(steps),
        histogram=hist,
        per_position=[sum(1 for a in steps if a >= k) for k in range(1, num_steps + 1)],
        per_step=steps,
    )


# --------------------------------------------------------------------------- cases

VOCAB = 256
FIXED_POINT = 200  # map target: T(x) = x + 1 (mod V), except T(200) = 200
MIXED_LO, MIXED_HI = 100, 160  # map draft: wrong (D(x) = x) for x % 3 == 0 in [100, 160)


def map_target(x: int) -> int:
    return x if x == FIXED_POINT else (x + 1) % VOCAB


def map_draft(x: int) -> int:
    if MIXED_LO <= x < MIXED_HI and x % 3 == 0:
        return x  # never right: T(T(x)) = x + 2
    return map_target(map_target(x))


# prompt, max_new_tokens: each prompt exercises one acceptance pattern of the "map" pair
MAP_PROMPTS = {
    # position 1 always accepted, position 2 never (T has no fixed point on the way)
    "pos1_always_pos2_never": ([10, 11, 12, 13, 14], 9),
    # climbs into the fixed point 200: first two steps accept 1, then every draft accepted
    "into_fixed_point": ([190, 191, 192, 193, 194], 11),
    # mixed region: some steps reject position 1
    "mixed": ([96, 97, 98, 99, 100], 16),
}


VOCAB_MISSING_DRAFT_VOCAB = 128
# "vocab_missing": token streams below, across and above the draft's 128 ids (T(x) = x + 1 up to the fixed point 200)
VOCAB_PROMPTS = {
    "below": ([10, 11, 12, 13], 12),
    "across": ([96, 97, 98, 99, 100], 40),
    "above": ([150, 151, 152], 16),
}


# "vocab_domain": a compact draft over the target ids of another domain than the served traffic's. Its vocabulary (a
# valid d2t) is the upper half of the map target's ids; it proposes T(T(x)) (right at position 1 wherever that is in
# its vocabulary). Prompts of the same shape (4 tokens, 61 new, never reaching the fixed point 200) in its domain
# (every step accepts position 1: 30 steps of 2 tokens) and outside it (below 128: every step commits 1 token).
DOMAIN_HOT = tuple(range(VOCAB // 2, VOCAB))
DOMAIN_PROMPTS = {
    "in": {f"in-{p}": (list(range(p - 3, p + 1)), 61) for p in (130, 132, 134, 136)},
    "out": {f"out-{p}": (list(range(p - 3, p + 1)), 61) for p in (20, 35, 50, 65)},
}


def domain_draft(x: int) -> int:
    return map_target(map_target(x))


def domain_proposal(x: int) -> int:
    """What the "vocab_domain" draft proposes for simulate_chain: T(T(x)) inside its vocabulary; outside it some id of
    its vocabulary, which is never the target's next token there (T(T(x)) is not in it): -1."""
    d = domain_draft(x)
    return d if d >= DOMAIN_HOT[0] else -1


def build_case(root, name: str, *, num_steps: int = 2) -> dict:
    """Write the checkpoints of one case under ``root/name``; returns
    dict(target=path, draft=path, expected=..., args=[extra server args]).

    Cases: "random", "zero_head", "map", "vocab_missing" (draft over 128 of 256 ids, no d2t), "vocab_domain" (a
    compact map draft over target ids 128..255 through a valid d2t), "rope" and "rope_built"
    (sglang_cpu.position_draft: rope_theta 10000 / 1e6 in config.json), "fc_width" (num_aux 4 vs 3 captured),
    "eagle_algo"
    (an EAGLE-3 draft under --speculative-algorithm EAGLE, whose checkpoint also holds an fc_norm weight
    that its config does not enable)."""
    base = os.path.join(str(root), name)
    tcfg = spec_target_config()
    tpath = os.path.join(base, "target")
    dpath = os.path.join(base, "draft")
    algo = "EAGLE3"
    expected: dict = {}
    if name == "random":
        write_target_checkpoint(tpath, tcfg, seed=0)
        write_eagle3_draft_checkpoint(dpath, eagle3_draft_config(tcfg), seed=0)
        expected = dict(note="greedy output equals the non-speculative server's")
    elif name == "zero_head":
        write_target_checkpoint(tpath, tcfg, seed=0, zero_lm_head=True)
        write_eagle3_draft_checkpoint(dpath, eagle3_draft_config(tcfg), seed=0, zero_lm_head=True)
        T = D = lambda x: 0  # noqa: E731
        expected = dict(prompts={"all_accepted": ([10, 11, 12, 13, 14], 7)}, T=T, D=D)
    elif name == "map":
        write_target_checkpoint(tpath, tcfg, seed=0, next_token_map=map_target)
        emb = random_deepseek_v3(tcfg, 0).model.embed_tokens.weight.detach()
        write_map_draft_checkpoint(dpath, tcfg, emb, map_draft)
        expected = dict(prompts=dict(MAP_PROMPTS), T=map_target, D=map_draft)
    elif name == "vocab_missing":
        # The map target with a draft over a smaller vocabulary (128 of 256) whose checkpoint has no d2t: SGLang uses
        # draft ids as target ids 0..127. Its lm_head is zero, so it proposes draft id 0 every time, never what the
        # map target says on these prompts: every verify step commits one token, the target's.
        write_target_checkpoint(tpath, tcfg, seed=0, next_token_map=map_target)
        write_eagle3_draft_checkpoint(dpath, eagle3_draft_config(tcfg, draft_vocab_size=VOCAB_MISSING_DRAFT_VOCAB),
                                      seed=0, zero_lm_head=True)
        expected = dict(prompts=dict(VOCAB_PROMPTS), T=map_target, D=lambda x: 0)
    elif name == "vocab_domain":
        write_target_checkpoint(tpath, tcfg, seed=0, next_token_map=map_target)
        emb = random_deepseek_v3(tcfg, 0).model.embed_tokens.weight.detach()
        write_map_draft_checkpoint(dpath, tcfg, emb, domain_draft, hot=DOMAIN_HOT)
        prompts = {**DOMAIN_PROMPTS["in"], **DOMAIN_PROMPTS["out"]}
        expected = dict(prompts=prompts, T=map_target, D=domain_proposal, hot=DOMAIN_HOT)
    elif name in ("rope", "rope_built"):
        # position_draft: a draft built for rope_theta 1e6 whose attention rests on a sink token; "rope" ships it
        # with config.json's rope_theta 10000 (acceptance falls with position), "rope_built" with 1e6.
        from sglang_cpu import position_draft as P

        emb = P.marked_embedding(random_deepseek_v3(tcfg, 0).model.embed_tokens.weight)
        write_target_checkpoint(tpath, tcfg, seed=0, next_token_map=P.rope_target, embedding=emb)
        theta = P.DEFAULT_ROPE_THETA if name == "rope" else P.BUILT_ROPE_THETA
        attention = P.attention_state(emb, float(tcfg.rms_norm_eps))
        write_map_draft_checkpoint(dpath, tcfg, emb, P.rope_draft, attention=attention, rope_theta=theta,
                                   num_attention_heads=P.HEADS)
        expected = dict(prompts=dict(P.ROPE_PROMPTS), T=P.rope_target, D=P.rope_draft, rope_theta=theta)
    elif name == "fc_width":
        write_target_checkpoint(tpath, tcfg, seed=0)
        write_eagle3_draft_checkpoint(dpath, eagle3_draft_config(tcfg, num_aux=4), seed=0)
    elif name == "eagle_algo":
        write_target_checkpoint(tpath, tcfg, seed=0)
        # Also a per-aux norm weight whose config flag (fc_norm) is missing: SGLang drops it without a word.
        extra = {"fc_norm.0.weight": torch.ones(int(tcfg.hidden_size))}
        write_eagle3_draft_checkpoint(dpath, eagle3_draft_config(tcfg), seed=0, state=extra)
        algo = "EAGLE"
    else:
        raise ValueError(f"unknown case {name!r}")
    if "prompts" in expected:
        expected["runs"] = {
            key: simulate_chain(expected["T"], expected["D"], p, n, num_steps)
            for key, (p, n) in expected["prompts"].items()
        }
    args = spec_server_args(dpath, algorithm=algo, num_steps=num_steps)
    return dict(target=tpath, draft=dpath, expected=expected, args=args, target_config=tcfg)


def spec_server_args(draft_path, *, algorithm="EAGLE3", num_steps=2):
    """Extra launch_server args (on top of SGLangServer's CPU base args) for a chain draft."""
    return [
        "--speculative-algorithm", algorithm,
        "--speculative-draft-model-path", str(draft_path),
        "--speculative-num-steps", str(num_steps),
        "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", str(num_steps + 1),
        "--decode-log-interval", "1",
    ]
