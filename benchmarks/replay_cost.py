"""What `eagle-probe replay --search` costs: one wiring evaluation timed on a draft of realistic width, extrapolated
to the search over a 61-layer target.

The default shape is SpecForge's Kimi-K2.5 EAGLE-3 draft (configs/kimi-k25-eagle3.json in SpecForge: hidden 7168,
64 heads of 128, 64 KV heads, intermediate 18432, draft vocabulary 32000, 3 aux states of a 7168-wide target,
vocabulary 163840). Random weights in memory (no checkpoint); the rows are split into requests of --request-len
tokens. Timed: the one-time set-up (the target's greedy tokens over its whole vocabulary, the embedding lookups and
their half of q/k/v) and the per-wiring pass (fc, the decoder layer, the lm_head, argmax), the median of --repeat runs.

    .venv/bin/python benchmarks/replay_cost.py [--positions 256] [--device cpu] [--json]
"""

import argparse
import json
import statistics
import sys
import time

import torch

sys.path.insert(0, __file__.rsplit("/benchmarks/", 1)[0])

from eagle_probe.commands.replay.draft import TorchDraft  # noqa: E402
from eagle_probe.commands.replay.evaluate import greedy_tokens  # noqa: E402
from eagle_probe.commands.replay.run import flops_per_wiring  # noqa: E402
from eagle_probe.commands.replay.spec import DraftSpec, RopeSpec  # noqa: E402
from eagle_probe.commands.replay.weights import DraftWeights, Layer  # noqa: E402


def build(args, device) -> TorchDraft:
    h, heads, kv, hd, inter = args.hidden, args.heads, args.kv_heads, args.head_dim, args.intermediate
    spec = DraftSpec(file="(in memory)", hidden_size=h, target_hidden_size=args.target_hidden, num_aux=args.slots,
                     num_layers=1, num_heads=heads, num_kv_heads=kv, head_dim=hd, intermediate_size=inter,
                     rms_norm_eps=1e-6, vocab_size=args.target_vocab, draft_vocab_size=args.draft_vocab,
                     tie_word_embeddings=False, norm_before_fc=False, fc_norm=False, fc_bias=False, o_bias=False,
                     layer_ids=(2, 30, 58), rope=RopeSpec(1e6, hd, 131072))
    g = torch.Generator(device="cpu").manual_seed(0)

    def rnd(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(device)

    ones = torch.ones(h, device=device)
    layer = Layer(qkv=rnd((heads + 2 * kv) * hd, 2 * h), o=rnd(h, heads * hd), o_bias=None, gate=rnd(inter, h),
                  up=rnd(inter, h), down=rnd(h, inter), input_layernorm=ones, hidden_norm=ones,
                  post_attention_layernorm=ones)
    weights = DraftWeights(spec, fc=rnd(h, args.slots * args.target_hidden), fc_bias=None, input_norm=None,
                           fc_norm=None, layers=[layer], norm=ones, lm_head=rnd(args.draft_vocab, h),
                           d2t=torch.zeros(args.draft_vocab, dtype=torch.long, device=device),
                           embedding=torch.randn(4096, h, generator=g), embedding_source="target",
                           lm_head_source="draft", notes=[])
    return TorchDraft(weights, device)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--positions", type=int, default=256)
    p.add_argument("--request-len", type=int, default=128)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--target-hidden", type=int, default=7168)
    p.add_argument("--heads", type=int, default=64)
    p.add_argument("--kv-heads", type=int, default=64)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--intermediate", type=int, default=18432)
    p.add_argument("--draft-vocab", type=int, default=32000)
    p.add_argument("--target-vocab", type=int, default=163840)
    p.add_argument("--slots", type=int, default=3)
    p.add_argument("--target-layers", type=int, default=61)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    torch.set_grad_enabled(False)
    draft = build(args, device)
    n = args.positions
    lens = [min(args.request_len, n - s) for s in range(0, n, args.request_len)]
    segments = [(sum(lens[:i]), m) for i, m in enumerate(lens)]
    positions = torch.cat([torch.arange(m) for m in lens])
    tokens = torch.randint(0, 4096, (n,))

    def timed(fn):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start, out

    head = torch.randn(args.target_vocab, args.target_hidden, dtype=torch.bfloat16)
    finals = torch.randn(n, args.target_hidden)
    labels_s, _ = timed(lambda: greedy_tokens(finals, head, device))
    head = None  # free it before the draft's passes
    prepare_s, prepared = timed(lambda: draft.prepare(tokens, positions, segments))
    aux = torch.randn(n, args.slots * args.target_hidden, device=device)
    timed(lambda: draft.predict(aux, prepared))  # warm-up
    runs = [timed(lambda: draft.predict(aux, prepared))[0] for _ in range(args.repeat)]
    per_wiring = statistics.median(runs)
    flops = flops_per_wiring(draft.spec, n, args.draft_vocab)
    indices = args.target_layers  # the dumps hold hidden_states.0..L-1 (SGLang never captures HF index L)
    per_round = args.slots * indices
    out = {
        "device": str(device), "threads": torch.get_num_threads(), "positions": n,
        "shape": {k: getattr(args, k) for k in ("hidden", "target_hidden", "heads", "kv_heads", "head_dim",
                                                "intermediate", "draft_vocab", "target_vocab", "slots")},
        "setup_s": round(labels_s + prepare_s, 3), "labels_s": round(labels_s, 3), "prepare_s": round(prepare_s, 3),
        "seconds_per_wiring": round(per_wiring, 4), "runs_s": [round(r, 4) for r in runs],
        "flops_per_wiring": flops, "gflops_per_s": round(flops / per_wiring / 1e9, 1),
        "wirings_exhaustive": indices ** args.slots, "wirings_per_coordinate_round": per_round,
        "coordinate_3_rounds_s": round(3 * per_round * per_wiring, 1),
        "exhaustive_s": round(indices ** args.slots * per_wiring, 1),
    }
    if args.json:
        print(json.dumps(out))
    else:
        for key, value in out.items():
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
