"""pytest's default import mode puts each test folder without an ``__init__.py``
on sys.path and imports its files by their bare name, so two such files with one
name break collection of the whole suite ("import file mismatch")."""

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _imported_by_bare_name(path: Path) -> bool:
    return not (path.parent / "__init__.py").exists()


def test_no_two_test_files_outside_packages_share_a_name():
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        if ".venv" in path.parts or not _imported_by_bare_name(path):
            continue
        by_name[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not clashes, f"test files imported under one bare name: {clashes}"
