#!/usr/bin/env python3
"""Dashboards as code: writes the Grafana dashboard (built with Grafana Labs' Foundation SDK, grafana-foundation-sdk,
pinned in requirements/runtime-0.5.23.txt) and the Prometheus alert rules (plain text), with the probe's pure
analysis constants.

    python dashboards/generate.py          # rewrite dashboards/eagle-probe.json and dashboards/prometheus/alerts.yml
    python dashboards/generate.py --check  # exit 1 when the committed files differ from this generator's output

The committed files are what Grafana and Prometheus load; tests/prometheus checks that they equal this output and
runs every expression below against a real Prometheus scraping a real SGLang server with the probe.

Conventions: every panel query filters on the dashboard variables `$instance`, `$node_rank` and `$tp_rank` (and
`$role` where the metric has a role label); rates use `$__rate_interval`. Acceptance follows vLLM's definitions: mean
acceptance length = 1 + rate(accepted tokens) / rate(drafts); acceptance rate at draft position k = rate(accepted at
k) / rate(request-steps whose draft reached k) (eagle_probe_spec_drafted_tokens_per_pos_total: with a depth that
changes at run time, --speculative-adaptive, the drafts that reached k are fewer than all drafts).
"""

import json
import os
import pathlib
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from grafana_foundation_sdk.builders import bargauge, common, prometheus, table, timeseries  # noqa: E402
from grafana_foundation_sdk.builders.dashboard import (  # noqa: E402
    AnnotationQuery,
    CustomVariable,
    Dashboard,
    DatasourceVariable,
    QueryVariable,
    Row,
    ThresholdsConfig,
)
from grafana_foundation_sdk.cog.encoder import JSONEncoder  # noqa: E402
from grafana_foundation_sdk.models.common import (  # noqa: E402
    BarGaugeDisplayMode,
    GraphDrawStyle,
    GraphThresholdsStyleMode,
    LegendDisplayMode,
    LegendPlacement,
    SortOrder,
    StackingMode,
    TooltipDisplayMode,
    VisibilityMode,
    VizOrientation,
)
from grafana_foundation_sdk.models.dashboard import (  # noqa: E402
    DashboardCursorSync,
    DataSourceRef,
    DataTransformerConfig,
    Threshold,
    ThresholdsMode,
    VariableOption,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat, QueryEditorMode  # noqa: E402

from eagle_probe.analysis.batch_buckets import LABELS as BATCH_BUCKETS  # noqa: E402
from eagle_probe.analysis.findings import (  # noqa: E402
    DRAFT_VOCAB_COVERAGE_LOW,
    MISMATCH_CODES,
    SPECULATION_SLOWER_THAN_PLAIN,
)
from eagle_probe.analysis.fingerprints import RMS_SPREAD_TOLERANCE  # noqa: E402  (one source each)
from eagle_probe.analysis.slices import DIMENSIONS, REQUEST_DIMENSIONS  # noqa: E402
from eagle_probe.analysis.speculation_cost import MIN_STEPS as COST_MIN_STEPS  # noqa: E402
from eagle_probe.analysis.vocab_coverage import LOW as COVERAGE_LOW  # noqa: E402
from eagle_probe.analysis.vocab_coverage import MIN_TOKENS as COVERAGE_MIN_TOKENS  # noqa: E402
from eagle_probe.analysis.vocab_coverage import Z as COVERAGE_Z  # noqa: E402

DASHBOARD_PATH = os.path.join(HERE, "eagle-probe.json")
ALERTS_PATH = os.path.join(HERE, "prometheus", "alerts.yml")

UID = "eagle-probe-eagle3"
DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
# node_rank: the node of a multi-node launch (each node's /metrics serves its own ranks' series once); "All" is .*,
# which also matches series without the label (SGLang's own, and probes before node labels)
SEL = 'instance=~"$instance", node_rank=~"$node_rank", tp_rank=~"$tp_rank"'
SEL_ROLE = SEL + ', role=~"$role"'
# SGLang's own gauge under both names: prometheus_client's OpenMetrics output (what Prometheus asks for) writes the
# sample as sglang_spec_accept_length, the classic text format as sglang:spec_accept_length.
SGLANG_ACCEPT_LENGTH = "sglang:spec_accept_length|sglang_spec_accept_length"
RANK = "instance, node_rank, tp_rank"
RI = "$__rate_interval"

COLLAPSE_THRESHOLD = 0.3  # position-0 acceptance rate; healthy EAGLE-3 drafts accept 0.6-0.9 at position 0
COVERAGE_WINDOW = "15m"  # sampled verified tokens counted by the coverage alert (MIN_TOKENS of them at least)
SLOWER_FOR = "15m"  # the speed-up's upper bound under 1 this long (it moves once per summary interval, since start)


def query(expr, legend="", ref="A", instant=False, fmt=PromQueryFormat.TIME_SERIES):
    q = (prometheus.Dataquery().expr(expr).legend_format(legend or "__auto").ref_id(ref).datasource(DS)
         .editor_mode(QueryEditorMode.CODE).format(fmt))
    return q.instant() if instant else q.range()


def timeseries_panel(pid, title, description, queries, width=12, unit="short", stack=False, bars=False,
                     soft_range=None, red_below=None):
    p = (timeseries.Panel().id(pid).title(title).description(description).datasource(DS).span(width).height(8)
         .unit(unit).targets(queries)
         .draw_style(GraphDrawStyle.BARS if bars else GraphDrawStyle.LINE).line_width(1)
         .fill_opacity(20 if stack else 0).show_points(VisibilityMode.AUTO).span_nulls(False)
         .stacking(common.StackingConfig().mode(StackingMode.NORMAL if stack else StackingMode.NONE).group("A"))
         .legend(common.VizLegendOptions().display_mode(LegendDisplayMode.TABLE).placement(LegendPlacement.BOTTOM)
                 .show_legend(True).calcs(["lastNotNull"]))
         .tooltip(common.VizTooltipOptions().mode(TooltipDisplayMode.MULTI).sort(SortOrder.DESCENDING)))
    if soft_range:
        p = p.axis_soft_min(soft_range[0]).axis_soft_max(soft_range[1])
    if red_below is not None:  # a line at the value, the area under it red
        p = (p.thresholds(ThresholdsConfig().mode(ThresholdsMode.ABSOLUTE).steps([
                 Threshold(value=None, color="red"), Threshold(value=red_below, color="green")]))
             .thresholds_style(common.GraphThresholdsStyleConfig().mode(GraphThresholdsStyleMode.LINE_AND_AREA)))
    return p


def table_panel(pid, title, description, queries, width=12, height=8, hidden=("Time",), rename=None, sort_by=None):
    p = (table.Panel().id(pid).title(title).description(description).datasource(DS).span(width).height(height)
         .targets(queries).show_header(True)
         .with_transformation(DataTransformerConfig(id_val="organize", options={
             "excludeByName": {name: True for name in hidden}, "indexByName": {}, "renameByName": rename or {}})))
    if sort_by:
        field, desc = sort_by
        p = p.sort_by([common.TableSortByFieldState().display_name(field).desc(desc)])
    return p


def with_panels(board):
    """The panels, row by row; the SDK lays them out left to right (24 columns a line)."""
    board = board.with_row(Row("Acceptance").id(100))
    board = board.with_panel(timeseries_panel(
        1, "Mean acceptance length",
        "Tokens per request and verify step, bonus token included: 1 + rate(accepted draft tokens) / rate(drafts) "
        "(vLLM's definition), per rank, from the probe; SGLang's own sglang:spec_accept_length gauge (average over "
        "the last --decode-log-interval steps, bonus included) beside it when --enable-metrics is on (stored as "
        "sglang_spec_accept_length when Prometheus scrapes OpenMetrics, which turns ':' into '_').",
        [query(f"1 + sum by ({RANK}) (rate(eagle_probe_spec_accepted_tokens_total{{{SEL}}}[{RI}]))"
               f" / sum by ({RANK}) (rate(eagle_probe_spec_drafts_total{{{SEL}}}[{RI}]))",
               "probe {{instance}} tp{{tp_rank}}", "A"),
         query(f"max by ({RANK}) ({{__name__=~\"{SGLANG_ACCEPT_LENGTH}\", {SEL}}})",
               "sglang {{instance}} tp{{tp_rank}}", "B")], unit="none"))
    board = board.with_panel(timeseries_panel(
        2, "Acceptance rate per draft position",
        "Fraction of the drafts that reached 0-based draft position k whose token there was accepted: rate(accepted "
        "at k) / rate(request-steps whose draft reached k), so that it holds when the draft depth changes at run "
        "time (--speculative-adaptive: a step at depth d drafts positions 0..d-1 only). A tree draft (topk > 1) "
        "counts positions along its accepted path. Position 0 near chance with later positions near 0 is the "
        "signature of a draft fed the wrong layers.",
        [query(per_position_rate(SEL, RANK), "position {{position}} {{instance}} tp{{tp_rank}}")],
        unit="percentunit", soft_range=(0, 1)))
    board = board.with_panel(
        bargauge.Panel().id(3).title("Distribution of accepted lengths").description(
            "Accepted draft tokens per request and verify step (bonus excluded) over the dashboard's time range, "
            "from the eagle_probe_spec_accepted_length histogram: bucket le=k counts steps that accepted exactly k.")
        .datasource(DS).span(12).height(8).unit("short")
        .targets([query(f"sum by (le) (increase(eagle_probe_spec_accepted_length_bucket{{{SEL}}}[$__range]))",
                        "{{le}}", instant=True, fmt=PromQueryFormat.HEATMAP)])
        .orientation(VizOrientation.VERTICAL).display_mode(BarGaugeDisplayMode.BASIC).show_unfilled(True)
        .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]).values(False)))
    board = board.with_panel(timeseries_panel(
        4, "Drafts and verify steps per second",
        "Request-steps that proposed draft tokens, and verify batches, per second and rank: the denominators of the "
        "acceptance panels (no drafts, no acceptance).",
        [query(f"sum by ({RANK}) (rate(eagle_probe_spec_drafts_total{{{SEL}}}[{RI}]))",
               "drafts {{instance}} tp{{tp_rank}}", "A"),
         query(f"sum by ({RANK}) (rate(eagle_probe_spec_verify_steps_total{{{SEL}}}[{RI}]))",
               "verify steps {{instance}} tp{{tp_rank}}", "B")], unit="ops"))

    board = with_depth_panels(board)
    board = with_cost_panels(board)
    board = with_slice_panels(board)
    board = with_vocabulary_panels(board)

    board = board.with_row(Row("Capture configuration and shapes").id(101))
    board = board.with_panel(table_panel(
        5, "Captured layers per rank",
        "The aux hidden-state slots each rank's target currently captures (series value 1; replaced configurations "
        "drop to 0 and are hidden): capture index (residual stream entering that decoder layer), HuggingFace "
        "hidden_states index, and the human label. Every rank should show the layers the draft was trained on.",
        [query(f"max by ({RANK}, pp_rank, dp_rank, role, slot, capture_index, hf_index, label) "
               f"(eagle_probe_capture_layer_info{{{SEL_ROLE}}}) == 1", instant=True, fmt=PromQueryFormat.TABLE)],
        hidden=("Time", "Value"), rename={"capture_index": "capture index", "hf_index": "hidden_states index"},
        sort_by=("tp_rank", False)))
    board = board.with_panel(timeseries_panel(
        6, "Aux width per rank",
        "Packed aux hidden-state width per token the target produced (K x hidden size), the width entering the "
        "draft, and the input width of the draft's fc. They must agree (target aux width = draft fc input).",
        [query(f"max by ({RANK}, role, path) (eagle_probe_aux_width{{{SEL_ROLE}}})",
               "target aux {{instance}} tp{{tp_rank}} {{role}} {{path}}", "A"),
         query(f"max by ({RANK}, path) (eagle_probe_draft_input_width{{{SEL}}})",
               "draft input {{instance}} tp{{tp_rank}} {{path}}", "B"),
         query(f"max by ({RANK}) (eagle_probe_draft_fc_in_width{{{SEL}}})",
               "draft fc in {{instance}} tp{{tp_rank}}", "C")]))
    board = board.with_panel(timeseries_panel(
        7, "Forward paths (eager, CUDA graph, TBO)",
        "Python-level target forwards per second by mode and path (eager steps; graph_capture runs while CUDA graphs "
        "are captured, replays skip Python) and whether the batch ran Two-Batch-Overlap; draft forwards by whether "
        "SGLang ran the draft's fc.",
        [query(f"sum by (role, mode, path, tbo) (rate(eagle_probe_target_forwards_total{{{SEL_ROLE}}}[{RI}]))",
               "{{role}} {{mode}} {{path}} tbo={{tbo}}", "A"),
         query(f"sum by (mode, path, fc) (rate(eagle_probe_draft_forwards_total{{{SEL}}}[{RI}]))",
               "draft {{mode}} {{path}} fc={{fc}}", "B")], unit="ops", stack=True))
    board = board.with_panel(timeseries_panel(
        8, "Aux hidden states returned",
        "Aux hidden states the target's last forward returned, per rank and path (should equal the number of "
        "configured slots, normally 3).",
        [query(f"max by ({RANK}, role, path) (eagle_probe_aux_states{{{SEL_ROLE}}})",
               "{{instance}} tp{{tp_rank}} {{role}} {{path}}")]))
    board = board.with_row(Row("Problems").id(102))
    board = board.with_panel(timeseries_panel(
        9, "Captures lost (Two-Batch-Overlap)",
        "Capture slots that fell in the layers Two-Batch-Overlap runs (which never capture): total since each "
        "process started, per rank. Anything above 0 means the draft got fewer aux states on TBO batches.",
        [query(f"sum by ({RANK}, role, mode) (eagle_probe_captures_lost_total{{{SEL_ROLE}}})",
               "{{instance}} tp{{tp_rank}} {{role}} {{mode}}")], width=8, bars=True))
    board = board.with_panel(table_panel(
        10, "Findings by code",
        "Findings the probe emitted since each process started, by code, severity and role (see the documentation's "
        "findings reference, docs/reference/findings.md; the JSON log line eagle_probe.finding carries the message "
        "and evidence).",
        [query(f"sum by ({RANK}, code, severity, role) (eagle_probe_findings_total{{{SEL_ROLE}}})",
               instant=True, fmt=PromQueryFormat.TABLE)], width=8, rename={"Value": "count"},
        sort_by=("count", True)))
    board = board.with_panel(timeseries_panel(
        11, "Probe internal errors",
        "Exceptions inside the probe, by site (never raised into SGLang; the first per site is logged as "
        "eagle_probe.internal_error). Should stay at 0.",
        [query(f"sum by ({RANK}, where) (eagle_probe_internal_errors_total{{{SEL}}})",
               "{{instance}} tp{{tp_rank}} {{where}}")], width=8, bars=True))

    board = board.with_row(Row("Hidden-state values").id(103))
    board = board.with_panel(timeseries_panel(
        13, "Aux RMS per slot and rank",
        "RMS of each aux slot (what the draft receives) in the last sampled forward, per rank: tensor-parallel ranks "
        "of one instance must overlap (they hold the same states after each all-reduce); a rank apart from the "
        "others is the tp_rank_divergence alert. Sampled every EAGLE_PROBE_FINGERPRINT_INTERVAL_S.",
        [query(f"max by ({RANK}, role, slot) (eagle_probe_aux_rms{{{SEL_ROLE}}})",
               "{{instance}} tp{{tp_rank}} {{role}} slot {{slot}}")], unit="none"))
    board = board.with_panel(timeseries_panel(
        14, "Non-finite aux values",
        "NaN or Inf values seen in sampled aux slots since each process started, per rank and slot (the "
        "aux_nonfinite finding names the layer). Should stay at 0.",
        [query(f"sum by ({RANK}, role, slot) (eagle_probe_aux_nonfinite_total{{{SEL_ROLE}}})",
               "{{instance}} tp{{tp_rank}} {{role}} slot {{slot}}")], bars=True))
    return board.with_panel(table_panel(
        12, "Probe per rank",
        "Probe and SGLang versions and the capture-id rule in effect, per rank (one row per live process).",
        [query(f"max by ({RANK}, pp_rank, dp_rank, probe_version, sglang_version, rules) (eagle_probe_info{{{SEL}}})",
               instant=True, fmt=PromQueryFormat.TABLE)], width=24, height=6, hidden=("Time", "Value")))


def per_position_rate(sel, by):
    """Acceptance rate at each draft position: rate(accepted at k) / rate(request-steps whose draft reached k),
    positions no draft reached in the window left out."""
    accepted = f"rate(eagle_probe_spec_accepted_tokens_per_pos_total{{{sel}}}[{RI}])"
    drafted = f"rate(eagle_probe_spec_drafted_tokens_per_pos_total{{{sel}}}[{RI}])"
    return (f"sum by ({by}, position) ({accepted})"
            f" / on ({by}, position) (sum by ({by}, position) ({drafted}) > 0)")


def with_depth_panels(board):
    """The draft depth each verify step ran at (adaptive depth changes it; a tree's depth is its draft steps)."""
    steps = f"rate(eagle_probe_spec_depth_verify_steps_total{{{SEL}}}[{RI}])"
    drafts = f"rate(eagle_probe_spec_depth_drafts_total{{{SEL}}}[{RI}])"
    accepted = f"rate(eagle_probe_spec_depth_accepted_tokens_total{{{SEL}}}[{RI}])"
    board = board.with_row(Row("Draft depth").id(106))
    board = board.with_panel(timeseries_panel(
        20, "Draft depth in use",
        "Share of verify steps at each draft depth (speculative steps the step ran: fixed without "
        "--speculative-adaptive; SGLang's adaptive policy picks one of its candidate steps per batch size from the "
        "accepted length), per instance (its TP ranks verify the same steps). Depth 0 is a verify of width 1 (no "
        "drafts). "
        "SGLang turns adaptive depth off silently (topk > 1, DP attention, two-batch overlap, pdmux, multi-layer "
        "EAGLE): one depth only then. `eagle-probe summarize` prints the same as `draft depth in use`.",
        [query(f"sum by (instance, depth) ({steps}) / on (instance) group_left () (sum by (instance) ({steps}) > 0)",
               "depth {{depth}} {{instance}}")],
        unit="percentunit", stack=True, soft_range=(0, 1)))
    board = board.with_panel(timeseries_panel(
        21, "Mean acceptance length per draft depth",
        "Tokens per request and verify step at each draft depth, bonus token included: 1 + rate(accepted drafts at "
        "depth d) / rate(request-steps at depth d), per instance; the current depth (eagle_probe_spec_draft_depth: "
        "the depth of the last verify step counted, per rank) beside it. Deeper steps that accept no more than "
        "shallow ones cost verify width for nothing.",
        [query(f"1 + sum by (instance, depth) ({accepted}) / (sum by (instance, depth) ({drafts}) > 0)",
               "depth {{depth}} {{instance}}", "A"),
         query(f"max by ({RANK}) (eagle_probe_spec_draft_depth{{{SEL}}})",
               "current depth {{instance}} tp{{tp_rank}}", "B")], unit="none"))
    return board


def with_cost_panels(board):
    """Does speculation pay? The probe's estimate per batch-size bucket and the phase costs behind it (its step timer,
    runtime/parts/costs.py). An instance's tp ranks time the same steps: the speed-up is the highest of their
    estimates (the alert fires when every rank's upper bound is under 1), the phase seconds and steps are summed."""
    seconds = f"rate(eagle_probe_spec_phase_seconds_total{{{SEL}}}[{RI}])"
    steps = f"rate(eagle_probe_spec_timed_steps_total{{{SEL}}}[{RI}])"
    board = board.with_row(Row("Does speculation pay?").id(107))
    board = board.with_panel(timeseries_panel(
        22, "Estimated speed-up over plain decoding by batch size",
        "Estimated speed-up of speculation over plain decoding at each batch-size bucket (requests in the decode "
        f"step: {', '.join(BATCH_BUCKETS)}): tokens per step (from the acceptance per draft position) x a plain "
        "step's time / a speculative step's time, from the probe's step timer (EAGLE_PROBE_PHASE_TIMING, on by "
        "default) and its acceptance counts since the process started, set once per summary interval "
        "(eagle_probe_spec_estimated_speedup); the upper bound is the estimate plus two standard errors "
        "(eagle_probe_spec_estimated_speedup_upper). Per instance, the highest of its tp ranks' estimates (they time "
        "the same steps). Under 1 (red) speculation costs more than it saves at that batch size; an upper bound "
        "under 1 is beyond the uncertainty, the EagleProbeSpeculationSlowerThanPlain alert. A bucket appears once "
        f"it has {COST_MIN_STEPS} timed steps and a timed target forward to estimate a plain step from. "
        "`eagle-probe advise LOG_DIR` prints the estimate with the best depth per batch size, and `--write FILE` "
        "the adaptive config (--speculative-adaptive --speculative-adaptive-config FILE).",
        [query(f"max by (instance, batch_bucket) (eagle_probe_spec_estimated_speedup{{{SEL}}})",
               "{{batch_bucket}} {{instance}}", "A"),
         query(f"max by (instance, batch_bucket) (eagle_probe_spec_estimated_speedup_upper{{{SEL}}})",
               "upper bound {{batch_bucket}} {{instance}}", "B")],
        unit="none", soft_range=(0, 2), red_below=1))
    return board.with_panel(timeseries_panel(
        23, "Mean phase time per step by batch size",
        "Seconds per timed speculative decode step spent in each phase, by batch-size bucket: "
        "rate(eagle_probe_spec_phase_seconds_total) / rate(eagle_probe_spec_timed_steps_total) of the same bucket, "
        "per instance (its tp ranks summed: they time the same steps). draft: all the draft's steps; verify: the "
        "target's verify forward; extend: the draft extend after it; step: the worker's whole step (the others and "
        "what runs between them). From the probe's step timer, on the clock its start-up statement names (wall "
        "clock on the CPU, CUDA events on a GPU, never waiting for the device). These are the costs behind the "
        "speed-up estimate; `eagle-probe advise LOG_DIR` prints them with the break-even accept length and the "
        "recommended depth.",
        [query(f"sum by (instance, batch_bucket, phase) ({seconds})"
               f" / on (instance, batch_bucket) group_left () (sum by (instance, batch_bucket) ({steps}) > 0)",
               "{{phase}} {{batch_bucket}} {{instance}}")], unit="s"))


def slice_rate_query(dimension):
    """Per-position acceptance rate in each slice of one dimension: rate(accepted at k in the slice) / rate(drafts in
    the slice), slices that saw no drafts in the window left out (their series exist at zero from the first flush).
    The slice series carry no drafted-per-position counter: under a depth that changes at run time, positions past
    the shallowest depth in use read low here (the panel's description says so; summarize divides by drafted). Summed
    over an instance's tp ranks: they verify the same steps, so numerator and denominator scale alike."""
    by = "instance, bucket"
    sel = f'{SEL}, dimension="{dimension}"'
    accepted = f"rate(eagle_probe_spec_slice_accepted_tokens_per_pos_total{{{sel}}}[{RI}])"
    drafts = f"rate(eagle_probe_spec_slice_drafts_total{{{sel}}}[{RI}])"
    return query(f"sum by ({by}, position) ({accepted}) / on ({by}) group_left () (sum by ({by}) ({drafts}) > 0)",
                 "{{bucket}} position {{position}} {{instance}}")


def with_slice_panels(board):
    board = board.with_row(Row("Acceptance by slice").id(104))
    board = board.with_panel(timeseries_panel(
        15, "Acceptance rate per draft position by sequence position",
        "Per-position acceptance rate of the request-steps whose chain starts at a sequence position (prompt + "
        "generated tokens) in each log2 bucket (0-63, 64-127, ...), from eagle_probe_spec_slice_* counters. "
        "Acceptance that falls as sequences grow points at a RoPE scaling or max_position_embeddings mismatch "
        "between draft and target, or a draft trained on shorter sequences. Divided by all the slice's request-steps: "
        "with adaptive depth, positions past the shallowest depth in use read low (see 'Acceptance rate per draft "
        "position' and 'Draft depth in use').",
        [slice_rate_query("position")], unit="percentunit", soft_range=(0, 1)))
    board = board.with_panel(timeseries_panel(
        16, "Acceptance rate per draft position by $slice",
        "The same rate sliced by the dimension chosen in the `slice` variable: batch (requests in the verify step: "
        "padded-batch bugs), cached_prefix (stale draft state on cache hits), path (graph or eager: state a CUDA "
        "graph captured once), step (first verify step after prefill or later), position. `eagle-probe summarize` "
        "names a slice worse than the rest beyond chance (acceptance_slice_low).",
        [slice_rate_query("$slice")], unit="percentunit", soft_range=(0, 1)))
    requests = f"eagle_probe_spec_requests_by_accept_length_total{{{SEL}}}"
    return board.with_panel(
        bargauge.Panel().id(17).title("Requests by accept length").description(
            "Share of the requests that finished over the dashboard's time range, by their own accept length (1 + "
            "their accepted draft tokens per verify step, bonus included). Two humps point at a subset of the "
            "traffic (a template, a language) that the draft serves worse.")
        .datasource(DS).span(24).height(8).unit("percentunit")
        .targets([query(f"sum by (bucket) (increase({requests}[$__range]))"
                        f" / on () group_left () (sum (increase({requests}[$__range])) > 0)",
                        "{{bucket}}", instant=True)])
        .orientation(VizOrientation.VERTICAL).display_mode(BarGaugeDisplayMode.BASIC).show_unfilled(True)
        .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]).values(False)))


def with_vocabulary_panels(board):
    tokens = "eagle_probe_draft_vocab_verified_tokens_total"
    board = board.with_row(Row("Draft vocabulary").id(105))
    board = board.with_panel(timeseries_panel(
        18, "Vocabulary coverage",
        "Share of the target's verified tokens (sampled verify steps, EAGLE_PROBE_COVERAGE_INTERVAL_S) that lie in "
        "the draft's vocabulary, per rank: since the process started (the eagle_probe_draft_vocab_coverage gauge) "
        "and over the window (rate of in_vocab=\"true\" over all). Coverage c caps the mean accept length at "
        f"1 / (1 - c) for any draft; under {COVERAGE_LOW:.0%} is {DRAFT_VOCAB_COVERAGE_LOW} (missing d2t, or a hot "
        "vocabulary built from other traffic).",
        [query(f"max by ({RANK}) (eagle_probe_draft_vocab_coverage{{{SEL}}})",
               "since start {{instance}} tp{{tp_rank}}", "A"),
         query(f'sum by ({RANK}) (rate({tokens}{{{SEL}, in_vocab="true"}}[{RI}]))'
               f" / (sum by ({RANK}) (rate({tokens}{{{SEL}}}[{RI}])) > 0)",
               "window {{instance}} tp{{tp_rank}}", "B")], unit="percentunit", soft_range=(0, 1)))
    return board.with_panel(timeseries_panel(
        19, "Verified tokens in and out of the draft's vocabulary",
        "Sampled verified tokens per second, per rank, by whether the draft's vocabulary holds them (in_vocab). "
        "Tokens out of it are ones the draft can never propose.",
        [query(f"sum by ({RANK}, in_vocab) (rate({tokens}{{{SEL}}}[{RI}]))",
               "in_vocab={{in_vocab}} {{instance}} tp{{tp_rank}}")], unit="ops", stack=True))


def variables():
    def query_var(name, label, expr):
        return (QueryVariable(name).label(label).datasource(DS)
                .query({"query": expr, "refId": "PrometheusVariableQueryEditor-VariableQuery"})
                .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED).include_all(True).multi(True).all_value(".*")
                .current(VariableOption(selected=True, text=["All"], value=["$__all"]))
                .sort(VariableSort.NUMERICAL_ASC))

    return [DatasourceVariable("datasource").label("Prometheus").type("prometheus"),
            query_var("instance", "instance", "label_values(eagle_probe_info, instance)"),
            query_var("node_rank", "node", 'label_values(eagle_probe_info{instance=~"$instance"}, node_rank)'),
            query_var("tp_rank", "TP rank",
                      'label_values(eagle_probe_info{instance=~"$instance", node_rank=~"$node_rank"}, tp_rank)'),
            query_var("role", "role", 'label_values(eagle_probe_target_forwards_total{instance=~"$instance"}, role)'),
            slice_var()]


def slice_var():
    """The dimension the second slice panel shows: one of analysis.slices' fixed dimensions, the schedulers' and the
    HTTP server's entry point (single choice); a custom label's dimension is typed in as label:KEY."""
    default = "batch"
    dimensions = list(DIMENSIONS) + list(REQUEST_DIMENSIONS)
    return (CustomVariable("slice").label("slice dimension").values(",".join(dimensions))
            .description("Dimension of the 'Acceptance rate per draft position by $slice' panel; a custom label "
                         "allowed by --tokenizer-metrics-allowed-custom-labels: type label:KEY")
            .options([VariableOption(selected=d == default, text=d, value=d) for d in dimensions])
            .current(VariableOption(selected=True, text=default, value=default)).multi(False).include_all(False)
            .allow_custom_value(True))


def dashboard():
    board = (Dashboard("eagle-probe: EAGLE-3 speculative decoding").uid(UID)
             .description("SGLang EAGLE-3 serving seen by eagle-probe: acceptance, draft depth, whether speculation "
                          "pays, captured layers per rank, shapes, forward paths, findings. Generated by "
                          "dashboards/generate.py; do not edit by hand.")
             .tags(["sglang", "eagle3", "speculative-decoding", "eagle-probe"]).editable()
             .tooltip(DashboardCursorSync.CROSSHAIR).time("now-1h", "now").refresh("30s").timezone("browser")
             .variables(variables())
             .annotation(AnnotationQuery().name("Annotations & Alerts").built_in(1).enable(True).hide(True)
                         .icon_color("rgba(0, 211, 255, 1)").type("dashboard")
                         .datasource(DataSourceRef(type_val="grafana", uid="-- Grafana --"))))
    return json.loads(json.dumps(with_panels(board).build(), cls=JSONEncoder))


# --------------------------------------------------------------------------------------------- alerts

PROCESS = "instance, node_rank, host, tp_rank, pp_rank, dp_rank"  # the labels that name one probe process's series


def in_tp_group(metric):
    """`metric` with its process's tp_group label (eagle_probe_info's; the instance where that is empty)."""
    join = f"{metric} * on ({PROCESS}) group_left"
    return (f'{join} (tp_group) eagle_probe_info{{tp_group!=""}}\n'
            f'or label_replace({join} () eagle_probe_info{{tp_group=""}}, "tp_group", "$1", "instance", "(.*)")')


def alerts():
    """[(name, expr, for, severity, summary, description, signal)]; `signal` is the expression without its
    threshold (what the tests require to return data from a real run)."""
    # position 0's rate over the request-steps that drafted position 0 (depth-0 steps of adaptive depth draft none)
    drafts = 'sum by (instance, tp_rank) (rate(eagle_probe_spec_drafted_tokens_per_pos_total{position="0"}[5m]))'
    pos0 = ('sum by (instance, tp_rank) (rate(eagle_probe_spec_accepted_tokens_per_pos_total{position="0"}[5m]))'
            f"\n/ {drafts}")
    codes = "|".join(MISMATCH_CODES)
    mismatch = f'sum by (instance, tp_rank, role, code) (eagle_probe_findings_total{{code=~"{codes}"}})'
    lost = "sum by (instance, tp_rank, role, mode) (eagle_probe_captures_lost_total)"
    errors = "sum by (instance, tp_rank, where) (eagle_probe_internal_errors_total)"
    # The ranks that must agree: one TP group, named by eagle_probe_info's tp_group (a multi-node launch's id, so
    # that its nodes' ranks are compared; else the server's host:port), or the instance where a process has none.
    slot_group = "tp_group, role, slot, pp_rank, dp_rank"
    rank_group = "tp_group, role, pp_rank, dp_rank"
    rms, step = in_tp_group("eagle_probe_aux_rms"), in_tp_group("eagle_probe_aux_fingerprint_step")
    rms_spread = (f"(max by ({slot_group}) ({rms})\n- min by ({slot_group}) ({rms}))\n"
                  f"/ avg by ({slot_group}) ({rms})")
    same_forward = (f"(max by ({rank_group}) ({step})\n"
                    f"== min by ({rank_group}) ({step}))")
    nonfinite = "sum by (instance, tp_rank, role, slot) (eagle_probe_aux_nonfinite_total)"
    # draft_vocab_coverage_low's low half (analysis.vocab_coverage) over a window: the coverage's upper confidence
    # bound c + Z * sqrt(c (1 - c) / n) = (in + Z * sqrt(in * out / n)) / n under LOW, over at least MIN_TOKENS
    # sampled tokens. The finding floors c (1 - c) at 0.25 / n; from MIN_TOKENS on, the floor acts only within about
    # 0.25 / n of 0 or 1 and moves the bound by at most 1.5 / n: the same side of LOW either way (tests/prometheus
    # checks every count from MIN_TOKENS to 1200 tokens).
    vocab = "eagle_probe_draft_vocab_verified_tokens_total"
    window = COVERAGE_WINDOW
    inside = f'sum by (instance, tp_rank) (increase({vocab}{{in_vocab="true"}}[{window}]))'
    outside = f'sum by (instance, tp_rank) (increase({vocab}{{in_vocab="false"}}[{window}]))'
    verified = f"sum by (instance, tp_rank) (increase({vocab}[{window}]))"
    coverage_bound = f"({inside}\n+ {COVERAGE_Z:g} * sqrt({inside} * {outside}\n/ {verified}))\n/ {verified}"
    # The speed-up's upper bound (estimate + 2 standard errors) per batch-size bucket; an instance's tp ranks time the
    # same steps, so the highest of theirs: the alert fires when every rank's bound is under 1.
    upper = "max by (instance, batch_bucket) (eagle_probe_spec_estimated_speedup_upper)"
    return [
        dict(alert="EagleProbeAcceptanceCollapse",
             expr=f"({pos0}) < {COLLAPSE_THRESHOLD}\nand on (instance, tp_rank)\n({drafts}) > 0",
             signal=pos0, **{"for": "10m"}, severity="critical",
             summary="EAGLE-3 acceptance collapsed on {{ $labels.instance }} tp_rank {{ $labels.tp_rank }}",
             description=f"Position-0 acceptance rate is {{{{ $value | humanizePercentage }}}} "
                         f"(under {COLLAPSE_THRESHOLD:.0%}) "
                         "for 10 minutes while drafts are being made. Check the captured layers per rank and "
                         "the findings (layer_mismatch, fc_width_mismatch, tbo_capture_lost)."),
        dict(alert="EagleProbeLayerOrShapeMismatch", expr=f"{mismatch} > 0", signal=mismatch, **{"for": "0m"},
             severity="critical",
             summary="eagle-probe finding {{ $labels.code }} on {{ $labels.instance }} tp_rank {{ $labels.tp_rank }}",
             description="The probe found that the draft is fed other layers or shapes than it expects "
                         "({{ $labels.code }}, role {{ $labels.role }}). The eagle_probe.finding log line has the "
                         "message and evidence; `eagle-probe summarize` prints it per rank."),
        dict(alert="EagleProbeCapturesLost", expr=f"{lost} > 0", signal=lost, **{"for": "0m"}, severity="critical",
             summary="Aux captures lost to Two-Batch-Overlap on {{ $labels.instance }} tp_rank {{ $labels.tp_rank }}",
             description="{{ $value }} capture slots fell in the layers Two-Batch-Overlap runs ({{ $labels.mode }} "
                         "batches); those batches feed the draft fewer aux hidden states."),
        dict(alert="EagleProbeTpRankDivergence",
             expr=f"({rms_spread}) > {RMS_SPREAD_TOLERANCE}\nand on ({rank_group})\n{same_forward}",
             signal=rms_spread, **{"for": "0m"}, severity="critical",
             summary="Aux slot {{ $labels.slot }} differs between the tp ranks of {{ $labels.tp_group }}",
             description="The RMS of aux slot {{ $labels.slot }} ({{ $labels.role }}) spreads by {{ $value }} "
                         "(max - min over mean) across the tp ranks of one TP group ({{ $labels.tp_group }}: a "
                         "multi-node launch's id, its nodes included, else the server's host:port) in the same "
                         "sampled forward; "
                         f"healthy bf16 ranks stay under {RMS_SPREAD_TOLERANCE} (docs/values.md). A rank holding "
                         "partial sums or another state feeds its draft other values; `eagle-probe summarize` names "
                         "the ranks (tp_rank_divergence)."),
        dict(alert="EagleProbeAuxNonFinite", expr=f"{nonfinite} > 0", signal=nonfinite, **{"for": "0m"},
             severity="critical",
             summary="NaN or Inf in aux slot {{ $labels.slot }} on {{ $labels.instance }} "
                     "tp_rank {{ $labels.tp_rank }}",
             description="{{ $value }} non-finite values in sampled aux slot {{ $labels.slot }} ({{ $labels.role }}); "
                         "the draft is fed them. The aux_nonfinite finding names the layer."),
        dict(alert="EagleProbeDraftVocabCoverageLow",
             expr=f"({coverage_bound}) < {COVERAGE_LOW:g}\nand on (instance, tp_rank)\n"
                  f"({verified}) >= {COVERAGE_MIN_TOKENS}",
             signal=coverage_bound, **{"for": "5m"}, severity="warning",
             summary="Draft vocabulary coverage low on {{ $labels.instance }} tp_rank {{ $labels.tp_rank }}",
             description="The upper confidence bound of the share of verified tokens inside the draft's vocabulary "
                         f"is {{{{ $value | humanizePercentage }}}} (under {COVERAGE_LOW:.0%}) over the last "
                         f"{COVERAGE_WINDOW} of sampled verify steps ({COVERAGE_MIN_TOKENS} tokens at least). The "
                         "draft can never propose the other tokens, which caps the mean accept length at 1 / (1 - "
                         "coverage) for any draft: ship the d2t map the training wrote (draft_vocab_map_missing), or "
                         "rebuild the hot vocabulary from traffic like the served one. `eagle-probe summarize` names "
                         f"it ({DRAFT_VOCAB_COVERAGE_LOW})."),
        dict(alert="EagleProbeSpeculationSlowerThanPlain", expr=f"{upper} < 1", signal=upper,
             **{"for": SLOWER_FOR}, severity="warning",
             summary="Speculation slower than plain decoding at batch size {{ $labels.batch_bucket }} on "
                     "{{ $labels.instance }}",
             description="At batch sizes {{ $labels.batch_bucket }} speculation is estimated slower than plain "
                         "decoding beyond its uncertainty: the estimated speed-up plus two standard errors is "
                         f"{{{{ printf \"%.2f\" $value }}}} (under 1) on every tp rank, for {SLOWER_FOR} (the "
                         "probe's step timer and acceptance since the process started). Run `eagle-probe advise "
                         "LOG_DIR --write FILE` on the probe's logs and serve with `--speculative-adaptive "
                         "--speculative-adaptive-config FILE` (the best depth at each batch size, none where no depth "
                         "pays), or turn speculation off for that batch size. `eagle-probe summarize` names the step "
                         f"times behind it ({SPECULATION_SLOWER_THAN_PLAIN})."),
        dict(alert="EagleProbeInternalErrors", expr=f"{errors} > 0", signal=errors, **{"for": "0m"}, severity="warning",
             summary="eagle-probe internal errors at {{ $labels.where }} on {{ $labels.instance }}",
             description="{{ $value }} exceptions inside the probe at {{ $labels.where }} (never raised into SGLang; "
                         "the probe's data for that site may be missing). "
                         "See the eagle_probe.internal_error log line."),
    ]


def _yaml_str(value):
    return json.dumps(value)  # a JSON string is a valid YAML double-quoted scalar


def alerts_yaml():
    lines = ["# Prometheus alert rules for eagle-probe. Generated by dashboards/generate.py; do not edit by hand.",
             "groups:", "  - name: eagle-probe", "    rules:"]
    for a in alerts():
        lines.append(f"      - alert: {a['alert']}")
        lines.append("        expr: |-")
        lines += [f"          {line}" for line in a["expr"].splitlines()]
        lines.append(f"        for: {a['for']}")
        lines.append("        labels:")
        lines.append(f"          severity: {a['severity']}")
        lines.append("        annotations:")
        lines.append(f"          summary: {_yaml_str(a['summary'])}")
        lines.append(f"          description: {_yaml_str(a['description'])}")
    return "\n".join(lines) + "\n"


def dashboard_json():
    return json.dumps(dashboard(), indent=2, sort_keys=False) + "\n"


def outputs():
    return {DASHBOARD_PATH: dashboard_json(), ALERTS_PATH: alerts_yaml()}


def main(argv):
    stale = []
    for path, text in outputs().items():
        current = pathlib.Path(path).read_text() if os.path.exists(path) else None
        if current != text:
            stale.append(path)
            if "--check" not in argv:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as f:
                    f.write(text)
    if "--check" in argv:
        for path in stale:
            print(f"{path} differs from dashboards/generate.py's output; run python dashboards/generate.py")
        return 1 if stale else 0
    for path in stale:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
