"""How far apart two healthy tensor-parallel ranks' aux fingerprints can be: the measurement behind the
tp_rank_divergence tolerances (eagle_probe/analysis/fingerprints.py).

Run:  .venv/bin/python benchmarks/tp_tolerance.py [--tp 8] [--tokens 256] [--width 7168] [--trials 3]

On a GPU, ranks that all-reduce bf16 partial sums in different orders (a one-shot custom all-reduce sums locally)
hold values that differ in the last bits. This reduces the same bf16 partials in two orders on the CPU (a residual
stream with a few massive-activation channels, as real LLMs have), fingerprints both with the probe's own
Fingerprinter, and prints the rms spread and 1 - cosine of the signatures beside the fraction of elements that
differ; then the same figures for two faults: a rank holding only its partial sum, and a slot scaled by 1.5.
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from eagle_probe.analysis.fingerprints import cosine, spread  # noqa: E402
from eagle_probe.runtime.values.fingerprint import Fingerprinter  # noqa: E402


def fingerprint(x):
    rms, _, _, _, signature = Fingerprinter(1, x.shape[-1], x.device).queue(x).read()[0]
    return rms, signature


def compare(a, b):
    (rms_a, sig_a), (rms_b, sig_b) = fingerprint(a), fingerprint(b)
    return spread([rms_a, rms_b]), 1 - cosine(sig_a, sig_b)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tp", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--width", type=int, default=7168)
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    print(f"{args.tp} bf16 partials of {args.tokens} x {args.width}, reduced in two orders")
    print(f"{'case':<34}{'rms spread':>12}{'1 - cosine':>12}{'elements differing':>20}")
    for trial in range(args.trials):
        base = torch.randn(args.tokens, args.width) * 0.5
        base[:, :4] *= 200
        parts = [(base / args.tp + torch.randn(args.tokens, args.width) * 0.05).bfloat16() for _ in range(args.tp)]
        forward, backward = parts[0].clone(), parts[-1].clone()
        for p in parts[1:]:
            forward = forward + p
        for p in reversed(parts[:-1]):
            backward = backward + p
        differing = float((forward != backward).float().mean())
        rms_spread, one_minus_cos = compare(forward, backward)
        print(f"{'healthy, other reduction order':<34}{rms_spread:>12.2e}{one_minus_cos:>12.2e}{differing:>20.3f}")
        if trial == 0:
            faults = (("fault: a rank's partial sum only", parts[0]), ("fault: scaled by 1.5", forward * 1.5))
            for name, fault in faults:
                rms_spread, one_minus_cos = compare(forward, fault)
                print(f"{name:<34}{rms_spread:>12.2e}{one_minus_cos:>12.2e}{'':>20}")


if __name__ == "__main__":
    main()
