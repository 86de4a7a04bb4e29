"""Configuration: read once from EAGLE_PROBE_* environment variables into one frozen object.

Environment variables are the only channel that reaches SGLang's spawned scheduler processes.
"""

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
LOG_LEVELS = ("debug", "info", "warning", "error")
PHASE_TIMING_MODES = ("on", "off")
INNER_FORWARD_MODES = ("auto", "on", "off")
DUMP_LAYER_CHOICES = ("aux", "all")
DUMP_MODE_CHOICES = ("extend", "target_verify")  # the target forward modes a dump may hold
MAX_ACCURACY_POSITIONS = 64  # per-position training accuracies; real draft chains have a handful
# The runtime's integrations (runtime/integrations ALL, as `eagle-probe compat` lists them), named here because the
# shared vocabulary imports nothing of the runtime; tests/unit/test_disabled_integrations.py holds them equal.
INTEGRATION_NAMES = ("model_runner", "targets", "llama_eagle3", "kimi_k25_eagle3", "acceptance", "retraction",
                     "eagle_worker", "runner_paths", "request_classes", "phase_timing", "block_drafts")
DRAFT_ACCURACY_ACCEPTED = ("a number in (0, 1] (one per-token accuracy), or comma-separated per-position "
                           "accuracies in (0, 1] as SpecForge logs them, e.g. 0.75,0.62,0.55")

# Launch flags under which SGLang dynamo-traces the inner model forward; a wrapper there would
# be traced into (or break) a fullgraph compile, so inner-forward wrappers stay off. The second exists before 0.5.23
# only. Read from the command line at install (before SGLang parses it); what SGLang resolved, however it was given
# (YAML --config, Engine(...)), is in the start-up statement (eagle_probe.observability: settings.torch_compile).
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
    log_dir: str | None = None
    log_level: str = "info"
    log_max_mb: float = 100.0  # a process's log file rotates past this size
    log_keep: int = 4  # rotated files kept per process
    metrics_port: int | None = None
    metrics_addr: str = "127.0.0.1"  # the per-rank exporter's bind address (loopback unless said otherwise)
    summary_interval_s: float = 60.0
    fingerprint_interval_s: float = 1.0  # sampled aux fingerprints (0: off)
    coverage_interval_s: float = 0.1  # sampled verify steps whose tokens meet the draft's vocabulary (0: off)
    flush_interval_s: float = 1.0  # counted values reach the Prometheus series at most this late (0: summary/exit)
    log_every_forward: bool = False
    phase_timing: str = "on"  # the cost of each speculative step (runtime/timing/), for the speed-up estimate
    inner_forward: str = "auto"
    disabled_integrations: tuple[str, ...] = ()  # integrations that wrap nothing (names of INTEGRATION_NAMES)
    # Training accuracy, in one form everywhere: per-position conditional accuracies as SpecForge logs them per TTT
    # step, (0.75, 0.62, 0.55); one per-token number is the one-position tuple (0.75,), since the last repeats.
    draft_accuracy: tuple[float, ...] | None = None
    collapse_ratio: float = 0.6  # observed / expected mean acceptance length under this is a collapse
    collapse_min_drafts: int = 64  # request-steps a window needs before it can be judged
    trained_layers: str | None = None  # e.g. "hf:0,3,31": what the draft was trained on
    dump_dir: str | None = None  # opt-in dumps of target forwards of dump_modes (they contain token ids)
    dump_every: int = 10  # the first eligible forward of each mode, then every N-th
    dump_ranks: tuple[int, ...] | None = (0,)  # tp ranks that write; None: all
    dump_layers: str = "aux"  # aux: what the draft receives; all: also the residual stream entering every layer
    dump_max_mb: float = 256.0  # the dump directory's total
    dump_modes: tuple[str, ...] = ("extend",)  # target forward modes dumped: extend, target_verify
    reference: str | None = None  # a JSON file from `eagle-probe reference`: live slots are compared with it
    draft_max_length: int | None = None  # the sequence length the draft was trained on (eagle_probe.draft_dir)

    def to_env(self) -> dict:
        """The variables that reproduce this configuration in a child process: every setting that has a value."""
        env = {}
        for setting in SETTINGS:
            text = setting.write(getattr(self, setting.field))
            if text:
                env[setting.variable] = text
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


def _port(env: Mapping[str, str], name: str, default: int | None = None) -> int | None:
    return _number(env, name, default, int, lambda v: 1 <= v <= 65535, "an integer TCP port 1-65535")


def _positive_float(env: Mapping[str, str], name: str, default: float) -> float:
    return _number(env, name, default, float, lambda v: 0 < v < float("inf"), "a number of seconds > 0")


def _positive_float_mb(env: Mapping[str, str], name: str, default: float) -> float:
    return _number(env, name, default, float, lambda v: 0 < v < float("inf"), "a size in MB > 0")


def _seconds_or_zero(env: Mapping[str, str], name: str, default: float) -> float:
    return _number(env, name, default, float, lambda v: 0 <= v < float("inf"), "a number of seconds >= 0")


def _fraction(env: Mapping[str, str], name: str, default: float | None) -> float | None:
    return _number(env, name, default, float, lambda v: 0 < v <= 1, "a number in (0, 1]")


def format_accuracy(value: tuple[float, ...]) -> str:
    """The EAGLE_PROBE_DRAFT_ACCURACY text of a parsed value."""
    return ",".join(repr(float(v)) for v in value)


def parse_accuracy(raw: str) -> tuple[float, ...]:
    """'0.75' -> (0.75,); '0.75,0.62,0.55' -> (0.75, 0.62, 0.55). Raises ValueError saying what is wrong."""
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
    return tuple(values)


def _accuracy(env: Mapping[str, str], name: str, default=None) -> tuple[float, ...] | None:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return parse_accuracy(raw)
    except ValueError as exc:
        raise ConfigError(name, raw, f"{DRAFT_ACCURACY_ACCEPTED} ({exc})") from None


def _modes(env: Mapping[str, str], name: str, default: tuple[str, ...]) -> tuple[str, ...]:
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


def _integrations(env: Mapping[str, str], name: str, default: tuple[str, ...]) -> tuple[str, ...]:
    """Comma-separated integration names, each once (order kept): e.g. 'runner_paths,request_classes'."""
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    names = []
    for part in raw.split(","):
        integration = part.strip().lower()
        if integration not in INTEGRATION_NAMES:
            raise ConfigError(name, raw, "comma-separated integration names among " + ", ".join(INTEGRATION_NAMES)
                              + f" ({part.strip()!r} is not one)")
        if integration not in names:
            names.append(integration)
    return tuple(names)


def _count(env: Mapping[str, str], name: str, default: int) -> int:
    return _number(env, name, default, int, lambda v: v >= 0, "an integer >= 0")


def _positive_int(env: Mapping[str, str], name: str, default: int) -> int:
    return _number(env, name, default, int, lambda v: v >= 1, "an integer >= 1")


def _optional_positive_int(env: Mapping[str, str], name: str, default: int | None = None) -> int | None:
    return _number(env, name, default, int, lambda v: v >= 1, "an integer >= 1 (unset: not given)")


def _layer_spec(env: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    from .layer_spec import parse_trained_layers

    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        parse_trained_layers(raw)
    except ValueError as exc:
        raise ConfigError(name, raw, f"'hf:I,J,...' (HF hidden_states indices) or 'sglang:I,J,...' ({exc})") from None
    return raw.strip()


def _ranks(env: Mapping[str, str], name: str, default: tuple[int, ...]) -> tuple[int, ...] | None:
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


def _directory(env: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    """A directory path; blank would name a directory called ' ', surely by mistake."""
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    if not raw.strip() or "\x00" in raw:
        raise ConfigError(name, raw, "a directory path (not blank; unset for the default)")
    return raw


def read_reference(path: str) -> list:
    """The reference file's slots; raises ValueError (or OSError) naming what is wrong."""
    import json

    from .reference_format import parse_reference

    with open(path, encoding="utf-8") as handle:
        return parse_reference(json.load(handle))


def _reference_file(env: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        read_reference(raw)
    except (OSError, ValueError) as exc:
        raise ConfigError(name, raw, f"a JSON file written by `eagle-probe reference` ({exc})") from None
    return raw


def _text(value) -> str | None:
    return None if value is None else str(value)


def _float_text(value) -> str | None:
    return None if value is None else repr(value)


def _bool_text(value: object) -> str:
    return "1" if value else "0"


def _ranks_text(value) -> str:
    return "all" if value is None else ",".join(map(str, value))


def _accuracy_text(value) -> str | None:
    return None if value is None else format_accuracy(value)


def _names_text(value) -> str:
    return ",".join(value)


@dataclass(frozen=True)
class Setting:
    """One EAGLE_PROBE_* variable, declared once: ProbeConfig.to_env(), `eagle-probe run`'s options and help, and
    the documentation's configuration page are generated from SETTINGS."""

    variable: str
    field: str  # the ProbeConfig field it sets (the default is the field's own)
    read: Callable  # (env, variable, default) -> value; raises ConfigError naming what it accepts
    meaning: str
    write: Callable[[object], str | None] = _text  # the value back to the variable's text (None or "": not set)
    option: str | None = None  # its `eagle-probe run` option
    path: bool = False  # `run` makes it absolute (the launched command may change directory)
    needs: str | None = None  # the variable without which this setting does nothing
    choices: tuple[str, ...] | None = None  # `run` offers these (case-insensitive)
    default_text: str | None = None  # how the unset default reads, where the field's value says it poorly

    @property
    def switch(self) -> bool:
        """A yes/no setting: its `run` option takes no value."""
        return self.read is _bool


def _choice_setting(variable: str, field: str, choices, meaning: str, **more) -> Setting:
    return Setting(variable, field, lambda env, name, default: _choice(env, name, default, choices), meaning,
                   choices=tuple(choices), **more)


def default_text(setting: Setting, defaults: "ProbeConfig | None" = None) -> str:
    """The unset default as the documentation and `run --help` show it."""
    if setting.default_text is not None:
        return setting.default_text
    value = getattr(ProbeConfig() if defaults is None else defaults, setting.field)
    if value is None:
        return "none"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return setting.write(value) or "none"


_DUMP = "EAGLE_PROBE_DUMP_DIR"
_ACCURACY = "EAGLE_PROBE_DRAFT_ACCURACY"

SETTINGS = (
    Setting("EAGLE_PROBE_ENABLED", "enabled", _bool, "turns the probe on or off in every process that loads it "
            "(`eagle-probe run` sets it to 1)", write=_bool_text),
    Setting("EAGLE_PROBE_LOG_DIR", "log_dir", _directory, "the directory for the JSON log lines: one "
            "`eagle-probe-HOST-PID.jsonl` per process", option="--log-dir", path=True, default_text="stderr"),
    _choice_setting("EAGLE_PROBE_LOG_LEVEL", "log_level", LOG_LEVELS, "the lowest level of the probe's log lines",
                    option="--log-level"),
    Setting("EAGLE_PROBE_LOG_MAX_MB", "log_max_mb", _positive_float_mb, "a process's log file is rotated once it "
            "holds this many MB (whole lines only): renamed `eagle-probe-HOST-PID.NNNNN.jsonl`, numbered in order, and "
            "a new file begins with the process's once-only lines again (start-up, capture, statement, findings)",
            write=_float_text, option="--log-max-mb", needs="EAGLE_PROBE_LOG_DIR"),
    Setting("EAGLE_PROBE_LOG_KEEP", "log_keep", _count, "rotated files kept per process, the oldest removed first "
            "(`0`: none; the periodic events are cumulative, so the last ones still give the whole run's totals)",
            option="--log-keep", needs="EAGLE_PROBE_LOG_DIR"),
    Setting("EAGLE_PROBE_METRICS_PORT", "metrics_port", _port, "each process serves the probe's series (only them) "
            "on ADDR:PORT+tp_rank when SGLang's `--enable-metrics` is off; with it, SGLang's `/metrics` on every node "
            "serves them and no exporter starts", option="--metrics-port"),
    Setting("EAGLE_PROBE_METRICS_ADDR", "metrics_addr", _address, "the IP address that exporter binds; another than "
            "loopback (needed when Prometheus runs on another host) logs one `eagle_probe.metrics.exposed` warning "
            "naming it", option="--metrics-addr"),
    Setting("EAGLE_PROBE_REFERENCE", "reference", _reference_file, "a JSON file from `eagle-probe reference`: each "
            "live aux slot's fingerprint is compared with the training data's (`aux_value_mismatch`)",
            option="--reference", path=True),
    Setting("EAGLE_PROBE_SUMMARY_INTERVAL_S", "summary_interval_s", _positive_float, "seconds between "
            "`eagle_probe.summary` events (and the periodic acceptance, coverage and slice events)",
            write=_float_text, option="--summary-interval"),
    Setting("EAGLE_PROBE_FLUSH_INTERVAL_S", "flush_interval_s", _seconds_or_zero, "seconds between moves of the "
            "counted values into the Prometheus series (a background thread); `0`: only at the summary tick and at "
            "exit", write=_float_text, option="--flush-interval"),
    Setting("EAGLE_PROBE_FINGERPRINT_INTERVAL_S", "fingerprint_interval_s", _seconds_or_zero, "seconds between "
            "sampled fingerprints of the aux slots (`0`: off); see Hidden-state values", write=_float_text,
            option="--fingerprint-interval"),
    Setting("EAGLE_PROBE_COVERAGE_INTERVAL_S", "coverage_interval_s", _seconds_or_zero, "seconds between verify "
            "steps whose committed tokens are checked against the draft's vocabulary (`0`: off); see Vocabulary "
            "coverage", write=_float_text, option="--coverage-interval"),
    Setting("EAGLE_PROBE_LOG_EVERY_FORWARD", "log_every_forward", _bool, "an `eagle_probe.target.forward` line per "
            "forward (debugging only)", write=_bool_text, option="--log-every-forward"),
    _choice_setting("EAGLE_PROBE_PHASE_TIMING", "phase_timing", PHASE_TIMING_MODES, "time each speculative decode "
                    "step's draft, verify and draft extend, and the target's forwards, by batch size (wall clock on "
                    "the CPU, CUDA events on a GPU; no synchronisation): the speed-up estimate and `eagle-probe "
                    "advise`; see Does speculation pay?", option="--phase-timing"),
    _choice_setting("EAGLE_PROBE_INNER_FORWARD", "inner_forward", INNER_FORWARD_MODES, "wrap the inner model "
                    "forwards (auto: off under `--enable-torch-compile`, and before 0.5.23 "
                    "`--enable-piecewise-cuda-graph`, which dynamo would trace them under; read from the command "
                    "line)", option="--inner-forward"),
    Setting("EAGLE_PROBE_DISABLED_INTEGRATIONS", "disabled_integrations", _integrations, "integrations (as "
            "`eagle-probe compat` lists them) that wrap nothing: their SGLang targets stay untouched, and each "
            "target gives one `eagle_probe.integration.skipped` line (reason: disabled by "
            "EAGLE_PROBE_DISABLED_INTEGRATIONS) saying what the probe cannot report without it",
            write=_names_text, option="--disabled-integrations"),
    Setting("EAGLE_PROBE_DRAFT_ACCURACY", "draft_accuracy", _accuracy, "the draft's training accuracy: per-position "
            "conditional accuracies as SpecForge logs them, e.g. `0.75,0.62,0.55` (at most "
            f"{MAX_ACCURACY_POSITIONS}), or one per-token number such as `0.75` for every position: enables "
            "expected-vs-observed acceptance (see Acceptance against training)", write=_accuracy_text,
            option="--draft-accuracy"),
    Setting("EAGLE_PROBE_COLLAPSE_RATIO", "collapse_ratio", _fraction, "observed / expected mean acceptance length "
            "under this in a window is `acceptance_collapse`", write=_float_text, option="--collapse-ratio",
            needs=_ACCURACY),
    Setting("EAGLE_PROBE_COLLAPSE_MIN_DRAFTS", "collapse_min_drafts", _positive_int, "request-steps a window needs "
            "before it is judged (summary intervals with fewer are carried into the next window)",
            option="--collapse-min-drafts", needs=_ACCURACY),
    Setting("EAGLE_PROBE_TRAINED_LAYERS", "trained_layers", _layer_spec, "the layers the draft was trained on, "
            "`hf:0,3,31` or `sglang:-1,2,30` (see doctor): enables `layer_mismatch` against what the target "
            "captures", option="--trained-layers"),
    Setting(_DUMP, "dump_dir", _directory, "turns on dumps of target forwards into this directory (they contain "
            "token ids); created 0700, files 0600", option="--dump-dir", path=True),
    Setting("EAGLE_PROBE_DUMP_EVERY", "dump_every", _positive_int, "dump the first eligible forward, then every "
            "N-th; each mode of EAGLE_PROBE_DUMP_MODES is counted on its own", option="--dump-every", needs=_DUMP),
    Setting("EAGLE_PROBE_DUMP_RANKS", "dump_ranks", _ranks, "the tp ranks that write dumps", write=_ranks_text,
            option="--dump-ranks", needs=_DUMP),
    _choice_setting("EAGLE_PROBE_DUMP_LAYERS", "dump_layers", DUMP_LAYER_CHOICES, "`aux`: what the draft receives; "
                    "`all`: also the residual stream entering every layer (SGLang 0.5.14+)", option="--dump-layers",
                    needs=_DUMP),
    Setting("EAGLE_PROBE_DUMP_MAX_MB", "dump_max_mb", _positive_float_mb, "the dump directory's total size in MB; "
            "reaching it stops dumps", write=_float_text, option="--dump-max-mb", needs=_DUMP),
    Setting("EAGLE_PROBE_DUMP_MODES", "dump_modes", _modes, "target forward modes to dump: `extend` (prefill), "
            "`target_verify` (the eager verify forwards, with each row's request, position and whether it was "
            "committed), or `extend,target_verify` (what `eagle-probe consistency` needs)", write=_names_text,
            option="--dump-modes", needs=_DUMP),
    Setting("EAGLE_PROBE_DRAFT_MAX_LENGTH", "draft_max_length", _optional_positive_int, "the sequence length the "
            "draft was trained on; unset, it is read from the draft directory (SpecForge's training_state.pt "
            "`args.max_length`, else config.json's max_position_embeddings, stated as such)",
            option="--draft-max-length", default_text="read from the draft directory"),
)
SETTING_BY_VARIABLE = {setting.variable: setting for setting in SETTINGS}


def load_config(env: Mapping[str, str] | None = None) -> ProbeConfig:
    """Parse EAGLE_PROBE_* variables; raises ConfigError on the first bad one."""
    env = os.environ if env is None else env
    defaults = ProbeConfig()
    return ProbeConfig(**{setting.field: setting.read(env, setting.variable, getattr(defaults, setting.field))
                          for setting in SETTINGS})


def inner_forward_enabled(config: ProbeConfig, argv) -> bool:
    """Whether to wrap inner model forwards, resolving 'auto' from the launch command."""
    if config.inner_forward != "auto":
        return config.inner_forward == "on"
    return not any(arg.split("=", 1)[0] in COMPILE_FLAGS for arg in argv)
