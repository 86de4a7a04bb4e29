"""The seed in miniature: a trained tiny DeepSeek-V3 target and a trained EAGLE-3 draft for it, committed under
``examples/seed/weights/``, whose acceptance depends on which target hidden-state layers feed the draft.

Test and example support only (never part of the probe). ``examples/seed/train.py`` builds the pair (plain torch,
deterministic); this module holds what a test or another engineer reuses: the synthetic language and its prompts,
the trained wiring, the paths of the committed checkpoints, a function that writes a copy of the draft with other
``eagle_config`` ids, and helpers to serve the pair and read SGLang's acceptance.

The language: a sequence is ``[key, x0, x1, ...]``. Data tokens come from two alphabets of N = 31 tokens,
A = 66..96 and B = 97..127, and alternate between them. There are 8 fixed random bijections A -> B and 8 B -> A
(``A_TO_B``, ``B_TO_A``, from ``LANGUAGE_SEED``); a key token (64 of them, 2..65) names one of each. Every next
token depends on the key, which only position 0 holds; a pair (x_t, x_t+1) shows the map of x_t's alphabet, never
the one the token after x_t+1 needs. Prompts are chosen so that no data token repeats within the prompt and its
continuation (nothing to copy).

The target is built so that the key reaches the residual stream at exactly one place: only decoder layer 4 mixes
positions (the attention output projections of layers 0-3 and 5 are zero and were kept frozen in training). The
residual stream entering layer i (HF ``hidden_states[i]``, SGLang capture index i) is therefore a function of the
token alone for i <= 4, and index 5 (the output of layer 4) is the only capturable state that carries the key
(SGLang never captures the last layer's output, HF index 6). The draft was trained on HF indices (3, 4, 5):
served with them it predicts the next two tokens; served one layer early, (2, 3, 4), it gets no key at all.

SGLang 0.5.23's ids (eagle_probe.versions: +1 only when the first id is 1, else as given): ids (3, 4, 5) capture
(3, 4, 5); ids (2, 3, 4) capture (2, 3, 4), which is also what a config written in SpecForge's "output of layer k"
convention for the trained layers says. SGLang's default for 6 layers, [2, 3, 3], repeats index 3: the server
fails at its first forward ("captured 2 of 3 aux hidden states"), so it is no usable wrong wiring here.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WEIGHTS_DIR = os.path.join(ROOT, "examples", "seed", "weights")
TARGET_PATH = os.path.join(WEIGHTS_DIR, "target")
DRAFT_PATH = os.path.join(WEIGHTS_DIR, "draft")
RECORD_PATH = os.path.join(WEIGHTS_DIR, "seed.json")

# ---------------------------------------------------------------------------------------------- the language

VOCAB = 128
NUM_MAPS = 8  # maps per alphabet; a key names one of each
KEY0 = 2  # key tokens 2..65
NUM_KEYS = NUM_MAPS * NUM_MAPS
N = 31  # alphabet size
A0 = KEY0 + NUM_KEYS  # alphabet A: 66..96
B0 = A0 + N  # alphabet B: 97..127
DATA_TOKENS = tuple(range(A0, A0 + N)) + tuple(range(B0, B0 + N))
LANGUAGE_SEED = 0


def _maps(seed: int = LANGUAGE_SEED):
    rng = random.Random(seed)
    a_to_b = [tuple(rng.sample(range(N), N)) for _ in range(NUM_MAPS)]
    b_to_a = [tuple(rng.sample(range(N), N)) for _ in range(NUM_MAPS)]
    return tuple(a_to_b), tuple(b_to_a)


A_TO_B, B_TO_A = _maps()  # A_TO_B[i][a] = b: token A0 + a is followed by B0 + b under a key with map i

NUM_LAYERS = 6
MIXING_LAYER = 4  # the only decoder layer whose attention writes to the residual stream
TRAINED_HF_LAYERS = (3, 4, 5)  # HF hidden_states indices the draft was trained on (= SGLang capture indices)
WRONG_HF_LAYERS = (2, 3, 4)  # the same, one layer early
TRAINED_IDS = (3, 4, 5)  # eagle_config ids that capture TRAINED_HF_LAYERS on SGLang 0.5.23
WRONG_IDS = (2, 3, 4)  # ids that capture WRONG_HF_LAYERS on SGLang 0.5.23

NUM_STEPS = 2  # chain of 2 draft tokens (3 verify tokens), topk 1
PROMPT_LEN = 6  # key + 5 data tokens
MAX_NEW_TOKENS = 24  # prompt + output (+ the last verify step's draft tokens) stay within 40 positions
TRAIN_SEQ_LEN = 40


def key_token(map_a: int, map_b: int) -> int:
    """The key whose A tokens follow A_TO_B[map_a] and whose B tokens follow B_TO_A[map_b]."""
    if not (0 <= map_a < NUM_MAPS and 0 <= map_b < NUM_MAPS):
        raise ValueError(f"maps are 0..{NUM_MAPS - 1}")
    return KEY0 + map_a * NUM_MAPS + map_b


def key_maps(key: int) -> tuple[int, int]:
    k = int(key) - KEY0
    if not 0 <= k < NUM_KEYS:
        raise ValueError(f"{key} is not a key token")
    return k // NUM_MAPS, k % NUM_MAPS


def is_data(token: int) -> bool:
    return A0 <= token < A0 + N or B0 <= token < B0 + N


def next_token(key: int, token: int) -> int:
    """The language's (deterministic) next token after a data token, under ``key``."""
    map_a, map_b = key_maps(key)
    if A0 <= token < A0 + N:
        return B0 + A_TO_B[map_a][token - A0]
    if B0 <= token < B0 + N:
        return A0 + B_TO_A[map_b][token - B0]
    raise ValueError(f"{token} is not a data token")


def sequence(key: int, first: int, length: int) -> list[int]:
    """``[key, first, next, ...]`` of ``length`` tokens."""
    seq = [int(key), int(first)]
    while len(seq) < length:
        seq.append(next_token(key, seq[-1]))
    return seq[:length]


def continuation(prompt: Sequence[int], max_new_tokens: int = MAX_NEW_TOKENS) -> list[int]:
    """What a perfect model generates greedily after ``prompt`` (a prefix of a sequence of the language)."""
    key, out, last = prompt[0], [], prompt[-1]
    for _ in range(max_new_tokens):
        last = next_token(key, last)
        out.append(last)
    return out


def make_prompts(count: int = 8, seed: int = 1234, length: int = PROMPT_LEN,
                 horizon: int = PROMPT_LEN + MAX_NEW_TOKENS + NUM_STEPS + 1) -> list[list[int]]:
    """Prompts of the language with distinct keys whose first ``horizon`` tokens repeat no data token (so neither
    model can copy an earlier continuation); random first tokens from both alphabets."""
    rng = random.Random(seed)
    keys = list(range(KEY0, KEY0 + NUM_KEYS))
    rng.shuffle(keys)
    prompts = []
    for key in keys:
        starts = [t for t in DATA_TOKENS if len(set(sequence(key, t, horizon)[1:])) == horizon - 1]
        if starts:
            prompts.append(sequence(key, rng.choice(starts), length))
        if len(prompts) == count:
            return prompts
    raise ValueError("not enough keys with long cycles")


PROMPTS = make_prompts()

# ---------------------------------------------------------------------------------------------- the pair


def load_record(path: str = RECORD_PATH) -> dict:
    """The training record written with the weights: wiring, accuracies, seeds, simulated acceptance."""
    with open(path) as f:
        return json.load(f)


def capture_indices(ids: Sequence[int] | None, num_layers: int = NUM_LAYERS) -> tuple[int, ...]:
    """What SGLang 0.5.23 captures for eagle_config ids (None: its default), via the probe's version table."""
    from eagle_probe.analysis.layers import apply_capture_rule
    from eagle_probe.versions import PLUS_ONE_IF_FIRST_IS_ONE

    indices, _ = apply_capture_rule(PLUS_ONE_IF_FIRST_IS_ONE, ids, num_layers)
    return tuple(int(i) for i in indices)


def copy_checkpoint(source: str, dest: str, edit_config) -> None:
    """Copy the checkpoint directory ``source`` to ``dest``, its config.json changed in place by ``edit_config``."""
    os.makedirs(dest, exist_ok=True)
    for name in os.listdir(source):
        if name != "config.json":
            shutil.copyfile(os.path.join(source, name), os.path.join(dest, name))
    with open(os.path.join(source, "config.json")) as f:
        config = json.load(f)
    edit_config(config)
    with open(os.path.join(dest, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def write_draft_copy(dest: str, layer_ids: Sequence[int] | None, source: str = DRAFT_PATH) -> str:
    """Copy the committed draft checkpoint to ``dest`` with ``eagle_config.eagle_aux_hidden_state_layer_ids`` set to
    ``layer_ids`` (SGLang's id convention; None drops the key, so SGLang uses its default). Weights are unchanged:
    the fc still expects 3 aux states of width 64."""

    def set_ids(config):
        eagle = dict(config.get("eagle_config") or {})
        if layer_ids is None:
            eagle.pop("eagle_aux_hidden_state_layer_ids", None)
        else:
            eagle["eagle_aux_hidden_state_layer_ids"] = [int(i) for i in layer_ids]
        if eagle:
            config["eagle_config"] = eagle
        else:
            config.pop("eagle_config", None)

    copy_checkpoint(source, dest, set_ids)
    return dest


HOT_TOKENS = tuple(range(VOCAB - 64, VOCAB))  # the compact draft's vocabulary: every data token (and keys 64, 65)


def write_compact_draft(dest: str, layer_ids: Sequence[int], keep_map: bool, source: str = DRAFT_PATH) -> str:
    """A compact-vocabulary copy of the committed draft, as SpecForge ships drafts for large vocabularies: its own
    lm_head keeps only the rows of ``HOT_TOKENS`` (``draft_vocab_size`` 64 of the target's 128) and the ``d2t``
    buffer maps draft id i to target id i + d2t[i]. ``keep_map=False`` writes what a converter that saves only the
    module's parameters writes: the same lm_head without d2t (SGLang then serves draft ids as target ids)."""
    import torch
    from safetensors.torch import load_file, save_file

    write_draft_copy(dest, layer_ids, source)
    tensors = load_file(os.path.join(source, "model.safetensors"))
    hot = torch.tensor(HOT_TOKENS, dtype=torch.long)
    tensors["lm_head.weight"] = tensors["lm_head.weight"][hot].contiguous()
    if keep_map:
        tensors["d2t"] = hot - torch.arange(len(HOT_TOKENS), dtype=torch.long)
    save_file(tensors, os.path.join(dest, "model.safetensors"))
    with open(os.path.join(dest, "config.json")) as f:
        config = json.load(f)
    config["draft_vocab_size"] = len(HOT_TOKENS)
    with open(os.path.join(dest, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    return dest


def server_args(draft_path: str, num_steps: int = NUM_STEPS) -> list[str]:
    """launch_server args (on top of SGLangServer's CPU base args) for the pair: greedy chain, topk 1."""
    from sglang_cpu.draft_models import spec_server_args

    return spec_server_args(draft_path, num_steps=num_steps)


def server(draft_path: str, *, log_path: str | None = None, env: dict | None = None,
           pythonpath_prefix: Sequence[str] = (), extra_args: Sequence[str] = (), num_steps: int = NUM_STEPS,
           target_path: str = TARGET_PATH):
    """An (unstarted) ``SGLangServer`` serving the committed target with the draft at ``draft_path``: the CPU
    speculative shims' environment (``SPEC_ENV``) plus ``env``; ``pythonpath_prefix`` e.g. the probe's bootstrap."""
    from sglang_cpu.server import SGLangServer
    from sglang_cpu.spec_shims import SPEC_ENV

    return SGLangServer(target_path, extra_args=[*server_args(draft_path, num_steps), *extra_args],
                        env={**SPEC_ENV, **(env or {})}, pythonpath_prefix=pythonpath_prefix, log_path=log_path)


def generate_all(srv, prompts: Sequence[Sequence[int]] = None, max_new_tokens: int = MAX_NEW_TOKENS) -> list[dict]:
    """Greedy /generate for every prompt (one at a time); the decoded JSON answers (output_ids, meta_info)."""
    return [srv.generate_raw(p, max_new_tokens=max_new_tokens) for p in (PROMPTS if prompts is None else prompts)]


def acceptance(answers: Sequence[dict]) -> dict:
    """SGLang's own per-request figures (meta_info) and the mean accept length over all verify steps
    (1 + correct drafts / verify steps: the bonus token counted, as SGLang's ``accept len``)."""
    verify = [int(a["meta_info"]["spec_verify_ct"]) for a in answers]
    correct = [int(a["meta_info"]["spec_num_correct_drafts"]) for a in answers]
    return dict(
        verify_ct=verify,
        num_correct_drafts=correct,
        accept_length_per_request=[round(1 + c / v, 4) for c, v in zip(correct, verify)],
        mean_accept_length=round(1 + sum(correct) / max(sum(verify), 1), 4),
    )
