"""The package layout's one rule, read from the source: what runs inside SGLang never imports the commands or a
tool of theirs (a downloader, a subprocess, an HTTP client), and the analysis rules import no SGLang."""

import ast
import importlib.util
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "eagle_probe"
# What a serving process loads: the runtime, the shared vocabulary, the bootstrap.
SERVING = sorted([*PACKAGE.glob("runtime/**/*.py"), PACKAGE / "__init__.py", PACKAGE / "config.py",
                  PACKAGE / "events.py", PACKAGE / "versions.py", PACKAGE / "families.py",
                  *PACKAGE.glob("bootstrap/*.py")])
ANALYSIS = sorted(PACKAGE.glob("analysis/*.py"))
TOOLS = ("subprocess", "urllib", "http")


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(path: pathlib.Path):
    """Absolute names of everything a module imports (also inside functions)."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) if node.level \
                else node.module
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


@pytest.mark.parametrize("path", SERVING, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_serving_side_imports_no_command_and_no_tool(path):
    bad = [name for name in imported_names(path)
           if name.startswith("eagle_probe.commands") or name.split(".")[0] in TOOLS]
    assert not bad, f"{path.relative_to(PACKAGE)} imports {bad}"


@pytest.mark.parametrize("path", ANALYSIS, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_analysis_imports_no_sglang_and_no_commands(path):
    names = list(imported_names(path))
    assert not [n for n in names if n.split(".")[0] in ("sglang", "torch") or n.startswith("eagle_probe.commands")]
    # The observation types are the only runtime module the rules know (they are plain values).
    assert {n for n in names if n.startswith("eagle_probe.runtime")} <= {
        "eagle_probe.runtime.observations", "eagle_probe.runtime.observations.CaptureConfigured",
        "eagle_probe.runtime.observations.TargetForward"}


def test_top_level_holds_only_the_shared_vocabulary():
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert modules == ["__init__.py", "__main__.py", "config.py", "events.py", "families.py", "versions.py"]
    assert sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__") == [
        "analysis", "bootstrap", "commands", "runtime"]
