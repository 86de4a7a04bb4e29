"""`eagle-probe reference`: the training data's aux slots as fingerprints (the running probe's own statistics and
signature), written to a JSON file; EAGLE_PROBE_REFERENCE=that file makes the running probe compare each live slot
with it (aux_value_mismatch)."""

import argparse
import json
import os
import sys

from ..reference_format import REFERENCE_FORMAT
from .specforge_data import DataError, read_samples


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "reference", help="write the fingerprints of SpecForge training data's aux slots (EAGLE_PROBE_REFERENCE)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="SpecForge offline data directory (*.ckpt, *.ckpt.gz)")
    parser.add_argument("-o", "--output", required=True, help="the JSON file to write")
    parser.set_defaults(func=run)
    return parser


def _real_rows(sample) -> int:
    """Rows before SpecForge's right padding (token id 0 with loss_mask 0 at the end)."""
    ids, mask = sample.input_ids.tolist(), sample.loss_mask.tolist()
    end = len(ids)
    while end > 1 and ids[end - 1] == 0 and mask[end - 1] == 0:
        end -= 1
    return end


def build(samples) -> dict:
    import torch

    from ..runtime.values.fingerprint import Fingerprinter

    hidden, slots = samples[0].hidden_size, samples[0].slots
    rows = torch.cat([s.aux_hidden_state[:_real_rows(s)].float() for s in samples])
    prints = Fingerprinter(slots, hidden, rows.device).queue(rows).read()
    return {"format": REFERENCE_FORMAT, "hidden_size": hidden, "samples": len(samples), "tokens": int(rows.shape[0]),
            "slots": [{"slot": k, "rms": rms, "mean": mean, "absmax": absmax, "nonfinite": nonfinite,
                       "signature": list(signature)}
                      for k, (rms, mean, absmax, nonfinite, signature) in enumerate(prints)]}


def run(args) -> int:
    try:
        data = read_samples(args.data)
    except DataError as exc:
        print(f"eagle-probe reference: {exc}", file=sys.stderr)
        return 2
    reference = build(data.samples)
    reference["source"] = os.path.abspath(args.data)
    try:
        with open(args.output, "w", encoding="utf-8") as handle:
            json.dump(reference, handle)
    except OSError as exc:
        print(f"eagle-probe reference: cannot write {args.output}: {exc.strerror}", file=sys.stderr)
        return 2
    for _path, why in data.skipped:
        print(f"eagle-probe reference: skipped {why}", file=sys.stderr)
    print(f"eagle-probe reference: {len(data.samples)} samples, {reference['tokens']} tokens, "
          f"{len(reference['slots'])} slots of width {reference['hidden_size']} -> {args.output}")
    return 0
