"""The target family of a model directory: its config.json `architectures` (top level, or a nested text config as
the VL classes have) looked up in eagle_probe.families for one SGLang release. Used by doctor, replay and parity.
"""

import os
from dataclasses import dataclass, replace

from .. import families
from ..analysis.findings import CAPTURE_RULE_UNVERIFIED, TARGET_NOT_EAGLE3, Finding, _finding
from ..families import Family
from ..versions import Version, format_version

NESTED_TEXT_KEYS = ("text_config", "language_config", "llm_config")
# HF model_type -> family, for a config that names no architectures (said in a note, never silently)
MODEL_TYPES = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "qwen2_moe": "qwen2_moe",
               "qwen3_moe": "qwen3_moe", "gpt_oss": "gpt_oss", "glm4_moe": "glm4_moe", "glm4_moe_lite": "glm4_moe_lite",
               "deepseek_v2": "deepseek_v2", "deepseek_v3": "deepseek_v2", "deepseek_v32": "deepseek_v2",
               "kimi_k2": "deepseek_v2", "kimi_k25": "deepseek_v2", "minimax_m2": "minimax_m2",
               "gemma3": "gemma3", "gemma3_text": "gemma3", "gemma4": "gemma4_vl", "gemma4_text": "gemma4"}


@dataclass(frozen=True)
class TargetFamily:
    architecture: str | None  # the class name looked up (None: the config names none)
    family: Family | None  # the row to predict with (for an untabled class: a stand-in marked unverified)
    verified: bool  # the row is proven for this release by the contract check
    finding: Finding | None = None  # target_not_eagle3 or capture_rule_unverified
    note: str | None = None

    @property
    def served(self) -> bool:
        return self.family is not None

    def describe(self) -> str:
        if self.family is None:
            return f"{self.architecture or 'unknown'}: not an EAGLE-3 target"
        row = self.family
        text = (f"{row.label} [{row.name}], rule {row.letter} ({row.rule}): {families.RULE_TEXT.get(row.rule, '')}; "
                f"default {row.default_ids}")
        return text + ("" if self.verified else " (UNVERIFIED: no row proves this class's rule)")


def rules_text(rules, row: Family | None) -> str:
    """The release's rules in one line, with the capture rule of the target's family (DeepSeek's: the version
    row's own description)."""
    if row is None:
        return "no EAGLE-3 capture rule (not an EAGLE-3 target)"
    if row.name == "deepseek_v2":
        return rules.describe()
    return (f"capture ids: {row.rule} (rule {row.letter}); default {row.default_ids}; embedding capturable: "
            f"{row.embedding_capturable}; final layer capturable: {row.final_capturable}; graph set-up uses "
            f"default layers: {rules.graph_setup_uses_default_layers}")


def architectures(data: dict) -> list[str]:
    """config.json's `architectures` (class names), from the top level or a nested text config."""
    for source in [data] + [data.get(k) for k in NESTED_TEXT_KEYS]:
        if isinstance(source, dict) and isinstance(source.get("architectures"), list):
            names = [a for a in source["architectures"] if isinstance(a, str)]
            if names:
                return names
    return []


def _stand_in(why: str) -> Family:
    """The row an untabled setter class is predicted with: rule A, the rule every untabled setter of 0.5.23 reads
    as, not proven by the contract check (hence unverified)."""
    llama = families.family("llama")
    assert llama is not None
    return replace(llama, name="unverified", label=f"unverified ({why})", classes=(), inherited=(), delegates=())


def resolve(data: dict, version: Version | None) -> TargetFamily:
    """The family of a target config for a release (None: the newest)."""
    names = architectures(data)
    release = format_version(version) if version is not None else "the newest release"
    for name in names:
        row = families.family_for_architecture(name, version)
        if row is not None:
            return TargetFamily(name, row, True)
    for name in names:  # a class of a family that this release has, added to it in another release
        rows = families.rows_naming(name)
        here = rows and families.family(rows[0].name, version)
        if here:
            since = format_version(min(r.first for r in rows if name in r.architectures()))
            return TargetFamily(name, here, True, note=(
                f"target: {name} is not in SGLang {release} (its rows start at {since}); predicted with the "
                f"{here.label} rule of {release}, which its language model follows"))
    for name in names:
        why = families.untabled(name)
        if why is not None:
            finding = _finding(
                CAPTURE_RULE_UNVERIFIED,
                f"{name} defines set_eagle3_layers_to_capture but no family row proves its rule ({why}); the "
                f"predictions below assume SGLang adds 1 to every id (rule A, what its setter reads as in 0.5.23), "
                f"unverified for SGLang {release}.", architecture=name, rule=families.RULE_PLUS_ONE)
            return TargetFamily(name, _stand_in(why), False, finding)
    if not names:
        for source in [data] + [data.get(k) for k in NESTED_TEXT_KEYS]:
            model_type = source.get("model_type") if isinstance(source, dict) else None
            row = families.family(MODEL_TYPES[model_type], version) if model_type in MODEL_TYPES else None
            if row is not None:
                return TargetFamily(None, row, True, note=(
                    f"target: the config names no 'architectures'; family {row.name} from model_type "
                    f"'{model_type}'"))
        finding = _finding(
            CAPTURE_RULE_UNVERIFIED,
            "the target config names no 'architectures': its family is unknown; the predictions below use "
            "DeepSeek-V2/V3's rule (the probe's default), unverified for this model.", architecture=None)
        return TargetFamily(None, families.deepseek(version), False, finding)
    shown = ", ".join(names)
    later = [r for n in names for r in families.rows_naming(n)]
    if later:
        span = ", ".join(sorted({f"{r.label}: {r.releases_text}" for r in later}))
        finding = _finding(
            TARGET_NOT_EAGLE3,
            f"{shown}: SGLang {release} has no EAGLE-3 target of this class (the family is served in {span}); "
            f"use a release where it is.", architectures=names, sglang_version=release)
        return TargetFamily(names[0], None, False, finding)
    finding = _finding(
        TARGET_NOT_EAGLE3,
        f"{shown}: SGLang {release} serves no EAGLE-3 target of this class (no family of eagle_probe.families names it "
        f"and it is not a known class with set_eagle3_layers_to_capture); SGLang refuses the EAGLE-3 launch with "
        f"ValueError when it configures aux hidden-state capture. Serve it without EAGLE-3, or pick a target "
        f"family that `eagle-probe compat` lists.", architectures=names, sglang_version=release)
    return TargetFamily(names[0], None, False, finding)


class TargetConfigError(ValueError):
    """A target directory without a readable config.json (the message names the file)."""


def resolve_directory(path: str, version: Version | None) -> TargetFamily:
    """resolve() for a model directory's config.json (or the file itself); TargetConfigError when unreadable."""
    from .json_files import MAX_CONFIG_BYTES, read_json_object

    file = os.path.join(path, "config.json") if os.path.isdir(path) else path
    if not os.path.lexists(file):
        raise TargetConfigError(f"target config: {file}: no such file")
    return resolve(read_json_object(file, "target config", TargetConfigError, MAX_CONFIG_BYTES), version)
