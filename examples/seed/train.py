"""Train the seed in miniature: a tiny DeepSeek-V3 target and an EAGLE-3 draft whose wiring matters.

1. The language (sglang_cpu/seed.py): ``[key, x0, x1, ...]``; data tokens alternate between two alphabets, and the
   key at position 0 names the map each alphabet's tokens follow. Every next token depends on the key.
2. The target: transformers' DeepseekV3ForCausalLM (6 dense MLA layers, hidden 64, vocab 128) trained on the
   language. Only layer 4's attention writes to the residual stream (the attention output projections of layers
   0-3 and 5 are zero and stay frozen), so the key reaches the residual stream at the output of layer 4
   (HF hidden_states[5]) and nowhere earlier; linear probes per layer show it on the trained weights.
3. The draft: the structure SGLang's LlamaForCausalLMEagle3 serves, written here in plain torch (fc 3 x 64 -> 64;
   one decoder layer over [input_layernorm(embedding(token t+1)) ; hidden_norm(fc(aux at t))]; final norm; its
   own lm_head), trained on the target's hidden states HF (3, 4, 5) with the target's frozen embedding (SGLang
   serves the draft with the target's embedding). Both chain steps are trained (training-time test): step 1 as
   SGLang's draft extend, step 2 as its draft decode (the draft's own pre-norm output as the hidden input, fc
   skipped, attending step 1's entries up to t and itself). During training the draft's attention sees, before t,
   another sequence's entries (its own entry at t stays its own): on its own history a one-layer draft learns to
   infer part of the key from earlier tokens; this way it must read it from the target's hidden state at t.
4. Checks the pair offline: per-step draft accuracy with the trained wiring and with the same layers one early
   (HF (2, 3, 4)), and a plain-torch replay of SGLang's greedy chain (topk 1, 2 draft tokens) on the prompts.
5. Writes examples/seed/weights/{target,draft}/ (config.json + model.safetensors, float32) and seed.json.

Deterministic: fixed seeds, one CPU thread by default. About 3 minutes on a 2-core CPU.

Run:  .venv/bin/python examples/seed/train.py [--out examples/seed/weights]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from sglang_cpu import seed as S  # noqa: E402

TARGET_SEED = 0
DRAFT_SEED = 1
DATA_SEED = 2
PROBE_SEED = 3

TARGET_STEPS = 2000
DRAFT_STEPS = 1500
BATCH = 32
EVAL_BATCH = 512

DRAFT_INTERMEDIATE = 256
DRAFT_WEIGHT_DECAY = 0.0
DRAFT_HEADS = 4

# ------------------------------------------------------------------------------------------------------ data


def sample_batch(rng: random.Random, n: int, length: int = S.TRAIN_SEQ_LEN) -> torch.Tensor:
    rows = [S.sequence(rng.randrange(S.KEY0, S.KEY0 + S.NUM_KEYS), rng.choice(S.DATA_TOKENS), length)
            for _ in range(n)]
    return torch.tensor(rows, dtype=torch.long)


def lr_lambda(steps: int, warmup: int = 50):
    def f(step):
        return min(1.0, (step + 1) / warmup) * max(0.02, 0.5 * (1 + math.cos(math.pi * min(step, steps) / steps)))
    return f


# ---------------------------------------------------------------------------------------------------- target


def target_config():
    from sglang_cpu.tiny_models import deepseek_v3_config

    return deepseek_v3_config(num_hidden_layers=S.NUM_LAYERS, first_k_dense_replace=S.NUM_LAYERS,
                              vocab_size=S.VOCAB, hidden_size=64, intermediate_size=128, num_attention_heads=4)


def build_target(config):
    from transformers import DeepseekV3ForCausalLM

    torch.manual_seed(TARGET_SEED)
    model = DeepseekV3ForCausalLM(config).to(torch.float32)
    frozen = []
    for i, layer in enumerate(model.model.layers):
        if i != S.MIXING_LAYER:
            # No position mixing before (or after) layer MIXING_LAYER: its attention adds nothing to the residual.
            layer.self_attn.o_proj.weight.data.zero_()
            layer.self_attn.o_proj.weight.requires_grad_(False)
            frozen.append(f"model.layers.{i}.self_attn.o_proj.weight")
    return model, frozen


def target_loss_and_acc(logits, tokens):
    # position t >= 1 predicts token t+1 (position 0 holds the key; the first data token is random)
    pred, want = logits[:, 1:-1], tokens[:, 2:]
    loss = F.cross_entropy(pred.reshape(-1, pred.shape[-1]), want.reshape(-1))
    return loss, (pred.argmax(-1) == want).float().mean().item()


class _ZeroAttention:
    """Stands in for the forward of an attention whose output projection is zero (frozen): the same result, zero,
    without computing it (training only; the saved model and every evaluation run the real forward)."""

    def __init__(self, attn):
        self.attn = attn

    def __enter__(self):
        self.attn.forward = lambda hidden_states, *args, **kwargs: (torch.zeros_like(hidden_states), None)

    def __exit__(self, *exc):
        del self.attn.forward


def train_target(model, steps, rng, log):
    params = [p for p in model.parameters() if p.requires_grad]
    skipped = [_ZeroAttention(layer.self_attn) for i, layer in enumerate(model.model.layers) if i != S.MIXING_LAYER]
    for ctx in skipped:
        ctx.__enter__()
    try:
        _train_target(model, params, steps, rng, log)
    finally:
        for ctx in skipped:
            ctx.__exit__()
    model.eval()


def _train_target(model, params, steps, rng, log):
    opt = torch.optim.AdamW(params, lr=3e-3, betas=(0.9, 0.98), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(steps))
    model.train()
    for step in range(steps):
        tokens = sample_batch(rng, BATCH)
        loss, acc = target_loss_and_acc(model(tokens).logits, tokens)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        if step % 100 == 0 or step == steps - 1:
            log(f"target step {step:5d}  loss {loss.item():.4f}  batch acc {acc:.4f}")


@torch.no_grad()
def target_hidden(model, tokens):
    """HF hidden_states: index i = residual stream entering layer i (0 = embedding output)."""
    return model(tokens, output_hidden_states=True).hidden_states


@torch.no_grad()
def target_accuracy(model, tokens):
    _, acc = target_loss_and_acc(model(tokens).logits, tokens)
    return acc


def key_probe(model, rng, ridge=1e-3):
    """Held-out accuracy of linear probes (ridge regression onto one-hot classes) that read, at every data position,
    the key (64 classes), its A map and its B map (8 classes each) from each residual stream HF 0..5."""
    train, test = sample_batch(rng, 1024), sample_batch(rng, 512)
    hs_train, hs_test = target_hidden(model, train), target_hidden(model, test)

    def labels(tokens):
        key = (tokens[:, :1] - S.KEY0).expand(-1, tokens.shape[1] - 1).reshape(-1)
        return {"key": (key, S.NUM_KEYS), "map_a": (key // S.NUM_MAPS, S.NUM_MAPS),
                "map_b": (key % S.NUM_MAPS, S.NUM_MAPS)}

    def features(hs):
        xs = hs[:, 1:].reshape(-1, hs.shape[-1]).to(torch.float64)
        return torch.cat([xs, torch.ones(xs.shape[0], 1, dtype=torch.float64)], dim=-1)

    result = {}
    for name in ("key", "map_a", "map_b"):
        (y_train, classes), (y_test, _) = labels(train)[name], labels(test)[name]
        result[name] = {}
        for index in range(S.NUM_LAYERS):
            x_train, x_test = features(hs_train[index]), features(hs_test[index])
            onehot = F.one_hot(y_train, classes).to(torch.float64)
            gram = x_train.T @ x_train + ridge * x_train.shape[0] * torch.eye(x_train.shape[1], dtype=torch.float64)
            weights = torch.linalg.solve(gram, x_train.T @ onehot)
            result[name][index] = round(((x_test @ weights).argmax(-1) == y_test).float().mean().item(), 4)
    return result


# ----------------------------------------------------------------------------------------------------- draft


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x, positions, theta):
    """Neox-style rotary embedding of x [B, heads, T, hd] at integer positions [T] (SGLang's Llama default)."""
    hd = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    freqs = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    cos, sin = freqs.cos(), freqs.sin()
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Eagle3Draft(nn.Module):
    """The structure SGLang's LlamaForCausalLMEagle3 serves (one input decoder layer), parameter names as in an
    EAGLE-3 checkpoint (``midlayer.*``, ``fc``, ``norm``, ``lm_head``)."""

    def __init__(self, config: dict, num_aux: int):
        super().__init__()
        h, self.heads = config["hidden_size"], config["num_attention_heads"]
        self.hd, inter, eps = config["head_dim"], config["intermediate_size"], config["rms_norm_eps"]
        self.theta = float(config["rope_theta"])
        vocab = config.get("draft_vocab_size") or config["vocab_size"]
        self.fc = nn.Linear(num_aux * h, h, bias=False)
        self.hidden_norm, self.input_layernorm = RMSNorm(h, eps), RMSNorm(h, eps)
        self.post_attention_layernorm, self.norm = RMSNorm(h, eps), RMSNorm(h, eps)
        self.q_proj = nn.Linear(2 * h, self.heads * self.hd, bias=False)
        self.k_proj = nn.Linear(2 * h, self.heads * self.hd, bias=False)
        self.v_proj = nn.Linear(2 * h, self.heads * self.hd, bias=False)
        self.o_proj = nn.Linear(self.heads * self.hd, h, bias=False)
        self.gate_proj = nn.Linear(h, inter, bias=False)
        self.up_proj = nn.Linear(h, inter, bias=False)
        self.down_proj = nn.Linear(inter, h, bias=False)
        self.lm_head = nn.Linear(h, vocab, bias=False)
        for lin in (self.fc, self.q_proj, self.k_proj, self.v_proj, self.o_proj, self.gate_proj, self.up_proj,
                    self.down_proj, self.lm_head):
            nn.init.normal_(lin.weight, std=0.05)

    def _split(self, x):  # [B, T, heads*hd] -> [B, heads, T, hd]
        return x.view(x.shape[0], x.shape[1], self.heads, self.hd).transpose(1, 2)

    def qkv(self, embeds, hidden, positions):
        """Input layer up to attention. ``hidden`` is fc's output (target-fed) or the draft's own pre-norm output."""
        x = torch.cat([self.input_layernorm(embeds), self.hidden_norm(hidden)], dim=-1)
        q = rope(self._split(self.q_proj(x)), positions, self.theta)
        k = rope(self._split(self.k_proj(x)), positions, self.theta)
        return q, k, self._split(self.v_proj(x))

    def finish(self, attn, residual):
        """o_proj, residual, MLP; returns (pre-norm output = what SGLang hands the next draft step, logits)."""
        b, _, t, _ = attn.shape
        residual = self.o_proj(attn.transpose(1, 2).reshape(b, t, -1)) + residual
        mlp = self.down_proj(F.silu(self.gate_proj(self.post_attention_layernorm(residual)))
                             * self.up_proj(self.post_attention_layernorm(residual)))
        out = mlp + residual
        return out, self.lm_head(self.norm(out))

    def attend(self, q, hist_k, hist_v, aligned_k, aligned_v):
        """Attention of the query for every base position t at once: to the history entries before t
        (hist_k[:, :, j] for j < t) and to entries aligned with t (aligned_k[i][:, :, t], the query's own entry
        last). With hist = the first step's own keys and aligned = [those keys], this is plain causal attention."""
        t = q.shape[2]
        scale = self.hd ** -0.5
        strict = torch.ones(t, t, dtype=torch.bool).tril(-1)
        scores = [torch.matmul(q, hist_k[:, :, :t].transpose(-1, -2)).mul(scale).masked_fill(~strict, float("-inf"))]
        scores += [(q * ak[:, :, :t]).sum(-1, keepdim=True) * scale for ak in aligned_k]
        probs = torch.softmax(torch.cat(scores, dim=-1), dim=-1)
        attn = torch.matmul(probs[..., :t], hist_v[:, :, :t])
        for i, av in enumerate(aligned_v):
            attn = attn + probs[..., t + i: t + i + 1] * av[:, :, :t]
        return attn

    def first_step(self, embeds, aux, foreign=None):
        """Target-fed forward over base positions 0..T-1 (SGLang's draft extend): embeds = embedding(token t+1),
        aux = packed target hidden states at t; causal. ``foreign`` (a permutation of the batch, training only): the
        history before t comes from another sequence of the batch. Returns (out, logits, k, v)."""
        hidden = self.fc(aux)
        positions = torch.arange(embeds.shape[1])
        q, k, v = self.qkv(embeds, hidden, positions)
        if foreign is None:
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            attn = self.attend(q, k[foreign], v[foreign], [k], [v])
        out, logits = self.finish(attn, hidden)
        return out, logits, k, v

    def unroll(self, embed_table, tokens, aux, steps, foreign=None):
        """Teacher-forced chain of ``steps`` draft steps over every base position (training-time test). Step j
        (0-based) at base t predicts token t + 2 + j; for j >= 1 (SGLang's draft decode) the query sits at position
        t + j, its hidden input is step j-1's pre-norm output (fc skipped), and it attends the first step's entries
        0..t, the chain's earlier decode entries at t and itself. Returns the logits of every step."""
        length = tokens.shape[1]
        out, logits, k1, v1 = self.first_step(embed_table[tokens[:, 1:]], aux[:, : length - 1], foreign)
        hist_k, hist_v = (k1, v1) if foreign is None else (k1[foreign], v1[foreign])
        all_logits, aligned_k, aligned_v = [logits], [k1], [v1]
        for j in range(1, steps):
            t = length - 1 - j
            q, k, v = self.qkv(embed_table[tokens[:, 1 + j:]], out[:, :t], torch.arange(t) + j)
            aligned_k, aligned_v = [a[:, :, :t] for a in aligned_k] + [k], [a[:, :, :t] for a in aligned_v] + [v]
            out, logits = self.finish(self.attend(q, hist_k, hist_v, aligned_k, aligned_v), out[:, :t])
            all_logits.append(logits)
        return all_logits

    @torch.no_grad()
    def propose(self, embed_table, tokens, aux, steps):
        """The chain SGLang drafts after ``tokens`` = committed tokens + the pending verified token: greedy,
        topk 1. ``aux`` holds the target's packed hidden states at the committed positions."""
        n = tokens.shape[1] - 1
        out, logits, k1, v1 = self.first_step(embed_table[tokens[:, 1:]], aux[:, :n])
        draft = [int(logits[0, -1].argmax())]
        hidden, extra_k, extra_v = out[:, -1:], [], []
        for j in range(1, steps):
            embeds = embed_table[torch.tensor([[draft[-1]]])]
            q, k, v = self.qkv(embeds, hidden, torch.tensor([n - 1 + j]))
            keys = torch.cat([k1, *extra_k, k], dim=2)
            values = torch.cat([v1, *extra_v, v], dim=2)
            attn = F.scaled_dot_product_attention(q, keys, values)
            hidden, logits = self.finish(attn, hidden)
            extra_k.append(k)
            extra_v.append(v)
            draft.append(int(logits[0, -1].argmax()))
        return draft

    def checkpoint_state(self, embed_table) -> dict:
        """Tensors under the names SGLang's LlamaForCausalLMEagle3.load_weights reads."""
        names = {
            "fc.weight": self.fc, "lm_head.weight": self.lm_head,
            "midlayer.self_attn.q_proj.weight": self.q_proj, "midlayer.self_attn.k_proj.weight": self.k_proj,
            "midlayer.self_attn.v_proj.weight": self.v_proj, "midlayer.self_attn.o_proj.weight": self.o_proj,
            "midlayer.mlp.gate_proj.weight": self.gate_proj, "midlayer.mlp.up_proj.weight": self.up_proj,
            "midlayer.mlp.down_proj.weight": self.down_proj,
            "midlayer.hidden_norm.weight": self.hidden_norm, "midlayer.input_layernorm.weight": self.input_layernorm,
            "midlayer.post_attention_layernorm.weight": self.post_attention_layernorm, "norm.weight": self.norm,
        }
        state = {name: module.weight.detach().clone() for name, module in names.items()}
        state["embed_tokens.weight"] = embed_table.detach().clone()  # SGLang swaps in the target's; ship the same
        return state


def pack(hidden_states, layers):
    return torch.cat([hidden_states[i] for i in layers], dim=-1)


def draft_losses(draft, embed_table, tokens, aux, steps, foreign=None):
    losses, accs = [], []
    for j, logits in enumerate(draft.unroll(embed_table, tokens, aux, steps, foreign)):
        want = tokens[:, 2 + j:]
        pred = logits[:, : want.shape[1]]
        losses.append(F.cross_entropy(pred.reshape(-1, pred.shape[-1]), want.reshape(-1)))
        accs.append((pred.argmax(-1) == want).float().mean().item())
    return losses, accs


def train_draft(draft, target, embed_table, layers, steps, rng, log, chain=S.NUM_STEPS, weight_decay=0.0,
                foreign_history=True):
    """Trains every draft step of the chain on the target's hidden states of whole sequences. With
    ``foreign_history`` the draft's attention sees, before base position t, the entries of another sequence of the
    batch (its own entry at t is its own): it cannot learn to infer the key from earlier tokens (which a one-layer
    draft partly learns on this language) and must take it from the target's hidden state at t."""
    opt = torch.optim.AdamW(draft.parameters(), lr=3e-3, betas=(0.9, 0.98), weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(steps))
    for step in range(steps):
        tokens = sample_batch(rng, BATCH)
        aux = pack(target_hidden(target, tokens), layers)
        foreign = torch.roll(torch.arange(tokens.shape[0]), 1) if foreign_history else None
        losses, accs = draft_losses(draft, embed_table, tokens, aux, chain, foreign)
        sum(losses).backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        if step % 100 == 0 or step == steps - 1:
            log(f"draft  step {step:5d}  losses {[round(x.item(), 4) for x in losses]}  batch acc {accs}")


@torch.no_grad()
def draft_accuracy(draft, target, embed_table, layers, tokens, chain=S.NUM_STEPS):
    """Teacher-forced per-step accuracy over whole sequences (the draft's inputs from position 0, as SGLang gives
    them); also step 2 given step 1 right (what acceptance at position 2 needs)."""
    aux = pack(target_hidden(target, tokens), layers)
    logits = draft.unroll(embed_table, tokens, aux, chain)
    # base positions t >= 1 (t = 0 feeds the key token's own state; SGLang never drafts from it)
    hits = [(lg[:, 1: tokens.shape[1] - 2 - j].argmax(-1) == tokens[:, 3 + j:]) for j, lg in enumerate(logits)]
    result = {f"step{j + 1}": round(h.float().mean().item(), 4) for j, h in enumerate(hits)}
    if chain >= 2:
        both = hits[0][:, : hits[1].shape[1]] & hits[1]
        result["step2_given_step1"] = round((both.float().sum() / hits[0][:, : hits[1].shape[1]].float().sum()
                                             .clamp(min=1)).item(), 4)
    return result


# ------------------------------------------------------------------------------------------- chain replay


@torch.no_grad()
def simulate_chain(target, draft, embed_table, layers, prompt, max_new_tokens, num_steps=S.NUM_STEPS):
    """Plain-torch replay of SGLang's greedy EAGLE chain (topk 1): prefill, then per round draft ``num_steps``
    tokens, verify [pending, d1..], accept the longest matching prefix, take the target's bonus token. Counts as
    SGLang's meta_info does (every verify step that ran, with its full number of correct drafts)."""
    committed = list(prompt)
    pending = int(target(torch.tensor([committed])).logits[0, -1].argmax())
    out, per_step = [pending], []
    while len(out) < max_new_tokens:
        aux = pack(target_hidden(target, torch.tensor([committed])), layers)
        drafts = draft.propose(embed_table, torch.tensor([committed + [pending]]), aux, num_steps)
        verify = committed + [pending] + drafts
        preds = target(torch.tensor([verify])).logits[0, len(committed):].argmax(-1).tolist()
        accepted = 0
        while accepted < num_steps and drafts[accepted] == preds[accepted]:
            accepted += 1
        committed += [pending] + drafts[:accepted]
        out += drafts[:accepted] + [preds[accepted]]
        pending = preds[accepted]
        per_step.append(accepted)
    return dict(output_ids=out[:max_new_tokens], verify_ct=len(per_step), num_correct_drafts=sum(per_step),
                per_step=per_step)


def summarize_runs(runs):
    verify = sum(r["verify_ct"] for r in runs)
    correct = sum(r["num_correct_drafts"] for r in runs)
    per_request = [1 + r["num_correct_drafts"] / r["verify_ct"] for r in runs]
    return dict(mean_accept_length=round(1 + correct / verify, 4),
                mean_accept_length_per_request=[round(x, 4) for x in per_request],
                num_correct_drafts=[r["num_correct_drafts"] for r in runs],
                verify_ct=[r["verify_ct"] for r in runs])


# ---------------------------------------------------------------------------------------------------- output


def write_checkpoints(out_dir, target, draft, draft_cfg):
    from safetensors.torch import save_file

    tdir, ddir = os.path.join(out_dir, "target"), os.path.join(out_dir, "draft")
    os.makedirs(tdir, exist_ok=True)
    os.makedirs(ddir, exist_ok=True)
    target.config.architectures = ["DeepseekV3ForCausalLM"]
    target.save_pretrained(tdir, safe_serialization=True, max_shard_size="10GB")
    state = draft.checkpoint_state(target.model.embed_tokens.weight)
    save_file({k: v.contiguous().to(torch.float32) for k, v in state.items()}, os.path.join(ddir, "model.safetensors"))
    with open(os.path.join(ddir, "config.json"), "w") as f:
        json.dump(draft_cfg, f, indent=2)
    return tdir, ddir


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=S.WEIGHTS_DIR)
    parser.add_argument("--target-steps", type=int, default=TARGET_STEPS)
    parser.add_argument("--draft-steps", type=int, default=DRAFT_STEPS)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: same bits on every run)")
    parser.add_argument("--draft-weight-decay", type=float, default=DRAFT_WEIGHT_DECAY)
    parser.add_argument("--draft-intermediate", type=int, default=DRAFT_INTERMEDIATE)
    parser.add_argument("--draft-own-history", action="store_true",
                        help="train the draft on its own history (the draft then partly infers the key itself)")
    parser.add_argument("--target-from", help="load this target checkpoint instead of training one (draft only)")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    t0 = time.monotonic()

    def log(msg):
        print(f"[{time.monotonic() - t0:7.1f}s] {msg}", flush=True)

    from sglang_cpu.draft_models import eagle3_draft_config

    rng = random.Random(DATA_SEED)
    eval_tokens = sample_batch(random.Random(DATA_SEED + 100), EVAL_BATCH)

    tcfg = target_config()
    target, frozen = build_target(tcfg)
    if args.target_from:
        from transformers import DeepseekV3ForCausalLM

        target = DeepseekV3ForCausalLM.from_pretrained(args.target_from).to(torch.float32).eval()
        tcfg = target.config
        for _ in range(args.target_steps):  # the draft's data stream starts where it does after training
            sample_batch(rng, BATCH)
    else:
        train_target(target, args.target_steps, rng, log)
    target.requires_grad_(False)
    target_time = time.monotonic() - t0
    target_acc = target_accuracy(target, eval_tokens)
    log(f"target held-out next-token accuracy {target_acc:.4f}")
    probe = key_probe(target, random.Random(PROBE_SEED))
    log(f"linear-probe accuracy per HF hidden_states index (chance: key {1 / S.NUM_KEYS:.3f}, maps "
        f"{1 / S.NUM_MAPS:.3f}): {probe}")

    embed_table = target.model.embed_tokens.weight.detach()
    draft_cfg = eagle3_draft_config(tcfg, layer_ids=S.TRAINED_IDS, draft_vocab_size=S.VOCAB,
                                    num_attention_heads=DRAFT_HEADS, intermediate_size=args.draft_intermediate)
    torch.manual_seed(DRAFT_SEED)
    draft = Eagle3Draft(draft_cfg, num_aux=len(S.TRAINED_HF_LAYERS))
    t1 = time.monotonic()
    train_draft(draft, target, embed_table, S.TRAINED_HF_LAYERS, args.draft_steps, rng, log,
                weight_decay=args.draft_weight_decay, foreign_history=not args.draft_own_history)
    draft.eval()
    draft_time = time.monotonic() - t1

    acc_right = draft_accuracy(draft, target, embed_table, S.TRAINED_HF_LAYERS, eval_tokens)
    acc_wrong = draft_accuracy(draft, target, embed_table, S.WRONG_HF_LAYERS, eval_tokens)
    log(f"draft accuracy, trained wiring HF {S.TRAINED_HF_LAYERS}: {acc_right}")
    log(f"draft accuracy, wrong wiring HF {S.WRONG_HF_LAYERS}: {acc_wrong}")

    sims = {}
    for name, layers in (("trained", S.TRAINED_HF_LAYERS), ("wrong", S.WRONG_HF_LAYERS)):
        runs = [simulate_chain(target, draft, embed_table, layers, p, S.MAX_NEW_TOKENS) for p in S.PROMPTS]
        sims[name] = dict(summarize_runs(runs), per_step=[r["per_step"] for r in runs],
                          output_is_the_language=all(r["output_ids"] == S.continuation(p)
                                                     for r, p in zip(runs, S.PROMPTS)))
        log(f"replayed chain, {name} wiring HF {layers}: mean accept length {sims[name]['mean_accept_length']}, "
            f"correct drafts per request {sims[name]['num_correct_drafts']} of verify steps {sims[name]['verify_ct']}")

    tdir, ddir = write_checkpoints(args.out, target, draft, draft_cfg)
    record = {
        "language": {
            "vocab": S.VOCAB, "alphabet_size": S.N, "alphabets": [[S.A0, S.A0 + S.N - 1], [S.B0, S.B0 + S.N - 1]],
            "keys": [S.KEY0, S.KEY0 + S.NUM_KEYS - 1], "maps_per_alphabet": S.NUM_MAPS,
            "language_seed": S.LANGUAGE_SEED, "train_seq_len": S.TRAIN_SEQ_LEN,
        },
        "target": {
            "layers": S.NUM_LAYERS, "mixing_layer": S.MIXING_LAYER, "frozen_zero": frozen,
            "steps": args.target_steps, "batch": BATCH, "heldout_next_token_accuracy": round(target_acc, 4),
            "linear_probe_accuracy_by_hf_index": probe, "train_seconds": round(target_time, 1),
        },
        "draft": {
            "trained_hf_layers": list(S.TRAINED_HF_LAYERS), "eagle_config_ids": list(S.TRAINED_IDS),
            "capture_rule": "sglang 0.5.23: +1 only when the first id is 1, else as given",
            "wrong_hf_layers": list(S.WRONG_HF_LAYERS), "wrong_ids": list(S.WRONG_IDS),
            "steps": args.draft_steps, "batch": BATCH, "chain_steps_trained": S.NUM_STEPS,
            "intermediate_size": args.draft_intermediate,
            "weight_decay": args.draft_weight_decay, "foreign_history": not args.draft_own_history,
            "heldout_accuracy_trained_wiring": acc_right, "heldout_accuracy_wrong_wiring": acc_wrong,
            "train_seconds": round(draft_time, 1),
        },
        "replayed_chain": {"num_steps": S.NUM_STEPS, "topk": 1, "max_new_tokens": S.MAX_NEW_TOKENS,
                           "prompts": S.PROMPTS, **sims},
        "seeds": {"target": TARGET_SEED, "draft": DRAFT_SEED, "data": DATA_SEED, "probe": PROBE_SEED,
                  "eval_data": DATA_SEED + 100, "prompts": 1234, "language": S.LANGUAGE_SEED},
        "target_loaded_from": args.target_from,
        "torch": torch.__version__, "threads": args.threads,
        "total_seconds": round(time.monotonic() - t0, 1),
    }
    with open(os.path.join(args.out, "seed.json"), "w") as f:
        json.dump(record, f, indent=2)
    log(f"wrote {tdir}, {ddir} and {os.path.join(args.out, 'seed.json')}")


if __name__ == "__main__":
    main()
