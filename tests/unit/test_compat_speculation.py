"""`eagle-probe compat` lists the shapes of speculation the installed release serves (chain, adaptive depth, tree)
and what the probe reads of each verify step, in text and JSON."""

import json

from eagle_probe import versions
from eagle_probe.commands.cli import main
from eagle_probe.commands.compat import render_shapes, shapes_for


def test_compat_json_has_the_shapes_and_what_the_probe_reads(capsys):
    main(["compat", "--no-import", "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert report["sglang_version"] == "0.5.23"  # the release the test environment pins
    shapes = {s["shape"]: s for s in report["speculation_shapes"]}
    assert list(shapes) == ["chain", "adaptive depth", "tree"]
    for s in shapes.values():
        reads = " ".join(s["probe_reads"])
        assert "GenerationBatchResult.accept_index" in reads and "[requests, spec_steps + 1]" in reads
        assert "speculative_num_draft_tokens" in reads
    adaptive = shapes["adaptive depth"]
    assert "--speculative-adaptive" in adaptive["flags"] and "_maybe_disable_adaptive" in adaptive["needs"]
    for needed in ("topk 1", "DP attention", "two-batch overlap", "pdmux", "multi-layer EAGLE"):
        assert needed in adaptive["needs"]
    assert "own depth" in " ".join(adaptive["probe_reads"]) and "draft depth in use" in adaptive["probe_shows"]
    tree = shapes["tree"]
    assert "V2 worker" in tree["needs"] and "T - 1" in " ".join(tree["probe_reads"])
    assert "depths along the accepted path" in tree["probe_shows"] and "#23530" in tree["probe_shows"]


def test_compat_text_prints_the_shapes(capsys):
    main(["compat", "--no-import"])
    out = capsys.readouterr().out
    assert "shapes of speculation (what each needs; what the probe reads of each verify step):" in out
    for shape in ("chain", "adaptive depth", "tree"):
        assert f"\n  {shape}: " in out
    assert out.count("probe reads: per-step depth from GenerationBatchResult.accept_index's shape") == 3


def test_no_shapes_tabled_for_other_releases():
    assert shapes_for(versions.parse_version("0.5.8")) == [] and shapes_for(None) == []
    assert render_shapes({"speculation_shapes": []}) == [
        "shapes of speculation: not tabled for this release (the table holds SGLang 0.5.23's)"]
