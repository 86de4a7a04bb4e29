"""One release table (versions.RELEASE_TEXTS) and everything that names supported releases agreeing with it: the
tables that derive from it in code, and what code cannot derive (requirements/, scripts/, the rows' tested tiers)."""

import pathlib
import re

from eagle_probe import families, versions
from eagle_probe.analysis import draft_config_keys

ROOT = pathlib.Path(__file__).resolve().parents[2]
RELEASE = r"\d+\.\d+\.\d+(?:\.post\d+)?"


def _text(*parts) -> str:
    return ROOT.joinpath(*parts).read_text(encoding="utf-8")


def _pin(path: pathlib.Path) -> str:
    [pin] = re.findall(rf"^sglang==({RELEASE})\s*$", path.read_text(encoding="utf-8"), re.M)
    return pin


def test_the_table_is_ordered_and_the_range_comes_from_it():
    releases = [versions.parse_release(t) for t in versions.RELEASE_TEXTS]
    assert all(r is not None and r.final for r in releases)
    keys = [r.key for r in releases]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert [versions.format_version(v) for v in versions.RELEASES] == list(versions.RELEASE_TEXTS)
    assert versions.RELEASES[0] == versions.SUPPORTED_MIN
    assert versions.RELEASES[-1][:3] + (0,) == versions.SUPPORTED_MAX
    assert f"{versions.RELEASE_TEXTS[0]} to {versions.RELEASE_TEXTS[-1]}" == versions.SUPPORTED_RANGE_TEXT
    assert all(versions.is_supported(v) for v in versions.RELEASES)


def test_the_code_tables_name_only_table_releases():
    assert families.RELEASES is versions.RELEASES
    assert {rules.first for rules in versions.RULES} <= set(versions.RELEASES)
    assert versions.RULES[0].first == versions.SUPPORTED_MIN
    bounds = {row.first for row in families.FAMILIES} | {row.last for row in families.FAMILIES if row.last}
    assert bounds <= set(versions.RELEASES), sorted(bounds - set(versions.RELEASES))
    since = {first for reads in draft_config_keys.READS.values() for first in reads.values()}
    assert since <= set(versions.RELEASE_TEXTS), sorted(since - set(versions.RELEASE_TEXTS))


def test_the_contract_tests_walk_the_table():
    source = _text("tests", "contract", "test_contract.py")
    assert "KNOWN = list(versions.RELEASE_TEXTS)" in source
    assert "families.RELEASES" in _text("tests", "contract", "test_contract_families.py")


def test_the_tested_tiers_are_table_releases_with_their_pins():
    tested = versions.TESTED_RELEASES
    assert set(tested) <= set(versions.RELEASE_TEXTS) and tested[0] == versions.RELEASE_TEXTS[0]
    requirements = ROOT / "requirements"
    nodeps = {m.group(1): p for p in requirements.glob("sglang-*-nodeps.txt")
              if (m := re.fullmatch(rf"sglang-({RELEASE})-nodeps\.txt", p.name))}
    assert sorted(nodeps) == sorted(tested)
    assert all(_pin(path) == release for release, path in nodeps.items())
    runtime = {m.group(1) for p in requirements.glob("runtime-*.txt")
               if (m := re.fullmatch(rf"runtime-({RELEASE})\.txt", p.name))}
    assert sorted(runtime) == sorted(tested)


def test_the_outside_range_pin_is_just_before_the_range():
    pin = versions.parse_version(_pin(ROOT / "requirements" / "sglang-outside-range.txt"))
    assert pin is not None and pin < versions.SUPPORTED_MIN and pin[:2] == versions.SUPPORTED_MIN[:2]


def test_the_setup_and_test_scripts_name_the_tested_tiers():
    setup = _text("scripts", "setup.sh")
    arms = re.findall(rf"^\s+({RELEASE})\) venv=(\S+?);", setup, re.M)
    assert sorted(r for r, _ in arms) == sorted(versions.TESTED_RELEASES)
    [default] = re.findall(rf"^release=\$\{{1:-({RELEASE})\}}$", setup, re.M)
    assert dict(arms)[default] == ".venv" and default in versions.TESTED_RELEASES
    [accepted] = re.findall(r"\(accepted: ([^)]*)\)", setup)
    assert sorted(accepted.split(", ")) == sorted(versions.TESTED_RELEASES)
    outside = _pin(ROOT / "requirements" / "sglang-outside-range.txt")
    for script in sorted((ROOT / "scripts").glob("*.sh")):
        named = set(re.findall(rf"(?<![\d.])({RELEASE})(?!\d|\.\d)", script.read_text(encoding="utf-8")))
        named |= set(re.findall(rf"-({RELEASE})\.sh$", script.name))
        assert named <= set(versions.TESTED_RELEASES) | {outside}, (script.name, named)
