"""Claims about where each side reads eagle_aux_hidden_state_layer_ids, and how the drafts' loaders name the
checkpoint (the facts of analysis.draft_ids and analysis.draft_weights), per release: the target only
subscripts eagle_config; LlamaForCausalLMEagle3 never reads the top-level ids; Kimi-K2.5's MLA draft
(kimi_k25_eagle3, 0.5.12+) reads eagle_config's, then the top-level ones, else 3, and sizes its fc by that count
times config.target_hidden_size, else hidden_size;
its load_weights takes d2t by exact name and renames/fuses the names analysis.draft_weights' "kimi" naming says."""

from __future__ import annotations

import ast

from ...analysis.draft_ids import DRAFT_CLASSES, KEY, KIMI, LLAMA
from .claims import Claim, body_check, sets_attributes
from .rule_checks import calls_name

KIMI_MODULE = DRAFT_CLASSES[KIMI].module
LLAMA_MODULE = DRAFT_CLASSES[LLAMA].module
# Where the target worker resolves the draft's ids: model_runner up to 0.5.15, this component from 0.5.16.
TARGET_ID_MODULES = ("sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state",
                     "sglang.srt.model_executor.model_runner")
# Strings Eagle3DeepseekV2ForCausalLM.load_weights must use for the "kimi" naming to hold.
KIMI_LOADER_NAMES = ("d2t", ".d2t", "t2d", ".t2d", "midlayer.", "model.", "lm_head.", ".gate_proj", ".up_proj",
                     ".gate_up_proj", "q_a_proj", "kv_a_proj_with_mqa", "fused_qkv_a_proj_with_mqa")


def _strings(node) -> set:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def _getattr_key(node, owner=None) -> list[ast.Call]:
    """getattr(<owner>, KEY, ...) calls (any first argument when owner is None)."""
    return [n for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
            and n.func.id == "getattr" and len(n.args) >= 2 and isinstance(n.args[1], ast.Constant)
            and n.args[1].value == KEY and (owner is None or ast.unparse(n.args[0]) == owner)]


def _subscripts_key(node) -> bool:
    return any(isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and n.slice.value == KEY
               for n in ast.walk(node))


def _target_reads_eagle_config_only(src) -> str | None:
    module = next((m for m in TARGET_ID_MODULES if src.has_module(m)), None)
    if module is None:
        return f"none of {', '.join(TARGET_ID_MODULES)} found"
    tree = src.tree(module)
    if not _subscripts_key(tree):
        return f"{module} does not subscript eagle_config[{KEY!r}]"
    extra = _getattr_key(tree)
    return None if not extra else f"{module} also reads {ast.unparse(extra[0])} (line {extra[0].lineno})"


def _kimi_count_test(node) -> str | None:
    if not any(isinstance(n, ast.Call) and ast.unparse(n) == f"eagle_config.get({KEY!r})" for n in ast.walk(node)):
        return f"does not read eagle_config.get({KEY!r})"
    if not _getattr_key(node, "config"):
        return f"does not fall back to getattr(config, {KEY!r}, ...)"
    if not any(isinstance(n, ast.Return) and isinstance(n.value, ast.Constant) and n.value.value == 3
               for n in ast.walk(node)):
        return "does not return 3 without ids"
    return None


KIMI_TARGET_WIDTH = "getattr(config, 'target_hidden_size', None) or config.hidden_size"


def _kimi_target_width_test(node) -> str | None:
    # the probe's draft forward event reads the same two config fields (Eagle3MLAModel has no hidden_size_in)
    found = any(isinstance(n, ast.BoolOp) and ast.unparse(n) == KIMI_TARGET_WIDTH for n in ast.walk(node))
    return None if found else f"does not compute {KIMI_TARGET_WIDTH}"


def _kimi_loader_test(node) -> str | None:
    missing = [s for s in KIMI_LOADER_NAMES if s not in _strings(node)]
    return None if not missing else f"does not use {missing}"


def _llama_no_top_level(src) -> str | None:
    tree = src.tree(LLAMA_MODULE)
    if tree is None:
        return f"{LLAMA_MODULE} not found"
    found = _getattr_key(tree, "config")
    return None if not found else f"reads {ast.unparse(found[0])} (line {found[0].lineno})"


def draft_id_claims(kimi_present: bool) -> list[Claim]:
    out = [Claim(f"the target reads the draft's ids only as eagle_config[{KEY!r}] (never the top-level key)",
                 _target_reads_eagle_config_only),
           Claim(f"{LLAMA_MODULE} never reads the top-level {KEY} (getattr(config, ...))", _llama_no_top_level)]
    if not kimi_present:
        return out
    return out + [
        body_check(KIMI_MODULE, "_get_eagle_aux_layer_count", "counts eagle_config's ids, else the top-level ids, "
                   "else 3", _kimi_count_test),
        body_check(KIMI_MODULE, "Eagle3MLAModel.__init__", "sizes fc by _get_eagle_aux_layer_count(config)",
                   calls_name("_get_eagle_aux_layer_count")),
        body_check(KIMI_MODULE, "Eagle3MLAModel.__init__", f"takes the aux width as {KIMI_TARGET_WIDTH}",
                   _kimi_target_width_test),
        sets_attributes(KIMI_MODULE, "Eagle3MLAModel", ("fc", "embed_tokens", "config")),
        sets_attributes(KIMI_MODULE, "Eagle3DeepseekV2ForCausalLM", ("model", "config", "load_lm_head_from_target")),
        body_check(KIMI_MODULE, "Eagle3DeepseekV2ForCausalLM.load_weights", "takes d2t as 'd2t'/'*.d2t', skips "
                   "t2d, maps layers.0. to midlayer. under model., fuses gate/up and q_a/kv_a", _kimi_loader_test),
    ]
