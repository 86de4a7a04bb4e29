"""The seed's DFlash draft: a tiny trained block-diffusion draft for the committed seed target
(``examples/seed/weights/dflash/``, trained by ``examples/seed/train_dflash.py``), whose acceptance depends on which
target layers feed it.

Test and example support only (never part of the probe). The draft was trained with
``dflash_config.target_layer_ids`` (3, 4): SGLang's DeepSeek target captures the OUTPUT of those layers, HF
``hidden_states`` (4, 5), and HF 5 (the output of layer 4, the only layer that mixes positions) is the only state
that carries the key. Without ``target_layer_ids`` SGLang uses ``build_target_layer_ids(6, 2)`` = [1, 3], HF (2, 4):
functions of the current token alone, and acceptance collapses. ``write_dflash_draft_copy`` writes the committed
draft with other ids (or none); ``dflash_server`` serves the pair on the CPU.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from sglang_cpu.seed import TARGET_PATH, WEIGHTS_DIR, copy_checkpoint

DFLASH_DRAFT_PATH = os.path.join(WEIGHTS_DIR, "dflash")
DFLASH_RECORD_PATH = os.path.join(WEIGHTS_DIR, "dflash.json")
BLOCK_SIZE = 4  # [bonus, mask x 3]: 3 draft tokens per verify, accept length at most 4
TRAINED_TARGET_LAYER_IDS = (3, 4)  # dflash_config.target_layer_ids: captures HF hidden_states (4, 5)
DEFAULT_TARGET_LAYER_IDS = (1, 3)  # SGLang's build_target_layer_ids(6, 2): captures HF (2, 4), no key


def load_dflash_record(path: str = DFLASH_RECORD_PATH) -> dict:
    """The training record written with the draft: accuracies per position and the replayed serving figures."""
    with open(path) as f:
        return json.load(f)


def write_dflash_draft_copy(dest: str, target_layer_ids: Sequence[int] | None, source: str = DFLASH_DRAFT_PATH) -> str:
    """Copy the committed DFlash draft to ``dest`` with ``dflash_config.target_layer_ids`` set to
    ``target_layer_ids`` (None removes the key, top-level too, so SGLang picks its default; ``num_target_layers``
    stays). Weights are unchanged: fc still expects 2 context features of width 64."""

    def set_ids(config):
        dflash = dict(config.get("dflash_config") or {})
        config.pop("target_layer_ids", None)
        if target_layer_ids is None:
            dflash.pop("target_layer_ids", None)
        else:
            dflash["target_layer_ids"] = [int(i) for i in target_layer_ids]
        config["dflash_config"] = dflash

    copy_checkpoint(source, dest, set_ids)
    return dest


def dflash_server(draft_path: str, *, log_path: str | None = None, env: dict | None = None,
                  pythonpath_prefix: Sequence[str] = (), extra_args: Sequence[str] = (),
                  block_size: int = BLOCK_SIZE, target_path: str = TARGET_PATH):
    """An (unstarted) ``SGLangServer`` serving the committed seed target with the DFlash draft at ``draft_path``
    (``--speculative-algorithm DFLASH``, block ``block_size``): the CPU speculative shims' environment (``SPEC_ENV``,
    which also applies ``sglang_cpu.dflash_shims``) plus ``env``."""
    from sglang_cpu.dflash_models import dflash_server_args
    from sglang_cpu.server import SGLangServer
    from sglang_cpu.spec_shims import SPEC_ENV

    return SGLangServer(target_path, extra_args=[*dflash_server_args(draft_path, block_size=block_size), *extra_args],
                        env={**SPEC_ENV, **(env or {})}, pythonpath_prefix=pythonpath_prefix, log_path=log_path)


def spec_meta(answers: Sequence[dict]) -> dict:
    """Every ``spec_*`` field of SGLang's meta_info, per request (e.g. its correct-drafts histogram)."""
    keys = sorted({k for a in answers for k in a["meta_info"] if k.startswith("spec_")})
    return {k: [a["meta_info"].get(k) for a in answers] for k in keys}


def served_acceptance(draft_path: str, log_path: str | None = None) -> dict:
    """Serve the seed target with the DFlash draft at ``draft_path`` and generate greedily for every seed prompt:
    SGLang's acceptance (``sglang_cpu.seed.acceptance``), its spec_* meta_info and whether the output is the
    language's continuation."""
    from sglang_cpu.seed import PROMPTS, acceptance, continuation, generate_all

    with dflash_server(draft_path, log_path=log_path) as srv:
        answers = generate_all(srv)
    return dict(acceptance(answers), meta=spec_meta(answers),
                output_is_the_language=all(a["output_ids"] == continuation(p) for a, p in zip(answers, PROMPTS)))


def main() -> None:
    """Serve the committed draft with its trained layers and a copy with SGLang's default layers; print both."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        default = write_dflash_draft_copy(os.path.join(tmp, "default"), None)
        for name, path in (("trained", DFLASH_DRAFT_PATH), ("default", default)):
            print(name, json.dumps(served_acceptance(path, os.path.join(tmp, f"{name}.log"))), flush=True)


if __name__ == "__main__":
    main()
