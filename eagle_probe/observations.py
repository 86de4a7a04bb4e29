"""Observations: frozen plain values, the only thing that crosses from SGLang's world into the probe. They are
shared vocabulary: the runtime builds them, the pure analysis rules read them (without importing the runtime)."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

# Labels every probe series carries: bounded per deployment (ranks, node ranks, host names).
RANK_LABELS = ("tp_rank", "pp_rank", "dp_rank", "node_rank", "host")


@dataclass(frozen=True)
class Ranks:
    """Where a process runs: its node and host, and its own places in the target's parallel groups (never the draft's
    swapped-in group). dp_rank is the data-parallel controller's number for the scheduler; attn_dp_rank its place in
    the attention-DP group under DP attention (the same number there)."""

    tp_rank: int | None = None
    tp_size: int | None = None
    pp_rank: int | None = None
    dp_rank: int | None = None
    pp_size: int | None = None
    attn_tp_rank: int | None = None
    attn_tp_size: int | None = None
    attn_dp_rank: int | None = None
    attn_dp_size: int | None = None
    node_rank: int | None = None
    nnodes: int | None = None
    host: str | None = None

    def labels(self) -> dict:
        """The series labels (RANK_LABELS); an unknown value is the empty string."""
        return {k: ("" if getattr(self, k) is None else str(getattr(self, k))) for k in RANK_LABELS}

    def sizes(self) -> dict:
        """The widths and attention places, for the info series (one per process, not per series)."""
        return {k: ("" if getattr(self, k) is None else str(getattr(self, k)))
                for k in ("tp_size", "pp_size", "attn_tp_rank", "attn_tp_size", "attn_dp_rank", "attn_dp_size",
                          "nnodes")}

    def fields(self) -> dict:
        """Every field, for the log lines (bound to every event of the process)."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class CaptureConfigured:
    """One call of set_eagle3_layers_to_capture, after it returned."""

    model_class: str
    role: str
    requested_ids: tuple[int, ...] | None
    layers_to_capture: tuple[int, ...]
    num_layers: int
    first_k_dense_replace: int | None
    start_layer: int
    end_layer: int
    is_last_pp_stage: bool
    caller: str  # qualified name of the SGLang function that made the call
    during_graph_setup: bool
    family: str | None = None  # families.py row name; None: no row names the class (rule unverified)
    family_rule: str | None = None  # the row's rule, or "unverified"; None: not known (offline predictions)
    rule_applied: str | None = None  # the rule as applied to these ids (families.positions)
    # the graph runners the target's ModelRunner already held when the call returned (capture_after_graph)
    graphs_captured: tuple[str, ...] = ()


class TargetForward(NamedTuple):
    """One Python-level run of a target family's inner model forward (DeepseekV2Model, LlamaModel, ...; eager steps
    and CUDA-graph capture runs).

    A NamedTuple rather than a frozen dataclass: it is built on every forward, and a frozen
    dataclass's __init__ costs about ten times as much.
    """

    model_class: str
    role: str
    mode: str
    capturing: bool  # a CUDA graph is being captured (the stream flag or SGLang's capture mode)
    can_run_tbo: bool
    layers_to_capture: tuple[int, ...]
    num_layers: int
    normal_range: tuple[int, int]
    tbo_range: tuple[int, int] | None
    lost: tuple[int, ...]
    tokens: int
    aux_expected: int
    aux_returned: int | None  # None when the forward raised
    aux_format: str  # packed | list | none | error
    aux_shape: tuple[int, ...] | None  # packed shape, or None
    slot_widths: tuple[int, ...]
    dtype: str | None
    error: str | None = None  # "ExcType: message" raised by SGLang (re-raised unchanged)

    @property
    def path(self) -> str:
        return "graph_capture" if self.capturing else "eager"

    def signature(self) -> tuple:
        """Everything but the token count: a change here is worth a log line."""
        return (self.model_class, self.role, self.mode, self.capturing, self.can_run_tbo,
                self.layers_to_capture, self.normal_range, self.tbo_range, self.aux_returned,
                self.aux_format, None if self.aux_shape is None else self.aux_shape[1:],
                self.slot_widths, self.dtype, self.error)


@dataclass(frozen=True)
class DraftLoaded:
    """An EAGLE-3 draft after load_weights: its configuration and what the checkpoint held."""

    model_class: str
    eagle_layer_ids: tuple[int, ...] | None
    use_aux_hidden_state: bool | None
    target_hidden_size: int | None
    draft_hidden_size: int | None
    num_aux: int | None
    fc_in: int | None
    fc_out: int | None
    norm_before_fc: bool
    fc_norm: bool
    norm_output: bool
    draft_vocab_size: int | None
    lm_head_from_target: bool
    checkpoint_tensors: int
    dropped: tuple[str, ...]
    ignored: tuple[str, ...]  # skipped by SGLang on purpose (t2d), not a loss
    embed_in_checkpoint: bool
    lm_head_in_checkpoint: bool
    embed_rel_diff: float | None = None  # the checkpoint's embed_tokens against the target's (None: not compared)
    embed_compare: str = ""  # how it was compared, or why not
    target_vocab_size: int | None = None  # the config's vocab_size: the target's vocabulary the draft serves
    d2t_size: int | None = None  # entries of the checkpoint's d2t map (None: the checkpoint has none)
    d2t_problems: dict | None = None  # analysis.vocab_map.map_problems of that map (None: not computed)
    # The ids the draft class sized its fc from and where it read them (analysis.draft_ids: eagle_config,
    # top_level, num_aux_hidden_states, default); eagle_layer_ids above are the ones the target is given.
    ids_read: tuple[int, ...] | None = None
    ids_read_from: str = ""
    # Forward keys of the draft config this release's class ignores (analysis.draft_config_keys): (written key, value
    # as JSON text, reason); the release they were judged against; where the config was read (or why not).
    config_ignored: tuple[tuple[str, str, str], ...] = ()
    sglang_release: str | None = None
    config_source: str = ""
    # The draft's trained sequence length (eagle_probe.draft_dir) and where it came from, with any fallback notes.
    trained_length: int | None = None
    trained_length_source: str = ""
    trained_length_notes: tuple[str, ...] = ()


class DraftForward(NamedTuple):
    """One Python-level run of the EAGLE-3 draft's inner model forward."""

    model_class: str
    mode: str
    capturing: bool
    aux_width: int | None  # width of spec_info.hidden_states coming from the target
    embed_width: int
    fc_in: int | None
    fc_ran: bool  # SGLang runs fc only when aux_width != embed_width
    num_aux: int | None
    target_hidden_size: int | None
    tokens: int
    error: str | None = None

    @property
    def path(self) -> str:
        return "graph_capture" if self.capturing else "eager"

    def signature(self) -> tuple:
        return self[:9] + (self.error,)


class VerifyStep(NamedTuple):
    """Accepted draft tokens (bonus excluded) per live request of one verify step, read on the CPU."""

    accepted: tuple[int, ...]
    positions: int  # the step's own draft depth: its speculative steps (adaptive: the steps it ran), a tree's depth
    source: str = ""  # the SGLang function whose result was read (the release's acceptance hook)
    # For acceptance by slice (runtime/slice_counter.py), read per request off the hot path:
    reqs: Sequence = ()  # the requests of `accepted`, in order (a list of the step's own: SGLang's Req objects)
    batch_size: int = 0  # requests in the verify step before finished ones were left out
    graph: bool | None = None  # the verify forward ran as a CUDA graph (None: not known)
    proposed: int = 0  # drafts proposed per request: a tree's nodes after its root (0: a chain, `positions`)


class RequestFinished(NamedTuple):
    """A finished request's traffic classes and accepted drafts, read in SGLang's HTTP server process."""

    classes: tuple[tuple[str, str], ...]  # (dimension, bucket): its entry point, a bucket per allowed custom label
    lengths: dict[int, int]  # accepted drafts (0..positions) -> its verify steps that accepted that many
    positions: int  # draft positions along the chain (speculative steps)


class AuxFingerprint(NamedTuple):
    """One aux slot's fingerprint from one sampled forward (plain floats, read from host memory)."""

    role: str
    slot: int
    capture_index: int | None  # None for the draft's input (the draft does not know the layer)
    mode: str
    step: int  # the model's forward count in this process (equal across TP ranks for the same forward)
    tokens: int
    width: int
    rms: float
    mean: float
    absmax: float
    nonfinite: int
    signature: tuple[float, ...]


@dataclass(frozen=True)
class DraftVocabulary:
    """The target ids an EAGLE-3 draft can propose, known once its weights are loaded (analysis.vocab_coverage)."""

    model_class: str
    draft_vocab_size: int | None
    target_vocab_size: int | None
    map_kind: str  # vocab_coverage.MAP_FULL, MAP_D2T or MAP_NONE
    hot_ids: tuple[int, ...] | None  # the target ids it can propose (None: every id)


@dataclass(frozen=True)
class BlockCaptureConfigured:
    """A block-diffusion (DFlash, DSpark) draft's capture set-up on the target: the outermost
    set_dflash_layers_to_capture / set_dspark_layers_to_capture call, the positions it stored, and what the draft's
    config.json says of the ids (`draft_config`: analysis.dflash_layers.BlockDraftConfig, None when unread)."""

    model_class: str
    setter: str  # the setter called (its algorithm: DFLASH or DSPARK)
    requested_ids: tuple[int, ...] | None
    layers_to_capture: tuple[int, ...]
    num_layers: int
    is_last_pp_stage: bool
    draft_config: object | None  # BlockDraftConfig
    draft_config_path: str | None  # where it was read, or why not
    caller: str

    @property
    def algorithm(self) -> str:
        return "DSPARK" if "dspark" in self.setter else "DFLASH"  # as --speculative-algorithm names it


@dataclass(frozen=True)
class BlockDraftLoaded:
    """The block-diffusion worker after its set-up: the block it drafts and the draft's projection of the target's
    states (fc: K x hidden in, hidden out)."""

    worker_class: str
    model_class: str  # the draft model's class
    block_size: int | None  # served (--speculative-num-draft-tokens, else the checkpoint's)
    config_block_size: int | None  # the checkpoint's dflash_config.block_size
    mask_token_id: int | None
    num_draft_layers: int | None
    num_context_features: int | None  # K: the target states the draft's fc takes per token
    hidden_size: int | None
    fc_in: int | None
    fc_out: int | None
    target_layer_ids: tuple[int, ...] | None  # the draft's own parsed ids (None: none named, or before 0.5.19)


class BlockDraftFed(NamedTuple):
    """What one hand-off fed the block draft's projection (project_target_hidden): the target's concatenated states."""

    worker_class: str
    mode: str  # EXTEND (after a prefill) or TARGET_VERIFY (after a verify)
    width: int
    expected_width: int | None  # the draft's fc input width
    rows: int
    dtype: str
    is_graph: bool | None = None
