"""The stable log event names, shared by the recorder that writes them and the commands that read them back, and
what each one is (CATALOGUE: the documentation's log-events page is generated from it)."""

from typing import NamedTuple

STARTED = "eagle_probe.started"
CONFIG_ERROR = "eagle_probe.config_error"
UNSUPPORTED_VERSION = "eagle_probe.unsupported_version"
INTEGRATION_SKIPPED = "eagle_probe.integration.skipped"
CAPTURE_CONFIGURED = "eagle_probe.capture.configured"
TARGET_FORWARD = "eagle_probe.target.forward"
DRAFT_LOADED = "eagle_probe.draft.loaded"
DRAFT_FORWARD = "eagle_probe.draft.forward"
ACCEPTANCE = "eagle_probe.acceptance"
VOCAB_COVERAGE = "eagle_probe.draft.vocab_coverage"
AUX_FINGERPRINT = "eagle_probe.aux.fingerprint"  # one slot: what the reader gives for each slot of the line below
AUX_FINGERPRINTS = "eagle_probe.aux.fingerprints"  # one sampled forward's slots, one line
DUMP_WRITTEN = "eagle_probe.dump.written"
DUMP_STOPPED = "eagle_probe.dump.stopped"
FINDING = "eagle_probe.finding"
SUMMARY = "eagle_probe.summary"
INTERNAL_ERROR = "eagle_probe.internal_error"
METRICS_EXPOSED = "eagle_probe.metrics.exposed"
ACCEPTANCE_SLICES = "eagle_probe.acceptance_slices"
OBSERVABILITY = "eagle_probe.observability"
CUSTOM_LABEL_NOT_SLICED = "eagle_probe.custom_label.not_sliced"
SPEC_COSTS = "eagle_probe.spec.costs"
BLOCK_CAPTURE = "eagle_probe.block_draft.capture"  # DFlash / DSpark: the target's capture for the block draft
BLOCK_DRAFT_LOADED = "eagle_probe.block_draft.loaded"
BLOCK_DRAFT_FED = "eagle_probe.block_draft.fed"

# Written once per process, or on first sight of what they name: a rotated log's new file begins with them again
# (runtime/sinks/rotation.py), and a reader drops the repeats (the very same line).
ONCE_PER_PROCESS = frozenset({
    STARTED, CONFIG_ERROR, UNSUPPORTED_VERSION, INTEGRATION_SKIPPED, CAPTURE_CONFIGURED, TARGET_FORWARD, DRAFT_LOADED,
    DRAFT_FORWARD, DUMP_STOPPED, FINDING, METRICS_EXPOSED, OBSERVABILITY, CUSTOM_LABEL_NOT_SLICED, BLOCK_CAPTURE,
    BLOCK_DRAFT_LOADED, BLOCK_DRAFT_FED})


# Periodic events whose counts run since the process started: a rotated log's new file begins with the latest of
# each (after the once-only lines), so that the files kept always hold the last totals; a reader drops the repeats.
LATEST_PER_PROCESS = frozenset({ACCEPTANCE, SPEC_COSTS, ACCEPTANCE_SLICES, VOCAB_COVERAGE, SUMMARY})
CARRIED_ON_ROTATION = ONCE_PER_PROCESS | LATEST_PER_PROCESS


class Event(NamedTuple):
    """What the documentation's log-events page says of one event: when it is written, and its main fields, each
    'name' or 'name: what it holds'."""

    when: str
    fields: tuple[str, ...]

    def field_names(self) -> tuple[str, ...]:
        return tuple(f.split(":", 1)[0] for f in self.fields)


# Every line also carries these (the worker processes' ranks where known).
COMMON_FIELDS = ("event", "pid", "host", "timestamp", "level", "node_rank", "nnodes", "tp_rank", "tp_size", "pp_rank",
                 "pp_size", "dp_rank", "attn_tp_rank", "attn_tp_size", "attn_dp_rank", "attn_dp_size")

CATALOGUE = {
    STARTED: Event("first observation in a worker process (a rank), or SGLang's HTTP server process's first finished "
                   "request (role: http_server)", (
        "probe_version", "sglang_version", "rules", "metrics_port", "metrics_multiprocess",
        "metrics_served_by: where this process's series are served (SGLang's /metrics, the probe's exporter, none)",
        "launch: `id`, a hash of the arguments every node of one launch gives alike, those arguments, and "
        "`tp_group`, the ranks whose values must agree (the launch id across nodes, else host:port; the info series' "
        "label)",
        "flush_interval_s", "role: http_server in SGLang's HTTP server process, else absent")),
    CAPTURE_CONFIGURED: Event("every `set_eagle3_layers_to_capture` call", (
        "model_class", "role", "requested_ids", "layers_to_capture",
        "mapping: plus_one / as_given / default_layers", "version_rule",
        "family: the family row's name, null without one", "family_rule: the row's rule, or `unverified`",
        "rule_applied: the rule as applied to these ids", "slots: slot, capture_index, hf_index, label",
        "num_layers", "first_k_dense_replace", "layer_range", "caller", "during_graph_setup")),
    TARGET_FORWARD: Event("a new forward signature", (
        "model_class", "role", "mode", "path", "capturing", "can_run_tbo", "layers_to_capture", "slot_labels",
        "normal_layers", "tbo_layers", "lost", "tokens", "aux_expected", "aux_returned", "aux_format", "aux_shape",
        "slot_widths", "dtype", "error")),
    FINDING: Event("a new finding", ("code", "severity", "role", "message", "evidence")),
    DRAFT_LOADED: Event("the EAGLE-3 draft's `load_weights` returned", (
        "model_class", "eagle_layer_ids", "use_aux_hidden_state", "target_hidden_size", "draft_hidden_size", "num_aux",
        "fc_in", "fc_out", "norm_before_fc", "fc_norm", "norm_output", "draft_vocab_size", "lm_head_from_target",
        "checkpoint_tensors", "dropped", "ignored", "target_vocab_size", "d2t_size", "d2t_problems",
        "ids_read: the ids the draft sized its `fc` from",
        "ids_read_from: `eagle_config`, `top_level`, `num_aux_hidden_states` or `default`",
        "config_ignored: the forward keys this release's draft class does not read ([key, value as JSON, reason])",
        "sglang_release", "config_source: where the draft's config.json was read",
        "trained_length: the sequence length the draft was trained on",
        "trained_length_source: the variable, SpecForge's training_state.pt or config.json's max_position_embeddings",
        "trained_length_notes: why an earlier source was not used")),
    DRAFT_FORWARD: Event("a new draft forward signature", (
        "model_class", "mode", "path", "aux_width: incoming", "embed_width", "fc_in", "fc_ran", "num_aux",
        "target_hidden_size", "tokens", "error")),
    ACCEPTANCE: Event("every `EAGLE_PROBE_SUMMARY_INTERVAL_S` while verify steps run, and at exit", (
        "steps: window counts, as the next three", "drafts", "draft_tokens",
        "drafted_tokens: the older name of draft_tokens, still read by summarize", "accepted_tokens: bonus excluded",
        "positions", "mean_accepted_drafts", "mean_accept_length: bonus included", "per_position_rate",
        "conditional_rate: accepted at k given k-1", "accept_length_histogram",
        "expected_mean_accept_length: with `EAGLE_PROBE_DRAFT_ACCURACY`", "observed_over_expected",
        "expected_per_position_rate", "draft_accuracy: the per-position accuracies given",
        "total: since start, the same counts as the window's (steps, drafts, draft_tokens, accepted_tokens, "
        "per-position and per-depth counts, histogram): `summarize` reads them where the earlier windows are missing "
        "(rotated away)",
        "read_at: the SGLang function whose result was read (the release's acceptance hook)")),
    VOCAB_COVERAGE: Event("every `EAGLE_PROBE_SUMMARY_INTERVAL_S` while sampled verify steps run, and at exit", (
        "in_vocab: running total of the sampled steps' committed tokens inside the draft's vocabulary",
        "verified_tokens: running total of the sampled steps' committed tokens", "coverage", "window_in_vocab",
        "window_verified_tokens", "samples", "map: `full`, `d2t`, or `none` (no d2t: draft ids used as target ids)",
        "hot_vocab_size", "draft_vocab_size", "target_vocab_size",
        "mean_accept_length_cap: 1 / (1 - coverage), at most the positions + 1; null: no cap", "interval_s")),
    CUSTOM_LABEL_NOT_SLICED: Event("once per custom-label key, in SGLang's HTTP server process: a key the server does "
                                   "not allow, or one that reached its bound of distinct values", (
        "key", "reason: not_allowed, or values (further values are counted as 'other')",
        "allowed: the keys --tokenizer-metrics-allowed-custom-labels allows", "message")),
    SPEC_COSTS: Event("every `EAGLE_PROBE_SUMMARY_INTERVAL_S` while speculative decode steps run (or, on a server "
                      "without speculation, its decode steps), and at exit (with `EAGLE_PROBE_PHASE_TIMING` on)", (
        "source: the clock (wall_clock, cuda_events, sglang_device_timer)", "topk",
        "steps: since start, batch bucket -> depth -> [steps, batch_sum, draft_s, verify_s, extend_s, step_s, "
        "periods, period_s, period_s2]",
        "forwards: since start, the target's decode, verify and short prefill forwards by MODE:WIDTH:BUCKET (a "
        "prefill's width: *) -> the sums of 1, requests, tokens, their squares and product, seconds, and seconds x "
        "each and squared",
        "acceptance: all, greedy, sampled -> accepted and drafted request-steps per draft position",
        "estimate: per bucket, estimated_speedup, uncertainty, break_even_accept_length, recommended_num_steps, "
        "plain_step_seconds and plain_source, phase_seconds", "dropped: steps not timed (the queue was full)",
        "first_calls: first steps, periods and forwards of each shape, left out (once-only work)",
        "server: plain on a server without speculation (its lines hold plain_steps, no steps, acceptance or "
        "estimate)", "plain_steps: since start, batch bucket -> the same list as a step row: the plain decode steps "
        "`eagle-probe advise` measures the plain step from")),
    ACCEPTANCE_SLICES: Event("every `EAGLE_PROBE_SUMMARY_INTERVAL_S` while verify steps run, and at exit", (
        "role: target (a scheduler's verify steps), or http_server (SGLang's HTTP server process: finished requests "
        "by entry point and custom label)", "positions",
        "slices: cumulative, dimension -> bucket -> `request_steps`, `accepted` per 0-based draft position",
        "request_accept_length: finished requests per accept-length bucket", "requests",
        "requests_classified: finished requests counted by traffic class (role http_server: SGLang's HTTP server "
        "process, dimensions entry and label:KEY)",
        "low: the slices `acceptance_slice_low` names", "test")),
    AUX_FINGERPRINTS: Event("a sampled forward, one line for its slots: every slot on first sight and once per "
                            "`EAGLE_PROBE_SUMMARY_INTERVAL_S` (the same forward on every rank: the bucket comes from "
                            "the wall clock), a slot also when it moved (rms by 20 %, signature cosine under 0.9)", (
        "role: target, the aux states returned; draft, its input on target-fed forwards", "mode",
        "step: the model's forward count in this process, equal across TP ranks", "tokens",
        "source: worker (the states the target handed the EAGLE worker, on every path, graphs included; step: the "
        "worker's count of target forwards) or forward (the inner model forward's, eager forwards only)",
        "slots: one object per slot logged: slot, capture_index (the HF hidden_states index), label, width, rms, "
        "mean, absmax (6 significant digits), nonfinite, signature (32 numbers)")),
    AUX_FINGERPRINT: Event("one slot of a sampled forward, as `summarize` reads each slot of the line above; "
                           "earlier builds of the probe wrote one such line per slot, and are read the same", (
        "role", "slot", "capture_index", "hf_index: the capture index", "label", "mode", "step", "tokens", "width",
        "rms", "mean", "absmax", "nonfinite", "signature", "source")),
    DUMP_WRITTEN: Event("a dump file is complete", ("path", "bytes")),
    DUMP_STOPPED: Event("dumps stop for good in this process (once)", (
        "reason: cap, full, file_size_limit, unwritable, error", "error", "directory", "message")),
    OBSERVABILITY: Event("once per process, at its first forward after graph set-up: what the probe sees here", (
        "settings: decode_graph, prefill_graph (the graph runner per phase, null: eager), torch_compile, "
        "overlap_schedule, dp_attention, inner_forward_replaced, inner_forward_wrapped, worker_boundary, timing (the "
        "step timer's clock: wall_clock, cuda_events, sglang_device_timer; null: none), read from "
        "SGLang's model runner and server args",
        "observations: what, source, live, why (the reason it is not live)", "message")),
    SUMMARY: Event("every `EAGLE_PROBE_SUMMARY_INTERVAL_S` (checked on observations), and at exit", (
        "forwards: role, mode, path, tbo, count (inner model forwards: eager and capture only)",
        "model_forwards: role, mode, path (eager, graph_replay, graph_capture), graph, count (ModelRunner.forward, "
        "every path)", "captures_lost", "findings", "internal_errors",
        "series_refused: series name -> samples dropped past the series' bound (Metrics: How many series)")),
    INTEGRATION_SKIPPED: Event("a patch target missing from a module SGLang imported (once per process; `warning` if "
                               "the version table expects it there, else `info`), or one of an integration named in "
                               "`EAGLE_PROBE_DISABLED_INTEGRATIONS` (`info`, once per install)", (
        "integration", "target", "reason", "expected", "sglang_version", "supported",
        "off: what the probe cannot report without it", "message")),
    UNSUPPORTED_VERSION: Event("SGLang outside the range (once per process; nothing is wrapped)", (
        "sglang_version", "supported", "off", "message")),
    METRICS_EXPOSED: Event("the per-rank exporter binds a non-loopback address (once)", ("addr", "port", "message")),
    CONFIG_ERROR: Event("a bad `EAGLE_PROBE_*` value (the probe stays off; the server runs normally)", (
        "variable", "value", "accepted")),
    INTERNAL_ERROR: Event("first exception at a probe site (then counted only)", ("where", "error")),
    BLOCK_CAPTURE: Event("the outermost `set_dflash_layers_to_capture` / `set_dspark_layers_to_capture` call (DFlash, "
                         "DSpark drafts)", (
        "model_class", "role", "algorithm: dflash or dspark", "setter", "requested_ids: the target_layer_ids SGLang "
        "passed", "layers_to_capture: the positions the setter stored", "rule: plus_one / as_given / other, read from "
        "the two", "rule_text", "slots: slot, capture_index, hf_index, label", "num_layers",
        "ids_source: dflash_config.target_layer_ids, target_layer_ids, dspark_target_layer_ids, "
        "dspark_config.target_layer_ids, default (SGLang chose them) or unknown", "default_ids: SGLang's default for "
        "this target and draft", "num_draft_layers", "draft_config: where the draft's config.json was read, or why "
        "not", "is_last_pp_stage", "caller")),
    BLOCK_DRAFT_LOADED: Event("the DFlash worker's set-up returned", (
        "worker_class", "model_class", "block_size: served", "config_block_size: the checkpoint's",
        "draft_positions: block_size - 1, the tokens a block proposes", "mask_token_id", "num_draft_layers",
        "num_context_features: K", "hidden_size", "fc_in", "fc_out", "fc_expected_in: K x hidden_size",
        "target_layer_ids: the draft's own (null: its config names none)")),
    BLOCK_DRAFT_FED: Event("a new signature of what a hand-off feeds the block draft's `project_target_hidden`", (
        "worker_class", "mode: EXTEND or TARGET_VERIFY", "width", "expected_width: the draft's fc input", "rows",
        "dtype")),
}
