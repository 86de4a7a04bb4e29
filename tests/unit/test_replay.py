"""`eagle-probe replay` without SGLang: the search rules (Wilson intervals, exhaustive and coordinate search,
near-ties, the reachable choice), the finding, how dump rows become positions, and bad input (a message naming
the file and what is wrong, exit status 2, never a traceback). The draft itself is proven against SGLang's real
class in tests/real_sglang/test_replay_draft.py, and the search on real dumps in test_replay_search.py."""

import json
import os
import pathlib

import pytest
import torch
from safetensors.torch import save_file

from eagle_probe.analysis import findings as F
from eagle_probe.analysis.wiring_search import Candidate, SearchResult, all_wirings, choose, search, wilson_interval
from eagle_probe.commands.cli import main
from eagle_probe.versions import parse_version, rules_for
from sglang_cpu.draft_models import eagle3_draft_config, spec_target_config, write_eagle3_draft_checkpoint

H, VOCAB, LAYERS = 64, 256, 6
RULES_0523 = rules_for(parse_version("0.5.23"))


# -- the rules ------------------------------------------------------------------------------------------------------

def test_wilson_interval_known_values():
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    lo, hi = wilson_interval(10, 10)
    assert lo == pytest.approx(0.7225, abs=1e-4) and hi == pytest.approx(1.0)
    lo, hi = wilson_interval(50, 100)
    assert lo == pytest.approx(0.4038, abs=1e-4) and hi == pytest.approx(0.5962, abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def _planted(planted, n=1000):
    """Synthetic agreement: each slot that matches the planted index adds 300 of 1000 positions."""
    calls = []

    def evaluate(wirings):
        calls.append(len(wirings))
        return [(100 + 300 * sum(a == b for a, b in zip(w, planted)), n) for w in wirings]

    return evaluate, calls


def test_exhaustive_up_to_512_wirings():
    evaluate, _ = _planted((4, 0, 7))
    result = search(range(8), 3, (1, 2, 3), evaluate)  # 8^3 = 512
    assert result.method == "exhaustive" and len(result.candidates) == 512 == result.total_wirings
    assert result.ranked()[0].hf_indices == (4, 0, 7)


def test_coordinate_search_over_512_wirings_from_the_served_one():
    evaluate, calls = _planted((9, 0, 41))
    result = search(range(62), 3, (2, 30, 58), evaluate)  # a 61-layer target's 62 indices: 238328 wirings
    assert result.method == "coordinate" and result.total_wirings == 62 ** 3
    assert result.ranked()[0].hf_indices == (9, 0, 41)
    assert result.rounds == 2  # one round improves every slot, the next confirms
    assert len(result.candidates) <= 2 * 3 * 62 and result.start == (2, 30, 58)
    assert all(c <= 62 for c in calls)  # one slot's 62 options per call at most


def test_coordinate_search_keeps_the_current_wiring_on_ties():
    result = search(range(20), 3, (1, 2, 3), lambda ws: [(10, 100)] * len(ws), exhaustive_limit=10)
    assert result.rounds == 1 and result.ranked(prefer=(1, 2, 3))[0].hf_indices == (1, 2, 3)


def test_choice_prefers_a_reachable_near_tie():
    # 0.5.23 cannot put index 1 first (id 1 triggers its +1 rule); (0, 3, 31) is a near-tie it can reach
    cands = {(1, 3, 31): Candidate((1, 3, 31), 455, 1000), (0, 3, 31): Candidate((0, 3, 31), 450, 1000),
             (2, 30, 58): Candidate((2, 30, 58), 100, 1000)}
    choice = choose(SearchResult("exhaustive", cands, 3, 1, (2, 30, 58)), 61, RULES_0523, served=(2, 30, 58))
    assert choice.top.hf_indices == (1, 3, 31) and choice.best.hf_indices == (0, 3, 31)
    assert choice.ids == (0, 3, 31) and [c.hf_indices for c in choice.near_ties] == [(1, 3, 31), (0, 3, 31)]
    assert choice.reachability[(1, 3, 31)][0] is None and "first index is 1" in choice.reachability[(1, 3, 31)][1]
    # alone, the unreachable top stays the best, with the reason
    del cands[(0, 3, 31)]
    choice = choose(SearchResult("exhaustive", cands, 2, 1, (2, 30, 58)), 61, RULES_0523, served=(2, 30, 58))
    assert choice.best.hf_indices == (1, 3, 31) and choice.ids is None and "first index is 1" in choice.unreachable


def test_within_near_ties_the_likeliest_reachable_wiring_is_chosen():
    # the seed's shape: the embedding output ties the trained layer by accuracy; the draft gives the target's tokens
    # a higher mean log-probability under the wiring it was trained on
    cands = {(0, 4, 5): Candidate((0, 4, 5), 460, 500, -0.91), (3, 4, 5): Candidate((3, 4, 5), 458, 500, -0.42),
             (2, 3, 4): Candidate((2, 3, 4), 100, 500, -3.2), (1, 2, 3): Candidate((1, 2, 3), 300, 500, -0.05)}
    result = SearchResult("exhaustive", cands, 4, 1, (2, 3, 4))
    choice = choose(result, 6, RULES_0523, served=(2, 3, 4))
    assert choice.top.hf_indices == (0, 4, 5) and choice.best.hf_indices == (3, 4, 5) and choice.ids == (3, 4, 5)
    assert [c.hf_indices for c in choice.near_ties] == [(0, 4, 5), (3, 4, 5)]  # (1, 2, 3): likelier, not a tie
    assert choice.runner_up.hf_indices == (0, 4, 5)
    # the likeliest tie unreachable (0.5.23 puts no index 1 first): the likeliest reachable one, and no runner-up
    cands[(1, 4, 5)] = Candidate((1, 4, 5), 459, 500, -0.1)
    choice = choose(SearchResult("exhaustive", cands, 5, 1, (2, 3, 4)), 6, RULES_0523, served=(2, 3, 4))
    assert choice.best.hf_indices == (3, 4, 5) and choice.runner_up.hf_indices == (0, 4, 5)
    del cands[(0, 4, 5)]
    choice = choose(SearchResult("exhaustive", cands, 4, 1, (2, 3, 4)), 6, RULES_0523, served=(2, 3, 4))
    assert choice.best.hf_indices == (3, 4, 5) and choice.runner_up is None
    # equal accuracy: the likelihood ranks; unmeasured or NaN likelihoods sort last
    assert [c.hf_indices for c in SearchResult("exhaustive", {
        (1,): Candidate((1,), 5, 10, float("nan")), (2,): Candidate((2,), 5, 10, -1.0), (3,): Candidate((3,), 5, 10),
        (4,): Candidate((4,), 5, 10, -0.5)}, 4, 1, (1,)).ranked()] == [(4,), (2,), (1,), (3,)]


def test_all_wirings_and_the_finding():
    assert len(all_wirings([0, 1, 2], 2)) == 9 and all_wirings([5], 3) == [(5, 5, 5)]
    assert F.CODES[F.TRAINED_LAYERS_INFERRED][0] == F.WARNING
    def search(served, served_accuracy, near_tie, method, **more):
        return F.wiring_search_finding(F.WiringSearch(
            served=served, served_accuracy=served_accuracy, served_positions=500, best=(0, 3, 31), best_accuracy=0.45,
            best_positions=500, num_layers=61, ids=(0, 3, 31), unreachable=None, sglang_version="0.5.23",
            near_tie=near_tie, method=method, **more))

    warn = search((2, 30, 58), 0.1, False, "coordinate")
    assert warn.severity == "warning" and "[0, 3, 31]" in warn.message and "embedding output" in warn.message
    same = search((0, 3, 31), 0.45, True, "exhaustive")
    assert same.severity == "info" and same.evidence_dict()["served_hf"] == [0, 3, 31]
    assert "tie with it" not in warn.message and "tie with it" not in same.message  # one reachable near-tie
    tied = search((2, 30, 58), 0.1, False, "coordinate", ties_reachable=3, margin_within_noise=True)
    assert "2 other wiring(s) tie with it" in tied.message and "within noise" in tied.message
    assert tied.evidence_dict()["ties_reachable"] == 3


# -- synthetic inputs ------------------------------------------------------------------------------------------------

def write_target(path, hidden=H):
    os.makedirs(path, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    save_file({"model.embed_tokens.weight": torch.randn(VOCAB, hidden, generator=g),
               "lm_head.weight": torch.randn(VOCAB, hidden, generator=g),
               "model.layers.0.mlp.down_proj.weight": torch.zeros(2, 2)}, os.path.join(path, "model.safetensors"))
    with open(os.path.join(path, "config.json"), "w") as handle:
        json.dump({"model_type": "deepseek_v3", "hidden_size": hidden, "vocab_size": VOCAB}, handle)
    return str(path)


def write_draft(path, **overrides):
    config = eagle3_draft_config(spec_target_config(), draft_vocab_size=VOCAB, **overrides)
    return write_eagle3_draft_checkpoint(str(path), config, seed=0)


def write_dump(directory, lens=(5, 4), prefixes=None, layers=True, hidden=H, slots=(2, 4, 5), drop=(), name="d1",
               meta_extra=None):
    os.makedirs(directory, exist_ok=True)
    rows = sum(lens)
    g = torch.Generator().manual_seed(len(name))
    states = {i: torch.randn(rows, hidden, generator=g) for i in range(LAYERS)}
    tensors = {"aux_hidden_states": torch.cat([states[i] for i in slots], dim=-1),
               "final_hidden_state": torch.randn(rows, hidden, generator=g),
               "input_ids": torch.randint(0, VOCAB, (rows,), generator=g),
               "positions": torch.cat([torch.arange(n) for n in lens]),
               "extend_seq_lens": torch.tensor(lens), "extend_prefix_lens": torch.tensor(prefixes or [0] * len(lens))}
    if layers:
        tensors.update({f"hidden_states.{i}": t for i, t in states.items()})
    for key in drop:
        tensors.pop(key)
    meta = {"format_version": 1, "hf_indices": list(slots), "capture_indices": list(slots), "num_layers": LAYERS,
            "hidden_size": hidden, "sglang_version": "0.5.23", "model_class": "DeepseekV3ForCausalLM", "step": 1,
            "tp_rank": 0, "dp_rank": 0, "pp_rank": 0, **(meta_extra or {})}
    path = os.path.join(directory, f"eagle-probe-dump-host-tp0-1-{name}.safetensors")
    save_file(tensors, path, metadata={"eagle_probe.format": "1", "eagle_probe.meta": json.dumps(meta)})
    return path


@pytest.fixture
def inputs(tmp_path):
    return (write_draft(tmp_path / "draft"), write_target(tmp_path / "target"), str(tmp_path / "dumps"),
            write_dump(tmp_path / "dumps"))


def replay(capsys, *args):
    code = main(["replay", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_rows_and_requests_from_a_dump(tmp_path):
    from eagle_probe.commands.replay.dumps import read_dumps

    write_dump(tmp_path / "d", lens=(5, 1, 4), prefixes=[0, 0, 3])
    write_dump(tmp_path / "d", lens=(5, 1, 4), prefixes=[0, 0, 3], name="d2",
               meta_extra={"tp_rank": 1})  # another rank's copy of the same forward
    rows = read_dumps(str(tmp_path / "d"), want_layers=False)
    assert rows.segments == [(0, 4), (4, 3)] and rows.evaluated_positions == 7 and rows.requests == 3
    assert rows.cached_prefix_requests == 1 and len(rows.duplicates) == 1
    assert rows.layers == {} and rows.layer_indices == list(range(LAYERS))


def write_verify_dump(directory, chains=2, per=3, name="v1", ids=True):
    """A worker verify dump of `chains` requests of `per` rows, without the final hidden state (a replayed forward)."""
    rows = chains * per
    g = torch.Generator().manual_seed(7)
    tensors = {"aux_hidden_states": torch.randn(rows, 3 * H, generator=g),
               "input_ids": torch.arange(10, 10 + rows), "positions": torch.arange(rows) + 20,
               "committed_counts": torch.tensor([20 + i for i in range(chains)])}
    if ids:
        tensors["target_next_ids"] = torch.arange(100, 100 + rows)
    meta = {"format_version": 1, "hf_indices": [2, 4, 5], "capture_indices": [2, 4, 5], "num_layers": LAYERS,
            "hidden_size": H, "sglang_version": "0.5.23", "model_class": "DeepseekV3ForCausalLM", "step": 3,
            "tp_rank": 0, "dp_rank": 0, "pp_rank": 0, "mode": "TARGET_VERIFY", "source": "worker",
            "final_hidden_state": False, "req_ids": [f"r{i}" for i in range(chains)], "rows_per_request": per}
    path = os.path.join(directory, f"eagle-probe-dump-host-tp0-1-{name}.safetensors")
    save_file(tensors, path, metadata={"eagle_probe.format": "1", "eagle_probe.meta": json.dumps(meta)})
    return path


def test_verify_dumps_label_rows_where_no_prefill_dump_holds_the_final_state(tmp_path):
    from eagle_probe.commands.dump_files import DumpError
    from eagle_probe.commands.replay.dumps import read_dumps

    d = tmp_path / "d"
    write_dump(d, layers=False, drop=("final_hidden_state",))  # a prefill replayed from a graph: no labels
    write_verify_dump(d)
    rows = read_dumps(str(d), want_layers=False)
    # per chain of 3 rows, rows 0 and 1 are evaluated: the token after them and the target's id after that
    assert rows.segments == [(0, 2), (2, 2)] and rows.requests == 2 and rows.label_states is None
    assert rows.next_tokens.tolist() == [11, 12, 14, 15] and rows.label_ids.tolist() == [101, 102, 104, 105]
    assert rows.positions.tolist() == [20, 21, 23, 24] and len(rows.unlabelled) == 1
    # a prefill dump with the final hidden state wins: the verify dump is left out
    write_dump(d, layers=False, name="other")
    rows = read_dumps(str(d), want_layers=False)
    assert rows.label_ids is None and rows.evaluated_positions == 7 and len(rows.unlabelled) == 2
    # neither kind of label: the error names both and how to get them
    bare = tmp_path / "bare"
    write_dump(bare, layers=False, drop=("final_hidden_state",))
    write_verify_dump(bare, ids=False)
    with pytest.raises(DumpError, match="final_hidden_state.*target_next_ids.*--disable-cuda-graph"):
        read_dumps(str(bare), want_layers=False)


def test_duplicate_ranks_are_read_once(tmp_path):
    from eagle_probe.commands.replay.dumps import read_dumps

    first = write_dump(tmp_path / "d", name="aa")
    with open(first, "rb") as handle:
        data = handle.read()
    with open(os.path.join(tmp_path / "d", "eagle-probe-dump-host-tp1-2-aa.safetensors"), "wb") as handle:
        handle.write(data)
    rows = read_dumps(str(tmp_path / "d"), want_layers=True)
    assert len(rows.files) == 1 and len(rows.duplicates) == 1 and rows.evaluated_positions == 7


def test_a_run_on_synthetic_inputs_has_the_documented_keys(inputs, capsys):
    draft, target, dumps, _ = inputs
    code, out, err = replay(capsys, "--draft", draft, "--target", target, "--dump-dir", dumps, "--search",
                            "--format", "json")
    assert code == 0, err
    report = json.loads(out)
    assert report["search"]["method"] == "exhaustive" and len(report["candidates"]) == 216
    assert report["served"]["positions"] == 7 and report["best"]["positions"] == 7
    assert {"ids", "ci95", "accuracy", "hf_indices"} <= set(report["best"])
    assert report["cost"]["flops_per_wiring"] > 0 and report["cost"]["seconds_per_wiring"] > 0


# -- bad input -------------------------------------------------------------------------------------------------------

def _bad(capsys, args, *needles):
    code, out, err = replay(capsys, *args)
    assert code == 2, (out, err)
    assert "Traceback" not in err and err.startswith("eagle-probe replay: "), err
    for needle in needles:
        assert needle in err, err
    return err


def test_missing_and_corrupt_checkpoints(inputs, tmp_path, capsys):
    draft, target, dumps, _ = inputs
    _bad(capsys, ["--draft", str(tmp_path / "nope"), "--target", target, "--dump-dir", dumps], "nope",
         "no such directory")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text(pathlib.Path(draft, "config.json").read_text())
    _bad(capsys, ["--draft", str(empty), "--target", target, "--dump-dir", dumps], str(empty), "no *.safetensors")
    (empty / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not a header}")
    _bad(capsys, ["--draft", str(empty), "--target", target, "--dump-dir", dumps], "model.safetensors",
         "not a readable safetensors file")
    broken = tmp_path / "broken-target"
    broken.mkdir()
    (broken / "model.safetensors").write_bytes(b"garbage")
    _bad(capsys, ["--draft", draft, "--target", str(broken), "--dump-dir", dumps], str(broken / "model.safetensors"))
    (empty / "config.json").write_text("{not json")
    _bad(capsys, ["--draft", str(empty), "--target", target, "--dump-dir", dumps], "config.json", "not valid JSON")


def test_truncated_safetensors_named(inputs, tmp_path, capsys):
    draft, target, dumps, dump_file = inputs
    data = pathlib.Path(dump_file).read_bytes()
    with open(dump_file, "wb") as handle:
        handle.write(data[: len(data) // 2])
    _bad(capsys, ["--draft", draft, "--target", target, "--dump-dir", dumps], dump_file)


def test_missing_tensors_named(inputs, tmp_path, capsys):
    draft, target, dumps, _ = inputs
    from safetensors.torch import load_file

    tensors = load_file(os.path.join(draft, "model.safetensors"))
    del tensors["fc.weight"]
    save_file(tensors, os.path.join(draft, "model.safetensors"))
    _bad(capsys, ["--draft", draft, "--target", target, "--dump-dir", dumps], draft, "missing tensor fc.weight")
    draft2 = write_draft(tmp_path / "draft2")
    tensors = load_file(os.path.join(draft2, "model.safetensors"))
    del tensors["midlayer.mlp.down_proj.weight"]
    save_file(tensors, os.path.join(draft2, "model.safetensors"))
    _bad(capsys, ["--draft", draft2, "--target", target, "--dump-dir", dumps], "layers.0.mlp.down_proj.weight")
    no_embed = tmp_path / "target2"
    no_embed.mkdir()
    save_file({"lm_head.weight": torch.zeros(VOCAB, H)}, str(no_embed / "model.safetensors"))
    _bad(capsys, ["--draft", draft2, "--target", str(no_embed), "--dump-dir", dumps], "model.embed_tokens.weight")
    nodump = tmp_path / "nodump"
    write_dump(nodump, drop=("final_hidden_state",))
    draft3 = write_draft(tmp_path / "draft3")
    _bad(capsys, ["--draft", draft3, "--target", target, "--dump-dir", str(nodump)], "final_hidden_state", "dump ")


def test_target_index_names_a_missing_shard(inputs, tmp_path, capsys):
    draft, _, dumps, _ = inputs
    target = tmp_path / "sharded"
    target.mkdir()
    (target / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
        "lm_head.weight": "model-00002-of-00002.safetensors"}}))
    _bad(capsys, ["--draft", draft, "--target", str(target), "--dump-dir", dumps], "model-00001-of-00002.safetensors",
         "no such file")


def test_dump_directory_without_dumps(inputs, tmp_path, capsys):
    draft, target, _, _ = inputs
    (tmp_path / "none").mkdir()
    _bad(capsys, ["--draft", draft, "--target", target, "--dump-dir", str(tmp_path / "none")], "no dump files")
    other = tmp_path / "other"
    other.mkdir()
    save_file({"x": torch.zeros(2)}, str(other / "x.safetensors"))
    _bad(capsys, ["--draft", draft, "--target", target, "--dump-dir", str(other)], "x.safetensors",
         "not an eagle-probe dump")
    single = tmp_path / "single"
    write_dump(single, lens=(1, 1))
    _bad(capsys, ["--draft", draft, "--target", target, "--dump-dir", str(single)], "no request in the dumps has two")


def test_mismatched_widths(inputs, tmp_path, capsys):
    draft, target, dumps, dump_file = inputs
    four = write_draft(tmp_path / "four", num_aux=4)
    _bad(capsys, ["--draft", four, "--target", target, "--dump-dir", dumps], dump_file, "fc", "4 x 64 = 256",
         "3 aux slots of width 64")
    wide = tmp_path / "wide"
    write_dump(wide, hidden=32)
    _bad(capsys, ["--draft", draft, "--target", target, "--dump-dir", str(wide)], "width 32")
    bad_fc = write_draft(tmp_path / "badfc")
    from safetensors.torch import load_file
    tensors = load_file(os.path.join(bad_fc, "model.safetensors"))
    tensors["fc.weight"] = torch.zeros(H, 2 * H)
    save_file(tensors, os.path.join(bad_fc, "model.safetensors"))
    _bad(capsys, ["--draft", bad_fc, "--target", target, "--dump-dir", dumps], "fc.weight has shape [64, 128]")


def test_search_needs_all_layer_dumps_and_bad_options(inputs, tmp_path, capsys):
    draft, target, _, _ = inputs
    aux_only = tmp_path / "aux"
    write_dump(aux_only, layers=False)
    _bad(capsys, ["--draft", draft, "--target", target, "--dump-dir", str(aux_only), "--search"],
         "EAGLE_PROBE_DUMP_LAYERS=all", "eager forwards only", "--disable-cuda-graph")
    dumps = str(tmp_path / "dumps")
    _bad(capsys, ["--draft", draft, "--target", target, "--dump-dir", dumps, "--wiring", "hf:1,2"], "--wiring",
         "takes 3 aux states")
    _bad(capsys, ["--draft", draft, "--target", target, "--dump-dir", dumps, "--wiring", "0,1,2"], "--wiring",
         "name the convention")
    _bad(capsys, ["--draft", draft, "--target", target, "--dump-dir", dumps, "--sglang-version", "x.y"],
         "--sglang-version")
    if not torch.cuda.is_available():
        _bad(capsys, ["--draft", draft, "--target", target, "--dump-dir", dumps, "--device", "cuda"], "--device cuda")


def test_replay_prints_the_ids_to_set_by_the_target_family(tmp_path, capsys):
    # the same dumps under a Llama target: SGLang adds 1 to every id, so the ids to set are the HF indices - 1
    draft, dumps = write_draft(tmp_path / "draft"), str(tmp_path / "dumps")
    write_dump(tmp_path / "dumps")
    llama = write_target(tmp_path / "llama")
    with open(os.path.join(llama, "config.json"), "w") as handle:
        json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H,
                   "vocab_size": VOCAB}, handle)
    code, out, err = replay(capsys, "--draft", draft, "--target", llama, "--dump-dir", dumps, "--search",
                            "--sglang-version", "0.5.23", "--format", "json")
    assert code == 0, err
    report = json.loads(out)
    best = report["best"]
    assert "[llama]" in report["target"]["family"] and "plus_one_always" in report["rules"]
    assert best["ids"] == [i - 1 for i in best["hf_indices"]]  # every index is reachable under Llama's rule
    assert all(tie["ids"] == [i - 1 for i in tie["hf_indices"]] for tie in report["near_ties"])
