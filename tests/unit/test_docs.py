"""The README and the documentation site: the reference pages match the code they are generated from, the README
holds what a user needs first and links only to pages that exist, and `mkdocs build --strict` fails on a broken
link."""

import importlib.util
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from eagle_probe.commands.cli import build_parser

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
MKDOCS = pathlib.Path(sys.executable).parent / "mkdocs"


def _gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "tools" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_reference_pages_are_up_to_date():
    # In a fresh interpreter: other tests of the session change process-wide tables (e.g. families found in a
    # loaded SGLang), which a page generated in this process would pick up (seen once in a whole-suite run).
    root = pathlib.Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, str(root / "tools" / "gen_docs.py"), "--check"], cwd=root,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"run: .venv/bin/python tools/gen_docs.py\n{done.stdout}{done.stderr}"


def test_a_changed_table_makes_its_page_stale(tmp_path):
    gen = _gen_docs()
    for path, text in gen.generate().items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text, encoding="utf-8")
    assert gen.stale(tmp_path) == []
    findings = tmp_path / "docs/reference/findings.md"
    findings.write_text(findings.read_text(encoding="utf-8").replace("tbo_capture_lost", "tbo_lost"), encoding="utf-8")
    assert gen.stale(tmp_path) == ["docs/reference/findings.md"]


def test_readme_fits_two_screens_in_the_issue_order():
    assert len(README.splitlines()) <= 100
    order = [README.index(h) for h in ("## Install", "## Two commands", "## First commands", "## Subcommands",
                                       "## Documentation")]
    assert order == sorted(order)
    assert "bash scripts/example.sh" in README and "bash scripts/test.sh" in README
    assert "mkdocs serve" in README


def test_readme_lists_every_subcommand():
    subparsers = next(a for a in build_parser()._actions if a.dest == "cmd")
    listed = set(re.findall(r"^\| \[`([a-z-]+)`\]", README, re.M))
    assert listed == set(subparsers.choices)


def test_readme_links_point_to_files_that_exist():
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    local = [link for link in links if "://" not in link]
    assert local and [link for link in local if not (ROOT / link).exists()] == []


def test_the_test_command_builds_the_site_strictly():
    script = (ROOT / "scripts/test.sh").read_text(encoding="utf-8")
    assert re.search(r"^[^#\n]*mkdocs build --strict", script, re.M)


@pytest.mark.skipif(not MKDOCS.exists(), reason="mkdocs is installed by scripts/setup.sh")
def test_strict_build_fails_on_a_broken_link(tmp_path):
    site = tmp_path / "site"
    shutil.copytree(ROOT / "docs", site / "docs")
    shutil.copy(ROOT / "mkdocs.yml", site / "mkdocs.yml")
    build = [str(MKDOCS), "build", "--strict", "-d", str(tmp_path / "out")]  # -q would hide the warnings
    env = {"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"}
    ok = subprocess.run(build, cwd=site, capture_output=True, text=True, env=env, timeout=120)
    assert ok.returncode == 0, ok.stderr
    with open(site / "docs/overhead.md", "a", encoding="utf-8") as page:
        page.write("\nSee [a page that is not there](nowhere.md).\n")
    broken = subprocess.run(build, cwd=site, capture_output=True, text=True, env=env, timeout=120)
    assert broken.returncode != 0 and "nowhere.md" in broken.stderr


def test_the_site_build_is_not_quiet():
    """Under -q mkdocs 1.6 counts no warnings, so --strict would pass a broken link."""
    script = (ROOT / "scripts/test.sh").read_text(encoding="utf-8")
    line = next(line for line in script.splitlines() if "mkdocs build" in line and not line.startswith("#"))
    assert " -q" not in line and "--quiet" not in line
