"""`eagle-probe replay` with a DFlash (block-diffusion) draft: the torch block forward (against a hand-computed case
and an independent per-anchor re-implementation), the masking (a block never sees context at or after its anchor),
the search on dumps-like rows built by running the committed seed target in torch (the committed draft, trained on
HF (4, 5), served SGLang's default HF (2, 4)), and bad inputs named."""

import json
import os
import shutil

import pytest

torch = pytest.importorskip("torch")
from safetensors.torch import load_file, save_file  # noqa: E402

from eagle_probe.commands.cli import main  # noqa: E402
from eagle_probe.commands.replay.block_draft import load_block_draft, rms_norm  # noqa: E402
from eagle_probe.commands.replay.block_run import BlockEvaluator, check_wiring, read_block_rows  # noqa: E402
from eagle_probe.commands.replay.checkpoints import target_head_and_embedding  # noqa: E402
from eagle_probe.commands.replay.spec import ReplayInputError  # noqa: E402
from sglang_cpu import seed as S  # noqa: E402
from sglang_cpu.dflash_seed import DFLASH_DRAFT_PATH, write_dflash_draft_copy  # noqa: E402

pytestmark = pytest.mark.unit

SERVED = (2, 4)  # SGLang's default for the seed target: target_layer_ids [1, 3]
TRAINED = (4, 5)  # dflash_config.target_layer_ids [3, 4]


def _target_states(prompts):
    """HF hidden_states 0..6 of the committed seed target over each token sequence, in plain torch."""
    transformers = pytest.importorskip("transformers")
    model = transformers.DeepseekV3ForCausalLM.from_pretrained(S.TARGET_PATH).to(torch.float32).eval()
    with torch.no_grad():
        return [model(torch.tensor([p]), output_hidden_states=True).hidden_states for p in prompts]


def write_dump(directory, sequences, states, served=SERVED, name="00001", final=True, prefixes=None):
    """One prefill dump as the probe writes it (EAGLE_PROBE_DUMP_LAYERS=all): hidden_states.0..5, the served
    context features, the final (normed) hidden state, the requests' lengths."""
    os.makedirs(directory, exist_ok=True)
    layers = {i: torch.cat([hs[i][0] for hs in states]) for i in range(6)}
    tensors = {"aux_hidden_states": torch.cat([layers[i] for i in served], dim=-1),
               "input_ids": torch.tensor([t for s in sequences for t in s]),
               "positions": torch.cat([torch.arange(len(s)) for s in sequences]),
               "extend_seq_lens": torch.tensor([len(s) for s in sequences]),
               "extend_prefix_lens": torch.tensor(prefixes or [0] * len(sequences)),
               **{f"hidden_states.{i}": t for i, t in layers.items()}}
    if final:
        tensors["final_hidden_state"] = torch.cat([hs[6][0] for hs in states])
    meta = {"format_version": "1", "hf_indices": list(served), "capture_indices": list(served), "num_layers": 6,
            "hidden_size": 64, "sglang_version": "0.5.23", "model_class": "DeepseekV2Model", "step": int(name),
            "tp_rank": 0, "dp_rank": None, "pp_rank": 0, "mode": "EXTEND", "all_layers": True,
            "layer_indices": list(range(6)), "final_hidden_state": final}
    path = os.path.join(directory, f"eagle-probe-dump-host-tp0-1-{name}.safetensors")
    save_file({k: v.contiguous() for k, v in tensors.items()}, path,
              metadata={"eagle_probe.format": "1", "eagle_probe.meta": json.dumps(meta)})
    return path


@pytest.fixture(scope="module")
def seed_inputs(tmp_path_factory):
    """(default-ids draft copy, dumps dir): 4 seed prompts with 14 tokens of their continuation, served HF (2, 4)."""
    root = tmp_path_factory.mktemp("dflash-replay")
    sequences = [list(p) + S.continuation(p)[:14] for p in S.PROMPTS[:4]]
    states = _target_states(sequences)
    dumps = str(root / "dumps")
    write_dump(dumps, sequences[:2], states[:2], name="00001")
    write_dump(dumps, sequences[2:], states[2:], name="00002")
    draft = write_dflash_draft_copy(str(root / "draft-default"), None)
    return {"draft": draft, "dumps": dumps, "root": root, "sequences": sequences, "states": states}


def replay(capsys, *args):
    code = main(["replay", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _head():
    embed, head, _, _ = target_head_and_embedding(S.TARGET_PATH)
    return embed, head


# -- the forward -----------------------------------------------------------------------------------------------------

def test_with_no_residual_writes_the_block_is_its_embeddings_normed(tmp_path):
    """o_proj and down_proj zero: every layer adds nothing, so the block's output is norm(target embedding of
    [bonus, mask, mask, mask]) whatever the context: hand-computed."""
    draft_dir = write_dflash_draft_copy(str(tmp_path / "d"), (3, 4))
    weights = load_file(os.path.join(draft_dir, "model.safetensors"))
    for name in weights:
        if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
            weights[name] = torch.zeros_like(weights[name])
    save_file(weights, os.path.join(draft_dir, "model.safetensors"))
    embed, head = _head()
    draft = load_block_draft(draft_dir, embed, head, "cpu")
    ctx = draft.context(torch.randn(1, 3, 128))
    ids = draft.block_ids(torch.tensor([17])).reshape(-1)
    assert ids.tolist() == [17, 0, 0, 0]
    mask = torch.ones(4, 7, dtype=torch.bool)
    out = draft.forward(ctx, torch.arange(3), ids, torch.arange(3, 7), mask)
    expected = rms_norm(embed[ids].float(), weights["norm.weight"], 1e-6)
    torch.testing.assert_close(out[0], expected, rtol=0, atol=1e-6)


def _naive_block(w, embed, feats, bonus, n, heads=4, hd=16, block=4, eps=1e-6, theta=10000.0):
    """One anchor, written out plainly (an independent re-implementation): the block's final normed states."""
    def norm(x, name):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w[name]

    def rope(x, pos):  # x [T, heads, hd], neox halves
        inv = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)
        a = pos.float()[:, None] * inv[None, :]
        cos, sin = a.cos()[:, None, :], a.sin()[:, None, :]
        x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

    ctx = norm(feats[:n] @ w["fc.weight"].T, "hidden_norm.weight")
    x = embed[torch.tensor([bonus] + [0] * (block - 1))].float()
    cpos, bpos = torch.arange(n), torch.arange(n, n + block)
    for i in range(2):
        a = f"layers.{i}.self_attn."
        ck = rope(norm((ctx @ w[a + "k_proj.weight"].T).view(n, heads, hd), a + "k_norm.weight"), cpos)
        cv = (ctx @ w[a + "v_proj.weight"].T).view(n, heads, hd)
        h = norm(x, f"layers.{i}.input_layernorm.weight")
        q = rope(norm((h @ w[a + "q_proj.weight"].T).view(block, heads, hd), a + "q_norm.weight"), bpos)
        k = rope(norm((h @ w[a + "k_proj.weight"].T).view(block, heads, hd), a + "k_norm.weight"), bpos)
        v = (h @ w[a + "v_proj.weight"].T).view(block, heads, hd)
        keys, values = torch.cat([ck, k]), torch.cat([cv, v])
        scores = torch.einsum("qhd,khd->hqk", q, keys) / hd ** 0.5
        attn = torch.einsum("hqk,khd->qhd", scores.softmax(-1), values).reshape(block, -1)
        x = x + attn @ w[a + "o_proj.weight"].T
        h = norm(x, f"layers.{i}.post_attention_layernorm.weight")
        m = f"layers.{i}.mlp."
        x = x + (torch.nn.functional.silu(h @ w[m + "gate_proj.weight"].T) * (h @ w[m + "up_proj.weight"].T)) \
            @ w[m + "down_proj.weight"].T
    return norm(x, "norm.weight")


def test_batched_scores_equal_a_per_anchor_reimplementation(seed_inputs):
    """The evaluator's batched pass (every anchor of every request at once, context masked per anchor) against the
    plain per-anchor forward above: same drafted tokens, same accept length."""
    embed, head = _head()
    draft = load_block_draft(DFLASH_DRAFT_PATH, embed, head, "cpu")
    rows = read_block_rows(seed_inputs["dumps"], 4)
    evaluator = BlockEvaluator(draft, rows, "cpu")
    w = load_file(os.path.join(DFLASH_DRAFT_PATH, "model.safetensors"))
    leading, blocks = [], 0
    for (first, length), hs in zip(rows.requests, seed_inputs["states"]):
        feats = torch.cat([hs[i][0] for i in TRAINED], -1)
        greedy = (hs[6][0] @ head.float().T).argmax(-1)
        tokens = rows.tokens[first:first + length]
        for n in range(1, length - 2):
            drafted = (_naive_block(w, embed, feats, int(tokens[n]), n) @ head.float().T)[1:].argmax(-1)
            hits = (drafted == greedy[n:n + 3]).int()
            leading.append(int(hits.cumprod(0).sum()))
            blocks += 1
    (score,) = evaluator.evaluate([TRAINED])
    assert score.blocks == blocks == evaluator.blocks
    assert score.accept_length == pytest.approx(1 + sum(leading) / blocks, abs=1e-9)


def test_a_block_never_sees_context_at_or_after_its_anchor(seed_inputs):
    """Garbage in the states of rows >= n leaves the block at anchor n unchanged (the mask), and the bonus token
    changes the drafts (the block is read)."""
    embed, head = _head()
    draft = load_block_draft(DFLASH_DRAFT_PATH, embed, head, "cpu")
    hs = seed_inputs["states"][0]
    feats = torch.cat([hs[i][0] for i in TRAINED], -1)[None]
    n, length = 8, feats.shape[1]
    mask = torch.cat([(torch.arange(length) < n).expand(4, -1), torch.ones(4, 4, dtype=torch.bool)], dim=1)
    ids = draft.block_ids(torch.tensor([seed_inputs["sequences"][0][n]])).reshape(-1)

    def run(f, block_ids=ids):
        return draft.forward(draft.context(f), torch.arange(length), block_ids, torch.arange(n, n + 4), mask)

    garbled = feats.clone()
    garbled[:, n:] = torch.randn_like(garbled[:, n:]) * 100
    torch.testing.assert_close(run(feats), run(garbled), rtol=0, atol=1e-5)
    other = draft.block_ids(torch.tensor([(int(ids[0]) + 5) % 128])).reshape(-1)
    assert not torch.allclose(run(feats), run(feats, other))


# -- the command on seed dumps ---------------------------------------------------------------------------------------

def test_search_finds_the_trained_layers_and_the_fix(seed_inputs, capsys):
    code, out, err = replay(capsys, "--draft", seed_inputs["draft"], "--target", S.TARGET_PATH, "--dump-dir",
                            seed_inputs["dumps"], "--search", "--format", "json")
    assert code == 0, err
    r = json.loads(out)
    assert r["kind"] == "dflash" and r["search"]["wirings"] == 36 and r["search"]["evaluated"] == 36
    assert r["dumps"]["requests"] == 4 and r["dumps"]["blocks"] == 4 * 17
    assert r["best"]["hf_indices"] == list(TRAINED) and r["best"]["ids"] == [3, 4]
    assert r["best"]["key"] == "dflash_config.target_layer_ids"
    assert r["best"]["accept_length"] > 3.5 and len(r["best"]["per_position"]) == 3
    assert r["served"]["hf_indices"] == list(SERVED) and r["served"]["accept_length"] < 1.8
    assert r["candidates"][0]["hf_indices"] in ([4, 5], [3, 5])  # HF 5 carries the key; 3 and 4 nearly alike
    served_in_layers = next(c for c in r["candidates"] if c["hf_indices"] == list(SERVED))
    assert served_in_layers["accept_length"] == r["served"]["accept_length"]  # aux states == the layers' states
    f = r["finding"]
    assert f["code"] == "trained_layers_inferred" and f["severity"] == "warning"
    assert '"target_layer_ids": [3, 4]' in f["message"] and "SGLang's silent default" in f["message"]
    assert f["evidence"]["fix_ids"] == [3, 4] and f["evidence"]["served_hf"] == list(SERVED)
    assert all(not c["reachable"] for c in r["near_ties"] if 0 in c["hf_indices"])

    code, text, _ = replay(capsys, "--draft", seed_inputs["draft"], "--target", S.TARGET_PATH, "--dump-dir",
                           seed_inputs["dumps"], "--search")
    assert code == 0
    assert "DFlash block draft" in text and "to capture it: dflash_config.target_layer_ids = [3, 4]" in text
    assert "WARNING trained_layers_inferred" in text and "accept length" in text


def test_the_trained_draft_served_its_layers_is_confirmed(seed_inputs, capsys):
    dumps = str(seed_inputs["root"] / "dumps-trained")
    write_dump(dumps, seed_inputs["sequences"], seed_inputs["states"], served=TRAINED)
    code, out, err = replay(capsys, "--draft", DFLASH_DRAFT_PATH, "--target", S.TARGET_PATH, "--dump-dir", dumps,
                            "--wiring", "hf:2,4", "--format", "json")
    assert code == 0, err
    r = json.loads(out)
    assert r["search"] is None and [c["hf_indices"] for c in r["candidates"]] == [[4, 5], [2, 4]]
    assert r["finding"]["severity"] == "info" and "The served wiring is the one it was trained on" in \
        r["finding"]["message"]


# -- bad inputs ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("wiring, needle", [
    ("hf:4", "1 HF indices [4], but the DFlash draft's fc takes 2 context features"),
    ("hf:4,5,5", "3 HF indices [4, 5, 5], but the DFlash draft's fc takes 2 context features"),
    ("hf:4,9", "the dumps hold no hidden_states.9 (HF index 9; they hold 0..5 of 6 layers)"),
    ("4,5", "name the convention"),
])
def test_bad_wirings_are_named(seed_inputs, capsys, wiring, needle):
    code, out, err = replay(capsys, "--draft", seed_inputs["draft"], "--target", S.TARGET_PATH, "--dump-dir",
                            seed_inputs["dumps"], "--wiring", wiring)
    assert code == 2 and needle in err and "Traceback" not in err, err
    assert f"--wiring {wiring!r}" in err


def test_check_wiring_directly(seed_inputs):
    rows = read_block_rows(seed_inputs["dumps"], 4)
    check_wiring((4, 5), 2, rows)
    with pytest.raises(ReplayInputError, match="no hidden_states.7"):
        check_wiring((7, 5), 2, rows)
    with pytest.raises(ReplayInputError, match="fc takes 2 context features"):
        check_wiring((5,), 2, rows)


def _draft_with(tmp_path, name, edit_config=None, edit_weights=None):
    dest = write_dflash_draft_copy(str(tmp_path / name), None)
    if edit_config:
        path = os.path.join(dest, "config.json")
        with open(path) as f:
            config = json.load(f)
        edit_config(config)
        with open(path, "w") as f:
            json.dump(config, f)
    if edit_weights:
        path = os.path.join(dest, "model.safetensors")
        weights = load_file(path)
        edit_weights(weights)
        save_file(weights, path)
    return dest


@pytest.mark.parametrize("name, edit_config, edit_weights, needles", [
    ("gemma", lambda c: c.update(use_gemma_norm=True), None, ("'use_gemma_norm' is True", "cannot judge")),
    ("conv", lambda c: c["dflash_config"].update(conv_kernel_size=3, conv_group_size=4), None,
     ("'dflash_config.conv_kernel_size' is 3",)),
    ("dspark", lambda c: c.update(dspark_config={"target_layer_ids": [1, 3]}), None, ("a DSpark draft",)),
    ("noblock", lambda c: (c["dflash_config"].pop("block_size"), c.pop("block_size")), None, ("no block_size",)),
    ("nomask", lambda c: c["dflash_config"].pop("mask_token_id"), None, ("no dflash_config.mask_token_id",)),
    ("ids3", lambda c: c["dflash_config"].update(target_layer_ids=[1, 2, 3]), None,
     ("names 3 layers [1, 2, 3], but its fc.weight takes 2 context features",)),
    ("nofc", None, lambda w: w.pop("fc.weight"), ("no tensor fc.weight",)),
    ("noq", None, lambda w: w.pop("layers.1.self_attn.q_proj.weight"), ("no tensor layers.1.self_attn.q_proj.weight",)),
    ("badk", None, lambda w: w.update({"layers.0.self_attn.k_norm.weight": torch.ones(8)}),
     ("layers.0.self_attn.k_norm.weight is [8]", "makes it [16]")),
    ("widefc", None, lambda w: w.update({"fc.weight": torch.zeros(64, 192)}),
     ("holds 2 context features of width 64", "takes 3 x 64")),
])
def test_bad_drafts_are_named(seed_inputs, tmp_path, capsys, name, edit_config, edit_weights, needles):
    draft = _draft_with(tmp_path, name, edit_config, edit_weights)
    code, _, err = replay(capsys, "--draft", draft, "--target", S.TARGET_PATH, "--dump-dir", seed_inputs["dumps"],
                          "--search")
    assert code == 2 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err


def test_bad_dumps_and_options_are_named(seed_inputs, tmp_path, capsys):
    args = ["--draft", seed_inputs["draft"], "--target", S.TARGET_PATH]
    code, _, err = replay(capsys, *args, "--dump-dir", seed_inputs["dumps"], "--draft-embedding", "own")
    assert code == 2 and "--draft-embedding applies to EAGLE-3 drafts only" in err
    no_final = str(tmp_path / "no-final")
    write_dump(no_final, seed_inputs["sequences"][:1], seed_inputs["states"][:1], final=False)
    code, _, err = replay(capsys, *args, "--dump-dir", no_final, "--search")
    assert code == 2 and "no prefill dump holds final_hidden_state" in err
    cached = str(tmp_path / "cached")
    write_dump(cached, seed_inputs["sequences"][:1], seed_inputs["states"][:1], prefixes=[4])
    code, _, err = replay(capsys, *args, "--dump-dir", cached, "--search")
    assert code == 2 and "1 started after cached tokens" in err
    shutil.rmtree(cached)
    code, _, err = replay(capsys, *args, "--dump-dir", str(tmp_path / "missing"))
    assert code == 2 and "missing" in err and "Traceback" not in err
