"""Draft config keys that change the EAGLE-3 forward, and which of them each SGLang release's draft class reads
(draft_config_ignored). Pure rules, no SGLang import: the running probe (draft load) and `eagle-probe doctor` call
the same function, so a key the release drops reads the same before launch and while serving.

A key is *ignored* when the draft config gives it a value that changes the forward (`ForwardKey.effective`) and the
release's draft class never reads it where it is written (top level or inside eagle_config): the module then runs as
if the key were absent, and a draft trained with it is served another network than it was trained as (vllm #38111
and #46488 for norm_before_fc / fc_norm / norm_output; sglang #32334).

READS is the table, per draft class: (key, where it is read) -> the first release whose class source reads it. It was
read off each release's wheel (versions.RELEASE_TEXTS) and is re-proven per release by the contract check
(eagle_probe/commands/contract/config_key_claims.py): the set of (key, where) the class's source reads must equal
what this table says for that release. Every read, once added, stayed in every later release, so one "since" per
entry describes it.
"""

from collections.abc import Callable
from dataclasses import dataclass

from ..versions import SUPPORTED_MAX, SUPPORTED_MIN, format_version, parse_version, resolve_release
from .draft_ids import DRAFT_CLASSES, KIMI, LLAMA, draft_class
from .findings import DRAFT_CONFIG_IGNORED, Finding, _finding

TOP, NESTED = "config", "eagle_config"  # where a key is written: the config's top level, or inside eagle_config


def _truthy(value, config) -> bool:
    return bool(value)


def _scaling(value) -> bool:
    """A rope dict that scales (its type is not the plain one)."""
    if not isinstance(value, dict):
        return False
    kind = value.get("rope_type", value.get("type"))
    return kind not in (None, "default")


def _rope_parameters(value, config) -> bool:
    """rope_parameters (transformers 5) changes the forward when it scales, or when it carries a rope_theta that the
    top level does not (a release reading rope_scaling and rope_theta alone then uses another base)."""
    if not isinstance(value, dict):
        return False
    theta = value.get("rope_theta")
    return _scaling(value) or (theta is not None and config.get("rope_theta") != theta)


def _target_hidden_size(value, config) -> bool:
    return value is not None and value != config.get("hidden_size")


def _num_aux(value, config) -> bool:
    return value is not None and value != 3  # a class that does not read it sizes its fc for 3 aux states


@dataclass(frozen=True)
class ForwardKey:
    name: str
    effect: str  # what it changes in the forward, in words
    effective: Callable[[object, dict], bool]  # (value, the whole config) -> whether this value changes anything
    absent: str  # how the module runs without it


FORWARD_KEYS: dict[str, ForwardKey] = {k.name: k for k in (
    ForwardKey("norm_before_fc", "an RMSNorm over the concatenated aux states before fc", _truthy, "no norm before fc"),
    ForwardKey("fc_norm", "an RMSNorm per aux state before fc", _truthy, "no per-state norm"),
    ForwardKey("use_aux_norm", "an RMSNorm per aux state before fc (fc_norm's older name)", _truthy,
               "no per-state norm"),
    ForwardKey("norm_output", "the final norm applied to the hidden state handed to the next draft step", _truthy,
               "the pre-norm state handed on"),
    ForwardKey("norm_before_residual", "the residual taken after hidden_norm (SpecForge's flag)", _truthy,
               "the residual taken before hidden_norm"),
    ForwardKey("target_hidden_size", "the width of each aux state (fc's input)",
               _target_hidden_size, "the draft's own hidden_size as the aux width"),
    ForwardKey("num_aux_hidden_states", "how many aux states fc takes", _num_aux, "3 aux states"),
    ForwardKey("rope_scaling", "RoPE scaling of the draft's attention",
               lambda value, config: _scaling(value), "unscaled RoPE"),
    ForwardKey("rope_parameters", "RoPE scaling and base of the draft's attention (transformers 5's field)",
               _rope_parameters, "rope_scaling and the top-level rope_theta alone"),
)}

# (key, where) -> first release whose draft class reads it (see the module docstring; proven by the contract check).
# Each is a release of versions.RELEASE_TEXTS (tests/unit/test_release_table.py).
READS: dict[str, dict[tuple[str, str], str]] = {
    LLAMA: {
        ("rope_scaling", TOP): "0.5.8",
        ("target_hidden_size", TOP): "0.5.8",
        ("rope_parameters", TOP): "0.5.10",
        ("num_aux_hidden_states", TOP): "0.5.12",
        ("fc_norm", TOP): "0.5.12",
        ("use_aux_norm", TOP): "0.5.12",
        ("norm_output", TOP): "0.5.12",
        ("norm_before_fc", TOP): "0.5.17",
        ("norm_before_fc", NESTED): "0.5.17",
    },
    KIMI: {
        ("rope_scaling", TOP): "0.5.12",
        ("rope_parameters", TOP): "0.5.12",
        ("target_hidden_size", TOP): "0.5.12",
        ("fc_norm", TOP): "0.5.13",
        ("use_aux_norm", TOP): "0.5.13",
        ("norm_output", TOP): "0.5.13",
    },
}
# The modules (and functions outside them) whose source a class's reads are taken from, for the contract check:
# Llama's draft decoder layer runs sglang.srt.models.llama.LlamaDecoderLayer.__init__, which builds its RoPE.
READ_SITES: dict[str, tuple[tuple[str, str | None], ...]] = {
    LLAMA: ((DRAFT_CLASSES[LLAMA].module, None), ("sglang.srt.models.llama", "LlamaDecoderLayer.__init__")),
    KIMI: ((DRAFT_CLASSES[KIMI].module, None),),
}

NEWEST = format_version(SUPPORTED_MAX)


def _release_version(release: str) -> tuple[int, ...]:
    version = parse_version(release)
    if version is None:
        raise ValueError(f"not a release number: {release!r}")
    return version


def reads_for(model_class: str, release: str) -> frozenset:
    """The (key, where) pairs the class reads in `release` (the table's; an unknown class is read as Llama's)."""
    version = _release_version(release)
    row = READS[draft_class(model_class).name]
    return frozenset(kw for kw, since in row.items() if _release_version(since) <= version)


def _first_reader(model_class: str, key: str, where: str) -> str | None:
    return READS[draft_class(model_class).name].get((key, where))


def judged_release(release):
    """(the release whose table row applies, a note when it is not the installed one): the nearest end of the
    supported range outside it, the newest when the version is unknown (versions.resolve_release's policy)."""
    resolved = resolve_release(release)
    if resolved.supported:
        return release, ""
    if resolved.version is None:
        return format_version(SUPPORTED_MAX), f"SGLang's version unknown ({release!r}): judged as the newest"
    if resolved.version > SUPPORTED_MAX:  # outside and not past it: before it (0.5.8rc1 precedes 0.5.8)
        return format_version(SUPPORTED_MAX), f"SGLang {release} is past the supported range: judged as the newest"
    return format_version(SUPPORTED_MIN), f"SGLang {release} is before the supported range: judged as the oldest"


@dataclass(frozen=True)
class IgnoredKey:
    key: str
    where: str  # TOP or NESTED
    value: object
    release: str
    reason: str  # "release table" (the class's source never reads it) or "loaded module" (read, yet not applied)

    @property
    def written(self) -> str:
        return self.key if self.where == TOP else f"eagle_config.{self.key}"


def written_keys(config: dict) -> list[tuple[str, str, object]]:
    """(key, where, value) of every forward key the config writes, top level first."""
    out = [(k, TOP, config[k]) for k in FORWARD_KEYS if k in config]
    nested = config.get("eagle_config")
    if isinstance(nested, dict):
        out += [(k, NESTED, nested[k]) for k in FORWARD_KEYS if k in nested]
    return out


def ignored_keys(config: dict, model_class: str, release: str, applied: dict[str, bool] | None = None
                 ) -> list[IgnoredKey]:
    """Forward keys of `config` (the draft's config.json as a dict) with a value that changes the forward which the
    release's class does not read where they are written. `applied`: what the loaded module shows it applied (key ->
    bool, only for keys it can show: norm_before_fc, fc_norm, norm_output); a key the table says is read but the module
    shows not applied is ignored too (reason "loaded module")."""
    if not isinstance(config, dict):
        raise TypeError(f"the draft config must be a JSON object, got {type(config).__name__}")
    reads = reads_for(model_class, release)
    out = []
    for key, where, value in written_keys(config):
        spec = FORWARD_KEYS[key]
        try:
            effective = spec.effective(value, config)
        except Exception:  # a value of an unexpected type: it changes something SGLang may read wrongly; say so
            effective = True
        if not effective:
            continue
        if (key, where) not in reads:
            out.append(IgnoredKey(key, where, value, release, "release table"))
        elif applied is not None and applied.get(key) is False:
            out.append(IgnoredKey(key, where, value, release, "loaded module"))
    return out


def _fix(item: IgnoredKey, model_class: str) -> str:
    other = NESTED if item.where == TOP else TOP
    if (item.key, other) in reads_for(model_class, item.release):
        place = "the top level" if other == TOP else "eagle_config"
        return f"move it to {place} of config.json, where this release reads it"
    since = _first_reader(model_class, item.key, item.where)
    if since is not None and _release_version(since) > _release_version(item.release):
        return f"serve with SGLang {since} or later, whose {draft_class(model_class).name} reads it"
    if item.reason == "loaded module":
        return "check how this release builds the module (the probe saw it read, yet not applied)"
    return (f"no SGLang release up to {NEWEST} reads it for {draft_class(model_class).name}: serve a draft trained "
            f"without it, or expect acceptance below its training")


def ignored_finding(items: list[IgnoredKey], model_class: str) -> Finding | None:
    """One draft_config_ignored finding naming every ignored key, its value and the release (None: nothing ignored)."""
    if not items:
        return None
    release = items[0].release
    parts = []
    for item in items:
        spec = FORWARD_KEYS[item.key]
        how = ("its source never reads it there" if item.reason == "release table"
               else "it reads it, yet the loaded module does not apply it")
        parts.append(f"{item.written} = {item.value!r} ({spec.effect}): {how}, so it runs with {spec.absent}; fix: "
                     f"{_fix(item, model_class)}")
    return _finding(
        DRAFT_CONFIG_IGNORED,
        f"{model_class}: SGLang {release} ignores {len(items)} key(s) of the draft config that change the EAGLE-3 "
        f"forward: " + "; ".join(parts) + ". A draft trained with them is served as another network; acceptance "
        "falls without an error.",
        model_class=model_class, release=release,
        ignored=[{"key": i.written, "value": i.value, "reason": i.reason} for i in items])


def from_observed(entries, release: str) -> list[IgnoredKey]:
    """IgnoredKey items back from DraftLoaded.config_ignored: (written key, value as JSON text, reason)."""
    import json

    out = []
    for written, text, reason in entries:
        where, _, key = written.rpartition(".")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        out.append(IgnoredKey(key, NESTED if where else TOP, value, release, reason))
    return out
