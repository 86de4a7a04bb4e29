"""`eagle-probe compat` prints the target-family table of the installed release (text and JSON)."""

import json

from eagle_probe import families, versions
from eagle_probe.commands.cli import main
from eagle_probe.commands.compat import render_families


def test_compat_json_has_the_family_table(capsys):
    main(["compat", "--no-import", "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    installed = versions.parse_version(report["sglang_version"]) if report["sglang_version"] else None
    assert report["families"] == families.table(installed)
    names = {r["family"] for r in report["families"]}
    assert {"llama", "qwen3", "qwen3_moe", "gpt_oss", "glm4_moe", "deepseek_v2"} <= names
    llama = next(r for r in report["families"] if r["family"] == "llama")
    assert llama["rule_letter"] == "A" and "LlamaForCausalLM" in " ".join(llama["classes"])
    assert "qwen3_vl.Qwen3VLForConditionalGeneration" in report["untabled"]


def test_compat_text_prints_one_line_per_family(capsys):
    main(["compat", "--no-import"])
    out = capsys.readouterr().out
    assert "target families (" in out
    for name in ("llama", "gpt_oss", "glm4_moe_lite", "minimax_m3_vl", "gemma3"):
        assert f"\n  {name} " in out
    assert "C as_given_if_max_is_n" in out and "D plus_one_including_default" in out
    assert "no row (observed, rule unverified)" in out


def test_render_families_of_an_early_release():
    lines = render_families({"families": families.table(versions.parse_version("0.5.8")), "untabled": {}})
    text = "\n".join(lines)
    assert "glm4_moe_lite" not in text and "gemma3" not in text  # not yet in 0.5.8
    assert "A plus_one_always" in text and "deepseek_v2" in text
