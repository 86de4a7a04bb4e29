"""Contract check over every SGLang release in the supported range (downloads wheels from PyPI, caches them
in .cache/sglang-wheels or $EAGLE_PROBE_WHEEL_CACHE; parses, never imports). About 330 MB the first time."""

import os

import pytest

from eagle_probe import versions
from eagle_probe.commands import contract

CACHE = os.environ.get("EAGLE_PROBE_WHEEL_CACHE", contract.DEFAULT_CACHE)
# Releases that existed when the table was written; PyPI's list must contain at least these.
KNOWN = ("0.5.8 0.5.8.post1 0.5.9 0.5.10 0.5.10.post1 0.5.11 0.5.12 0.5.12.post1 0.5.13 0.5.13.post1 0.5.14 0.5.15 "
         "0.5.15.post1 0.5.16 0.5.17 0.5.18 0.5.19 0.5.20 0.5.21 0.5.22 0.5.23").split()


@pytest.fixture(scope="module")
def releases():
    listed = contract.list_releases()
    missing = [r for r in KNOWN if r not in listed]
    assert not missing, f"PyPI's list lacks {missing}"
    return listed


def test_every_release_keeps_the_contract(releases):
    results = contract.check_releases(releases, CACHE)
    assert [r.release for r in results] == releases
    broken = [(r.release, claim, problem) for r in results for claim, problem in r.failures]
    assert not broken, "broken (release, claim): \n" + "\n".join(f"  {rel}: {claim}: {problem}"
                                                                  for rel, claim, problem in broken)


def test_check_catches_a_wrong_row():
    # 0.5.13's source judged by the 0.5.12 row (+1 always): the capture-id claim must break, naming the rule.
    src = contract.SourceTree.from_wheel(contract.download_wheel("0.5.13", CACHE), label="0.5.13")
    result = contract.check_tree(src, "0.5.13", rules=versions.rules_for((0, 5, 12, 0)))
    claims = [claim for claim, _ in result.failures]
    assert any("maps ids by plus_one_always" in c for c in claims), result.failures


def test_targets_come_from_the_integrations():
    from eagle_probe.runtime.integrations import ALL

    claims, notes = contract.claims_for(versions.RULES[-1])
    texts = " ".join(c.what for c in claims) + " ".join(notes)
    for integration in ALL:
        for target in integration.targets:
            assert f"{target.module}.{target.qualname}" in texts
