"""The supported SGLang range and what each release does, in one table (RULES).

Every row was decided from the source of each release between 0.5.8 and 0.5.23 (wheels read, not
imported) and is re-proven on every release by the contract check (eagle_probe/commands/contract/,
tools/contract_check.py, tests/contract): each field below has a claim there that fails, naming the
release and the claim, when a release does not do what its row says. The running probe, `doctor` and
`compat` ask this module; nothing else compares version numbers.

Where each rule changes (first release with the new behaviour):
  0.5.11  CUDA-graph set-up no longer calls set_eagle3_layers_to_capture() with no ids (the configured
          ids are applied before graphs: ModelRunner.init_aux_hidden_state_capture); spec v2
          (overlap) worker on by default; acceptance field renamed num_accepted_drafts_per_req_cpu
  0.5.12  acceptance field renamed num_correct_drafts_per_req_cpu, v2 resolver renamed
          _resolve_spec_overlap_tokens; the EAGLE-3 draft sizes fc by num_aux_hidden_states
  0.5.13  +1 applied only when ids[0] == 1; v1 EAGLEWorker removed; acceptance resolved in
          SchedulerBatchResultProcessor._resolve_spec_v2_tokens
  0.5.14  capture moved into the layer communicator (captures the residual, so index 0 is the
          embedding output); capture-mode flag moved to runner_utils.capture_mode; ranks published in
          sglang.srt.runtime_context; SGLANG_ENABLE_SPEC_V2 removed
  0.5.17  DeepSeek's aux states packed into one [T, K*H] tensor (AuxHiddenStatePacker)
  0.5.21  TBO helper imported into deepseek_v2 as model_forward_stages (was model_forward_maybe_tbo);
          sglang.srt.layers.dp_attention.get_attention_dp_rank removed (dp rank from runtime_context)
"""

import re
import sys
from dataclasses import dataclass

Version = tuple[int, int, int, int]  # (major, minor, micro, post)

# Capture-id rules: how set_eagle3_layers_to_capture(ids) turns ids into layers_to_capture.
PLUS_ONE_ALWAYS = "plus_one_always"  # [id + 1 for id in ids]
PLUS_ONE_IF_FIRST_IS_ONE = "plus_one_if_first_is_one"  # +1 only when ids[0] == 1, else ids as given
DEFAULT_LAYERS = "default_layers"  # ids is None: [2, n // 2, n - 3], no +1

DEFAULT_IDS_FORMULA = "[2, n // 2, n - 3]"
# The decoder-layer keyword through which the model hands a layer its capture collector (releases with
# embedding_capturable): all-layer dumps pass their own collector there for one forward.
LAYER_CAPTURE_KWARG = "captured_last_layer_outputs"  # n = config.num_hidden_layers; same in every supported release

# Where ranks come from (eagle_probe/runtime/context/ranks.py reads both, newest first).
RANKS_PARALLEL_STATE = "parallel_state"  # sglang.srt.distributed.parallel_state getters
RANKS_RUNTIME_CONTEXT = "runtime_context"  # sglang.srt.runtime_context.get_parallel()

# Acceptance: which worker a hook serves and when that worker runs.
V1_WORKER = "v1"  # EAGLEWorker (no overlap)
V2_WORKER = "v2"  # EAGLEWorkerV2 (overlap scheduler)
SPEC_V2_ENV = "SGLANG_ENABLE_SPEC_V2"
# Where a request is retracted: the one function that sets Req.is_retracted = True in every supported release.
REQ_MODULE = "sglang.srt.managers.schedule_batch"
RETRACT_HOOK = "Req.reset_for_retract"


# PEP 440 release numbers of SGLang's form (three components), any spelling PEP 440 normalises; a local label
# (+cu128) is read past.
_PEP440 = re.compile(
    r"v?(\d+)\.(\d+)\.(\d+)"
    r"(?:[-_.]?(alpha|beta|preview|pre|rc|a|b|c)[-_.]?(\d*))?"
    r"(?:-(\d+)|[-_.]?(?:post|rev|r)[-_.]?(\d*))?"
    r"(?:[-_.]?dev[-_.]?(\d*))?"
    r"(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?", re.IGNORECASE)
_PRE_ORDER = {"a": 0, "alpha": 0, "b": 1, "beta": 1}  # the rest (rc, c, pre, preview) are release candidates: 2


@dataclass(frozen=True)
class Release:
    """A release number as PEP 440 reads it: a final or post release (what the table proves), or a pre-release
    (a, b, rc) or dev release of one."""

    number: Version  # (major, minor, micro, post); post 0: none
    pre: tuple[int, int] | None = None  # (0 a, 1 b, 2 rc; its number)
    dev: int | None = None

    @property
    def final(self) -> bool:
        return self.pre is None and self.dev is None

    @property
    def key(self) -> tuple:
        """PEP 440's order: X.devN < XaN < XbN < XrcN < X < X.postN.devM < X.postN."""
        post = self.number[3]
        pre = self.pre
        if pre is None:  # a dev release of a final sorts before its pre-releases; a final or post after them
            pre = (-1, 0) if self.dev is not None and not post else (3, 0)
        return (*self.number[:3], pre, post or -1, sys.maxsize if self.dev is None else self.dev)


def parse_release(text: str) -> Release | None:
    """'0.5.24rc1' -> Release((0, 5, 24, 0), pre=(2, 1)); None when PEP 440 cannot read it as X.Y.Z[...]."""
    match = _PEP440.fullmatch(text.strip())
    if not match:
        return None
    major, minor, micro, pre_kind, pre_n, post_dash, post_n, dev = match.groups()
    post = int(post_dash or post_n or 0)  # post0 reads as no post release (the table has none)
    pre = None if pre_kind is None else (_PRE_ORDER.get(pre_kind.lower(), 2), int(pre_n or 0))
    return Release((int(major), int(minor), int(micro), post), pre, None if dev is None else int(dev or 0))


def parse_version(text: str) -> Version | None:
    """The release whose rows apply: '0.5.8.post1' -> (0, 5, 8, 1). A pre-release or dev release inside the
    supported range -> the proven release PEP 440 places it after ('0.5.23rc1' follows 0.5.22: (0, 5, 22, 0)); None
    for one outside the range, and for text that is not a release number."""
    release = parse_release(text)
    if release is None:
        return None
    if release.final:
        return release.number
    return _proven_before(release)


def _proven_before(release: Release) -> Version | None:
    """The newest proven release at or before `release` in PEP 440's order; None outside the supported range."""
    if not Release(SUPPORTED_MIN).key <= release.key <= Release(SUPPORTED_MAX[:3] + (99,)).key:
        return None
    return [v for v in RELEASES if Release(v).key <= release.key][-1]


def format_version(version: Version) -> str:
    text = ".".join(str(part) for part in version[:3])
    return text + (f".post{version[3]}" if version[3] else "")


@dataclass(frozen=True)
class AcceptanceHook:
    """Where per-step acceptance is read on the CPU (no device sync) for one worker path."""

    worker: str  # V1_WORKER or V2_WORKER
    when: str  # "default", or the environment that selects this path, e.g. "SGLANG_ENABLE_SPEC_V2=1"
    module: str
    qualname: str  # the function to wrap
    read: str  # what to read after it returns: "return[1].<field>" or "result.<field>" (argument)
    field: str  # per-request accepted count (list of int on the CPU)
    includes_bonus: bool  # False: accepted drafts only; the bonus (target-sampled) token is not counted
    field_owner: tuple[str, str] | None = None  # (module, class) declaring `field`, for return values
    # The step's committed tokens (accepted drafts and bonus) on the v1 worker: a field of `field_owner`, a 1-D device
    # tensor; None: the hook returns them per request as lists of ints (every v2 resolver)
    tokens_field: str | None = None

    @property
    def target(self) -> str:
        return f"{self.module}.{self.qualname}"


_V1_VERIFY = ("sglang.srt.speculative.eagle_worker", "EAGLEWorker.verify")
_EAGLE_INFO = "sglang.srt.speculative.eagle_info"
_OUTPUT_MIXIN = "sglang.srt.managers.scheduler_output_processor_mixin"
_BATCH_RESULT = "sglang.srt.managers.scheduler_components.batch_result_processor"


def _v1(field: str, when: str, tokens_field: str = "verified_id") -> AcceptanceHook:
    return AcceptanceHook(V1_WORKER, when, *_V1_VERIFY, read=f"return[1].{field}", field=field,
                          includes_bonus=False, field_owner=(_EAGLE_INFO, "EagleVerifyOutput"),
                          tokens_field=tokens_field)


def _v2(module: str, qualname: str, field: str, when: str) -> AcceptanceHook:
    return AcceptanceHook(V2_WORKER, when, module, qualname, read=f"result.{field}", field=field,
                          includes_bonus=False)


# The EAGLE worker boundary (runtime/integrations/eagle_worker.py): where the target's packed aux states are handed
# to the draft, after every target forward (graphs included). Proven per release by the contract check.
WORKER_MODULE = "sglang.srt.speculative.eagle_worker_v2"
WORKER_PREFILL_HOOK = "EagleDraftWorker._draft_extend_for_prefill"  # (batch, target_hidden_states, ...)
# The phases of one decode step (runtime/integrations/phase_timing.py): the step, then draft, verify and the draft
# extend (WORKER_DECODE_HOOK) inside it; each takes the batch first. Rows with worker_boundary have them.
WORKER_STEP_HOOK = "EAGLEWorkerV2.forward_batch_generation"
WORKER_DRAFT_HOOK = "EagleDraftWorker.draft"
WORKER_VERIFY_HOOK = "EAGLEWorkerV2.verify"
WORKER_DECODE_HOOK = "EagleDraftWorker._draft_extend_for_decode"  # (batch, batch_result, ...)
WORKER_HOOKS = (WORKER_PREFILL_HOOK, WORKER_DECODE_HOOK, WORKER_STEP_HOOK, WORKER_DRAFT_HOOK, WORKER_VERIFY_HOOK)
# Block-diffusion drafts (runtime/integrations/block_drafts.py): the DFlash worker (DSpark's subclasses it), from
# 0.5.14 (0.5.11 to 0.5.13 have a v1 DFlash worker the probe does not wrap). Its set-up, its step, and the hand-off of
# the target's hidden states to the draft (keyword-only: target_hidden, cache_loc, positions, ...).
BLOCK_WORKER_MODULE = "sglang.srt.speculative.dflash_worker_v2"
BLOCK_WORKER_INIT_HOOK = "DFlashWorkerV2.__init__"
BLOCK_WORKER_STEP_HOOK = "DFlashWorkerV2.forward_batch_generation"
BLOCK_WORKER_FEED_HOOK = "DFlashWorkerV2._append_target_hidden_to_draft_kv_by_loc"
BLOCK_ALGORITHMS = ("DFLASH", "DSPARK")  # --speculative-algorithm values whose drafts propose a block
# A server without speculation (runtime/integrations/phase_timing.py): the scheduler's step on the target worker,
# (batch, ...); timed on a plain decode batch, the measured plain step `eagle-probe advise` compares with.
PLAIN_WORKER_MODULE = "sglang.srt.managers.tp_worker"
PLAIN_STEP_HOOK = "TpModelWorker.forward_batch_generation"
# SGLang's own forward timer (SGLANG_ENABLE_METRICS_DEVICE_TIMER=1; runtime/timing/device_timer.py): each forward's
# interval starts here, (metadata)
DEVICE_TIMER_MODULE = "sglang.srt.utils.device_timer"
DEVICE_TIMER_HOOK = "DeviceTimer.wrap"
# SGLang's HTTP server process (runtime/integrations/request_classes.py): where a request arrives (its route and
# custom labels) and where its last output hands over its histogram of accepted drafts per verify step.
TOKENIZER_MODULE = "sglang.srt.managers.tokenizer_manager"
REQUEST_ARRIVAL_HOOK = "TokenizerManager._init_req_state"  # (obj, request)
REQUEST_FINISH_HOOK = "TokenizerManager._calculate_spec_decoding_metrics"  # (meta_info, recv_obj, i)
REQUEST_HISTOGRAM_FIELD = "spec_correct_drafts_histogram"  # recv_obj's, per request: verify steps per accepted count
# The graph runners' entry points and the model runner's forward (runtime/integrations/runner_paths.py)
_RUNNERS = "sglang.srt.model_executor.runner"
GRAPH_ENTRIES = (
    (f"{_RUNNERS}.decode_cuda_graph_runner", "DecodeCudaGraphRunner.execute", "decode_graph"),
    (f"{_RUNNERS}.prefill_cuda_graph_runner", "PrefillCudaGraphRunner.execute", "prefill_graph"),
    ("sglang.srt.model_executor.cpu_graph_runner", "CPUGraphRunner.execute", "cpu_graph"),
)


@dataclass(frozen=True)
class VersionRules:
    first: Version  # first release these rules describe (they hold up to the next row's `first`)
    capture_id_rule: str
    aux_format: str  # "list" of [T, H] tensors or one "packed" [T, K*H] tensor
    graph_setup_uses_default_layers: bool  # CUDA-graph set-up calls the setter with no ids first
    embedding_capturable: bool  # capture index 0 works (before 0.5.14: hidden + None -> TypeError)
    verified: bool  # exercised on real code here (see `tested`), not only read from the wheels
    # SGLang functions that call set_eagle3_layers_to_capture() with no ids during graph set-up
    graph_setup_callers: tuple[str, ...] = ()
    default_ids: str = DEFAULT_IDS_FORMULA
    capture_flag_module: str = "sglang.srt.model_executor.runner_utils.capture_mode"  # get_is_capture_mode()
    tbo_helper: str = "model_forward_stages"  # name imported into sglang.srt.models.deepseek_v2
    acceptance: tuple[AcceptanceHook, ...] = ()
    spec_v2_default: bool | None = None  # SGLANG_ENABLE_SPEC_V2's default; None: no switch (v2 only)
    rank_source: str = RANKS_RUNTIME_CONTEXT
    dp_rank_from_dp_attention: bool = False  # sglang.srt.layers.dp_attention.get_attention_dp_rank exists
    draft_reads_num_aux: bool = True  # EAGLE-3 draft's fc is H * num_aux_hidden_states (else H * 3)
    # Under --enable-metrics, node ranks >= 1 serve /metrics too (launch_dummy_health_check_server adds the Prometheus
    # middleware): the probe's series there go through SGLang, never through a second endpoint (runtime/sinks/endpoint)
    other_nodes_serve_metrics: bool = True
    # modules that integrations target but this release does not have (their targets are skipped)
    absent_modules: tuple[str, ...] = ()
    tested: str | None = None  # the release of this row that the real-SGLang tests run
    # EagleDraftWorker's hand-off methods take (batch, target_hidden_states) / (batch, batch_result) (values there)
    worker_boundary: bool = False
    graph_entries: bool = False  # the graph runners' execute entry points of GRAPH_ENTRIES exist
    # TokenizerManager's arrival and finish hooks, with REQUEST_HISTOGRAM_FIELD on its batch outputs (traffic classes)
    request_classes: bool = False

    @property
    def first_text(self) -> str:
        return format_version(self.first)

    def describe(self) -> str:
        return (
            f"capture ids: {self.capture_id_rule}; aux format: {self.aux_format}; "
            f"graph set-up uses default layers: {self.graph_setup_uses_default_layers}; "
            f"embedding capturable: {self.embedding_capturable}"
        )

    def as_dict(self) -> dict:
        """Plain values, for `compat`, `doctor` and JSON output."""
        return {
            "first": self.first_text,
            "capture_id_rule": self.capture_id_rule,
            "default_ids": self.default_ids,
            "aux_format": self.aux_format,
            "graph_setup_uses_default_layers": self.graph_setup_uses_default_layers,
            "graph_setup_callers": list(self.graph_setup_callers),
            "embedding_capturable": self.embedding_capturable,
            "capture_flag_module": self.capture_flag_module,
            "tbo_helper": f"sglang.srt.models.deepseek_v2.{self.tbo_helper}",
            "acceptance": [{"worker": h.worker, "when": h.when, "target": h.target, "read": h.read,
                            "includes_bonus": h.includes_bonus,
                            "tokens": f"return[1].{h.tokens_field}" if h.tokens_field else "return"}
                           for h in self.acceptance],
            "spec_v2_default": self.spec_v2_default,
            "rank_source": self.rank_source,
            "dp_rank_from_dp_attention": self.dp_rank_from_dp_attention,
            "draft_reads_num_aux": self.draft_reads_num_aux,
            "other_nodes_serve_metrics": self.other_nodes_serve_metrics,
            "absent_modules": list(self.absent_modules),
            "verified": self.verified,
            "tested": self.tested,
            "worker_boundary": self.worker_boundary,
            "graph_entries": self.graph_entries,
            "request_classes": self.request_classes,
        }


# The release table: every final and post release of the supported range, oldest first, each read from its wheel
# and re-proven by the contract check. The one list of them: the range below, families.RELEASES, the contract tests
# and the first releases of draft_config_keys.READS come from it; tests/unit/test_release_table.py holds what code
# cannot derive (requirements/, scripts/, the rows' `tested` tiers) to it. docs/releases-new.md: adding a release.
RELEASE_TEXTS: tuple[str, ...] = tuple((
    "0.5.8 0.5.8.post1 0.5.9 0.5.10 0.5.10.post1 0.5.11 0.5.12 0.5.12.post1 0.5.13 0.5.13.post1 0.5.14 0.5.15 "
    "0.5.15.post1 0.5.16 0.5.17 0.5.18 0.5.19 0.5.20 0.5.21 0.5.22 0.5.23").split())
RELEASES: tuple[Version, ...] = tuple(parse_release(t).number for t in RELEASE_TEXTS)  # type: ignore[union-attr]
SUPPORTED_MIN: Version = RELEASES[0]
SUPPORTED_MAX: Version = RELEASES[-1][:3] + (0,)  # the newest final release; its post releases are in the range too

_OLD_CAPTURE_FLAG = "sglang.srt.model_executor.cuda_graph_runner"
_OLD_TBO = "model_forward_maybe_tbo"
_KIMI_DRAFT = "sglang.srt.models.kimi_k25_eagle3"  # Kimi-K2.5's EAGLE-3 MLA draft, from 0.5.12
_BLOCK_WORKER = BLOCK_WORKER_MODULE  # from 0.5.14

# Ordered by first release; a release uses the last row whose `first` is <= it. Pre-releases are not proven: one
# inside the range gets the row of the proven release it follows (parse_version), one outside leaves the probe off.
# Every field is proven per release by eagle_probe.commands.contract.
RULES = (
    VersionRules(
        (0, 5, 8, 0), PLUS_ONE_ALWAYS, "list", True, False, verified=True, tested="0.5.8",
        graph_setup_callers=("sglang.srt.model_executor.cuda_graph_runner.CudaGraphRunner.__init__",
                             "sglang.srt.model_executor.model_runner.ModelRunner._dummy_run"),
        capture_flag_module=_OLD_CAPTURE_FLAG, tbo_helper=_OLD_TBO,
        acceptance=(_v1("accept_length_per_req_cpu", "default"),
                    _v2(_OUTPUT_MIXIN, "SchedulerOutputProcessorMixin._resolve_spec_overlap_token_ids",
                        "accept_length_per_req_cpu", f"{SPEC_V2_ENV}=1")),
        spec_v2_default=False, rank_source=RANKS_PARALLEL_STATE, dp_rank_from_dp_attention=True,
        draft_reads_num_aux=False, absent_modules=(_KIMI_DRAFT, _BLOCK_WORKER)),
    VersionRules(
        (0, 5, 11, 0), PLUS_ONE_ALWAYS, "list", False, False, verified=False,
        capture_flag_module=_OLD_CAPTURE_FLAG, tbo_helper=_OLD_TBO,
        acceptance=(_v2(_OUTPUT_MIXIN, "SchedulerOutputProcessorMixin._resolve_spec_overlap_token_ids",
                        "num_accepted_drafts_per_req_cpu", "default"),
                    _v1("num_accepted_drafts_per_req_cpu", f"{SPEC_V2_ENV}=0")),
        spec_v2_default=True, rank_source=RANKS_PARALLEL_STATE, dp_rank_from_dp_attention=True,
        draft_reads_num_aux=False, absent_modules=(_KIMI_DRAFT, _BLOCK_WORKER)),
    VersionRules(
        (0, 5, 12, 0), PLUS_ONE_ALWAYS, "list", False, False, verified=False, request_classes=True,
        capture_flag_module=_OLD_CAPTURE_FLAG, tbo_helper=_OLD_TBO,
        acceptance=(_v2(_OUTPUT_MIXIN, "SchedulerOutputProcessorMixin._resolve_spec_overlap_tokens",
                        "num_correct_drafts_per_req_cpu", "default"),
                    _v1("num_correct_drafts_per_req_cpu", f"{SPEC_V2_ENV}=0", tokens_field="accept_tokens")),
        spec_v2_default=True, rank_source=RANKS_PARALLEL_STATE, dp_rank_from_dp_attention=True,
        absent_modules=(_BLOCK_WORKER,)),
    VersionRules(
        (0, 5, 13, 0), PLUS_ONE_IF_FIRST_IS_ONE, "list", False, False, verified=False, request_classes=True,
        capture_flag_module=_OLD_CAPTURE_FLAG, tbo_helper=_OLD_TBO,
        acceptance=(_v2(_BATCH_RESULT, "SchedulerBatchResultProcessor._resolve_spec_v2_tokens",
                        "num_correct_drafts_per_req_cpu", "default"),),
        spec_v2_default=True, rank_source=RANKS_PARALLEL_STATE, dp_rank_from_dp_attention=True,
        absent_modules=(_BLOCK_WORKER,)),
    VersionRules(
        (0, 5, 14, 0), PLUS_ONE_IF_FIRST_IS_ONE, "list", False, True, verified=False, request_classes=True,
        tbo_helper=_OLD_TBO,
        acceptance=(_v2(_BATCH_RESULT, "SchedulerBatchResultProcessor._resolve_spec_v2_tokens",
                        "num_correct_drafts_per_req_cpu", "default"),),
        dp_rank_from_dp_attention=True),
    VersionRules(
        (0, 5, 17, 0), PLUS_ONE_IF_FIRST_IS_ONE, "packed", False, True, verified=False, request_classes=True,
        tbo_helper=_OLD_TBO,
        acceptance=(_v2(_BATCH_RESULT, "SchedulerBatchResultProcessor._resolve_spec_v2_tokens",
                        "num_correct_drafts_per_req_cpu", "default"),),
        dp_rank_from_dp_attention=True),
    VersionRules(
        (0, 5, 21, 0), PLUS_ONE_IF_FIRST_IS_ONE, "packed", False, True, verified=True, tested="0.5.23",
        worker_boundary=True, graph_entries=True, request_classes=True,
        acceptance=(_v2(_BATCH_RESULT, "SchedulerBatchResultProcessor._resolve_spec_v2_tokens",
                        "num_correct_drafts_per_req_cpu", "default"),)),
)

# The releases the real-SGLang test tiers install (requirements/sglang-<release>-nodeps.txt, scripts/setup.sh).
TESTED_RELEASES: tuple[str, ...] = tuple(rules.tested for rules in RULES if rules.tested)

SUPPORTED_RANGE_TEXT = f"{format_version(SUPPORTED_MIN)} to {format_version(SUPPORTED_MAX)}"
DEEPSEEK_V2 = "sglang.srt.models.deepseek_v2"


def is_supported(version: Version | None) -> bool:
    return version is not None and SUPPORTED_MIN <= version <= SUPPORTED_MAX[:3] + (99,)


def rules_for(version: Version | None) -> VersionRules:
    """Rules for a release; outside the range the nearest end of the table is used."""
    if version is None:
        return RULES[-1]
    chosen = RULES[0]
    for rules in RULES:
        if rules.first <= version:
            chosen = rules
    return chosen


@dataclass(frozen=True)
class ResolvedSGLang:
    """One SGLang release as the probe judges it (resolve_sglang): whether the probe runs on it and whose rules
    apply. The runtime turns the probe off unless `supported`; the commands use `rules` and say `note`."""

    text: str | None  # the release as given or installed; None: neither
    readable: bool  # PEP 440 reads `text` as a release number of SGLang's form
    version: Version | None  # the release whose rows apply (None: unreadable or unknown, the newest rows apply)
    supported: bool  # inside the proven range (a pre-release: by PEP 440's order)
    rules: VersionRules
    note: str = ""  # what was judged, for people ("" for a proven release)


def resolve_release(text: str | None) -> ResolvedSGLang:
    """The one policy for a release number (resolve_sglang without reading the installed one)."""
    if text is None:
        return ResolvedSGLang(None, False, None, False, RULES[-1],
                              "SGLang is not installed here and no release was given; using the newest rules")
    release = parse_release(text)
    if release is None:
        return ResolvedSGLang(text, False, None, False, RULES[-1],
                              f"SGLang {text!r} is not a release number the probe can read; using the newest rules")
    version = parse_version(text)
    if version is not None and is_supported(version):
        note = "" if release.final else (f"SGLang {text} is a pre-release: judged as {format_version(version)}, the "
                                         f"proven release it follows")
        return ResolvedSGLang(text, True, version, True, rules_for(version), note)
    kind = "" if release.final else "a pre-release "
    return ResolvedSGLang(text, True, release.number, False, rules_for(release.number),
                          f"SGLang {text} is {kind}outside the supported range {SUPPORTED_RANGE_TEXT}; "
                          f"using the nearest release's rules")


def resolve_sglang(given: str | None = None) -> ResolvedSGLang:
    """The release `given` (an option, a dump's record), else the installed one, judged by resolve_release."""
    return resolve_release(given if given is not None else installed_sglang_version())


def rules_range_text(rules: VersionRules) -> str:
    """'0.5.8 to before 0.5.11' for a row; the last row ends at the supported maximum."""
    index = RULES.index(rules)
    if index + 1 < len(RULES):
        return f"{rules.first_text} to before {RULES[index + 1].first_text}"
    return f"{rules.first_text} to {format_version(SUPPORTED_MAX)} (and its post releases)"


def acceptance_hook(target: str, rules: VersionRules | None = None) -> AcceptanceHook | None:
    """The table's acceptance hook for a dotted target ('module.Class.method') under `rules`
    (default: the installed release's), e.g. to read `hook.field` in a wrapper; None if not a hook there."""
    if rules is None:
        rules = resolve_sglang().rules
    for hook in rules.acceptance:
        if hook.target == target:
            return hook
    return None


def rule_since(rules: VersionRules, name: str) -> Version:
    """The first release from which `rules`' value of field `name` has held without a break (a rule can span
    several rows of the table, e.g. the +1 rule of 0.5.13 holds in every later row)."""
    value = getattr(rules, name)
    index = RULES.index(rules)
    while index > 0 and getattr(RULES[index - 1], name) == value:
        index -= 1
    return RULES[index].first


def acceptance_targets() -> tuple[tuple[str, str, str], ...]:
    """(module, qualname, worker) of every acceptance hook any row names, in table order: what to wrap."""
    seen: dict[tuple[str, str], str] = {}
    for rules in RULES:
        for hook in rules.acceptance:
            seen.setdefault((hook.module, hook.qualname), hook.worker)
    return tuple((module, qualname, worker) for (module, qualname), worker in seen.items())


def acceptance_field(target: str, rules: VersionRules, attr: str = "field") -> str | None:
    """The field to read at hook `target` under `rules` (attr "tokens_field": where its committed tokens are); for
    a release whose row does not name that hook (it is there anyway), the field of the newest row that does. None if
    no row names it."""
    hook = acceptance_hook(target, rules)
    if hook is not None:
        return getattr(hook, attr)
    for row in reversed(RULES):
        hook = acceptance_hook(target, row)
        if hook is not None:
            return getattr(hook, attr)
    return None


def version_specific_targets() -> dict[str, list[VersionRules]]:
    """Dotted names the table places in some rows only -> the rows that have them."""
    out: dict[str, list[VersionRules]] = {}
    for rules in RULES:
        names = [h.target for h in rules.acceptance] + list(rules.graph_setup_callers)
        names += [f"{DEEPSEEK_V2}.{rules.tbo_helper}", f"{rules.capture_flag_module}.get_is_capture_mode"]
        if rules.worker_boundary:
            names += [f"{WORKER_MODULE}.{hook}" for hook in WORKER_HOOKS]
        if rules.graph_entries:
            names += [f"{module}.{qualname}" for module, qualname, _ in GRAPH_ENTRIES]
        if rules.request_classes:
            names += [f"{TOKENIZER_MODULE}.{REQUEST_ARRIVAL_HOOK}", f"{TOKENIZER_MODULE}.{REQUEST_FINISH_HOOK}"]
        for name in names:
            out.setdefault(name, []).append(rules)
    return {k: v for k, v in out.items() if len(v) < len(RULES)}


def target_expected(module: str, qualname: str, rules: VersionRules) -> bool:
    """Whether the table says patch target module.qualname exists in the releases under `rules`."""
    if module in rules.absent_modules:
        return False
    rows = version_specific_targets().get(f"{module}.{qualname}")
    return rows is None or rules in rows


def graph_setup_callers() -> frozenset:
    """Every SGLang function any release's row lists as configuring capture during CUDA-graph set-up."""
    return frozenset(caller for rules in RULES for caller in rules.graph_setup_callers)


def capture_flag_modules() -> tuple[str, ...]:
    """Homes of SGLang's get_is_capture_mode(), newest first (for code that looks in sys.modules)."""
    return tuple(dict.fromkeys(rules.capture_flag_module for rules in reversed(RULES)))


def installed_sglang_version() -> str | None:
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover - Python < 3.8
        return None
    try:
        return version("sglang")
    except PackageNotFoundError:
        return None
