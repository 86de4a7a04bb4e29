"""`eagle-probe replay` on REAL dumps: SGLang 0.5.23's real DeepseekV3ForCausalLM (tiny, random weights, CPU) runs
an EXTEND forward under the probe with EAGLE_PROBE_DUMP_LAYERS=all, serving capture ids [1, 3, 4] (HF indices
2, 4, 5); the probe writes the dump; replay reads it with the target's checkpoint and a draft.

The planted draft: its fc is solved (least squares, exact: fewer positions than the 3 x 64 inputs) so that fed HF
hidden_states (0, 3, 5) at position t it lands on the direction of its lm_head row for the target's greedy token
at t + 1 (computed independently here, with transformers' reference model of the same weights). Its attention and
MLP keep small random weights, so the whole draft path runs. Fed any other wiring the solved fc misses. So
--search must name (0, 3, 5), reachable on 0.5.23 with ids [0, 3, 5], and find the served (2, 4, 5) far worse."""

import json
import os

import pytest
import torch
from safetensors import safe_open

from sglang_cpu.draft_models import eagle3_draft_config, spec_target_config, write_eagle3_draft_checkpoint

SERVED_IDS = [1, 3, 4]  # 0.5.23: +1 when the first id is 1 -> HF 2, 4, 5
SERVED = [2, 4, 5]
PLANTED = (0, 3, 5)
SEED = 7
PROMPTS = [[int(t) for t in torch.randint(3, 256, (17,), generator=torch.Generator().manual_seed(100 + i))]
           for i in range(9)]  # 9 x 16 = 144 positions < 3 x 64 fc inputs: the fit is exact


@pytest.fixture(scope="module")
def served(sglang_runtime, tmp_path_factory):
    """(target checkpoint, dump directory, transformers reference model) of one real dumped EXTEND forward."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    import eagle_probe
    from eagle_probe.runtime.state import STATE
    from sglang_cpu.draft_models import write_target_checkpoint
    from sglang_cpu.runtime import TinyBatchRunner, build_deepseek

    root = tmp_path_factory.mktemp("replay")
    config = spec_target_config()
    target = write_target_checkpoint(str(root / "target"), config, seed=SEED)
    model = build_deepseek(config, seed=SEED)
    model.set_eagle3_layers_to_capture(SERVED_IDS)
    dumps = root / "dumps"
    eagle_probe.uninstall()
    assert eagle_probe.install(env={"EAGLE_PROBE_LOG_DIR": str(root / "logs"), "EAGLE_PROBE_DUMP_DIR": str(dumps),
                                    "EAGLE_PROBE_DUMP_EVERY": "1", "EAGLE_PROBE_DUMP_LAYERS": "all"})
    try:
        TinyBatchRunner(model).extend(PROMPTS, capture_hidden_mode=CaptureHiddenMode.FULL)
        STATE.recorder.dump_writer.drain()
    finally:
        eagle_probe.uninstall()
    assert len(os.listdir(dumps)) == 1
    return target, str(dumps), model.hf_model


def _greedy_next(hf_model):
    """The target's greedy token at t + 1 for every position t with t + 1 in its request (transformers)."""
    labels = []
    with torch.no_grad():
        for prompt in PROMPTS:
            logits = hf_model(torch.tensor([prompt])).logits[0]
            labels += logits.argmax(-1)[1:].tolist()
    return torch.tensor(labels)


def _dumped_rows(dump_dir, wiring):
    """The dump's hidden_states of `wiring` at the evaluated rows (every row but each request's last), raw."""
    [name] = os.listdir(dump_dir)
    with safe_open(os.path.join(dump_dir, name), "pt") as handle:
        keep = [r for i, p in enumerate(PROMPTS) for r in range(i * 17, i * 17 + len(p) - 1)]
        return torch.cat([handle.get_tensor(f"hidden_states.{i}")[keep] for i in wiring], dim=-1)


@pytest.fixture(scope="module")
def planted_draft(served, tmp_path_factory):
    target, dump_dir, hf_model = served
    tcfg = spec_target_config()
    h, vocab = tcfg.hidden_size, tcfg.vocab_size
    labels = _greedy_next(hf_model)
    aux = _dumped_rows(dump_dir, PLANTED).double()
    head = torch.randn(vocab, h, generator=torch.Generator().manual_seed(3))
    head = head / head.norm(dim=-1, keepdim=True)
    want = 8.0 * head[labels].double()  # rms 1: the scale the hidden norm expects
    solution = torch.linalg.lstsq(aux, want, driver="gelsd").solution  # min-norm, [3H, H]
    assert (aux @ solution - want).abs().max() < 1e-6, "the planted fit is not exact"
    config = eagle3_draft_config(tcfg, layer_ids=SERVED_IDS, draft_vocab_size=vocab)
    path = write_eagle3_draft_checkpoint(str(tmp_path_factory.mktemp("draft") / "draft"), config, seed=1,
                                         state={"fc.weight": solution.T.float(), "lm_head.weight": head})
    return path, labels


def _replay(served, planted_draft, **kwargs):
    from eagle_probe.commands.replay.run import replay

    target, dump_dir, _ = served
    return replay(planted_draft[0], target, dump_dir, **kwargs)


def test_search_finds_the_planted_wiring_and_its_ids(served, planted_draft):
    report = _replay(served, planted_draft, do_search=True)
    search, best, srv = report["search"], report["best"], report["served"]
    print("served", srv["hf_indices"], srv["accuracy"], "best", best["hf_indices"], best["accuracy"],
          "runner-up", report["candidates"][1]["hf_indices"], report["candidates"][1]["accuracy"],
          "per wiring", report["cost"]["seconds_per_wiring"])
    assert search["method"] == "exhaustive" and search["wirings"] == 6 ** 3 == search["evaluated"]
    assert srv["hf_indices"] == SERVED and srv["positions"] == 144 == best["positions"]
    assert best["hf_indices"] == list(PLANTED) and best["accuracy"] == 1.0
    assert best["ids"] == [0, 3, 5] and best["reachable"] is True  # 0.5.23: ids as given unless the first is 1
    assert srv["accuracy"] < 0.5
    assert [c["hf_indices"] for c in report["near_ties"]] == [list(PLANTED)]  # nothing else comes close
    runner_up = report["candidates"][1]
    assert runner_up["ci95"][1] < best["ci95"][0]
    finding = report["finding"]
    assert finding["code"] == "trained_layers_inferred" and finding["severity"] == "warning"
    assert finding["evidence"]["fix_ids"] == [0, 3, 5] and "[0, 3, 5]" in finding["message"]
    assert report["draft"]["embedding"] == "target" and report["dumps"]["layer_indices"] == list(range(6))
    # the served wiring scores the same from the served aux states as from the dumped layers
    from_layers = next(c for c in report["candidates"] if c["hf_indices"] == SERVED)
    assert from_layers["correct"] == srv["correct"] and not any("aux states are not" in n for n in report["notes"])


def test_replay_labels_equal_transformers_greedy_tokens(served, planted_draft):
    from eagle_probe.commands.replay.checkpoints import target_head_and_embedding
    from eagle_probe.commands.replay.draft import load_torch_draft
    from eagle_probe.commands.replay.dumps import read_dumps
    from eagle_probe.commands.replay.evaluate import Evaluator

    target, dump_dir, _ = served
    embed, head, _, _ = target_head_and_embedding(target)
    rows = read_dumps(dump_dir, want_layers=True)
    evaluator = Evaluator(load_torch_draft(planted_draft[0], embed, head), rows, head, "cpu")
    assert torch.equal(evaluator.labels, planted_draft[1])
    assert rows.next_tokens.tolist() == [t for p in PROMPTS for t in p[1:]]
    assert rows.segments == [(16 * i, 16) for i in range(len(PROMPTS))]


def test_coordinate_search_from_the_served_wiring_finds_it_too(served, planted_draft):
    report = _replay(served, planted_draft, do_search=True, exhaustive_limit=10)
    search = report["search"]
    assert search["method"] == "coordinate" and search["start"] == SERVED
    assert report["best"]["hf_indices"] == list(PLANTED) and search["evaluated"] < 6 ** 3
    assert search["rounds"] >= 2  # a round that improved, then one that confirmed


def test_on_a_release_that_cannot_capture_the_embedding_no_ids_reach_it(served, planted_draft):
    report = _replay(served, planted_draft, do_search=True, sglang_version="0.5.8")
    best = report["best"]
    assert best["hf_indices"] == list(PLANTED) and best["ids"] is None and best["reachable"] is False
    assert "embedding output" in best["unreachable"]
    assert report["finding"]["evidence"]["fix_ids"] is None and "No eagle_aux_hidden_state_layer_ids" in \
        report["finding"]["message"]


def test_cli_text_and_json(served, planted_draft, capsys):
    from eagle_probe.commands.cli import main

    target, dump_dir, _ = served
    args = ["replay", "--draft", planted_draft[0], "--target", target, "--dump-dir", dump_dir]
    assert main(args + ["--search", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {"served", "best", "candidates", "near_ties", "finding", "search", "cost"} <= set(report)
    assert {"hf_indices", "accuracy", "positions"} <= set(report["served"])
    assert {"hf_indices", "accuracy", "ids"} <= set(report["best"])
    assert all({"hf_indices", "accuracy", "ci95", "positions"} <= set(c) for c in report["candidates"])
    assert main(args + ["--search"]) == 0
    text = capsys.readouterr().out
    assert "best    HF 0, 3, 5" in text and "eagle_aux_hidden_state_layer_ids = [0, 3, 5]" in text
    assert "WARNING trained_layers_inferred" in text
    # without --search: the served wiring and any --wiring given
    assert main(args + ["--wiring", "hf:0,3,5", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["search"] is None and report["best"]["hf_indices"] == list(PLANTED)
    assert len(report["candidates"]) == 2
    assert main(args + ["--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["best"]["hf_indices"] == SERVED and report["finding"]["severity"] == "info"
