"""The dump file format (docs/values.md): shared vocabulary, written by the runtime's dump writer and read back
by the offline commands through commands/dump_files.py.

One safetensors file per dumped target forward, named eagle-probe-dump-HOST-tpRANK-PID-SEQUENCE.safetensors, with
the tensors below and, in the safetensors metadata, FORMAT_KEY = FORMAT_VERSION and META_KEY = the JSON metadata.
"""

FORMAT_VERSION = "1"  # also the JSON metadata's "format_version" (earlier writers stored it as the integer 1)
SUFFIX = ".safetensors"
FORMAT_KEY, META_KEY = "eagle_probe.format", "eagle_probe.meta"
# Tensors: what the draft is fed (real tokens only), the final hidden state, and the tokens with their positions.
AUX, FINAL, INPUT_IDS, POSITIONS = "aux_hidden_states", "final_hidden_state", "input_ids", "positions"
# The final hidden state is in every dump of an eager forward; a dump the EAGLE worker boundary took of a forward
# replayed from a CUDA graph has none (metadata "final_hidden_state": false, "hidden_size" gives the width).
REQUIRED = (AUX, INPUT_IDS, POSITIONS)
SEQ_LENS, PREFIX_LENS = "extend_seq_lens", "extend_prefix_lens"  # per request, where the batch has them
LAYER_PREFIX = "hidden_states."  # hidden_states.I: the residual stream entering layer I (all-layer dumps)
# Target verify forwards (EAGLE_PROBE_DUMP_MODES=...,target_verify; metadata "mode" = "TARGET_VERIFY"): the rows are
# the requests' verify chains one after another ("req_ids" in the metadata, in row order, each "rows_per_request"
# rows); per request, the drafts the verify step accepted (-1: unknown) and the committed tokens before its first row.
ACCEPTED = "accepted_drafts"  # [B] int64: rows 0..accepted of the request were committed (row 0 always is)
PREFIX_IDS, PREFIX_COUNTS = "committed_ids", "committed_counts"  # the B prefixes back to back, [B] their lengths
# Verify dumps the EAGLE worker boundary takes: [T] int64, the target's greedy token after each row (the argmax of the
# verify logits SGLang hands the worker), so that replay has labels where no final hidden state was dumped.
TARGET_IDS = "target_next_ids"
EXTEND_MODE, VERIFY_MODE = "EXTEND", "TARGET_VERIFY"
