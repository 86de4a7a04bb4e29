"""What the probe reads of SGLang's block-diffusion drafts (DFlash, DSpark; runtime/integrations/block_drafts.py and
analysis/dflash_layers.py), claimed per release from the source: the worker's attributes, the hand-off into the
draft's projection, the draft's fc, where the ids come from and SGLang's default for them, and the DeepSeek
family's capture rule (id i -> position i + 1)."""

from __future__ import annotations

import ast

from ... import versions
from .claims import Claim, body_check, sets_attributes
from .rule_checks import calls_name

DFLASH_MODEL = "sglang.srt.models.dflash"
DFLASH_UTILS = "sglang.srt.speculative.dflash_utils"
DEEPSEEK = versions.DEEPSEEK_V2


def _stores_plus_one(node) -> str | None:
    """The setter stores `[val + 1 for val in layer_ids]` into `self.model.layers_to_capture`."""
    for n in ast.walk(node):
        if isinstance(n, ast.Assign) and any(ast.unparse(t) == "self.model.layers_to_capture" for t in n.targets):
            value = n.value
            if isinstance(value, ast.ListComp) and isinstance(value.elt, ast.BinOp) and \
                    isinstance(value.elt.op, ast.Add) and ast.unparse(value.elt.right) == "1":
                return None
            return f"stores {ast.unparse(value)}"
    return "does not assign self.model.layers_to_capture"


def _default_formula(node) -> str | None:
    """build_target_layer_ids spreads k layers from 1 to n - 3 (and takes n // 2 for one draft layer)."""
    text = ast.unparse(node)
    wanted = ("num_target_layers // 2", "start = 1", "end = num_target_layers - 3")
    missing = [w for w in wanted if w not in text]
    return f"lacks {missing}" if missing else None


def _reads_ids(node) -> str | None:
    text = ast.unparse(node)
    return None if "'target_layer_ids'" in text else "does not read target_layer_ids"


def block_draft_claims(rules: versions.VersionRules) -> list[Claim]:
    if versions.BLOCK_WORKER_MODULE in rules.absent_modules:
        return []
    worker = versions.BLOCK_WORKER_MODULE
    return [
        sets_attributes(worker, "DFlashWorkerV2", ["block_size", "_mask_token_id", "draft_model", "model_runner"]),
        body_check(worker, versions.BLOCK_WORKER_FEED_HOOK, "hands target_hidden to the draft's "
                   "project_target_hidden", calls_name("project_target_hidden")),
        # (its parsed config, draft_config, from 0.5.19 only: the probe reads it where it is)
        sets_attributes(DFLASH_MODEL, "DFlashDraftModel", ["fc", "num_context_features", "config"]),
        body_check(DFLASH_UTILS, "build_target_layer_ids", "spreads the draft's layers from 1 to n - 3 (one layer: "
                   "n // 2)", _default_formula),
        body_check(DFLASH_UTILS, "parse_dflash_draft_config", "reads target_layer_ids (dflash_config, then top level)",
                   _reads_ids),
        body_check(DEEPSEEK, "DeepseekV2ForCausalLM.set_dflash_layers_to_capture", "captures id i at position i + 1",
                   _stores_plus_one),
    ]
