"""Train a tiny DFlash (block-diffusion) draft for the committed seed target, whose acceptance depends on which
target layers feed it.

SGLang 0.5.23 drafts a DFlash block like this (sglang/srt/speculative/dflash_worker_v2.py, models/dflash.py):

- Context: every committed token j gets ``ctx_j = hidden_norm(fc(concat(target hidden at the capture layers)))``
  (after the prefill, and after each verify for the committed verify tokens); per draft layer its K/V are
  ``k_norm(k_proj(ctx_j))`` roped at position j, ``v_proj(ctx_j)`` (no input_layernorm), kept in the draft KV cache.
- Block: with n committed tokens and the verified bonus token b, the draft runs on ``[b, mask, mask, mask]`` at
  positions n..n+3 (embeddings from the TARGET's table; mask = ``dflash_config.mask_token_id``). Each draft layer is
  a Qwen3-style pre-norm decoder layer (q/k RMSNorm per head, neox rope) whose attention is NOT causal (no
  ``layer_types`` / ``is_causal`` in the config: ENCODER_ONLY): every block token sees the n context entries and
  all 4 block tokens. Final ``norm``, then the TARGET's lm_head; greedy argmax at block positions 1..3 drafts
  tokens n+1..n+3 (position 0's output is unused). The target verifies [b, d1, d2, d3] (chain, causal).
- Capture: ``dflash_config.target_layer_ids`` ids -> the DeepSeek target captures ``[i + 1 for i in ids]``, i.e.
  HF ``hidden_states[i + 1]`` (the OUTPUT of layer i). Without the key SGLang uses build_target_layer_ids(6, 2) =
  [1, 3] -> HF (2, 4), which never carry the key (only layer 4 mixes positions; HF 5 is its output).

This script trains that forward in plain torch (float32, fixed seeds, one CPU thread by default) with ids (3, 4) =
HF (4, 5) as the context, the target frozen (its embedding and lm_head too), every anchor n = 1..L-4 of each
training sequence at once (one attention mask: block a sees context j < n_a and its own 4 tokens). It prints the
held-out per-position accuracy with the trained layers and, for the same draft, with the default layers' features,
replays SGLang's greedy DFlash loop on the seed prompts for both, and writes examples/seed/weights/dflash/
(config.json + model.safetensors) and examples/seed/weights/dflash.json.

Deterministic (same bits on every run with one thread); about 4.5 minutes on a 2-core CPU.

Run:  .venv/bin/python examples/seed/train_dflash.py [--out examples/seed/weights]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from sglang_cpu import seed as S  # noqa: E402


def _load_seed_train():
    """examples/seed/train.py (the seed's trainer): data, target hidden states, RMSNorm, rope, summaries."""
    spec = importlib.util.spec_from_file_location("seed_train", os.path.join(HERE, "train.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


T = _load_seed_train()

DRAFT_SEED = 11
DATA_SEED = 12
EVAL_SEED = 112

BLOCK_SIZE = 4
NUM_LAYERS = 2
HEADS = 4
INTERMEDIATE = 256
STEPS = 3000
BATCH = 16
LR = 3e-3
EVAL_BATCH = 256
MASK_TOKEN_ID = 0  # the target's bos, never in the language; its (untrained) embedding row is the mask's
TRAINED_IDS = (3, 4)  # dflash_config.target_layer_ids the draft is trained with
DEFAULT_IDS = (1, 3)  # SGLang's build_target_layer_ids(6, 2), used when the config has no target_layer_ids


def hf_layers(ids) -> tuple[int, ...]:
    """HF hidden_states indices SGLang's DeepSeek target captures for DFlash ids: the output of layer i."""
    return tuple(int(i) + 1 for i in ids)


# ----------------------------------------------------------------------------------------------------- draft


def _heads(x, heads):  # [B, T, heads*hd] -> [B, heads, T, hd]
    return x.view(x.shape[0], x.shape[1], heads, -1).transpose(1, 2)


class DFlashLayer(nn.Module):
    """One decoder layer of SGLang's DFlashDraftModel (Qwen3-style, q/k norm, non-causal attention)."""

    def __init__(self, h, heads, hd, inter, eps, theta):
        super().__init__()
        self.heads, self.theta = heads, theta
        self.input_layernorm, self.post_attention_layernorm = T.RMSNorm(h, eps), T.RMSNorm(h, eps)
        self.q_norm, self.k_norm = T.RMSNorm(hd, eps), T.RMSNorm(hd, eps)
        self.q_proj, self.k_proj = nn.Linear(h, heads * hd, bias=False), nn.Linear(h, heads * hd, bias=False)
        self.v_proj, self.o_proj = nn.Linear(h, heads * hd, bias=False), nn.Linear(heads * hd, h, bias=False)
        self.gate_proj, self.up_proj = nn.Linear(h, inter, bias=False), nn.Linear(h, inter, bias=False)
        self.down_proj = nn.Linear(inter, h, bias=False)

    def context_kv(self, ctx, positions):
        """K/V SGLang writes to the draft KV cache for context features ``ctx`` [B, L, h] (kv_proj_only, k norm,
        rope at the context positions)."""
        k = T.rope(self.k_norm(_heads(self.k_proj(ctx), self.heads)), positions, self.theta)
        return k, _heads(self.v_proj(ctx), self.heads)

    def forward(self, x, positions, ctx_k, ctx_v, mask):
        """x: [B, Q, h] block residual stream; positions [Q]; mask [Q, L + Q] (True: attend)."""
        h = self.input_layernorm(x)
        q = T.rope(self.q_norm(_heads(self.q_proj(h), self.heads)), positions, self.theta)
        k = T.rope(self.k_norm(_heads(self.k_proj(h), self.heads)), positions, self.theta)
        v = _heads(self.v_proj(h), self.heads)
        attn = F.scaled_dot_product_attention(q, torch.cat([ctx_k, k], 2), torch.cat([ctx_v, v], 2), attn_mask=mask)
        x = x + self.o_proj(attn.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class DFlashDraft(nn.Module):
    """SGLang's DFlashDraftModel in plain torch, parameter names as its load_weights reads them."""

    def __init__(self, config: dict):
        super().__init__()
        h, eps, theta = config["hidden_size"], config["rms_norm_eps"], float(config["rope_theta"])
        num_ctx = len(config["dflash_config"]["target_layer_ids"])
        self.fc = nn.Linear(num_ctx * h, h, bias=False)
        self.hidden_norm, self.norm = T.RMSNorm(h, eps), T.RMSNorm(h, eps)
        self.layers = nn.ModuleList(
            DFlashLayer(h, config["num_attention_heads"], config["head_dim"], config["intermediate_size"], eps, theta)
            for _ in range(config["num_hidden_layers"]))
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.05 if "fc" not in name else 0.02)

    def forward(self, features, embeds, anchors, mask):
        """features [B, L, K*h] (target hidden states at the context positions 0..L-1), embeds [B, A*block, h]
        (target embeddings of [bonus, mask...] per anchor), anchors: the A block start positions. Returns the final
        normed hidden states [B, A*block, h] (logits = target lm_head of them)."""
        ctx = self.hidden_norm(self.fc(features))
        ctx_pos = torch.arange(features.shape[1])
        positions = (torch.as_tensor(anchors)[:, None] + torch.arange(BLOCK_SIZE)).reshape(-1)
        x = embeds
        for layer in self.layers:
            ctx_k, ctx_v = layer.context_kv(ctx, ctx_pos)
            x = layer(x, positions, ctx_k, ctx_v, mask)
        return self.norm(x)

    def checkpoint_state(self) -> dict:
        """The parameters under SGLang's checkpoint names (``layers.i.self_attn.*``, ``layers.i.mlp.*``)."""
        return {checkpoint_name(name): p.detach().clone().contiguous() for name, p in self.named_parameters()}


_ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm")
_MLP = ("gate_proj", "up_proj", "down_proj")


def checkpoint_name(name: str) -> str:
    """``layers.0.q_proj.weight`` -> ``layers.0.self_attn.q_proj.weight`` (mlp likewise); others as they are."""
    parts = name.split(".")
    if parts[0] == "layers" and parts[2] in _ATTENTION + _MLP:
        parts.insert(2, "self_attn" if parts[2] in _ATTENTION else "mlp")
    return ".".join(parts)


def block_mask(anchors, context_len) -> torch.Tensor:
    """[A*block, L + A*block]: block a's tokens see context j < anchors[a] and their own block (not causal)."""
    anchors = torch.as_tensor(anchors)
    blocks = torch.arange(len(anchors)).repeat_interleave(BLOCK_SIZE)
    ctx = torch.arange(context_len)[None, :] < anchors[blocks][:, None]
    own = blocks[:, None] == blocks[None, :]
    return torch.cat([ctx, own], dim=1)


def block_embeds(embed_table, tokens, anchors):
    """Target embeddings of [token at n, mask x (block-1)] for every anchor n: [B, A*block, h]."""
    ids = torch.full((tokens.shape[0], len(anchors), BLOCK_SIZE), MASK_TOKEN_ID, dtype=torch.long)
    ids[:, :, 0] = tokens[:, list(anchors)]
    return embed_table[ids.reshape(tokens.shape[0], -1)]


def draft_config(target_cfg, target_layer_ids=TRAINED_IDS, intermediate=INTERMEDIATE) -> dict:
    """config.json of the draft: a Qwen3-typed DFlashDraftModel with its dflash_config."""
    h = int(target_cfg.hidden_size)
    dflash = {"block_size": BLOCK_SIZE, "num_target_layers": int(target_cfg.num_hidden_layers),
              "mask_token_id": MASK_TOKEN_ID, "mask_token": "<|MASK|>"}
    if target_layer_ids is not None:
        dflash["target_layer_ids"] = [int(i) for i in target_layer_ids]
    return dict(
        architectures=["DFlashDraftModel"], model_type="qwen3", vocab_size=int(target_cfg.vocab_size),
        hidden_size=h, intermediate_size=intermediate, num_hidden_layers=NUM_LAYERS, num_attention_heads=HEADS,
        num_key_value_heads=HEADS, head_dim=h // HEADS, hidden_act="silu", attention_bias=False,
        max_position_embeddings=512, rms_norm_eps=float(target_cfg.rms_norm_eps), rope_theta=10000.0,
        tie_word_embeddings=False, bos_token_id=0, eos_token_id=1, torch_dtype="float32",
        block_size=BLOCK_SIZE, num_target_layers=int(target_cfg.num_hidden_layers), dflash_config=dflash)


# ------------------------------------------------------------------------------------------------ training


class Frozen:
    """The target and what the draft borrows from it: embedding table, lm_head, hidden states by HF index."""

    def __init__(self, target):
        self.target = target
        self.embed = target.model.embed_tokens.weight.detach()
        self.lm_head = target.lm_head.weight.detach()

    def features(self, tokens, layers):
        hs = T.target_hidden(self.target, tokens)
        return torch.cat([hs[i] for i in layers], dim=-1)


def block_logits(draft, frozen, tokens, features, anchors):
    embeds = block_embeds(frozen.embed, tokens, anchors)
    hidden = draft(features, embeds, anchors, block_mask(anchors, features.shape[1]))
    return (hidden @ frozen.lm_head.T).view(tokens.shape[0], len(anchors), BLOCK_SIZE, -1)


def block_targets(tokens, anchors):
    """[B, A, block-1]: tokens n+1..n+block-1 for every anchor n."""
    idx = torch.as_tensor(anchors)[:, None] + torch.arange(1, BLOCK_SIZE)
    return tokens[:, idx]


def train_anchors(length=S.TRAIN_SEQ_LEN):
    return list(range(1, length - BLOCK_SIZE + 1))


def train_draft(draft, frozen, layers, steps, rng, log):
    opt = torch.optim.AdamW(draft.parameters(), lr=LR, betas=(0.9, 0.98), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, T.lr_lambda(steps))
    anchors = train_anchors()
    for step in range(steps):
        tokens = T.sample_batch(rng, BATCH)
        logits = block_logits(draft, frozen, tokens, frozen.features(tokens, layers), anchors)[:, :, 1:]
        want = block_targets(tokens, anchors)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), want.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        if step % 200 == 0 or step == steps - 1:
            acc = (logits.argmax(-1) == want).float().mean(dim=(0, 1))
            acc = [round(a, 3) for a in acc.tolist()]
            log(f"dflash step {step:5d}  loss {loss.item():.4f}  batch acc per position {acc}")


@torch.no_grad()
def block_accuracy(draft, frozen, layers, tokens, min_anchor=S.PROMPT_LEN):
    """Teacher-forced, every anchor n >= min_anchor: accuracy of block positions 1..3, and the mean accept length
    of a greedy chain verify (1 + leading correct drafts)."""
    anchors = [n for n in train_anchors(tokens.shape[1]) if n >= min_anchor]
    logits = block_logits(draft, frozen, tokens, frozen.features(tokens, layers), anchors)[:, :, 1:]
    hits = logits.argmax(-1) == block_targets(tokens, anchors)
    leading = hits.int().cumprod(dim=-1).sum(-1).float()
    result = {f"position{i + 1}": round(hits[..., i].float().mean().item(), 4) for i in range(BLOCK_SIZE - 1)}
    result["accept_length"] = round(1 + leading.mean().item(), 4)
    return result


# ------------------------------------------------------------------------------------------ serving replay


@torch.no_grad()
def propose(draft, frozen, committed, bonus, layers):
    """SGLang's greedy DFlash block after ``committed`` (context) with the verified ``bonus`` token."""
    tokens = torch.tensor([committed + [bonus]])
    n = len(committed)
    logits = block_logits(draft, frozen, tokens, frozen.features(tokens[:, :n], layers), [n])
    return logits[0, 0, 1:].argmax(-1).tolist()


@torch.no_grad()
def simulate(draft, frozen, layers, prompt, max_new_tokens=S.MAX_NEW_TOKENS):
    """Plain-torch replay of SGLang's greedy DFlash loop: prefill, then per round draft a block, verify
    [bonus, d1..d3], accept the longest matching prefix, take the target's next token as the new bonus. Counts every
    verify step with its full number of correct drafts (as SGLang's meta_info)."""
    committed = list(prompt)
    bonus = int(frozen.target(torch.tensor([committed])).logits[0, -1].argmax())
    out, per_step = [bonus], []
    while len(out) < max_new_tokens:
        drafts = propose(draft, frozen, committed, bonus, layers)
        verify = committed + [bonus] + drafts
        preds = frozen.target(torch.tensor([verify])).logits[0, len(committed):].argmax(-1).tolist()
        accepted = 0
        while accepted < len(drafts) and drafts[accepted] == preds[accepted]:
            accepted += 1
        committed += [bonus] + drafts[:accepted]
        bonus = preds[accepted]
        out += drafts[:accepted] + [bonus]
        per_step.append(accepted)
    return dict(output_ids=out[:max_new_tokens], verify_ct=len(per_step), num_correct_drafts=sum(per_step),
                per_step=per_step)


def replay(draft, frozen, layers):
    runs = [simulate(draft, frozen, layers, p) for p in S.PROMPTS]
    summary = T.summarize_runs(runs)
    summary["accept_histogram"] = [sum(r["per_step"].count(k) for r in runs) for k in range(BLOCK_SIZE)]
    summary["output_is_the_language"] = all(r["output_ids"] == S.continuation(p) for r, p in zip(runs, S.PROMPTS))
    return summary


# ---------------------------------------------------------------------------------------------------- output


def write_checkpoint(out_dir, draft, config):
    from safetensors.torch import save_file

    from sglang_cpu.dflash_models import random_dflash_draft_state

    state = draft.checkpoint_state()
    expected = random_dflash_draft_state(config)  # the names and shapes DFlashDraftModel.load_weights consumes
    if {k: tuple(v.shape) for k, v in state.items()} != {k: tuple(v.shape) for k, v in expected.items()}:
        raise ValueError(f"checkpoint names/shapes differ from SGLang's: {sorted(set(state) ^ set(expected))}")
    ddir = os.path.join(out_dir, "dflash")
    os.makedirs(ddir, exist_ok=True)
    save_file({k: v.to(torch.float32) for k, v in state.items()}, os.path.join(ddir, "model.safetensors"))
    with open(os.path.join(ddir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    return ddir


def load_target(path=S.TARGET_PATH):
    from transformers import DeepseekV3ForCausalLM

    target = DeepseekV3ForCausalLM.from_pretrained(path).to(torch.float32).eval()
    target.requires_grad_(False)
    return target


def evaluate(draft, frozen, log):
    eval_tokens = T.sample_batch(random.Random(EVAL_SEED), EVAL_BATCH)
    result = {}
    for name, ids in (("trained", TRAINED_IDS), ("default", DEFAULT_IDS)):
        layers = hf_layers(ids)
        acc = block_accuracy(draft, frozen, layers, eval_tokens)
        sim = replay(draft, frozen, layers)
        log(f"{name} ids {ids} = HF {layers}: held-out per-position accuracy {acc}")
        log(f"{name} ids {ids}: replayed serving, mean accept length {sim['mean_accept_length']}, correct drafts "
            f"{sim['num_correct_drafts']} of verify steps {sim['verify_ct']}, histogram {sim['accept_histogram']}")
        result[name] = {"target_layer_ids": list(ids), "hf_layers": list(layers), "heldout_accuracy": acc,
                        "replayed_serving": sim}
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=S.WEIGHTS_DIR)
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--intermediate", type=int, default=INTERMEDIATE)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: same bits on every run)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.monotonic()

    def log(msg):
        print(f"[{time.monotonic() - t0:7.1f}s] {msg}", flush=True)

    frozen = Frozen(load_target())
    config = draft_config(frozen.target.config, intermediate=args.intermediate)
    torch.manual_seed(DRAFT_SEED)
    draft = DFlashDraft(config)
    train_draft(draft, frozen, hf_layers(TRAINED_IDS), args.steps, random.Random(DATA_SEED), log)
    draft.eval()
    train_seconds = time.monotonic() - t0
    result = evaluate(draft, frozen, log)
    ddir = write_checkpoint(args.out, draft, config)
    record = {
        "block_size": BLOCK_SIZE, "num_layers": NUM_LAYERS, "heads": HEADS, "intermediate_size": args.intermediate,
        "mask_token_id": MASK_TOKEN_ID, "steps": args.steps, "batch": BATCH, "anchors_per_sequence":
        len(train_anchors()), "lr": LR, "eval_min_anchor": S.PROMPT_LEN, "eval_sequences": EVAL_BATCH,
        "seeds": {"draft": DRAFT_SEED, "data": DATA_SEED, "eval": EVAL_SEED}, **result,
        "torch": torch.__version__, "threads": args.threads, "train_seconds": round(train_seconds, 1),
        "total_seconds": round(time.monotonic() - t0, 1),
    }
    with open(os.path.join(args.out, "dflash.json"), "w") as f:
        json.dump(record, f, indent=2)
    log(f"wrote {ddir} and {os.path.join(args.out, 'dflash.json')}")


if __name__ == "__main__":
    main()
