"""The dump file format (README: "Dump files"): shared vocabulary, written by the runtime's dump writer and read back
by the offline commands through commands/dump_files.py.

One safetensors file per dumped target forward, named eagle-probe-dump-HOST-tpRANK-PID-SEQUENCE.safetensors, with
the tensors below and, in the safetensors metadata, FORMAT_KEY = FORMAT_VERSION and META_KEY = the JSON metadata.
"""

FORMAT_VERSION = "1"
SUFFIX = ".safetensors"
FORMAT_KEY, META_KEY = "eagle_probe.format", "eagle_probe.meta"
# Tensors: what the draft is fed (real tokens only), the final hidden state, and the tokens with their positions.
AUX, FINAL, INPUT_IDS, POSITIONS = "aux_hidden_states", "final_hidden_state", "input_ids", "positions"
REQUIRED = (AUX, FINAL, INPUT_IDS, POSITIONS)
SEQ_LENS, PREFIX_LENS = "extend_seq_lens", "extend_prefix_lens"  # per request, where the batch has them
LAYER_PREFIX = "hidden_states."  # hidden_states.I: the residual stream entering layer I (all-layer dumps)
