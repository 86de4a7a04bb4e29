"""SGLang's source as the contract check reads it: the sglang package's .py files from a wheel or from the
installed package (`SourceTree`), parsed with `ast` and never imported, and the name resolution the claims
build on: where a module binds a name (following sglang's own re-exports), a class member as getattr would
find it (bases included), and small readers of a def (parameters, decorators, calls, self attributes)."""

from __future__ import annotations

import ast
import os
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ... import versions


class SourceTree:
    """The sglang package's .py files, by module name, from a wheel or a directory."""

    def __init__(self, label: str, read: Callable[[str], bytes | None], paths: Iterable[str]):
        self.label = label
        self._read = read
        self.paths = sorted(p for p in paths if p.endswith(".py"))
        self._path_set = set(self.paths)
        self._trees: dict[str, ast.Module | None] = {}
        self._texts: dict[str, str | None] = {}

    @classmethod
    def from_wheel(cls, path: str, label: str | None = None) -> SourceTree:
        archive = zipfile.ZipFile(path)
        names = [n for n in archive.namelist() if n.startswith("sglang/")]
        return cls(label or os.path.basename(path), lambda n: archive.read(n), names)

    @classmethod
    def installed(cls) -> SourceTree | None:
        import importlib.util

        spec = importlib.util.find_spec("sglang")  # finds the package; does not import it
        if spec is None or not spec.submodule_search_locations:
            return None
        root = os.path.dirname(list(spec.submodule_search_locations)[0])
        paths = []
        for folder, _, files in os.walk(os.path.join(root, "sglang")):
            paths += [os.path.relpath(os.path.join(folder, f), root) for f in files if f.endswith(".py")]

        def read(rel):
            with open(os.path.join(root, rel), "rb") as handle:
                return handle.read()

        return cls(f"installed sglang {versions.installed_sglang_version()}", read, paths)

    def _path(self, module: str) -> str | None:
        base = module.replace(".", "/")
        for candidate in (base + ".py", base + "/__init__.py"):
            if candidate in self._path_set:
                return candidate
        return None

    def has_module(self, module: str) -> bool:
        return self._path(module) is not None

    def text(self, module: str) -> str | None:
        if module not in self._texts:
            path = self._path(module)
            self._texts[module] = None if path is None else self._read(path).decode("utf-8-sig", "replace")
        return self._texts[module]

    def tree(self, module: str) -> ast.Module | None:
        if module not in self._trees:
            text = self.text(module)
            self._trees[module] = None if text is None else ast.parse(text)
        return self._trees[module]

    def modules(self, prefix: str = "sglang") -> list[str]:
        out = []
        for path in self.paths:
            name = path[:-3].replace("/", ".")
            name = name[: -len(".__init__")] if name.endswith(".__init__") else name
            if name == prefix or name.startswith(prefix + "."):
                out.append(name)
        return out

    def split(self, dotted: str) -> tuple[str | None, str]:
        """'a.b.C.f' -> ('a.b', 'C.f'): the longest prefix that is a module here."""
        parts = dotted.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            module = ".".join(parts[:cut])
            if self.has_module(module):
                return module, ".".join(parts[cut:])
        return None, dotted


def _binds(node, name: str) -> bool:
    """Whether a top-level statement defines or assigns `name`."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name == name
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
    return isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name


def top_level_bindings(body):
    """Statements at module level (descending into if/try, not into defs)."""
    for node in body:
        if isinstance(node, (ast.If, ast.Try)):
            yield from top_level_bindings(node.body)
            yield from top_level_bindings(node.orelse)
            for handler in getattr(node, "handlers", ()):
                yield from top_level_bindings(handler.body)
            yield from top_level_bindings(getattr(node, "finalbody", ()))
        else:
            yield node


@dataclass
class Found:
    module: str
    node: ast.AST  # FunctionDef / ClassDef / Assign / AnnAssign / ImportFrom / Import

    @property
    def where(self) -> str:
        return f"{self.module}:{getattr(self.node, 'lineno', '?')}"


def _absolute(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def find_name(src: SourceTree, module: str, name: str, depth: int = 0) -> Found | None:
    """Where `name` is bound at module level (following `from x import name` inside sglang)."""
    tree = src.tree(module)
    if tree is None or depth > 8:
        return None
    found = None
    for node in top_level_bindings(tree.body):
        if _binds(node, name):
            found = Found(module, node)
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    origin = _absolute(module, node, src.text(module) is not None and
                                       src._path(module).endswith("__init__.py"))
                    inner = find_name(src, origin, alias.name, depth + 1) if origin.startswith("sglang") else None
                    found = inner or Found(module, node)
    return found


def class_member(src: SourceTree, cls: Found, attr: str, depth: int = 0) -> Found | None:
    """Where class `cls` (or a base of it defined in sglang) binds `attr`."""
    if depth > 8 or not isinstance(cls.node, ast.ClassDef):
        return None
    for node in cls.node.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == attr:
            return Found(cls.module, node)
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == attr for t in node.targets):
            return Found(cls.module, node)
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == attr:
            return Found(cls.module, node)
    for base in cls.node.bases:  # inherited, as getattr would find it
        name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else None
        base_found = find_name(src, cls.module, name) if name else None
        if base_found is not None:
            hit = class_member(src, base_found, attr, depth + 1)
            if hit is not None:
                return hit
    return None


def find(src: SourceTree, module: str, qualname: str) -> Found | None:
    """Resolve module + 'Class.method' (or 'function') the way Patcher's getattr chain would."""
    first, *rest = qualname.split(".")
    found = find_name(src, module, first)
    for part in rest:
        if found is None:
            return None
        found = class_member(src, found, part)
    return found


def find_function(src: SourceTree, module: str, qualname: str) -> tuple[Found | None, str | None]:
    """(the def, None), or (None, what is wrong) when module.qualname is not a function."""
    found = find(src, module, qualname)
    if found is None or not isinstance(found.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None, f"{module}.{qualname} not found"
    return found, None


def param_names(node) -> list[str]:
    """A def's parameter names, self/cls left out, keyword-only ones last."""
    args = [a.arg for a in node.args.posonlyargs + node.args.args]
    if args and args[0] in ("self", "cls"):
        args = args[1:]
    return args + [a.arg for a in node.args.kwonlyargs]


def decorators(node) -> list[str]:
    return [ast.unparse(d) for d in getattr(node, "decorator_list", ())]


def self_attrs_assigned(cls_node: ast.ClassDef) -> set:
    """Every self.<attr> a class's methods assign, and its annotated (dataclass) fields."""
    out = set()
    for node in ast.walk(cls_node):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "self":
                    out.add(sub.attr)
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)  # dataclass field
    return out


def calls(node) -> Iterable[ast.Call]:
    return (n for n in ast.walk(node) if isinstance(n, ast.Call))


def call_name(call: ast.Call) -> str:
    """The called name: f for f(...) and x.f(...), '' otherwise."""
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
