"""Claims about which draft config keys that change the EAGLE-3 forward each draft class reads, per release (the
table analysis.draft_config_keys.READS): the (key, where) pairs its source reads must be exactly the table's for
that release, so a release that starts (or stops) reading one breaks the claim, naming the key.

A read is, with KEY one of analysis.draft_config_keys.FORWARD_KEYS: at the top level `getattr(config, KEY, ...)`,
`hasattr(config, KEY)` or `config.KEY` (config or self.config); inside eagle_config `eagle_config.get(KEY, ...)`,
`eagle_config[KEY]` or `getattr(eagle_config, KEY, ...)`. The sites read are the class's module and, for Llama's
draft, the base decoder layer's __init__ that builds its RoPE (READ_SITES)."""

from __future__ import annotations

import ast
from collections.abc import Iterable

from ...analysis.draft_config_keys import FORWARD_KEYS, NESTED, READ_SITES, TOP, reads_for
from ...analysis.draft_ids import DRAFT_CLASSES
from .claims import Claim
from .source import SourceTree, find_function

_CONFIG = ("config", "self.config")


def _owner(node) -> str | None:
    text = ast.unparse(node)
    if text in _CONFIG:
        return TOP
    if text.endswith("eagle_config"):
        return NESTED
    return None


def _key(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and node.value in FORWARD_KEYS else None


def reads_in(tree: ast.AST) -> set[tuple[str, str]]:
    """The (key, where) pairs a piece of source reads (see the module docstring)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                and len(node.args) >= 2:
            where, key = _owner(node.args[0]), _key(node.args[1])
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and node.args:
            where, key = _owner(node.func.value), _key(node.args[0])
            where = where if where == NESTED else None
        elif isinstance(node, ast.Subscript):
            where, key = _owner(node.value), _key(node.slice)
            where = where if where == NESTED else None
        elif isinstance(node, ast.Attribute) and node.attr in FORWARD_KEYS:
            where, key = _owner(node.value), node.attr
            where = where if where == TOP else None
        else:
            continue
        if where is not None and key is not None:
            found.add((key, where))
    return found


def class_reads(src: SourceTree, model_class: str) -> tuple[set[tuple[str, str]], list[str]]:
    """(the pairs the class's read sites read, problems finding a site)."""
    found, problems = set(), []
    for module, qualname in READ_SITES[model_class]:
        if qualname is None:
            tree = src.tree(module)
            if tree is None:
                problems.append(f"module {module} not found")
                continue
            found |= reads_in(tree)
        else:
            node, error = find_function(src, module, qualname)
            if error:
                problems.append(error)
                continue
            found |= reads_in(node.node)
    return found, problems


def _text(pairs: Iterable[tuple[str, str]]) -> str:
    return ", ".join(k if w == TOP else f"eagle_config.{k}" for k, w in sorted(pairs)) or "none"


def config_key_claims(release: str, present: Iterable[str]) -> list[Claim]:
    """One claim per draft class whose module the release has (`present`: the class names)."""
    out = []
    for name in present:
        expected = reads_for(name, release)

        def check(src, name=name, expected=expected):
            got, problems = class_reads(src, name)
            if problems:
                return "; ".join(problems)
            if got == expected:
                return None
            extra, missing = got - expected, expected - got
            return (f"reads {_text(got)}" + (f"; not in the table: {_text(extra)}" if extra else "")
                    + (f"; the table says it reads, not found: {_text(missing)}" if missing else ""))

        out.append(Claim(f"{DRAFT_CLASSES[name].module}: {name} reads the forward keys {_text(expected)} "
                         f"(analysis.draft_config_keys.READS)", check))
    return out
