"""Contract check over every SGLang release in the supported range (downloads wheels from PyPI, caches them
in .cache/sglang-wheels or $EAGLE_PROBE_WHEEL_CACHE; parses, never imports). About 330 MB the first time."""

import os

import pytest

from eagle_probe import versions
from eagle_probe.commands import contract

CACHE = os.environ.get("EAGLE_PROBE_WHEEL_CACHE", contract.DEFAULT_CACHE)
# The release table (versions.RELEASE_TEXTS): PyPI must list every release of it, and no release of the range
# that it lacks (a new one gets its row first: docs/releases-new.md).
KNOWN = list(versions.RELEASE_TEXTS)


@pytest.fixture(scope="module")
def releases():
    listed = contract.list_releases()
    missing = [r for r in KNOWN if r not in listed]
    assert not missing, f"PyPI's list lacks {missing}"
    untabled = [r for r in listed if r not in KNOWN]
    assert not untabled, f"PyPI lists {untabled} in the supported range; add them to versions.RELEASE_TEXTS"
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
