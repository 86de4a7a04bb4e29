"""Configuration: read once from EAGLE_PROBE_* environment variables into one frozen object.

Environment variables are the only channel that reaches SGLang's spawned scheduler processes.
"""

import os
from dataclasses import dataclass
from typing import Mapping, Optional, Tuple, Union

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
LOG_LEVELS = ("debug", "info", "warning", "error")
INNER_FORWARD_MODES = ("auto", "on", "off")
DUMP_LAYER_CHOICES = ("aux", "all")
DUMP_MODE_CHOICES = ("extend", "target_verify")  # the target forward modes a dump may hold
MAX_ACCURACY_POSITIONS = 64  # per-position training accuracies; real draft chains have a handful
DRAFT_ACCURACY_ACCEPTED = ("a number in (0, 1] (one per-token accuracy), or comma-separated per-position "
                           "accuracies in (0, 1] as SpecForge logs them, e.g. 0.75,0.62,0.55")

# Launch flags under which SGLang dynamo-traces the inner model forward; a wrapper there would
# be traced into (or break) a fullgraph compile, so inner-forward wrappers stay off.
COMPILE_FLAGS = ("--enable-torch-compile", "--enable-piecewise-cuda-graph")


class ConfigError(ValueError):
    """A bad EAGLE_PROBE_* value; the message names the variable and what it accepts."""

    def __init__(self, variable: str, value: str, accepted: str):
        self.variable = variable
        self.value = value
        self.accepted = accepted
        super().__init__(f"{variable}={value!r} is not valid; accepted: {accepted}")


@dataclass(frozen=True)
class ProbeConfig:
    enabled: bool = True
    log_dir: Optional[str] = None
    log_level: str = "info"
    metrics_port: Optional[int] = None
    metrics_addr: str = "127.0.0.1"  # the per-rank exporter's bind address (loopback unless said otherwise)
    summary_interval_s: float = 60.0
    fingerprint_interval_s: float = 1.0  # sampled aux fingerprints (0: off)
    coverage_interval_s: float = 0.1  # sampled verify steps whose tokens meet the draft's vocabulary (0: off)
    flush_interval_s: float = 1.0  # counted values reach the Prometheus series at most this late (0: summary/exit)
    log_every_forward: bool = False
    inner_forward: str = "auto"
    # Training accuracy: one per-token number (0.75), or per-position conditional accuracies (0.75, 0.62, 0.55)
    # as SpecForge logs them per TTT step (analysis.acceptance.expected_mean_length reads both forms).
    draft_accuracy: Optional[Union[float, Tuple[float, ...]]] = None
    collapse_ratio: float = 0.6  # observed / expected mean acceptance length under this is a collapse
    collapse_min_drafts: int = 64  # request-steps a window needs before it can be judged
    trained_layers: Optional[str] = None  # e.g. "hf:0,3,31": what the draft was trained on
    dump_dir: Optional[str] = None  # opt-in dumps of target forwards of dump_modes (they contain token ids)
    dump_every: int = 10  # the first eligible forward of each mode, then every N-th
    dump_ranks: Optional[Tuple[int, ...]] = (0,)  # tp ranks that write; None: all
    dump_layers: str = "aux"  # aux: what the draft receives; all: also the residual stream entering every layer
    dump_max_mb: float = 256.0  # the dump directory's total
    dump_modes: Tuple[str, ...] = ("extend",)  # target forward modes dumped: extend, target_verify
    reference: Optional[str] = None  # a JSON file from `eagle-probe reference`: live slots are compared with it
    draft_max_length: Optional[int] = None  # the sequence length the draft was trained on (eagle_probe.draft_dir)

    def to_env(self) -> dict:
        """The variables that reproduce this configuration in a child process."""
        env = {
            "EAGLE_PROBE_ENABLED": "1" if self.enabled else "0",
            "EAGLE_PROBE_LOG_LEVEL": self.log_level,
            "EAGLE_PROBE_SUMMARY_INTERVAL_S": repr(self.summary_interval_s),
            "EAGLE_PROBE_FLUSH_INTERVAL_S": repr(self.flush_interval_s),
            "EAGLE_PROBE_FINGERPRINT_INTERVAL_S": repr(self.fingerprint_interval_s),
            "EAGLE_PROBE_COVERAGE_INTERVAL_S": repr(self.coverage_interval_s),
            "EAGLE_PROBE_LOG_EVERY_FORWARD": "1" if self.log_every_forward else "0",
            "EAGLE_PROBE_INNER_FORWARD": self.inner_forward,
        }
        if self.log_dir:
            env["EAGLE_PROBE_LOG_DIR"] = self.log_dir
        if self.metrics_port is not None:
            env["EAGLE_PROBE_METRICS_PORT"] = str(self.metrics_port)
            env["EAGLE_PROBE_METRICS_ADDR"] = self.metrics_addr
        if self.draft_accuracy is not None:
            env["EAGLE_PROBE_DRAFT_ACCURACY"] = format_accuracy(self.draft_accuracy)
        env["EAGLE_PROBE_COLLAPSE_RATIO"] = repr(self.collapse_ratio)
        env["EAGLE_PROBE_COLLAPSE_MIN_DRAFTS"] = str(self.collapse_min_drafts)
        if self.trained_layers:
            env["EAGLE_PROBE_TRAINED_LAYERS"] = self.trained_layers
        if self.reference:
            env["EAGLE_PROBE_REFERENCE"] = self.reference
        if self.draft_max_length is not None:
            env["EAGLE_PROBE_DRAFT_MAX_LENGTH"] = str(self.draft_max_length)
        if self.dump_dir:
            env.update(EAGLE_PROBE_DUMP_DIR=self.dump_dir, EAGLE_PROBE_DUMP_EVERY=str(self.dump_every),
                       EAGLE_PROBE_DUMP_RANKS="all" if self.dump_ranks is None else ",".join(map(str, self.dump_ranks)),
                       EAGLE_PROBE_DUMP_LAYERS=self.dump_layers, EAGLE_PROBE_DUMP_MAX_MB=repr(self.dump_max_mb),
                       EAGLE_PROBE_DUMP_MODES=",".join(self.dump_modes))
        return env


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(name, raw, "1/0, true/false, yes/no, on/off")


def _choice(env: Mapping[str, str], name: str, default: str, choices) -> str:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value not in choices:
        raise ConfigError(name, raw, ", ".join(choices))
    return value


def _number(env: Mapping[str, str], name: str, default, cast, valid, accepted: str):
    """A numeric variable: cast the text, check it, or name the variable and what it accepts."""
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = cast(raw)
    except ValueError:
        raise ConfigError(name, raw, accepted) from None
    if not valid(value):
        raise ConfigError(name, raw, accepted)
    return value


def _address(env: Mapping[str, str], name: str, default: str) -> str:
    import ipaddress

    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return str(ipaddress.ip_address(raw.strip()))
    except ValueError:
        raise ConfigError(name, raw, "an IP address to bind, e.g. 127.0.0.1 (default), 0.0.0.0 or ::") from None


def is_loopback(address: str) -> bool:
    import ipaddress

    return ipaddress.ip_address(address).is_loopback


def _port(env: Mapping[str, str], name: str) -> Optional[int]:
    return _number(env, name, None, int, lambda v: 1 <= v <= 65535, "an integer TCP port 1-65535")


def _positive_float(env: Mapping[str, str], name: str, default: float) -> float:
    return _number(env, name, default, float, lambda v: 0 < v < float("inf"), "a number of seconds > 0")


def _positive_float_mb(env: Mapping[str, str], name: str, default: float) -> float:
    return _number(env, name, default, float, lambda v: 0 < v < float("inf"), "a size in MB > 0")


def _seconds_or_zero(env: Mapping[str, str], name: str, default: float) -> float:
    return _number(env, name, default, float, lambda v: 0 <= v < float("inf"), "a number of seconds >= 0")


def _fraction(env: Mapping[str, str], name: str, default: Optional[float]) -> Optional[float]:
    return _number(env, name, default, float, lambda v: 0 < v <= 1, "a number in (0, 1]")


def format_accuracy(value) -> str:
    """The EAGLE_PROBE_DRAFT_ACCURACY text of a parsed value (one number, or per-position numbers)."""
    if isinstance(value, (tuple, list)):
        return ",".join(repr(float(v)) for v in value)
    return repr(value)


def parse_accuracy(raw: str) -> Union[float, Tuple[float, ...]]:
    """'0.75' -> 0.75; '0.75,0.62,0.55' -> (0.75, 0.62, 0.55). Raises ValueError saying what is wrong."""
    import math

    parts = raw.split(",")
    if len(parts) > MAX_ACCURACY_POSITIONS:
        raise ValueError(f"{len(parts)} positions; at most {MAX_ACCURACY_POSITIONS}")
    values = []
    for position, part in enumerate(parts):
        try:
            value = float(part)
        except ValueError:
            raise ValueError(f"position {position}: {part!r} is not a number") from None
        if not (math.isfinite(value) and 0 < value <= 1):
            raise ValueError(f"position {position}: {part.strip()} is not in (0, 1]")
        values.append(value)
    return values[0] if len(values) == 1 else tuple(values)


def _accuracy(env: Mapping[str, str], name: str) -> Optional[Union[float, Tuple[float, ...]]]:
    raw = env.get(name)
    if raw is None or raw == "":
        return None
    try:
        return parse_accuracy(raw)
    except ValueError as exc:
        raise ConfigError(name, raw, f"{DRAFT_ACCURACY_ACCEPTED} ({exc})") from None


def _modes(env: Mapping[str, str], name: str, default: Tuple[str, ...]) -> Tuple[str, ...]:
    """Comma-separated choices, each once (order kept): e.g. 'extend,target_verify'."""
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    accepted = "comma-separated forward modes among " + ", ".join(DUMP_MODE_CHOICES) + " (e.g. extend,target_verify)"
    modes = []
    for part in raw.split(","):
        mode = part.strip().lower()
        if mode not in DUMP_MODE_CHOICES:
            raise ConfigError(name, raw, accepted)
        if mode not in modes:
            modes.append(mode)
    return tuple(modes)


def _positive_int(env: Mapping[str, str], name: str, default: int) -> int:
    return _number(env, name, default, int, lambda v: v >= 1, "an integer >= 1")


def _optional_positive_int(env: Mapping[str, str], name: str) -> Optional[int]:
    return _number(env, name, None, int, lambda v: v >= 1, "an integer >= 1 (unset: not given)")


def _layer_spec(env: Mapping[str, str], name: str) -> Optional[str]:
    from .analysis.layers import parse_trained_layers

    raw = env.get(name)
    if raw is None or raw == "":
        return None
    try:
        parse_trained_layers(raw)
    except ValueError as exc:
        raise ConfigError(name, raw, f"'hf:I,J,...' (HF hidden_states indices) or 'sglang:I,J,...' ({exc})") from None
    return raw.strip()


def _ranks(env: Mapping[str, str], name: str, default: Tuple[int, ...]) -> Optional[Tuple[int, ...]]:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    if raw.strip().lower() == "all":
        return None
    try:
        ranks = tuple(int(part) for part in raw.split(","))
    except ValueError:
        raise ConfigError(name, raw, "'all' or comma-separated tp ranks >= 0, e.g. '0' or '0,1'") from None
    if not ranks or any(r < 0 for r in ranks):
        raise ConfigError(name, raw, "'all' or comma-separated tp ranks >= 0, e.g. '0' or '0,1'")
    return ranks


def _directory(env: Mapping[str, str], name: str) -> Optional[str]:
    """A directory path; blank would name a directory called ' ', surely by mistake."""
    raw = env.get(name)
    if raw is None or raw == "":
        return None
    if not raw.strip() or "\x00" in raw:
        raise ConfigError(name, raw, "a directory path (not blank; unset for the default)")
    return raw


def read_reference(path: str) -> list:
    """The reference file's slots; raises ValueError (or OSError) naming what is wrong."""
    import json

    from .analysis.fingerprints import parse_reference

    with open(path, encoding="utf-8") as handle:
        return parse_reference(json.load(handle))


def _reference_file(env: Mapping[str, str], name: str) -> Optional[str]:
    raw = env.get(name)
    if raw is None or raw == "":
        return None
    try:
        read_reference(raw)
    except (OSError, ValueError) as exc:
        raise ConfigError(name, raw, f"a JSON file written by `eagle-probe reference` ({exc})") from None
    return raw


def load_config(env: Optional[Mapping[str, str]] = None) -> ProbeConfig:
    """Parse EAGLE_PROBE_* variables; raises ConfigError on the first bad one."""
    env = os.environ if env is None else env
    log_dir = _directory(env, "EAGLE_PROBE_LOG_DIR")
    return ProbeConfig(
        enabled=_bool(env, "EAGLE_PROBE_ENABLED", True),
        log_dir=log_dir,
        log_level=_choice(env, "EAGLE_PROBE_LOG_LEVEL", "info", LOG_LEVELS),
        metrics_port=_port(env, "EAGLE_PROBE_METRICS_PORT"),
        metrics_addr=_address(env, "EAGLE_PROBE_METRICS_ADDR", "127.0.0.1"),
        summary_interval_s=_positive_float(env, "EAGLE_PROBE_SUMMARY_INTERVAL_S", 60.0),
        flush_interval_s=_seconds_or_zero(env, "EAGLE_PROBE_FLUSH_INTERVAL_S", 1.0),
        fingerprint_interval_s=_seconds_or_zero(env, "EAGLE_PROBE_FINGERPRINT_INTERVAL_S", 1.0),
        coverage_interval_s=_seconds_or_zero(env, "EAGLE_PROBE_COVERAGE_INTERVAL_S", 0.1),
        log_every_forward=_bool(env, "EAGLE_PROBE_LOG_EVERY_FORWARD", False),
        inner_forward=_choice(env, "EAGLE_PROBE_INNER_FORWARD", "auto", INNER_FORWARD_MODES),
        draft_accuracy=_accuracy(env, "EAGLE_PROBE_DRAFT_ACCURACY"),
        collapse_ratio=_fraction(env, "EAGLE_PROBE_COLLAPSE_RATIO", 0.6),
        collapse_min_drafts=_positive_int(env, "EAGLE_PROBE_COLLAPSE_MIN_DRAFTS", 64),
        trained_layers=_layer_spec(env, "EAGLE_PROBE_TRAINED_LAYERS"),
        dump_dir=_directory(env, "EAGLE_PROBE_DUMP_DIR"),
        dump_every=_positive_int(env, "EAGLE_PROBE_DUMP_EVERY", 10),
        dump_ranks=_ranks(env, "EAGLE_PROBE_DUMP_RANKS", (0,)),
        dump_layers=_choice(env, "EAGLE_PROBE_DUMP_LAYERS", "aux", DUMP_LAYER_CHOICES),
        dump_max_mb=_positive_float_mb(env, "EAGLE_PROBE_DUMP_MAX_MB", 256.0),
        dump_modes=_modes(env, "EAGLE_PROBE_DUMP_MODES", ("extend",)),
        reference=_reference_file(env, "EAGLE_PROBE_REFERENCE"),
        draft_max_length=_optional_positive_int(env, "EAGLE_PROBE_DRAFT_MAX_LENGTH"),
    )


def inner_forward_enabled(config: ProbeConfig, argv) -> bool:
    """Whether to wrap inner model forwards, resolving 'auto' from the launch command."""
    if config.inner_forward != "auto":
        return config.inner_forward == "on"
    return not any(arg.split("=", 1)[0] in COMPILE_FLAGS for arg in argv)
