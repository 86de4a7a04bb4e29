"""The package layout's one rule, read from the source: what runs inside SGLang never imports the commands or a
tool of theirs (a downloader, a subprocess, an HTTP client), and the analysis rules import no SGLang."""

import ast
import importlib.util
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "eagle_probe"
# What a serving process loads: the runtime, the shared vocabulary, the bootstrap.
SHARED = ("__init__.py", "config.py", "events.py", "versions.py", "families.py", "observations.py", "dump_format.py",
          "layer_spec.py", "reference_format.py", "draft_dir.py")
SERVING = sorted([*PACKAGE.glob("runtime/**/*.py"), *(PACKAGE / name for name in SHARED),
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
    # The rules read the observations from the shared vocabulary, never from the serving side.
    assert not [n for n in names if n.startswith("eagle_probe.runtime")]


# The vocabulary both sides share: it imports nothing above it (no analysis, runtime or commands).
VOCABULARY = [PACKAGE / name for name in ("config.py", "draft_dir.py", "dump_format.py", "events.py", "families.py",
                                          "layer_spec.py", "observations.py", "reference_format.py", "versions.py")]


@pytest.mark.parametrize("path", VOCABULARY, ids=lambda p: p.name)
def test_vocabulary_imports_nothing_above_it(path):
    above = ("eagle_probe.analysis", "eagle_probe.runtime", "eagle_probe.commands")
    assert not [n for n in imported_names(path) if n.startswith(above)]


def test_top_level_holds_only_the_shared_vocabulary():
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert modules == ["__init__.py", "__main__.py"] + sorted(p.name for p in VOCABULARY)
    assert sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__") == [
        "analysis", "bootstrap", "commands", "runtime"]


COMMANDS = sorted(PACKAGE.glob("commands/**/*.py"))


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_commands_read_dumps_through_the_shared_format(path):
    """The dump file format is shared vocabulary: the offline commands never reach into the runtime's writer."""
    assert not [n for n in imported_names(path) if n.startswith("eagle_probe.runtime.values.dump")]


MAX_FUNCTION_LINES = 60
MAX_PARAMETERS = 8


def _functions(path: pathlib.Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def _parameters(node) -> list[str]:
    args = node.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    return names[1:] if names[:1] in (["self"], ["cls"]) else names


def test_no_function_outgrows_its_limits():
    """Every function and method in eagle_probe/ spans at most 60 lines (from its `def`, decorators not counted, to
    its last line, docstring and comments included) and takes at most 8 parameters (positional, keyword-only,
    *args and **kwargs each count one; self and cls do not). A longer function is split into named steps; a builder
    with more inputs takes a small dataclass of them."""
    over = []
    for path in sorted(PACKAGE.glob("**/*.py")):
        for node in _functions(path):
            lines, params = node.end_lineno - node.lineno + 1, len(_parameters(node))
            if lines <= MAX_FUNCTION_LINES and params <= MAX_PARAMETERS:
                continue
            over.append(f"{path.relative_to(PACKAGE)}:{node.name} (line {node.lineno}): {lines} lines, {params} "
                        f"parameters")
    assert over == []
