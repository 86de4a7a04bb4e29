"""The kinds of claim the contract check makes about a SGLang source tree. A `Claim` is a sentence naming the
SGLang place it is about and a check that returns None when the claim holds, else what is wrong; the builders
here make the generic kinds (a function, property or class is defined with given leading parameters; a name is
absent; a class sets attributes; a function's body passes a test; a dataclass has a field; an environment
switch has a default; a module mentions a name). What to claim for a release is decided in `rules`."""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .source import SourceTree, decorators, find, find_function, find_name, param_names, self_attrs_assigned


@dataclass(frozen=True)
class Claim:
    what: str  # the claim in words, naming the SGLang place it is about
    check: Callable[[SourceTree], str | None]  # None when it holds, else what is wrong


def defines(module: str, qualname: str, params: Sequence[str] | None = None, kind: str = "function",
            what: str | None = None) -> Claim:
    def check(src):
        found = find(src, module, qualname)
        if found is None:
            return "not found" if src.has_module(module) else f"module {module} not found"
        node = found.node
        if kind == "function":
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                return None  # bound by an import from outside sglang: exists, signature not readable
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return f"is not a function ({type(node).__name__} at {found.where})"
            if params is not None:
                got = param_names(node)
                if tuple(got[: len(params)]) != tuple(params):
                    return f"parameters {got} do not start with {list(params)} ({found.where})"
        elif kind == "property":
            if not isinstance(node, ast.FunctionDef) or "property" not in decorators(node):
                return f"is not a property ({found.where})"
        elif kind == "class" and not isinstance(node, ast.ClassDef):
            return f"is not a class ({found.where})"
        return None

    sig = "" if params is None else f"({', '.join(params)}{', ...' if params else '...'})"
    return Claim(what or f"{kind} {module}.{qualname}{sig} exists", check)


def absent(module: str, qualname: str, why: str) -> Claim:
    def check(src):
        found = find(src, module, qualname)
        return None if found is None else f"present at {found.where}"

    return Claim(f"{module}.{qualname} does not exist ({why})", check)


def sets_attributes(module: str, cls: str, attrs: Sequence[str]) -> Claim:
    def check(src):
        found = find(src, module, cls)
        if found is None or not isinstance(found.node, ast.ClassDef):
            return f"class {module}.{cls} not found"
        assigned = self_attrs_assigned(found.node)
        # fields set in a base class defined in sglang count too
        for base in found.node.bases:
            name = base.id if isinstance(base, ast.Name) else None
            base_found = find_name(src, found.module, name) if name else None
            if base_found is not None and isinstance(base_found.node, ast.ClassDef):
                assigned |= self_attrs_assigned(base_found.node)
        missing = [a for a in attrs if a not in assigned]
        return None if not missing else f"never assigns self.{', self.'.join(missing)}"

    return Claim(f"{module}.{cls} sets {', '.join(attrs)}", check)


def body_check(module: str, qualname: str, what: str, test: Callable[[ast.AST], str | None]) -> Claim:
    def check(src):
        found, error = find_function(src, module, qualname)
        return error if error else test(found.node)

    return Claim(f"{module}.{qualname}: {what}", check)


def _annotated(node: ast.ClassDef):
    return [n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]


def dataclass_field(module: str, cls: str, field: str) -> Claim:
    def check(src):
        found = find(src, module, cls)
        if found is None or not isinstance(found.node, ast.ClassDef):
            return f"class {module}.{cls} not found"
        fields = _annotated(found.node)
        for base in found.node.bases:  # fields declared in a base class defined in sglang count too
            name = base.id if isinstance(base, ast.Name) else None
            base_found = find_name(src, found.module, name) if name else None
            if base_found is not None and isinstance(base_found.node, ast.ClassDef):
                fields += _annotated(base_found.node)
        return None if field in fields else f"fields are {fields}"

    return Claim(f"{module}.{cls} has field {field}", check)


def env_default(name: str, value: bool | None) -> Claim:
    def check(src):
        tree = src.tree("sglang.srt.environ")
        if tree is None:
            return "sglang.srt.environ not found"
        for n in ast.walk(tree):
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets):
                got = ast.unparse(n.value)
                if value is None:
                    return f"still defined: {got}"
                return None if got == f"EnvBool({value})" else f"default is {got}"
        return None if value is None else "not defined"

    text = "has no switch (v2 worker only)" if value is None else f"defaults to {value}"
    return Claim(f"sglang.srt.environ.{name} {text}", check)


def module_mentions(module: str, name: str, expected: bool, what: str) -> Claim:
    def check(src):
        tree = src.tree(module)
        if tree is None:
            return f"{module} not found"
        seen = any((isinstance(n, ast.Attribute) and n.attr == name)
                   or (isinstance(n, ast.Constant) and n.value == name)
                   for n in ast.walk(tree))
        return None if seen == expected else f"{'does not read' if expected else 'reads'} {name}"

    return Claim(f"{module}: {what}", check)
