"""Every series the probe makes: kind, name, help text and labels, one Spec each (sinks/series.py). The sink makes
them in this order (the generated reference lists them so); the depth and slice series on their first flush."""

from ...analysis.slices import DIMENSIONS
from ..values.dumps import STOP_REASONS
from .series import COUNTER, GAUGE, HISTOGRAM, Spec

# -- made with the sink -------------------------------------------------------------------------------------------

INFO = Spec(GAUGE, "eagle_probe_info", "Probe and SGLang versions in this process, its group widths and attention "
            "places, and tp_group: the ranks whose values must agree (a multi-node launch's id, else this server's "
            "host:port) (value 1; SGLang's HTTP server process has none).",
            ("probe_version", "sglang_version", "rules", "tp_group"))  # then the group widths (Ranks.sizes)
TARGET_FORWARDS = Spec(COUNTER, "eagle_probe_target_forwards_total", "Python-level forwards of the target's inner "
                       "model (DeepseekV2Model, LlamaModel, ...; eager steps and CUDA-graph capture runs).",
                       ("role", "mode", "path", "tbo"))
MODEL_FORWARDS = Spec(COUNTER, "eagle_probe_model_forwards_total", "ModelRunner.forward calls (target and draft) on "
                      "every path, CUDA graphs included, by path (eager, graph_replay, graph_capture) and the graph "
                      "runner that replayed it (none when eager).", ("role", "mode", "path", "graph"))
CAPTURE_LAYER_INFO = Spec(GAUGE, "eagle_probe_capture_layer_info",
                          "Configured aux capture slots (1 = current, 0 = replaced).",
                          ("role", "slot", "capture_index", "hf_index", "label"))
AUX_WIDTH = Spec(GAUGE, "eagle_probe_aux_width", "Width of the packed aux hidden states per token (K * H).",
                 ("role", "path"))
AUX_STATES = Spec(GAUGE, "eagle_probe_aux_states", "Aux hidden states returned by the last forward.", ("role", "path"))
CAPTURES_LOST = Spec(COUNTER, "eagle_probe_captures_lost_total",
                     "Capture slots that fell in the Two-Batch-Overlap layer range, per forward run.", ("role", "mode"))
FINDINGS = Spec(COUNTER, "eagle_probe_findings_total", "Findings emitted by code.", ("code", "severity", "role"))
INTERNAL_ERRORS = Spec(COUNTER, "eagle_probe_internal_errors_total",
                       "Exceptions inside the probe (never raised into SGLang).", ("where",))
INTEGRATION_SKIPPED = Spec(COUNTER, "eagle_probe_integration_skipped_total",
                           "Patch targets missing from the installed SGLang.", ("integration", "target"))
DRAFT_FORWARDS = Spec(COUNTER, "eagle_probe_draft_forwards_total",
                      "Python-level EAGLE-3 draft forwards, by whether SGLang ran the draft's fc.",
                      ("mode", "path", "fc"))
DRAFT_INPUT_WIDTH = Spec(GAUGE, "eagle_probe_draft_input_width",
                         "Width of the hidden states entering the draft (spec_info.hidden_states).", ("path",))
DRAFT_FC_IN_WIDTH = Spec(GAUGE, "eagle_probe_draft_fc_in_width", "Input width the draft's fc takes.")
# vLLM's spec-decode definitions: drafts = request-steps that proposed tokens.
VERIFY_STEPS = Spec(COUNTER, "eagle_probe_spec_verify_steps_total", "Verify steps (batches).")
DRAFTS = Spec(COUNTER, "eagle_probe_spec_drafts_total", "Draft sequences verified (request-steps).")
DRAFT_TOKENS = Spec(COUNTER, "eagle_probe_spec_draft_tokens_total", "Draft tokens proposed.")
ACCEPTED = Spec(COUNTER, "eagle_probe_spec_accepted_tokens_total", "Draft tokens accepted (bonus token excluded).")
ACCEPTED_PER_POS = Spec(COUNTER, "eagle_probe_spec_accepted_tokens_per_pos_total",
                        "Draft tokens accepted at each 0-based draft position.", ("position",))
DRAFTED_PER_POS = Spec(COUNTER, "eagle_probe_spec_drafted_tokens_per_pos_total", "Request-steps whose draft reached "
                       "each 0-based position (its rate's denominator).", ("position",))
ACCEPT_LENGTH = Spec(HISTOGRAM, "eagle_probe_spec_accepted_length",
                     "Accepted draft tokens per request and verify step (bonus excluded).",
                     buckets=tuple(range(0, 17)) + (float("inf"),))
AUX_RMS = Spec(GAUGE, "eagle_probe_aux_rms", "RMS of each aux slot in the last sampled forward.", ("role", "slot"))
AUX_ABSMAX = Spec(GAUGE, "eagle_probe_aux_absmax", "Largest absolute value of each aux slot in the last sampled "
                  "forward.", ("role", "slot"))
AUX_STEP = Spec(GAUGE, "eagle_probe_aux_fingerprint_step", "The model's forward count at the last sampled forward "
                "(equal across TP ranks when their gauges describe the same forward).", ("role",))
DUMPS_WRITTEN = Spec(COUNTER, "eagle_probe_dumps_written_total", "Dump files written.")
DUMP_BYTES = Spec(COUNTER, "eagle_probe_dump_bytes_total", "Bytes of dump files written.")
DUMPS_STOPPED = Spec(COUNTER, "eagle_probe_dumps_stopped_total",
                     f"Dumps stopped for good ({', '.join(STOP_REASONS)}).", ("reason",))
DUMPS_SKIPPED = Spec(COUNTER, "eagle_probe_dumps_skipped_total", "Planned dumps not written (the writer was behind).",
                     ("reason",))
AUX_NONFINITE = Spec(COUNTER, "eagle_probe_aux_nonfinite_total", "NaN or Inf values seen in sampled aux slots.",
                     ("role", "slot"))
VOCAB_TOKENS = Spec(COUNTER, "eagle_probe_draft_vocab_verified_tokens_total", "Verified tokens of sampled verify "
                    "steps, by whether the draft's vocabulary holds them.", ("in_vocab",))
VOCAB_COVERAGE = Spec(GAUGE, "eagle_probe_draft_vocab_coverage", "Share of the sampled verified tokens inside the "
                      "draft's vocabulary so far (caps the accept rate).")
PHASE_SECONDS = Spec(COUNTER, "eagle_probe_spec_phase_seconds_total", "Seconds of the speculative decode steps by "
                     "phase (draft: all its steps; verify: the target's verify; extend: the draft extend; step: the "
                     "worker's whole step) and batch-size bucket, on the clock the start-up statement names (timing).",
                     ("phase", "batch_bucket"))
TIMED_STEPS = Spec(COUNTER, "eagle_probe_spec_timed_steps_total", "Speculative decode steps timed, by batch-size "
                   "bucket.", ("batch_bucket",))
ESTIMATED_SPEEDUP = Spec(GAUGE, "eagle_probe_spec_estimated_speedup", "Estimated speed-up of speculation over plain "
                         "decoding by batch-size bucket (tokens per step x a plain step's time / a speculative "
                         "step's time), since start; set once per summary interval.", ("batch_bucket",))
ESTIMATED_SPEEDUP_UPPER = Spec(GAUGE, "eagle_probe_spec_estimated_speedup_upper", "The estimated speed-up plus two "
                               "standard errors: under 1, speculation is slower than plain decoding beyond its "
                               "uncertainty.", ("batch_bucket",))

# -- made on the first flush that counts them ---------------------------------------------------------------------

# The draft depth each verify step ran at (sinks/depth_metrics.py).
DEPTH_VERIFY_STEPS = Spec(COUNTER, "eagle_probe_spec_depth_verify_steps_total",
                          "Verify steps (batches) at each draft depth.", ("depth",))
DEPTH_DRAFTS = Spec(COUNTER, "eagle_probe_spec_depth_drafts_total", "Request-steps verified at each draft depth.",
                    ("depth",))
DEPTH_ACCEPTED = Spec(COUNTER, "eagle_probe_spec_depth_accepted_tokens_total",
                      "Draft tokens accepted at each draft depth (bonus token excluded).", ("depth",))
# prometheus_client's default mode ("all": one value per pid), as this gauge has had from the start
DRAFT_DEPTH = Spec(GAUGE, "eagle_probe_spec_draft_depth", "Draft depth of the last verify step counted.",
                   multiprocess_mode="all")

# Acceptance by slice (sinks/slice_metrics.py).
SLICE_DRAFTS = Spec(COUNTER, "eagle_probe_spec_slice_drafts_total", "Draft sequences verified (request-steps) in "
                    f"each slice of a dimension ({', '.join(DIMENSIONS)}).", ("dimension", "bucket"))
SLICE_ACCEPTED_PER_POS = Spec(COUNTER, "eagle_probe_spec_slice_accepted_tokens_per_pos_total", "Draft tokens "
                              "accepted at each 0-based draft position, in each slice of a dimension.",
                              ("dimension", "bucket", "position"))
REQUESTS_BY_ACCEPT_LENGTH = Spec(COUNTER, "eagle_probe_spec_requests_by_accept_length_total", "Finished requests by "
                                 "their accept length (1 + accepted drafts per verify step, bonus included), in "
                                 "fixed buckets.", ("bucket",))
