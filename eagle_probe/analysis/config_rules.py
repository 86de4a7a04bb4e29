"""Configuration rules: predict, from the target's and draft's configs alone, what SGLang will capture on
each path and what the draft will receive, and turn every problem into a finding.

Pure functions on plain values (no SGLang import, no file I/O): `eagle-probe doctor` parses the configs
and calls `predict` and `config_findings`. The findings reuse the running probe's rules
(analysis.findings, analysis.draft_rules) so both read the same.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from .. import families
from ..families import Family
from ..observations import CaptureConfigured
from ..versions import VersionRules
from .draft_ids import KEY, draft_class, draft_reads, ids_differ_finding
from .draft_rules import draft_input_findings, ids_for_capture, layer_mismatch_findings
from .findings import (
    DRAFT_WEIGHTS_DROPPED,
    FC_WIDTH_MISMATCH,
    PP_STAGE_NO_CAPTURE,
    TBO_CAPTURE_LOST,
    Finding,
    _finding,
    _labels,
    capture_config_findings,
    graph_eager_findings,
)
from .layers import LayerSplit, apply_capture_rule, capture_label, default_layer_ids, split_layers

EAGLE3, EAGLE = "EAGLE3", "EAGLE"


@dataclass(frozen=True)
class TargetSpec:
    model_class: str
    num_layers: int
    hidden_size: int
    first_k_dense_replace: int | None = None
    family: Family | None = None  # eagle_probe.families row; None: DeepSeek's behaviour (versions.RULES)

    @property
    def final_capturable(self) -> bool:
        return self.family is not None and self.family.final_capturable


@dataclass(frozen=True)
class DraftSpec:
    model_class: str
    hidden_size: int
    target_hidden_size: int | None = None
    layer_ids: tuple[int, ...] | None = None  # eagle_config's eagle_aux_hidden_state_layer_ids (the target's);
    # None: SGLang's defaults
    num_aux_hidden_states: int | None = None
    use_aux_hidden_state: bool = True
    norm_before_fc: bool = False
    fc_norm: bool = False
    top_level_ids: tuple[int, ...] | None = None  # the config's top-level ids (only Kimi's MLA draft reads them)

    def ids_read(self) -> tuple[tuple[int, ...] | None, str, int]:
        """(ids the draft class sizes its fc from, where from, its aux count): analysis.draft_ids."""
        return draft_reads(draft_class(self.model_class), {KEY: list(self.layer_ids)} if self.layer_ids else {},
                           self.top_level_ids, self.num_aux_hidden_states)

    @property
    def input_hidden_size(self) -> int:
        return self.target_hidden_size or self.hidden_size


@dataclass(frozen=True)
class LaunchSpec:
    algorithm: str = EAGLE3
    cuda_graph: bool = True
    tbo: bool = False
    pp_size: int = 1
    pp_partition: tuple[int, ...] | None = None  # SGLANG_PP_LAYER_PARTITION


@dataclass(frozen=True)
class PathPrediction:
    name: str  # eager | cuda_graph | eager+tbo | cuda_graph+tbo
    description: str
    requested_ids: tuple[int, ...] | None  # what the setter receives on this path (None: no ids)
    configured: tuple[int, ...]  # layers_to_capture
    captured: tuple[int, ...]  # what actually reaches the draft, in slot order
    lost: tuple[int, ...] = ()
    lost_reason: str = ""
    tbo_range: tuple[int, int] | None = None


@dataclass(frozen=True)
class Prediction:
    rules: VersionRules
    stage_range: tuple[int, int]  # layers of the last pipeline stage (where captures happen)
    fc_in_width: int  # the fc SGLang builds: input_hidden_size * num_aux
    num_aux: int  # aux states SGLang sizes the fc for
    paths: tuple[PathPrediction, ...] = field(default_factory=tuple)


def _v4_draft(rules: VersionRules) -> bool:
    """Whether the release's EAGLE-3 draft sizes fc from num_aux_hidden_states and reads the norm options
    (VersionRules.draft_reads_num_aux), or always builds fc for 3 states and ignores them (0.5.8)."""
    value = getattr(rules, "draft_reads_num_aux", None)
    return rules.aux_format == "packed" if value is None else bool(value)


def sglang_num_aux(draft: DraftSpec, rules: VersionRules) -> int:
    if not _v4_draft(rules):
        return 3
    return draft.ids_read()[2]


def last_stage_range(num_layers: int, pp_size: int, partition: Sequence[int] | None = None) -> tuple[int, int]:
    """Layers of the last pipeline stage: SGLang splits evenly, extra layers to the last stages."""
    if pp_size <= 1:
        return 0, num_layers
    if partition:
        return num_layers - int(partition[-1]), num_layers
    size = -(-num_layers // pp_size)
    return num_layers - size, num_layers


def tbo_split(target: TargetSpec, start: int, end: int) -> LayerSplit:
    """Which layers of the stage [start, end) a Two-Batch-Overlap forward runs outside the capturing loop, by the
    family's TBO behaviour (DeepSeek's: from first_k_dense_replace on)."""
    tbo = families.TBO_FROM_FIRST_K_DENSE if target.family is None else target.family.tbo
    if tbo == families.TBO_NONE:
        return LayerSplit((start, end), None)
    if tbo == families.TBO_ALL:
        return LayerSplit((start, start), (start, end))
    return split_layers(start, end, target.first_k_dense_replace, True)


def _capturable(target: TargetSpec, index: int, start: int, end: int) -> bool:
    n = target.num_layers
    if index == n and target.final_capturable and end == n:
        return True
    return start <= index < end and 0 <= index < n


def predict(target: TargetSpec, draft: DraftSpec, rules: VersionRules, launch: LaunchSpec) -> Prediction:
    n = target.num_layers
    start, end = last_stage_range(n, launch.pp_size, launch.pp_partition)
    num_aux = sglang_num_aux(draft, rules)
    pred = Prediction(rules, (start, end), draft.input_hidden_size * num_aux, num_aux)
    if launch.algorithm != EAGLE3 or not draft.use_aux_hidden_state:
        why = ("--speculative-algorithm EAGLE: the target captures no aux states; the draft gets its last "
               "hidden state" if launch.algorithm != EAGLE3 else
               "use_aux_hidden_state is false: the target captures no aux states; the draft gets its last hidden state")
        return replace(pred, paths=(PathPrediction("all", why, None, (), ()),))

    ids = draft.layer_ids
    eager, _ = apply_capture_rule(rules.capture_id_rule, ids, n, target.family)
    base = [("eager", "eager forwards: prefill EXTEND, TARGET_VERIFY beyond the CUDA-graph batch sizes"
             + ("" if launch.cuda_graph else ", and every step (CUDA graphs off)"), ids, tuple(eager))]
    if launch.cuda_graph:
        if rules.graph_setup_uses_default_layers:
            graph = default_layer_ids(n, target.family)
            base.append(("cuda_graph", "CUDA-graph capture (replayed TARGET_VERIFY steps): the set-up calls the "
                         "setter with no ids, so the defaults apply", None, tuple(graph)))
        else:
            base.append(("cuda_graph", "CUDA-graph capture (replayed TARGET_VERIFY steps): the configured ids",
                         ids, tuple(eager)))
    paths = []
    for name, desc, req, configured in base:
        captured = tuple(i for i in configured if _capturable(target, i, start, end))
        lost = tuple(i for i in configured if i not in captured)
        paths.append(PathPrediction(name, desc, req, configured, captured, lost,
                                    "outside the last pipeline stage or the layer range" if lost else ""))
    if launch.tbo and tbo_split(target, start, end).tbo is not None:
        split = tbo_split(target, start, end)
        for p in list(paths):
            lost = split.lost(p.captured)
            captured = tuple(i for i in p.captured if i not in lost)
            paths.append(PathPrediction(
                p.name + "+tbo", f"{p.name} forwards that Two-Batch-Overlap splits "
                f"(layers {split.tbo[0] if split.tbo else end}"
                f"..{end - 1} run in TBO stages, which do not capture)", p.requested_ids, p.configured, captured,
                lost, "Two-Batch-Overlap" if lost else "", split.tbo))
    return replace(pred, paths=tuple(paths))


def _with_context(finding: Finding, prefix: str, **evidence) -> Finding:
    merged = dict(finding.evidence)
    merged.update(evidence)
    return Finding(finding.code, finding.severity, f"{prefix}{finding.message}", tuple(sorted(merged.items())))


def tbo_findings(model_class: str, path: PathPrediction) -> list[Finding]:
    if not path.lost or path.tbo_range is None:
        return []
    kept = list(path.captured)
    consequence = ("all slots lost: the target returns a bare tensor and SGLang fails unpacking it"
                   if not kept else "SGLang 0.5.23 raises 'captured X of K aux hidden states'; 0.5.8 passes fewer "
                   "states on (the draft's fc is skipped or a CUDA-graph copy fails)")
    return [_finding(
        TBO_CAPTURE_LOST,
        f"{model_class} ({path.name}): Two-Batch-Overlap runs layers [{path.tbo_range[0]}, {path.tbo_range[1]}) "
        f"in its stages, which do not capture aux hidden states; lost capture slots {_labels(path.lost)}; kept "
        f"{_labels(kept)} ({consequence}). Disable --enable-two-batch-overlap or capture only indices below "
        f"{path.tbo_range[0]}.",
        lost=list(path.lost), kept=kept, layers_to_capture=list(path.configured),
        tbo_range=list(path.tbo_range), path=path.name)]


def pp_findings(model_class: str, path: PathPrediction, stage: tuple[int, int], pp_size: int,
                num_layers: int) -> list[Finding]:
    outside = [i for i in path.lost if 0 <= i < num_layers and not stage[0] <= i < stage[1]]
    if pp_size <= 1 or not outside:
        return []
    return [_finding(
        PP_STAGE_NO_CAPTURE,
        f"{model_class} ({path.name}): with {pp_size} pipeline stages only the last stage (layers "
        f"[{stage[0]}, {stage[1]})) captures; capture indices {_labels(outside, num_layers)} belong to earlier "
        f"stages and are never captured; kept {_labels(path.captured, num_layers)}.",
        lost=outside, kept=list(path.captured), stage_range=list(stage), pp_size=pp_size, path=path.name)]


def config_findings(target: TargetSpec, draft: DraftSpec, rules: VersionRules, launch: LaunchSpec,
                    trained_hf: Sequence[int] | None = None,
                    prediction: Prediction | None = None) -> list[Finding]:
    pred = prediction or predict(target, draft, rules, launch)
    out: list[Finding] = []
    if launch.algorithm == EAGLE3 and draft.use_aux_hidden_state:
        out += _capture_findings(target, draft, rules, launch, trained_hf, pred)
    out += _fc_input_findings(target, draft, rules, launch, pred)
    out += _ignored_config_findings(draft, rules)
    return out


def _capture_findings(target: TargetSpec, draft: DraftSpec, rules: VersionRules, launch: LaunchSpec,
                      trained_hf: Sequence[int] | None, pred: Prediction) -> list[Finding]:
    """What the predicted capture set-up of each path gets wrong (an EAGLE-3 draft fed aux states)."""
    n, cls = target.num_layers, target.model_class
    out: list[Finding] = []
    base = [p for p in pred.paths if "+tbo" not in p.name]
    eager = base[0]
    # Unreachable ids: the probe's own configuration rule on the predicted setter call.
    seen_configs = set()
    for p in base:
        if p.configured in seen_configs:
            continue
        seen_configs.add(p.configured)
        obs = CaptureConfigured(cls, "target", p.requested_ids, p.configured, n, target.first_k_dense_replace,
                                0, n, True, "eagle-probe doctor (predicted)", p.name == "cuda_graph")
        out.extend(f for f in capture_config_findings(obs, rules, target.family)
                   if f.code != "capture_rule_unexpected")
    graph = next((p for p in base if p.name == "cuda_graph"), None)
    if graph is not None:
        out.extend(graph_eager_findings(cls, graph.configured, eager.configured, "configuration (predicted)", n))
    for p in base:
        out.extend(pp_findings(cls, p, pred.stage_range, launch.pp_size, n))
    for p in pred.paths:
        out.extend(tbo_findings(cls, p))
    ids, source, _ = draft.ids_read()
    if ids is not None:
        named, _ = apply_capture_rule(rules.capture_id_rule, ids, n, target.family)
        differ = ids_differ_finding(draft.model_class, ids, source, draft.layer_ids, named, eager.configured, n)
        if differ is not None:
            out.append(_with_context(differ, "(predicted) ", path="eager"))
    if trained_hf is not None:
        groups: dict[tuple, list[str]] = {}  # captured indices -> the paths that capture them
        for p in base:
            groups.setdefault(p.captured, []).append(p.name)
        for captured, names in groups.items():
            req = next(p.requested_ids for p in base if p.captured == captured)
            for f in layer_mismatch_findings(captured=captured, trained_hf=trained_hf, num_layers=n,
                                             rules=rules, requested_ids=req, family=target.family):
                out.append(_with_context(f, f"{cls} ({' and '.join(names)}): ", path=" and ".join(names)))
    return out


def _fc_input_findings(target: TargetSpec, draft: DraftSpec, rules: VersionRules, launch: LaunchSpec,
                       pred: Prediction) -> list[Finding]:
    out: list[Finding] = []
    # What reaches the draft's fc on each path.
    # 0.5.23's packer raises on a short count (reported above), so nothing reaches the draft on such a path;
    # 0.5.8 passes the shorter list on.
    packed = rules.aux_format == "packed" and (target.family is None or target.family.name == "deepseek_v2")
    fc_paths = [p for p in pred.paths if not (p.lost and packed)]
    seen_widths = set()
    for p in fc_paths:
        if launch.algorithm != EAGLE3 or not draft.use_aux_hidden_state:
            width = target.hidden_size
        elif not p.captured:
            continue  # nothing returned: a crash, reported by the capture rules above
        else:
            width = len(p.captured) * target.hidden_size
        if width in seen_widths:
            continue
        seen_widths.add(width)
        for f in draft_input_findings(model_class=draft.model_class, mode="EXTEND/DRAFT_EXTEND", aux_width=width,
                                      embed_width=draft.hidden_size, fc_in_width=pred.fc_in_width,
                                      target_hidden_size=target.hidden_size, num_aux=pred.num_aux):
            prefix = ""
            if launch.algorithm != EAGLE3:
                prefix = ("(predicted) an EAGLE-3 draft under --speculative-algorithm EAGLE: use "
                          "--speculative-algorithm EAGLE3. ")
            elif not draft.use_aux_hidden_state:
                prefix = "(predicted) eagle_config.use_aux_hidden_state is false: the target captures nothing. "
            else:
                prefix = f"(predicted, {p.name}) "
            out.append(_with_context(f, prefix, path=p.name))
    return out


def _ignored_config_findings(draft: DraftSpec, rules: VersionRules) -> list[Finding]:
    out: list[Finding] = []
    # Draft config that this release (or this draft class) ignores.
    if draft.norm_before_fc and not draft_class(draft.model_class).reads_norm_before_fc:
        out.append(_finding(
            DRAFT_WEIGHTS_DROPPED,
            f"{draft.model_class}: the draft config sets norm_before_fc, which this draft class does not implement; "
            f"a checkpoint's norm-before-fc weights are dropped and the draft runs without them.",
            options=["norm_before_fc"]))
    if not _v4_draft(rules):
        declared = draft.num_aux_hidden_states
        if declared is not None and declared != 3:
            out.append(_finding(
                FC_WIDTH_MISMATCH,
                f"{draft.model_class}: the draft config declares num_aux_hidden_states={declared} (fc input "
                f"{declared * draft.input_hidden_size}) but this SGLang release always builds the fc for 3 states "
                f"({3 * draft.input_hidden_size}); loading the checkpoint's fc fails with a shape error.",
                declared_num_aux=declared, sglang_num_aux=3, fc_in_width=3 * draft.input_hidden_size))
        dropped = [k for k, v in (("norm_before_fc", draft.norm_before_fc), ("fc_norm", draft.fc_norm)) if v]
        if dropped:
            out.append(_finding(
                DRAFT_WEIGHTS_DROPPED,
                f"{draft.model_class}: the draft config sets {', '.join(dropped)}, which this SGLang release does "
                f"not implement; the checkpoint's norm weights are dropped without a word and the draft runs "
                f"without them.", options=dropped))
    return out


def fix_for(target: TargetSpec, rules: VersionRules, launch: LaunchSpec, trained_hf: Sequence[int]) -> dict:
    """The ids that would capture trained_hf under this release, with what still stands in the way."""
    n = target.num_layers
    ids, why = ids_for_capture(trained_hf, n, rules, target.family)
    notes = []
    if ids is not None:
        defaults = default_layer_ids(n, target.family)
        if launch.cuda_graph and rules.graph_setup_uses_default_layers and tuple(trained_hf) != defaults:
            notes.append(f"CUDA-graph replays still capture the defaults {list(defaults)} in this "
                         f"release: run with --disable-cuda-graph or upgrade")
        if launch.tbo:
            start, end = last_stage_range(n, launch.pp_size, launch.pp_partition)
            lost = tbo_split(target, start, end).lost(trained_hf)
            if lost:
                notes.append(f"Two-Batch-Overlap still drops {_labels(lost, n)}: disable it")
        if launch.pp_size > 1:
            start, end = last_stage_range(n, launch.pp_size, launch.pp_partition)
            outside = [i for i in trained_hf if not start <= i < end]
            if outside:
                notes.append(f"pipeline stages other than the last never capture {_labels(outside, n)}")
    return {"ids": None if ids is None else list(ids), "impossible": why or None, "notes": notes,
            "trained_hf": list(trained_hf),
            "labels": [capture_label(i, n, target.final_capturable) for i in trained_hf]}


# -- shapes of speculation (adaptive depth, tree drafts) ---------------------------------------------------------
# SGLang 0.5.23's facts, in its python/sglang/srt/: speculative/adaptive_spec_params.py
# (DEFAULT_ADAPTIVE_CONFIG, adaptive_unsupported_reason), arg_groups/speculative_hook.py (_maybe_disable_adaptive,
# _init_adaptive_speculative_params, _handle_eagle_family), speculative/eagle_utils.py (organize_draft_results).

ADAPTIVE_DEFAULT_CANDIDATES = {1: (1, 3, 5, 7), 8: (0, 1, 3), 32: (0, 1), 64: (0,)}  # batch size from -> steps
ADAPTIVE_SINCE = (0, 5, 23)  # the first release of the table with --speculative-adaptive (not proven earlier)
# What the probe reads of every v2 verify step, whatever its shape (runtime/integrations/acceptance.py _step_shape).
READS_DEPTH = "per-step depth from GenerationBatchResult.accept_index's shape [requests, spec_steps + 1]"
READS_PROPOSED = "proposed drafts per request from speculative_num_draft_tokens - 1"


def speculation_shapes() -> list[dict]:
    """The shapes of speculation SGLang 0.5.23 serves an EAGLE-3 draft with, what each needs and what the probe reads
    of each step (one list for `compat` and `doctor`)."""
    return [
        {"shape": "chain", "flags": "--speculative-eagle-topk 1 --speculative-num-steps N",
         "needs": "EAGLE/EAGLE3; num_draft_tokens is set to N + 1 by SGLang",
         "depth": "fixed: N",
         "probe_reads": [READS_DEPTH, READS_PROPOSED + " (= N)"],
         "probe_shows": "positions 0..N-1; accept rate = accepted / (N x request-steps)"},
        {"shape": "adaptive depth", "flags": "--speculative-adaptive [--speculative-adaptive-config FILE]",
         "needs": "EAGLE/EAGLE3, topk 1, no DP attention, no two-batch overlap, no pdmux, no multi-layer EAGLE "
                  "(else SGLang turns it off silently in _maybe_disable_adaptive: a fixed depth); --speculative-"
                  "num-steps among the candidate steps (default per batch size: "
                  + ", ".join(f">= {bs}: {list(c)}" for bs, c in ADAPTIVE_DEFAULT_CANDIDATES.items()) + ")",
         "depth": "changes per batch: one of the candidate steps; 0 is a verify of width 1 with no drafts",
         "probe_reads": [READS_DEPTH + ", so each step is counted at its own depth", READS_PROPOSED],
         "probe_shows": "draft depth in use (summarize; the dashboard's 'Draft depth in use' panel); per-position "
                        "rates over the request-steps that drafted each position"},
        {"shape": "tree", "flags": "--speculative-eagle-topk K>1 --speculative-num-steps N "
                                   "--speculative-num-draft-tokens T",
         "needs": "the V2 worker (the V1 workers are gone); N + 1 < T <= 1 + K + (N - 1) x K^2 (SGLang picks T - 1 "
                  "nodes among the candidates); page size > 1 only with flashinfer, fa3 or triton attention; not "
                  "with --speculative-use-rejection-sampling or adaptive depth",
         "depth": "fixed: N (the accepted path's length is at most N)",
         "probe_reads": [READS_DEPTH, READS_PROPOSED + " (= T - 1: the tree's nodes after its root)"],
         "probe_shows": "positions are depths along the accepted path; accept rate = accepted / proposed (T - 1 "
                        "per request-step, SGLang's #23530 definition), lower than the per-position rates"},
    ]


@dataclass(frozen=True)
class SpeculationSpec:
    """The launch's speculation flags (None: not given; SGLang picks)."""
    algorithm: str = EAGLE3
    adaptive: bool = False
    adaptive_config: str | None = None  # --speculative-adaptive-config (not read: its candidate steps unknown)
    topk: int | None = None
    num_steps: int | None = None
    num_draft_tokens: int | None = None
    dp_attention: bool = False  # --attn-dp-size > 1, or the deprecated --enable-dp-attention
    tbo: bool = False
    pdmux: bool = False
    multi_layer_eagle: bool = False


# doctor's options for the launch's speculation flags, spelled as SGLang spells them (argparse keyword arguments)
SPECULATION_FLAGS = (
    ("--speculative-adaptive", dict(action="store_true", help="adaptive draft depth (EAGLE/EAGLE3, topk 1; SGLang "
                                    "turns it off with DP attention, two-batch overlap, pdmux or multi-layer EAGLE)")),
    ("--speculative-adaptive-config", dict(metavar="FILE", help="the adaptive config file (its candidate steps are "
                                           "not read)")),
    ("--speculative-eagle-topk", dict(type=int, metavar="K", help="topk; > 1 drafts a tree")),
    ("--speculative-num-steps", dict(type=int, metavar="N", help="draft steps (the depth)")),
    ("--speculative-num-draft-tokens", dict(type=int, metavar="T", help="verify width per request (proposed drafts "
                                            "= T - 1)")),
    ("--attn-dp-size", dict(type=int, metavar="N", help="attention data-parallel size (> 1: DP attention)")),
    ("--enable-dp-attention", dict(action="store_true", help="DP attention (the deprecated spelling)")),
    ("--enable-pdmux", dict(action="store_true", help="the server runs with --enable-pdmux")),
    ("--enable-multi-layer-eagle", dict(action="store_true", help="the server runs with --enable-multi-layer-eagle")),
)
_MINIMUM = {"topk": ("--speculative-eagle-topk", 1), "num_steps": ("--speculative-num-steps", 0),
            "num_draft_tokens": ("--speculative-num-draft-tokens", 1)}


def speculation_from_flags(flags: dict) -> "SpeculationSpec":
    """SPECULATION_FLAGS' values (argparse's dests) as a SpeculationSpec."""
    return SpeculationSpec(
        adaptive=bool(flags.get("speculative_adaptive")), adaptive_config=flags.get("speculative_adaptive_config"),
        topk=flags.get("speculative_eagle_topk"), num_steps=flags.get("speculative_num_steps"),
        num_draft_tokens=flags.get("speculative_num_draft_tokens"),
        dp_attention=bool(flags.get("enable_dp_attention")) or (flags.get("attn_dp_size") or 1) > 1,
        pdmux=bool(flags.get("enable_pdmux")), multi_layer_eagle=bool(flags.get("enable_multi_layer_eagle")))


def checked_speculation(spec: "SpeculationSpec", algorithm: str, tbo: bool, error=ValueError) -> "SpeculationSpec":
    """The flags with the launch's algorithm and TBO; `error` naming the flag for a value SGLang cannot take."""
    for name, (flag, minimum) in _MINIMUM.items():
        value = getattr(spec, name)
        if value is not None and value < minimum:
            raise error(f"{flag} {value}: must be >= {minimum}")
    return replace(spec, algorithm=algorithm, tbo=tbo or spec.tbo)


def add_speculation_options(parser) -> None:
    """doctor's options for the launch's speculation flags (an argparse parser)."""
    group = parser.add_argument_group("shape of speculation (SGLang's own flags; what each needs, what the probe "
                                      "sees)")
    for flag, kwargs in SPECULATION_FLAGS:
        group.add_argument(flag, **kwargs)


def speculation_for(flags: dict, algorithm: str, tbo: bool, release, error=ValueError) -> dict:
    """speculation_report for doctor's parsed options (SPECULATION_FLAGS' dests), its algorithm and TBO."""
    return speculation_report(checked_speculation(speculation_from_flags(flags), algorithm, tbo, error), release)


def result_line(errors: int, warnings: int, shape: dict | None) -> str:
    """doctor's last line: its findings' errors and warnings and the speculation report's."""
    shape = shape or {}
    return (f"result: {errors + len(shape.get('errors', ()))} error(s), "
            f"{warnings + len(shape.get('warnings', ()))} warning(s)")


def render_speculation(shape: dict | None) -> list[str]:
    """speculation_report's result as doctor's text lines."""
    if not shape:
        return []
    depth = "changes per batch" if shape["adaptive"] else (shape["num_steps"] if shape["num_steps"] is not None
                                                           else "SGLang's choice")
    out = [f"speculation: {shape['shape']}, topk {shape['topk'] or 'auto'}, depth {depth}, "
           f"draft tokens {shape['num_draft_tokens'] or 'auto'}"
           + (f" ({shape['proposed_per_request']} proposed per request-step)"
              if shape["proposed_per_request"] is not None else "")]
    out += [f"  ERROR {e}" for e in shape["errors"]]
    out += [f"  WARNING {w}" for w in shape["warnings"]]
    return out + [f"  probe: {p}" for p in shape["probe"]]


def adaptive_off_reasons(spec: SpeculationSpec) -> list[str]:
    """Why SGLang 0.5.23 switches --speculative-adaptive off (adaptive_unsupported_reason returns the first)."""
    reasons = []
    if spec.algorithm not in (EAGLE, EAGLE3):
        reasons.append(f"--speculative-algorithm {spec.algorithm} (only EAGLE/EAGLE3)")
    if spec.topk is not None and spec.topk != 1:
        reasons.append(f"--speculative-eagle-topk {spec.topk} (only topk 1)")
    if spec.dp_attention:
        reasons.append("DP attention (adaptive decisions are not synchronised across DP ranks)")
    if spec.multi_layer_eagle:
        reasons.append("--enable-multi-layer-eagle (MultiLayerEagleWorkerV2 has no adaptive)")
    if spec.tbo:
        reasons.append("--enable-two-batch-overlap (the adaptive state swap drops the TBO attention wrapper)")
    if spec.pdmux:
        reasons.append("--enable-pdmux (the adaptive state swap does not update the decode attention group)")
    return reasons


@dataclass
class _ShapeDraft:
    """speculation_report's result while its steps fill it in: topk, steps and draft tokens as SGLang will run them
    (given, or what SGLang sets), and the findings in the order the steps add them."""
    spec: SpeculationSpec
    adaptive: bool  # adaptive depth asked for and not turned off by SGLang
    off: list[str]  # why SGLang turns the asked-for adaptive depth off
    topk: int | None
    steps: int | None
    draft_tokens: int | None
    shape: str = "chain"
    proposed: int | None = None
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    probe: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"shape": self.shape, "adaptive_requested": self.spec.adaptive, "adaptive": self.adaptive,
                "adaptive_off": self.off, "topk": self.topk, "num_steps": self.steps,
                "num_draft_tokens": self.draft_tokens, "proposed_per_request": self.proposed,
                "warnings": self.warnings, "errors": self.errors, "probe": self.probe}


def speculation_report(spec: SpeculationSpec, release: tuple[int, ...] | None = None) -> dict:
    """What the launch's shape of speculation needs and what the probe sees under it: {shape, depth, adaptive,
    adaptive_off, topk, num_steps, num_draft_tokens, proposed, warnings, errors, probe}. Warnings: SGLang changes
    or refuses what was asked; errors: SGLang refuses to start."""
    off = adaptive_off_reasons(spec) if spec.adaptive else []
    draft = _ShapeDraft(spec, adaptive=spec.adaptive and not off, off=off, topk=spec.topk, steps=spec.num_steps,
                        draft_tokens=spec.num_draft_tokens)
    draft.warnings += _adaptive_request_warnings(spec, release, off)
    if draft.adaptive:
        _adaptive_depth(draft)
    if draft.topk is not None and draft.topk > 1:
        _tree_shape(draft, draft.topk)
    else:
        _chain_shape(draft)
    if spec.num_steps is None and not draft.adaptive:
        draft.probe.append("no --speculative-num-steps: SGLang chooses steps, topk and draft tokens by the target's "
                           "architecture (_auto_choose_speculative_params; a tree for some); the probe reads the "
                           "shape each step ran, whatever was chosen")
    return draft.as_dict()


def _adaptive_request_warnings(spec: SpeculationSpec, release: tuple[int, ...] | None, off: list[str]) -> list[str]:
    """Warnings on an asked-for adaptive depth: a release before the table's, and SGLang turning it off (`off`)."""
    warnings = []
    if spec.adaptive and release is not None and tuple(release[:3]) < ADAPTIVE_SINCE:
        warnings.append(f"--speculative-adaptive: not checked for this release (the table starts at "
                        f"{'.'.join(map(str, ADAPTIVE_SINCE))})")
    if off:
        warnings.append("--speculative-adaptive is turned off by SGLang (_maybe_disable_adaptive logs "
                        "'speculative_adaptive disabled' and falls back to static speculative params): "
                        + "; ".join(off) + ". The probe will see one fixed depth"
                        + (f" ({spec.num_steps})" if spec.num_steps is not None else "") + ", not an adaptive one")
    return warnings


def _adaptive_depth(draft: _ShapeDraft) -> None:
    """Adaptive depth that SGLang keeps on: topk 1 unless given; num steps among the candidate steps (without a
    config file and without the flag, the middle candidate); draft tokens follow the steps."""
    spec = draft.spec
    candidates = sorted({s for c in ADAPTIVE_DEFAULT_CANDIDATES.values() for s in c})
    draft.topk = 1 if draft.topk is None else draft.topk
    if draft.steps is None:
        if spec.adaptive_config is None:
            draft.steps = candidates[len(candidates) // 2]
    elif spec.adaptive_config is None and draft.steps not in candidates:
        draft.errors.append(f"--speculative-num-steps {draft.steps} is not among the adaptive candidate steps "
                            f"{candidates} (SGLang 0.5.23 raises at launch: 'is not in the adaptive config "
                            "candidate_steps')")
    steps = draft.steps
    if spec.num_draft_tokens is not None and steps is not None and spec.num_draft_tokens != steps + 1:
        draft.warnings.append(f"--speculative-num-draft-tokens {spec.num_draft_tokens}: adaptive depth sets it to "
                              f"num steps + 1 = {steps + 1}")
    draft.probe.append(_adaptive_probe_line(spec.adaptive_config))


def _adaptive_probe_line(adaptive_config: str | None) -> str:
    """What the probe shows under adaptive depth, naming where the candidate steps come from."""
    return ("adaptive depth: SGLang picks each batch's speculative steps among "
            + (f"the candidate steps of {adaptive_config}" if adaptive_config else
               "the default candidate steps (" + ", ".join(
                   f"batch >= {bs}: {list(c)}" for bs, c in ADAPTIVE_DEFAULT_CANDIDATES.items()) + ")")
            + "; the probe counts each verify step at its own draft depth (" + READS_DEPTH + "), and shows "
            "`draft depth in use` in summarize and the dashboard's 'Draft depth in use' panel; per-position "
            "acceptance is over the request-steps that drafted each position (depth-0 steps draft none)")


def _tree_shape(draft: _ShapeDraft, topk: int) -> None:
    """topk > 1: a tree; its draft tokens checked against what a tree of that topk and depth holds."""
    draft.shape = "tree"
    steps, draft_tokens = draft.steps, draft.draft_tokens
    if steps is not None and draft_tokens is not None:
        _tree_size_findings(draft, topk, steps, draft_tokens)
    draft.probe.append(f"tree drafts (topk {topk}): the worker is the V2 one; depth = num steps"
                       + (f" ({steps})" if steps is not None else "")
                       + ", and the probe's positions are depths along the accepted path (SGLang's "
                       "spec_correct_drafts_histogram counts the same)")
    draft.proposed = None if draft_tokens is None else draft_tokens - 1
    draft.probe.append("accept rate = accepted / proposed drafts ("
                       + (f"{draft.proposed}" if draft.proposed is not None else "num draft tokens - 1")
                       + " per request-step, a tree's nodes after its root; SGLang's accept rate, #23530), lower "
                       "than the per-position rates, which divide by the request-steps that drafted each depth")


def _tree_size_findings(draft: _ShapeDraft, topk: int, steps: int, draft_tokens: int) -> None:
    """A tree's draft tokens: more than it holds stops SGLang; too few to reach the depth, or a chain's worth,
    waste the flags."""
    most = 1 + topk + (steps - 1) * topk * topk
    if draft_tokens > most:
        draft.errors.append(f"--speculative-num-draft-tokens {draft_tokens} is more than a tree of topk {topk} and "
                            f"{steps} steps holds (1 + {topk} + {steps - 1} x {topk}^2 = {most}): SGLang's "
                            "organize_draft_results cannot pick that many nodes (torch.topk fails at the first "
                            "decode)")
    elif draft_tokens <= steps:
        draft.warnings.append(f"--speculative-num-draft-tokens {draft_tokens} <= --speculative-num-steps {steps}: "
                              f"the tree's {draft_tokens - 1} nodes cannot reach depth {steps}, so the deepest "
                              "positions are never drafted (give more than num steps + 1 tokens)")
    elif draft_tokens == steps + 1:
        draft.warnings.append(f"--speculative-num-draft-tokens {draft_tokens} = num steps + 1 with topk {topk}: a "
                              "tree no wider than a chain (more tokens use the topk)")


def _chain_shape(draft: _ShapeDraft) -> None:
    """topk 1 or not given: a chain (or adaptive depth), whose draft tokens SGLang sets to num steps + 1."""
    draft.shape = "adaptive depth" if draft.adaptive else "chain"
    topk, steps, draft_tokens = draft.topk, draft.steps, draft.draft_tokens
    if topk == 1 and steps is not None and draft_tokens is not None and draft_tokens != steps + 1 \
            and not draft.adaptive:
        draft.warnings.append(f"--speculative-num-draft-tokens {draft_tokens} with topk 1: SGLang sets it to num "
                              f"steps + 1 = {steps + 1}")
    if steps is not None:
        draft.draft_tokens = steps + 1
    draft.proposed = steps  # a chain proposes one draft per step
    if not draft.adaptive:
        draft.probe.append("fixed depth" + (f" {steps}" if steps is not None else "") + ": every verify step is "
                           "counted at it; accept rate = accepted / proposed (num steps per request-step)")
