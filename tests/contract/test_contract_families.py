"""The target-family table (eagle_probe.families) proven over every release's parsed wheel (the same wheels and
cache as test_contract.py; parsed, never imported)."""

import os
from dataclasses import replace

import pytest

from eagle_probe import families, versions
from eagle_probe.commands import contract
from eagle_probe.commands.contract import families as contract_families

CACHE = os.environ.get("EAGLE_PROBE_WHEEL_CACHE", contract.DEFAULT_CACHE)
RELEASES = [versions.format_version(v) for v in families.RELEASES]


@pytest.fixture(scope="module")
def trees():
    cache = {}

    def tree(release):
        if release not in cache:
            cache[release] = contract.SourceTree.from_wheel(contract.download_wheel(release, CACHE), label=release)
        return cache[release]

    return tree


@pytest.mark.parametrize("release", RELEASES)
def test_every_family_row_holds(release, trees):
    broken = contract_families.check_families(trees(release), release)
    assert not broken, "broken (release, family, claim):\n" + "\n".join(f"  {c}: {p}" for c, p in broken)


def test_a_wrong_row_breaks_naming_release_family_and_claim(trees):
    src = trees("0.5.23")
    llama = families.family("llama", versions.parse_version("0.5.23"))
    wrong = replace(llama, rule=families.RULE_PLUS_ONE_IF_FIRST_IS_ONE, final_capturable=True, pp_guard=False)
    failures = [(c.what, c.check(src)) for c in contract_families.family_claims(wrong, "0.5.23")]
    failures = [(w, p) for w, p in failures if p is not None]
    texts = " ".join(f"{w} :: {p}" for w, p in failures)
    assert "0.5.23 family llama" in texts
    assert "rule is plus_one_always, not plus_one_if_first_is_one" in texts
    assert "PP guard present" in texts
    assert "final layer's output captured after the loop: False" in texts


def test_absent_family_is_proven_absent(trees):
    # GLM-4-MoE-Lite arrives in 0.5.13: absent (and proven so) in 0.5.12
    assert families.family("glm4_moe_lite", versions.parse_version("0.5.12")) is None
    claims = contract_families.claims_for_release("0.5.12")
    absent = [c for c in claims if "glm4_moe_lite: absent" in c.what]
    assert absent and absent[0].check(trees("0.5.12")) is None
    assert absent[0].check(trees("0.5.13")) is not None  # the same claim fails where it exists


def test_an_untabled_setter_class_is_caught(trees, monkeypatch):
    monkeypatch.delitem(families.UNTABLED, "qwen3_vl.Qwen3VLForConditionalGeneration")
    problem = contract_families.coverage_claim("0.5.23").check(trees("0.5.23"))
    assert problem and "qwen3_vl.Qwen3VLForConditionalGeneration" in problem


def test_every_setter_class_of_0523_has_a_row_or_is_listed(trees):
    src = trees("0.5.23")
    rows = families.rows_for(versions.parse_version("0.5.23"))
    known = {c for r in rows for c in r.classes + r.delegates + ((r.inner_setter,) if r.inner_setter else ())}
    for dotted in contract_families.setter_classes(src):
        assert dotted in known or dotted in families.UNTABLED, dotted
