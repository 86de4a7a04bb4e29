"""`eagle-probe replay`: the EAGLE-3 draft replayed in plain torch on the probe's dumps.

For each dumped position t whose next position is in the same request, the draft's first step gets the aux states
of t and the embedding of the token at t + 1 (SGLang's draft-extend input) and proposes a token; replay compares it
with the target's greedy token at t + 1 (its lm_head over the dumped final hidden state). Under greedy verification
that agreement is the position-0 acceptance rate. `--search` (all-layer dumps) finds the wiring, one HF
hidden_states index per aux slot, under which the draft agrees best: the layers it was most likely trained on. A DFlash
draft is scored instead by the expected accept length of its teacher-forced blocks on the prefill dumps.

Modules, one job each: spec (the draft config as SGLang reads it), checkpoints (safetensors reading), weights (a
draft checkpoint -> checked float32 weights), rope (rotary tables), attention (causal attention per request, batched),
draft (the torch draft's forward), dumps (dump files -> rows), evaluate (the target's tokens, agreement per wiring),
run (one replay -> report dict, text).
A DFlash draft (commands.block_drafts detects it) goes to block_draft (its block forward: a block of mask tokens
attending to the projected target states of the whole prefix) and block_run (teacher-forced blocks on the prefill
dumps, scored by expected accept length per wiring; the fix as dflash_config.target_layer_ids). A DSpark draft or a
DFlash variant block_draft does not implement is refused with the key that asks for it.
Exit status: 0, or 2 for bad input (the message names the file and what is wrong).
"""

import sys

from ..dump_dir_option import add_dump_dir_option

HELP = ("replay the EAGLE-3 or DFlash draft on the probe's dumps: agreement (or a DFlash block's accept length) per "
        "wiring, --search for the trained layers")


def cmd_replay(args) -> int:
    from ..block_drafts import block_draft

    block = block_draft(args.draft) is not None
    if block and args.draft_embedding is not None:
        print("eagle-probe replay: --draft-embedding applies to EAGLE-3 drafts only: a DFlash draft always reads the "
              "target's embed_tokens and lm_head", file=sys.stderr)
        return 2
    try:
        import safetensors  # noqa: F401
        import torch
    except ImportError as exc:
        print(f"eagle-probe replay: needs torch and safetensors in this environment ({exc})", file=sys.stderr)
        return 2
    from ..dump_files import DumpError
    from ..output import emit
    from .spec import ReplayInputError

    try:
        torch.set_grad_enabled(False)
        result, render = (_replay_block_draft if block else _replay_eagle3)(args)
    except (ReplayInputError, DumpError) as exc:
        print(f"eagle-probe replay: {exc}", file=sys.stderr)
        return 2
    except (MemoryError, torch.OutOfMemoryError) as exc:
        print(f"eagle-probe replay: out of memory ({exc}); use fewer dump files or --device cuda", file=sys.stderr)
        return 2
    return emit(result, args.format, render)


def _replay_eagle3(args):
    """(report, its text renderer) for an EAGLE-3 draft (run)."""
    from .run import render_text, replay

    return replay(args.draft, args.target, args.dump_dir, do_search=args.search, device_name=args.device,
                  draft_embedding=args.draft_embedding, wirings=args.wiring or (),
                  sglang_version=args.sglang_version), render_text


def _replay_block_draft(args):
    """(report, its text renderer) for a DFlash draft (block_run)."""
    from .block_run import render_block_text, replay_block_draft
    from .run import resolve_device, resolve_release

    notes: list[str] = []
    release = resolve_release(args.sglang_version, notes)
    return replay_block_draft(args.draft, args.target, args.dump_dir, do_search=args.search,
                              wirings=args.wiring or (), device=resolve_device(args.device), release=release,
                              notes=notes), render_block_text


def add_parser(sub) -> None:
    p = sub.add_parser("replay", help=HELP, description=__doc__.split("\n\n")[1])
    p.add_argument("--draft", required=True, help="EAGLE-3 or DFlash draft checkpoint directory (config.json + "
                   "*.safetensors); a DFlash draft is run as SGLang drafts a block (a DSpark draft is refused, exit 2)")
    p.add_argument("--target", required=True, help="target checkpoint directory: only model.embed_tokens.weight and "
                   "lm_head.weight are read (through model.safetensors.index.json)")
    add_dump_dir_option(p, "directory of the probe's dump files (EAGLE_PROBE_DUMP_DIR), or one")
    p.add_argument("--search", action="store_true", help="search the wiring the draft agrees best under (needs "
                   "EAGLE_PROBE_DUMP_LAYERS=all dumps)")
    p.add_argument("--wiring", action="append", metavar="SPEC", help="also score this wiring, e.g. hf:0,3,31 or "
                   "sglang:-1,2,30 (repeatable; needs all-layer dumps)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--draft-embedding", choices=("target", "own"), default=None,
                   help="the embedding the draft reads (default: as SGLang does: the target's, or the draft's own "
                   "when target_hidden_size differs from hidden_size; EAGLE-3 drafts only)")
    p.add_argument("--sglang-version", help="SGLang release whose capture rules decide the ids (default: installed)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_replay)
