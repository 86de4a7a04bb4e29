"""What each finding code means in full, where it is raised, and how to fix it: the documentation's findings page is
generated from this table and findings.CODES (code, severity, one line). A test holds the two to the same codes."""

from typing import NamedTuple

from . import findings as F


class Guide(NamedTuple):
    raised_by: str  # where it comes from: the running probe, doctor, summarize, replay, parity, consistency
    detail: str  # what it means, in full
    fix: str  # what to do


PROBE = "running probe"

GUIDE = {
    F.TBO_CAPTURE_LOST: Guide(
        f"{PROBE}, doctor (`--tbo`)",
        "capture slots fall in the layers Two-Batch-Overlap runs, which never capture; the draft is fed fewer (or "
        "stale) aux states on TBO batches",
        "serve without `--enable-two-batch-overlap`, or choose capture ids below the TBO layer range (for "
        "DeepSeek-like families, below `first_k_dense_replace`)"),
    F.AUX_COUNT_MISMATCH: Guide(
        PROBE,
        "the target returned fewer (or more) aux hidden states than configured (SGLang 0.5.23 raises \"captured X "
        "of K\")",
        "look for an id that no layer captures (`capture_id_unreachable`) or a repeated index; run `eagle-probe "
        "doctor` on the two configs"),
    F.GRAPH_EAGER_LAYER_MISMATCH: Guide(
        f"{PROBE}, doctor",
        "CUDA-graph capture and eager forwards capture different layers (0.5.8 to 0.5.10.post1 set the default "
        "layers during graph set-up, before the configured ids apply)",
        "upgrade SGLang to 0.5.11 or later, or serve with `--disable-cuda-graph` on the affected release"),
    F.CAPTURE_AFTER_GRAPH: Guide(
        PROBE,
        "set_eagle3_layers_to_capture ran after the target's model runner had captured its CUDA graphs, so every "
        "replay runs the capture configuration of graph-capture time (sglang #22836)",
        "use a release that configures capture before graph capture, or serve with `--disable-cuda-graph`"),
    F.CAPTURE_ID_UNREACHABLE: Guide(
        f"{PROBE}, doctor",
        "a configured capture index can never be captured by the target's family on its release: >= layers, "
        "negative, the embedding where the family cannot (Llama before 0.5.22, GLM-4-MoE before 0.5.21, DeepSeek "
        "before 0.5.14, ...), position N where the family never captures it or raises at start-up (Qwen2/3-MoE, "
        "Qwen3-Next), or outside the pipeline stage",
        "set ids the family's rule maps into the layer range (doctor prints them), or use a release that captures "
        "the embedding"),
    F.CAPTURE_RULE_UNEXPECTED: Guide(
        PROBE,
        "SGLang mapped the ids differently from the rule of the target's family row for the release (DeepSeek's rule "
        "where no row applies); the labels follow what SGLang set",
        "report it with `eagle-probe compat --source` output: the family table needs a row for this release"),
    F.TARGET_NOT_EAGLE3: Guide(
        "doctor",
        "the target's architecture defines no `set_eagle3_layers_to_capture` in this release, so SGLang refuses the "
        "EAGLE-3 launch and nothing is predicted: a class no family names (OPT, `Glm4ForCausalLM`, ...), or a family "
        "not yet in the release (GLM-4-MoE-Lite before 0.5.13, Gemma-3/4 before 0.5.12, MiniMax-M3 before 0.5.16, "
        "...; the message names the releases that serve it)",
        "serve without EAGLE-3, pick a family `eagle-probe compat` lists, or a release that serves the family"),
    F.CAPTURE_RULE_UNVERIFIED: Guide(
        f"{PROBE}, doctor",
        "the target class defines the setter but no family row proves its rule (`families.UNTABLED`: BailingMoE, "
        "Qwen3.5, Qwen3-VL, Glm5Next, MiMo-V2-Flash, MindSpore; or an external package's class): doctor predicts "
        "with rule A and names it unverified, and the running probe reports what SGLang set with `family_rule` "
        "`unverified` (never a base class's row guessed); in doctor also a config naming no architecture (then "
        "DeepSeek's rule, unverified)",
        "check the captured layers the probe reports (`eagle_probe.capture.configured`) against the draft's training "
        "by hand; add `architectures` to config.json where it is missing"),
    F.LAYER_MISMATCH: Guide(
        f"{PROBE}, doctor, replay, parity",
        "the target captures other layers than the draft's config names (in this process), or than it was trained "
        "on (`EAGLE_PROBE_TRAINED_LAYERS`, doctor's `--trained-layers`); says the ids to set, inverted through the "
        "rule of the target's family for the release. On 0.5.23: rule A (Llama, Qwen2/3, Qwen2/3-MoE, GLM-4-MoE, "
        "MiniMax, Gemma, ...) HF `[3, 16, 29]` needs ids `[2, 15, 28]`, and the embedding needs id `-1` where the "
        "family can capture it; rule B (DeepSeek-V2/V3/Kimi, GLM-4-MoE-Lite) HF `[2, 30, 58]` needs ids "
        "`[2, 30, 58]` as given, and HF 1 first has no id list; rule C (GPT-OSS) HF `[3, 12, 21]` needs "
        "`[2, 11, 20]` and `[2, 12, 24]` (largest = N) is set as given; rule D (MiniMax-M3 VL) adds 1 like A. When "
        "no id list can reach the layers (position N on Qwen-MoE, the embedding where the family cannot) it says why",
        "set `eagle_aux_hidden_state_layer_ids` in the draft's `eagle_config` to the ids the message names"),
    F.FC_WIDTH_MISMATCH: Guide(
        f"{PROBE}, doctor",
        "the aux width entering the draft differs from the width its `fc` takes",
        "make the number of capture ids times the target's hidden size equal the draft's `fc` input "
        "(`num_aux_hidden_states`, `target_hidden_size`)"),
    F.FC_SKIPPED: Guide(
        f"{PROBE}, doctor",
        "the draft's `fc` is skipped because the incoming width equals the embedding width (e.g. an EAGLE-3 draft "
        "under `--speculative-algorithm EAGLE`)",
        "serve an EAGLE-3 draft with `--speculative-algorithm EAGLE3`"),
    F.DRAFT_TARGET_IDS_DIFFER: Guide(
        f"{PROBE} (at draft load), doctor",
        "the draft sizes its `fc` from layer ids the target is not given, and the target captures other layers than "
        "those ids name: Kimi-K2.5's MLA draft (`Eagle3DeepseekV2ForCausalLM`) falls back to the config's top-level "
        "`eagle_aux_hidden_state_layer_ids`, while SGLang gives the target only `eagle_config`'s (else its defaults)",
        "put the ids in `eagle_config`"),
    F.DRAFT_WEIGHTS_DROPPED: Guide(
        PROBE,
        "checkpoint tensors of the draft that SGLang's loader dropped without a word (e.g. `fc_norm` weights whose "
        "config flag is missing)",
        "set the config flag the tensors belong to (`fc_norm`, `norm_before_fc`, ...) or remove them from the "
        "checkpoint"),
    F.DRAFT_EMBEDDING_REPLACED: Guide(
        f"{PROBE}, doctor",
        "the checkpoint's own `embed_tokens` differs from the target's (measured on 256 sampled rows read alone from "
        "the target checkpoint; equal embeddings, the usual draft, give no finding), or its `lm_head` (no "
        "`draft_vocab_size`) is replaced by the target's; where the target checkpoint is not a local directory it "
        "says so at info level. Severity warning, info when not compared",
        "check that the draft was trained with this target's embedding (and its lm_head, where the config has no "
        "`draft_vocab_size`): SGLang serves it with the target's, not the checkpoint's own"),
    F.PP_STAGE_NO_CAPTURE: Guide(
        "doctor",
        "capture ids on pipeline stages other than the last are never captured",
        "choose ids on the last pipeline stage, or change `--pp-partition`"),
    F.ACCEPTANCE_COLLAPSE: Guide(
        PROBE,
        "observed mean acceptance length under `EAGLE_PROBE_COLLAPSE_RATIO` of the one expected from "
        "`EAGLE_PROBE_DRAFT_ACCURACY` over a window; lists the findings already seen as likely causes",
        "fix the findings it lists; without any, dump the aux states and run `replay`, `parity` and `consistency`"),
    F.AUX_NONFINITE: Guide(
        PROBE,
        "an aux slot carries NaN or Inf (slot, capture index, layer label, count of non-finite values in the "
        "sampled forward)",
        "look at the target's numerics at that layer (dtype, overflow, a kernel); the draft cannot use the slot"),
    F.AUX_SLOTS_IDENTICAL: Guide(
        PROBE,
        "two aux slots carry the same values to the bit (a repeated index, two ids mapping to one layer, a layer "
        "that adds nothing)",
        "give distinct capture ids; check the family's rule with `eagle-probe doctor`"),
    F.TP_RANK_DIVERGENCE: Guide(
        "summarize, the `EagleProbeTpRankDivergence` alert",
        "tensor-parallel ranks that must hold the same aux states for the same forward disagree beyond the "
        "tolerance; names the slot, the ranks and the size of the difference",
        "look for a rank that skipped an all-reduce or holds a partial sum (custom all-reduce, a kernel, a "
        "hardware fault on that GPU)"),
    F.AUX_VALUE_MISMATCH: Guide(
        f"parity, {PROBE} with `EAGLE_PROBE_REFERENCE`",
        "an aux slot's values differ from the same slot of the draft's training data; says how far and which "
        "training slot (or served HF index) it resembles",
        "capture the layers the training data holds (the ids `parity` prints), or retrain on the served wiring"),
    F.TRAINED_LAYERS_INFERRED: Guide(
        "replay --search",
        "the draft agrees with its target best when fed other layers than the served ones; gives both accuracies, "
        "the ids to set by the target's family rule, the reachable wirings that tie and whether the margin is "
        "within noise. Severity warning, info when the served wiring is the best",
        "set the ids it names; where the margin is within noise, confirm with `parity` against the training data"),
    F.DRAFT_VOCAB_MAP_MISSING: Guide(
        f"doctor, {PROBE} (at draft load)",
        "the draft's `draft_vocab_size` is smaller than the target's `vocab_size` and its checkpoint has no `d2t`: "
        "SGLang uses draft ids as target ids without a word; says how many target ids can never be proposed (target "
        "vocab - draft vocab)",
        "ship the training's `d2t` (SpecForge's vocabulary mapping) in the draft checkpoint, or train over the full "
        "vocabulary"),
    F.DRAFT_VOCAB_MAP_INVALID: Guide(
        f"doctor, {PROBE} (at draft load)",
        "the `d2t` map sends draft ids outside the target's vocabulary (target id = i + d2t[i]) or two draft ids to "
        "one target id, or has another length than `draft_vocab_size` (or the draft's vocabulary is larger than the "
        "target's); names example ids",
        "ship the `d2t` the draft was trained with, unchanged"),
    F.DRAFT_VOCAB_COVERAGE_LOW: Guide(
        f"{PROBE}, summarize",
        "of the sampled verified tokens (at least 200), too few lie inside the draft's vocabulary: under 90 % beyond "
        "3 standard errors, or acceptance below the promise sits at the cap the coverage sets (at least 90 % of the "
        "tokens the coverage lets the draft propose were accepted); names the coverage, the map and the "
        "accept-length cap. It counts as a cause: an `acceptance_collapse` after it lists it, "
        "`acceptance_below_training` defers to it",
        "ship the d2t; rebuild the hot vocabulary from data like the served traffic, or use a larger or full draft "
        "vocabulary"),
    F.VERIFY_PREFILL_MISMATCH: Guide(
        "consistency",
        "the aux states a target verify forward fed the draft at its committed rows differ from a prefill of the "
        "same tokens on the same server beyond the tolerance; names the slot, the forward mode, the rows (position, "
        "step) and the size of the difference (an off-by-one or stale buffer on the decode path, which prefill-only "
        "checks such as `parity` cannot see)",
        "look at the decode path's aux buffers (the verify forward's capture, its row order, CUDA-graph state); "
        "compare with `--disable-cuda-graph`"),
    F.ACCEPTANCE_BELOW_TRAINING: Guide(
        "summarize",
        "served acceptance is below what the draft's training accuracies promise (under 90 % of the promised mean "
        "accept length, at least 3 standard errors short, over at least 64 drafts) and no other warning or error "
        "finding explains it; lists which checks came back clean (layers, shapes, widths, vocabulary map, values, "
        "TP ranks) and which were not checked for want of events. Severity warning, error under 60 % of the promise",
        "run the next commands it lists: dumps (`run --dump-dir ... --dump-modes extend,target_verify`), then "
        "`replay`, `parity`, `consistency`"),
    F.ACCEPTANCE_SLICE_LOW: Guide(
        f"{PROBE}, summarize",
        "acceptance in one slice (sequence position, batch size, cached prefix, forward path, first decode step) is "
        "below the rest of its dimension beyond chance: a one-sided two-proportion z-test per dimension, slice and "
        "draft position, at least 64 request-steps on each side, p under 0.01 / the number of tests run "
        "(Bonferroni), a gap of at least 0.10 and the slice at most 75 % of the rest; names the slice, the position, "
        "both rates and p",
        "follow the likely cause it names: position, a RoPE or `max_position_embeddings` mismatch; cached prefix, "
        "stale draft state on cache hits; batch, padded-batch bugs; path, state a CUDA graph captured once; first "
        "step, what the draft is handed after prefill"),
    F.DRAFT_CONFIG_IGNORED: Guide(
        f"{PROBE} (at draft load), doctor",
        "a key of the draft's config that changes the EAGLE-3 forward (`norm_before_fc`, `fc_norm` / `use_aux_norm`, "
        "`norm_output`, `norm_before_residual`, `target_hidden_size`, `num_aux_hidden_states`, rope scaling) is set "
        "to a value that matters where this release's draft class never reads it (a per-release table, "
        "`analysis/draft_config_keys.py`, proven from every release's source by the contract check): the draft "
        "is served without what it was trained with; names the key, its value and the release",
        "move the key to where the release reads it (the top level or `eagle_config`), serve with the release the "
        "finding names, or, where no release reads it, retrain without it"),
    F.ACCEPTANCE_LOW: Guide(
        "summarize",
        "with no training accuracy given, the served first-position acceptance is far below the field prior for "
        "EAGLE-3 on chat traffic (0.6, the low end of published figures; `analysis/field_prior.py` names the "
        "sources): under 0.4 over at least 100 request-steps and at least 3 standard errors below the prior; says "
        "which checks came back clean and what was not checked",
        "run the next command it names: the low slice when one traffic class is low; `consistency` when the decode "
        "path is suspect; dumps and `replay --search` when the layers could be wrong; `doctor` for the vocabulary "
        "map"),
    F.ACCEPTANCE_SAMPLED_TRAFFIC: Guide(
        f"{PROBE} (instead of `acceptance_collapse`), summarize (instead of `acceptance_low`)",
        "acceptance over all traffic is low, but the `sampling` slice shows greedy traffic served as expected and "
        "sampled traffic (temperature > 0) below it: at temperature > 0 SGLang accepts a draft token with the "
        "target's probability of it, so sampled requests accept less with any wiring; names both sides' mean accept "
        "length and first-position rate",
        "nothing to fix in the wiring; judge the layers on greedy traffic (send some requests at temperature 0), and "
        "weigh whether speculation pays for the sampled traffic class"),
    F.ACCEPTANCE_PAST_TRAINED_LENGTH: Guide(
        "summarize",
        "acceptance by sequence position drops beyond the length the draft was trained on (from "
        "`EAGLE_PROBE_DRAFT_MAX_LENGTH` / `--draft-max-length`, else SpecForge's `training_state.pt`, else "
        "`max_position_embeddings`, stated as such): the slices' test with the position slices split at that "
        "length; names both rates, both mean accept lengths and the length",
        "train the draft on longer sequences, or cap the context the draft serves; check the draft's rope scaling "
        "against the target's"),
    F.ACCEPTANCE_BIMODAL: Guide(
        "summarize",
        "the per-request accept-length distribution has two peaks (at least 20 requests, a valley at most half the "
        "smaller peak, at least 20 % of requests on each side, peaks at least 0.75 tokens apart): a subset of the "
        "traffic fails; names the slice when one slice explains it",
        "look at what the low group has in common (the slice it names, the entry point, sampling, the request "
        "labels) and compare it with the draft's training data"),
    F.SPECULATION_SLOWER_THAN_PLAIN: Guide(
        "summarize, advise (from the running probe's `eagle_probe.spec.costs` lines)",
        "the estimated speed-up (tokens per step from the acceptance x a plain step's time / a speculative step's "
        "time, per batch-size bucket, for all traffic and for greedy and sampled traffic apart) is under 1 by more "
        "than two standard errors; names the tokens per step, the break-even accept length, both step times and "
        "where the plain one came from",
        "the depth it names where a depth pays; else turn speculation off for that batch size (`eagle-probe advise "
        "--write` writes an adaptive config with candidate_steps [0] there) or serve that traffic class without a "
        "draft; see Does speculation pay?"),
    F.SPECULATION_DEPTH_OFF: Guide(
        "summarize, advise",
        "at a batch-size bucket, the depth that maximises the estimated speed-up differs from the depth served and "
        "beats it by 10 % and by two standard errors; says when that depth was never served (its cost and "
        "acceptance extrapolated)",
        "serve that depth for that batch size: `eagle-probe advise --write FILE` and `--speculative-adaptive "
        "--speculative-adaptive-config FILE`; measure again, since an extrapolated depth is an estimate"),
    F.DFLASH_TARGET_LAYERS_DEFAULTED: Guide(
        f"{PROBE}, doctor",
        "a DFlash or DSpark draft's config.json has no `dflash_config.target_layer_ids` (nor `target_layer_ids`, "
        "`dspark_target_layer_ids`), so SGLang chose the target layers that feed it: one draft layer takes layer "
        "n // 2, k > 1 draft layers are spread evenly from layer 1 to layer n - 3. SGLang logs nothing about it; a "
        "draft trained on other layers is fed the wrong signal and acceptance collapses (the seed's bug, sglang "
        "#21274, one generation on). Names the ids chosen and the HF hidden_states they capture",
        "find the layers the draft was trained on (its training config) and write them into the draft's "
        "config.json as `\"dflash_config\": {\"target_layer_ids\": [...]}` (ids are \"output of layer i\", HF "
        "hidden_states[i + 1]); give them to the probe as EAGLE_PROBE_TRAINED_LAYERS (`hf:...`) to have a "
        "mismatch named as `layer_mismatch`"),
    F.DFLASH_LAYER_IDS_DISAGREE: Guide(
        f"{PROBE}, doctor",
        "the draft's config names both `target_layer_ids` (output of layer i) and "
        "`eagle_aux_hidden_state_layer_ids` (capture positions, one higher) and they are not the same layers; "
        "SGLang checks the two agree for one published family only and serves `target_layer_ids`",
        "keep the one the draft was trained with and correct or drop the other"),
}
