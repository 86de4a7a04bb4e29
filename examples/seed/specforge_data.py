"""Write SpecForge-format EAGLE-3 training data for the seed pair, captured through SGLang itself (as SpecForge's
`prepare_hidden_states.py` does: an in-process model, `set_eagle3_layers_to_capture(ids)`, one full-sequence
prefill per sample, no CUDA graph), into `{out}/rows_0-2000/data_{i}.ckpt` (a torch.save'd dict with input_ids,
loss_mask, hidden_state [1, seq, H], aux_hidden_state [1, seq, K*H]).

Run:  .venv/bin/python examples/seed/specforge_data.py --out DIR [--ids 3 4 5] [--samples 8]
"""

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)


def load_target(path):
    """SGLang's real DeepseekV3ForCausalLM with the checkpoint's weights (and transformers' model for the final
    hidden state SpecForge stores as `hidden_state`)."""
    from sglang.srt.models.deepseek_v2 import DeepseekV3ForCausalLM
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(path).eval()
    model = DeepseekV3ForCausalLM(hf.config, quant_config=None).eval()
    model.load_weights((name, t.detach().clone()) for name, t in hf.state_dict().items())
    return model, hf


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--ids", type=int, nargs="+", help="capture ids (default: the seed's trained ids)")
    parser.add_argument("--samples", type=int, default=8)
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from sglang_cpu import seed, shims

    shims.apply()
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    from sglang_cpu.runtime import TinyBatchRunner, init_runtime

    init_runtime()
    model, hf = load_target(seed.TARGET_PATH)
    ids = list(args.ids or seed.TRAINED_IDS)
    model.set_eagle3_layers_to_capture(ids)
    runner = TinyBatchRunner(model)
    rows = os.path.join(args.out, "rows_0-2000")
    os.makedirs(rows, exist_ok=True)
    # the language's prompts with their continuations: what the draft learned from (and what a server is sent)
    sequences = [list(p) + seed.continuation(p) for p in seed.PROMPTS[:args.samples]]
    for i, tokens in enumerate(sequences):
        runner.reset()
        aux = runner.extend([tokens], capture_hidden_mode=CaptureHiddenMode.FULL).hidden_states
        with torch.no_grad():
            final = hf(torch.tensor([tokens]), output_hidden_states=True).hidden_states[-1][0]
        torch.save({"input_ids": torch.tensor(tokens), "loss_mask": torch.ones(len(tokens), dtype=torch.long),
                    "hidden_state": final.unsqueeze(0).clone(), "aux_hidden_state": aux.unsqueeze(0).clone()},
                   os.path.join(rows, f"data_{i}.ckpt"))
    captured = list(model.model.layers_to_capture)
    print(f"wrote {len(sequences)} SpecForge samples (capture ids {ids} -> indices {captured}) to {rows}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
