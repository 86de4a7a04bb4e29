"""SGLang's EAGLE-3 target families, per release: the second dimension of the version table.

Every class that SGLang serves as an EAGLE-3 target defines `set_eagle3_layers_to_capture(layer_ids)`, which turns
the configured ids into *positions* (`layers_to_capture`): position i is the residual stream entering layer i
(= HF `hidden_states[i]`; position 0 is the embedding output, position N = num_hidden_layers the final layer's
output). Families differ in that mapping, in their default set, in what they capture and where captures are
lost. One row of FAMILIES describes one family over a range of releases; a family whose behaviour changes has
one row per range. Every field is proven per release from the wheels by
eagle_probe.commands.contract.families (tests/contract/test_contract_families.py), which also proves that every class
defining the setter in a release belongs to a row or to UNTABLED.

DeepSeek's rows are built from versions.RULES (the capture-id rule and embedding capture are that table's
facts, not repeated here). Nothing here imports SGLang.

The rules (their letters as docs/reference/families.md shows them):
  A  plus_one_always             [v + 1 for v in ids]; default [2, n // 2, n - 3]
  B  plus_one_if_first_is_one    +1 only when ids[0] == 1, else ids as given; default as A
  C  as_given_if_max_is_n        ids as given when max(ids) == n, else +1; default as A
  D  plus_one_including_default  +1, and +1 on the default too: [3, n // 2 + 1, n - 2]
"""

from collections.abc import Sequence
from dataclasses import dataclass, replace

from . import versions
from .versions import DEFAULT_IDS_FORMULA, PLUS_ONE_ALWAYS, PLUS_ONE_IF_FIRST_IS_ONE, Version

RULE_PLUS_ONE = PLUS_ONE_ALWAYS  # A
RULE_PLUS_ONE_IF_FIRST_IS_ONE = PLUS_ONE_IF_FIRST_IS_ONE  # B
RULE_AS_GIVEN_IF_MAX_IS_N = "as_given_if_max_is_n"  # C
RULE_PLUS_ONE_WITH_DEFAULT = "plus_one_including_default"  # D
RULE_LETTERS = {RULE_PLUS_ONE: "A", RULE_PLUS_ONE_IF_FIRST_IS_ONE: "B", RULE_AS_GIVEN_IF_MAX_IS_N: "C",
                RULE_PLUS_ONE_WITH_DEFAULT: "D"}
RULE_TEXT = {
    RULE_PLUS_ONE: "adds 1 to every id",
    RULE_PLUS_ONE_IF_FIRST_IS_ONE: "adds 1 to every id only when the first id is 1, else uses the ids as given",
    RULE_AS_GIVEN_IF_MAX_IS_N: "uses the ids as given when the largest equals the number of layers, else adds 1",
    RULE_PLUS_ONE_WITH_DEFAULT: "adds 1 to every id, and to the default set too",
}
UNVERIFIED = "unverified"  # the rule of a class with a setter that no row describes

DEFAULT_FORMULA = DEFAULT_IDS_FORMULA  # "[2, n // 2, n - 3]"
DEFAULT_PLUS_ONE_FORMULA = "[3, n // 2 + 1, n - 2]"

# What a captured position holds.
CAPTURES_RESIDUAL = "residual_stream"  # the residual stream entering the layer (= HF hidden_states[i])
CAPTURES_BRANCH_OUTPUT = "branch_output"  # the hidden_states handed to the layer, without the pending residual
# How the inner forward captures (proof detail, named in the contract claims).
CAPTURES_LOOP_SUM = "loop_sum"  # hidden_states + residual in the loop (residual is None at layer 0: TypeError)
CAPTURES_LOOP_SUM_GUARDED = "loop_sum_guarded"  # the same, with the embedding taken as is when residual is None
CAPTURES_LAYER_KEYWORD = "layer_keyword"  # the layer's communicator captures its input residual (a keyword)
CAPTURES_LAYER_INPUT = "layer_input"  # the hidden_states entering the layer, appended as they are
CAPTURES_SNAPSHOT = "snapshot"  # residual_batch.snapshot(hidden_states) before the layer

TBO_NONE = "none"  # the forward has no Two-Batch-Overlap split
TBO_FROM_FIRST_K_DENSE = "from_first_k_dense_replace"  # layers >= first_k_dense_replace run in TBO stages: no capture
TBO_ALL = "all"  # a TBO batch runs every layer in TBO stages: nothing is captured


@dataclass(frozen=True)
class Family:
    name: str  # stable key, e.g. "llama"
    label: str  # for people, e.g. "Llama (and subclasses)"
    first: Version  # first release of this row
    last: Version | None  # last release of this row (None: up to the supported maximum)
    classes: tuple[str, ...]  # 'module.Class' under sglang.srt.models that define the setter
    inner: str  # 'module.Class' of the model whose forward captures
    rule: str
    default_ids: str
    captures: str  # CAPTURES_RESIDUAL or CAPTURES_BRANCH_OUTPUT
    capture_how: str  # CAPTURES_LOOP_SUM, ... (how the inner forward captures)
    embedding_capturable: bool  # position 0 can be captured
    final_capturable: bool  # position N (the final layer's output) can be captured
    tbo: str
    pp_guard: bool  # the setter returns early off the last pipeline rank (ids silently dropped there)
    inherited: tuple[str, ...] = ()  # subclasses that inherit the setter (read from 0.5.23; where they exist)
    delegates: tuple[str, ...] = ()  # classes that hand the ids unchanged to a class of this row
    inner_setter: str | None = None  # 'module.Class' whose own setter stores the positions and flags layers
    final_raises: bool = False  # position N raises IndexError in the inner setter (self.layers[N])
    n_source: str | None = "self.config.num_hidden_layers"  # where the setter reads N for the default
    note: str = ""

    @property
    def letter(self) -> str:
        return RULE_LETTERS.get(self.rule, "?")

    @property
    def releases_text(self) -> str:
        last = self.last or versions.SUPPORTED_MAX
        span = versions.format_version(self.first)
        if last != self.first:
            span += f" to {versions.format_version(last)}"
        return span + (" (and its post releases)" if self.last is None or self.last[3] == 0 else "")

    def architectures(self) -> tuple[str, ...]:
        """Class names as config.json's `architectures` gives them."""
        return tuple(dict.fromkeys(d.rpartition(".")[2] for d in self.classes + self.inherited + self.delegates))

    def as_dict(self) -> dict:
        return {
            "family": self.name, "label": self.label, "releases": self.releases_text,
            "first": versions.format_version(self.first),
            "last": None if self.last is None else versions.format_version(self.last),
            "classes": list(self.classes), "inherited": list(self.inherited), "delegates": list(self.delegates),
            "inner": self.inner, "rule": self.rule, "rule_letter": self.letter, "default_ids": self.default_ids,
            "captures": self.captures, "capture_how": self.capture_how,
            "embedding_capturable": self.embedding_capturable, "final_capturable": self.final_capturable,
            "final_raises": self.final_raises, "tbo": self.tbo, "pp_guard": self.pp_guard, "note": self.note,
        }


def _v(text: str) -> Version:
    parsed = versions.parse_version(text)
    assert parsed is not None, text
    return parsed


def _rows(name: str, label: str, first: str, changes: Sequence[tuple[str, dict]] = (), /,
          **fields) -> list[Family]:
    """Rows of one family: `fields` hold from `first`; each (release, overrides) of `changes` starts a new row."""
    out: list[Family] = []
    current = dict(fields)
    starts = [(first, {})] + list(changes)
    for index, (start, overrides) in enumerate(starts):
        current.update(overrides)
        last = None
        if index + 1 < len(starts):
            last = _previous(_v(starts[index + 1][0]))
        out.append(Family(name, label, _v(start), last, **current))
    return out


# The releases of the supported range (versions.RELEASE_TEXTS, the one table); a row's `last` is the release before
# the next row's first.
RELEASES: tuple[Version, ...] = versions.RELEASES


def _previous(version: Version) -> Version:
    earlier = [r for r in RELEASES if r < version]
    return earlier[-1] if earlier else version


_RESIDUAL = dict(captures=CAPTURES_RESIDUAL)
_KEYWORD = dict(capture_how=CAPTURES_LAYER_KEYWORD, embedding_capturable=True)
_SUM = dict(capture_how=CAPTURES_LOOP_SUM, embedding_capturable=False)
_GUARDED = dict(capture_how=CAPTURES_LOOP_SUM_GUARDED, embedding_capturable=True)
_A = dict(rule=RULE_PLUS_ONE, default_ids=DEFAULT_FORMULA)


def _deepseek_rows() -> list[Family]:
    """DeepSeek-V2/V3 (+ Kimi-K2.5, GLM-MoE-DSA, Mistral-Large-3): the rule and embedding capture are
    versions.RULES' (one row per change there)."""
    base = dict(classes=("deepseek_v2.DeepseekV2ForCausalLM",), inner="deepseek_v2.DeepseekV2Model",
                default_ids=DEFAULT_FORMULA, captures=CAPTURES_RESIDUAL, final_capturable=False,
                tbo=TBO_FROM_FIRST_K_DENSE, pp_guard=True,
                inherited=("deepseek_v2.DeepseekV3ForCausalLM", "deepseek_v2.DeepseekV32ForCausalLM",
                           "glm4_moe.GlmMoeDsaForCausalLM", "mistral_large_3.MistralLarge3ForCausalLM"),
                note="returns the aux states packed into one [T, K*H] tensor from 0.5.17 (versions.RULES)")
    changes = []
    previous = None
    for rules in versions.RULES:
        key = (rules.capture_id_rule, rules.embedding_capturable)
        if key != previous:
            changes.append((rules.first_text, dict(
                rule=rules.capture_id_rule, embedding_capturable=rules.embedding_capturable,
                capture_how=CAPTURES_LAYER_KEYWORD if rules.embedding_capturable else CAPTURES_LOOP_SUM)))
            previous = key
    rows = _rows("deepseek_v2", "DeepSeek-V2/V3 (+ Kimi-K2.5, GLM-MoE-DSA, Mistral-Large-3)", changes[0][0],
                 changes[1:], **dict(base, **changes[0][1]))
    kimi = _v("0.5.10")  # KimiK25ForConditionalGeneration hands the ids to its DeepSeek language model from 0.5.10
    out = []
    for row in rows:
        if row.first < kimi <= (row.last or versions.SUPPORTED_MAX[:3] + (99,)):
            out += [replace(row, last=_previous(kimi)),
                    replace(row, first=kimi, delegates=("kimi_k25.KimiK25ForConditionalGeneration",))]
        elif row.first >= kimi:
            out.append(replace(row, delegates=("kimi_k25.KimiK25ForConditionalGeneration",)))
        else:
            out.append(row)
    return out


FAMILIES: tuple[Family, ...] = tuple(
    _rows("llama", "Llama (and subclasses: Mistral, Phi-3, InternLM3, Llama-4 text, ...)", "0.5.8",
          [("0.5.22", _KEYWORD)],
          classes=("llama.LlamaForCausalLM",), inner="llama.LlamaModel", **_A, **_RESIDUAL, **_SUM,
          final_capturable=False, tbo=TBO_NONE, pp_guard=True,
          inherited=("llama.Phi3ForCausalLM", "llama.InternLM3ForCausalLM", "llama.IQuestCoderForCausalLM",
                     "llama4.Llama4ForCausalLM", "mistral.MistralForCausalLM",
                     "mistral.MistralForCausalLMMistralFormat", "ministral3.Ministral3ForCausalLM",
                     "teleflm.TeleFLMForCausalLM"),
          delegates=("mllama4.Llama4ForConditionalGeneration",))
    + _rows("qwen2", "Qwen2 / Qwen2.5", "0.5.8",
            [("0.5.21", dict(capture_how=CAPTURES_SNAPSHOT)), ("0.5.22", _KEYWORD)],
            classes=("qwen2.Qwen2ForCausalLM",), inner="qwen2.Qwen2Model", **_A, **_RESIDUAL, **_GUARDED,
            final_capturable=False, tbo=TBO_NONE, pp_guard=True)
    + _rows("qwen3", "Qwen3", "0.5.8", [("0.5.21", _KEYWORD)],
            classes=("qwen3.Qwen3ForCausalLM",), inner="qwen3.Qwen3Model", **_A, **_RESIDUAL, **_GUARDED,
            final_capturable=False, tbo=TBO_NONE, pp_guard=True)
    + _rows("qwen2_moe", "Qwen2-MoE", "0.5.8",
            classes=("qwen2_moe.Qwen2MoeForCausalLM",), inner="qwen2_moe.Qwen2MoeModel",
            inner_setter="qwen2_moe.Qwen2MoeModel", **_A, **_RESIDUAL, **_KEYWORD, final_capturable=False,
            final_raises=True, tbo=TBO_ALL, pp_guard=True)
    + _rows("qwen3_moe", "Qwen3-MoE", "0.5.8",
            classes=("qwen3_moe.Qwen3MoeForCausalLM",), inner="qwen3_moe.Qwen3MoeModel",
            inner_setter="qwen2_moe.Qwen2MoeModel", **_A, **_RESIDUAL, **_KEYWORD, final_capturable=False,
            final_raises=True, tbo=TBO_ALL, pp_guard=True, inherited=("mellum.MellumForCausalLM",))
    + _rows("gpt_oss", "GPT-OSS", "0.5.8",
            [("0.5.17", dict(rule=RULE_AS_GIVEN_IF_MAX_IS_N, capture_how=CAPTURES_LOOP_SUM_GUARDED,
                             embedding_capturable=True, final_capturable=True)),
             ("0.5.21", _KEYWORD)],
            classes=("gpt_oss.GptOssForCausalLM",), inner="gpt_oss.GptOssModel", **_A, **_RESIDUAL, **_SUM,
            final_capturable=False, tbo=TBO_NONE, pp_guard=True)
    + _rows("glm4_moe", "GLM-4.5/4.6/4.7 (GLM-4-MoE)", "0.5.8", [("0.5.21", _KEYWORD)],
            classes=("glm4_moe.Glm4MoeForCausalLM",), inner="glm4_moe.Glm4MoeModel", **_A, **_RESIDUAL, **_SUM,
            final_capturable=False, tbo=TBO_FROM_FIRST_K_DENSE, pp_guard=True)
    + _rows("glm4_moe_lite", "GLM-4-MoE-Lite (GLM-4.7-Flash)", "0.5.13", [("0.5.21", _KEYWORD)],
            classes=("glm4_moe_lite.Glm4MoeLiteForCausalLM",), inner="glm4_moe_lite.Glm4MoeLiteModel",
            rule=RULE_PLUS_ONE_IF_FIRST_IS_ONE, default_ids=DEFAULT_FORMULA, **_RESIDUAL, **_SUM,
            final_capturable=False, tbo=TBO_FROM_FIRST_K_DENSE, pp_guard=True)
    + _deepseek_rows()
    + _rows("minimax_m2", "MiniMax-M2", "0.5.8", [("0.5.11", _KEYWORD)],
            classes=("minimax_m2.MiniMaxM2ForCausalLM",), inner="minimax_m2.MiniMaxM2Model", **_A, **_RESIDUAL,
            **_SUM, final_capturable=False, tbo=TBO_ALL, pp_guard=True)
    + _rows("minimax_m3", "MiniMax-M3 (text)", "0.5.16", [("0.5.23", dict(final_capturable=True))],
            classes=("minimax_m3.MiniMaxM3SparseForCausalLM",), inner="minimax_m3.MiniMaxM3Model", **_A,
            **_RESIDUAL, **_KEYWORD, final_capturable=False, tbo=TBO_ALL, pp_guard=True)
    + _rows("minimax_m3_vl", "MiniMax-M3 (ConditionalGeneration)", "0.5.18",
            [("0.5.23", dict(final_capturable=True))],
            classes=("minimax_m3_vl.MiniMaxM3SparseForConditionalGeneration",), inner="minimax_m3.MiniMaxM3Model",
            rule=RULE_PLUS_ONE_WITH_DEFAULT, default_ids=DEFAULT_PLUS_ONE_FORMULA, **_RESIDUAL, **_KEYWORD,
            final_capturable=False, tbo=TBO_ALL, pp_guard=True, n_source="self.config.text_config.num_hidden_layers")
    + _rows("gemma3", "Gemma-3", "0.5.12",
            # up to 0.5.16 the decoder layer adds its residual itself: the input it is handed is the stream
            [("0.5.17", dict(captures=CAPTURES_BRANCH_OUTPUT,
                             note="the layer returns (branch output, residual): the capture misses the residual "
                                  "(HF hidden_states differ)"))],
            classes=("gemma3_causal.Gemma3ForCausalLM",), inner="gemma3_causal.Gemma3TextModel", **_A,
            captures=CAPTURES_RESIDUAL, capture_how=CAPTURES_LAYER_INPUT, embedding_capturable=True,
            final_capturable=True, tbo=TBO_NONE, pp_guard=False,
            delegates=("gemma3_mm.Gemma3ForConditionalGeneration",))
    + _rows("gemma4", "Gemma-4", "0.5.12", [("0.5.22", dict(capture_how=CAPTURES_LAYER_KEYWORD))],
            classes=("gemma4_causal.Gemma4ForCausalLM",), inner="gemma4_causal.Gemma4TextModel", **_A,
            **_RESIDUAL, capture_how=CAPTURES_LAYER_INPUT, embedding_capturable=True, final_capturable=True,
            tbo=TBO_NONE, pp_guard=False)
    + _rows("gemma4_vl", "Gemma-4 (ConditionalGeneration)", "0.5.12",
            [("0.5.22", dict(capture_how=CAPTURES_LAYER_KEYWORD))],
            classes=("gemma4_mm.Gemma4ForConditionalGeneration",), inner="gemma4_causal.Gemma4TextModel", **_A,
            **_RESIDUAL, capture_how=CAPTURES_LAYER_INPUT, embedding_capturable=True, final_capturable=True,
            tbo=TBO_NONE, pp_guard=False, n_source="self.config.text_config.num_hidden_layers",
            inherited=("gemma4_unified.Gemma4UnifiedForConditionalGeneration",))
    + _rows("qwen2_5_vl", "Qwen2.5-VL", "0.5.8",
            [("0.5.21", dict(capture_how=CAPTURES_SNAPSHOT)), ("0.5.22", _KEYWORD)],
            classes=("qwen2_5_vl.Qwen2_5_VLForConditionalGeneration",), inner="qwen2.Qwen2Model", **_A, **_RESIDUAL,
            **_GUARDED, final_capturable=False, tbo=TBO_NONE, pp_guard=False)
    + _rows("qwen3_next", "Qwen3-Next", "0.5.9",
            classes=("qwen3_next.Qwen3NextForCausalLM",), inner="qwen3_next.Qwen3NextModel",
            inner_setter="qwen3_next.Qwen3NextModel", **_A, **_RESIDUAL, **_KEYWORD, final_capturable=False,
            final_raises=True, tbo=TBO_NONE, pp_guard=True)
    + _rows("apertus", "Apertus", "0.5.8", [("0.5.22", _KEYWORD)],
            classes=("apertus.ApertusForCausalLM",), inner="apertus.ApertusModel", **_A, **_RESIDUAL, **_SUM,
            final_capturable=False, tbo=TBO_NONE, pp_guard=True)
    + _rows("exaone_moe", "EXAONE-MoE", "0.5.9", [("0.5.22", _KEYWORD)],
            classes=("exaone_moe.ExaoneMoEForCausalLM",), inner="exaone_moe.ExaoneMoEModel", **_A, **_RESIDUAL,
            **_SUM, final_capturable=False, tbo=TBO_NONE, pp_guard=True, inherited=("exaone_moe.ExaoneMoeForCausalLM",))
    + _rows("longcat_flash", "LongCat-Flash", "0.5.8", [("0.5.21", dict(capture_how=CAPTURES_SNAPSHOT,
                                                                         embedding_capturable=True))],
            classes=("longcat_flash.LongcatFlashForCausalLM",), inner="longcat_flash.LongcatFlashModel", **_A,
            **_RESIDUAL, **_SUM, final_capturable=False, tbo=TBO_NONE, pp_guard=False)
)

# Classes that define the setter but have no row (yet): the probe observes them with the rule `unverified`.
UNTABLED: dict[str, str] = {
    "mindspore.MindSporeForCausalLM": "hands the ids to a MindSpore model outside SGLang's source",
    "mimo_v2_flash.MiMoV2Model": "0.5.8 only: an inner model's setter that no outer class calls",
    "qwen3_5.Qwen3_5ForCausalLM": "not proven yet (inner setter of Qwen3.5)",
    "qwen3_5_text.Qwen3_5ForCausalLM": "not proven yet",
    "qwen3_vl.Qwen3VLForConditionalGeneration": "not proven yet",
    "glm5_next.Glm5NextForConditionalGeneration": "0.5.20 captures through a helper the contract does not read",
    "bailing_moe.BailingMoEForCausalLM": "captures two ways at once (the layer's keyword and per-layer flags); not "
                                         "proven yet",
}


# Target subclasses (read from 0.5.23) that inherit the setter of an UNTABLED class: observed, rule unverified.
UNTABLED_SUBCLASSES: dict[str, str] = {
    "bailing_moe.BailingMoeForCausalLM": "bailing_moe.BailingMoEForCausalLM",
    "bailing_moe.BailingMoeV2ForCausalLM": "bailing_moe.BailingMoEForCausalLM",
    "sarvam_moe.SarvamMoEForCausalLM": "bailing_moe.BailingMoEForCausalLM",
    "qwen3_5.Qwen3_5MoeForCausalLM": "qwen3_5.Qwen3_5ForCausalLM",
    "qwen3_5_text.Qwen3_5MoeForCausalLM": "qwen3_5_text.Qwen3_5ForCausalLM",
    "qwen3_5.Qwen3_5ForConditionalGeneration": "qwen3_vl.Qwen3VLForConditionalGeneration",
    "qwen3_5.Qwen3_5MoeForConditionalGeneration": "qwen3_vl.Qwen3VLForConditionalGeneration",
    "qwen3_vl_moe.Qwen3VLMoeForConditionalGeneration": "qwen3_vl.Qwen3VLForConditionalGeneration",
    "qwen3_omni_moe.Qwen3OmniMoeThinkerForConditionalGeneration": "qwen3_vl.Qwen3VLForConditionalGeneration",
    "cosmos3.Cosmos3ForConditionalGeneration": "qwen3_vl.Qwen3VLForConditionalGeneration",
    "interns1pro.InternS1ProForConditionalGeneration": "qwen3_vl.Qwen3VLForConditionalGeneration",
    "interns2_mobius.InternS2MobiusForConditionalGeneration": "qwen3_vl.Qwen3VLForConditionalGeneration",
    "interns2preview.InternS2PreviewForConditionalGeneration": "qwen3_vl.Qwen3VLForConditionalGeneration",
    "qwen4_exp.Qwen4ExpForConditionalGeneration": "qwen3_vl.Qwen3VLForConditionalGeneration",
}


def family_names() -> tuple[str, ...]:
    return tuple(dict.fromkeys(row.name for row in FAMILIES))


def _release(version: Version | None) -> Version:
    """The release whose rows describe `version` (None: the newest; outside the range: the nearest end)."""
    if version is None:
        return RELEASES[-1]
    if version < versions.SUPPORTED_MIN:
        return RELEASES[0]
    return version if versions.is_supported(version) else RELEASES[-1]


def rows_for(version: Version | None) -> list[Family]:
    """The rows that hold in a release (one per family present there)."""
    version = _release(version)
    out, seen = [], set()
    for row in FAMILIES:
        if row.name not in seen and row.first <= version and (row.last is None or version <= row.last
                                                                or version[:3] == row.last[:3]):
            out.append(row)
            seen.add(row.name)
    return out


def family(name: str, version: Version | None = None) -> Family | None:
    """The row of family `name` for a release; None when the family is absent there."""
    return next((row for row in rows_for(version) if row.name == name), None)


def family_for_architecture(architecture: str, version: Version | None = None) -> Family | None:
    """The family row for a config.json `architectures` entry in a release; None when no row of that release
    names the class (SGLang may still serve it: see untabled(), or not serve it with EAGLE-3 at all)."""
    for row in rows_for(version):
        if architecture in row.architectures():
            return row
    return None


def rows_naming(architecture: str) -> list[Family]:
    """Every row, of any release, whose classes name `architecture`."""
    return [row for row in FAMILIES if architecture in row.architectures()]


def family_for_class_names(names: Sequence[str], version: Version | None = None) -> Family | None:
    """The row for a class given its MRO's class names, most derived first (`[c.__name__ for c in cls.__mro__]`):
    the first name a row of the release names. For the runtime, which meets classes by object, not by config."""
    for name in names:
        row = family_for_architecture(name, version)
        if row is not None:
            return row
    return None


def predicted_positions(architecture: str, version: Version | None, layer_ids: Sequence[int] | None,
                        num_layers: int) -> tuple[tuple[int, ...] | None, str]:
    """(positions, rule as applied) for a class in a release; (None, UNVERIFIED) when no row names it: the probe
    then reports what SGLang set, with the rule marked unverified, and never guesses."""
    row = family_for_architecture(architecture, version)
    if row is None:
        return None, UNVERIFIED
    return positions(row.rule, layer_ids, num_layers)


def untabled(architecture: str) -> str | None:
    """Why a class that defines (or inherits) the setter has no row, or None when it is not listed."""
    for dotted, why in UNTABLED.items():
        if dotted.rpartition(".")[2] == architecture:
            return why
    for dotted, owner in UNTABLED_SUBCLASSES.items():
        if dotted.rpartition(".")[2] == architecture:
            return f"inherits the setter of {owner}: {UNTABLED[owner]}"
    return None


def deepseek(version: Version | None = None) -> Family:
    """DeepSeek's row: the default family wherever none is given (the probe's original target)."""
    row = family("deepseek_v2", version)
    assert row is not None
    return row


def _plus_one(ids: Sequence[int]) -> tuple[int, ...]:
    return tuple(i + 1 for i in ids)


def default_positions(rule: str, num_layers: int) -> tuple[int, ...]:
    base = (2, num_layers // 2, num_layers - 3)
    return _plus_one(base) if rule == RULE_PLUS_ONE_WITH_DEFAULT else base


def positions(rule: str, layer_ids: Sequence[int] | None, num_layers: int) -> tuple[tuple[int, ...], str]:
    """What set_eagle3_layers_to_capture(layer_ids) stores under `rule`: (positions, rule as applied)."""
    if layer_ids is None:
        return default_positions(rule, num_layers), versions.DEFAULT_LAYERS + (
            ":plus_one" if rule == RULE_PLUS_ONE_WITH_DEFAULT else "")
    ids = tuple(int(i) for i in layer_ids)
    if rule in (RULE_PLUS_ONE, RULE_PLUS_ONE_WITH_DEFAULT):
        return _plus_one(ids), rule
    if rule == RULE_PLUS_ONE_IF_FIRST_IS_ONE:
        if ids and ids[0] == 1:
            return _plus_one(ids), rule + ":applied"
        return ids, rule + ":not_applied"
    if rule == RULE_AS_GIVEN_IF_MAX_IS_N:
        if ids and max(ids) == num_layers:
            return ids, rule + ":as_given"
        return _plus_one(ids), rule + ":applied"
    raise ValueError(f"unknown capture-id rule {rule!r}")


def ids_to_positions(row: Family, layer_ids: Sequence[int] | None, num_layers: int) -> tuple[int, ...]:
    """The positions a family row's setter stores for these ids (the runtime, doctor, replay, parity use this)."""
    return positions(row.rule, layer_ids, num_layers)[0]


def first_release(name: str) -> Version:
    """The first release in which family `name` is served."""
    return min(row.first for row in FAMILIES if row.name == name)


def table(version: Version | None = None) -> list[dict]:
    """The rows of a release as plain values (`eagle-probe compat`), each with the release the family is served
    from (`since`)."""
    return [dict(row.as_dict(), since=versions.format_version(first_release(row.name))) for row in rows_for(version)]
