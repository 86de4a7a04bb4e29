"""Contract check: prove, from each SGLang release's source, what the probe relies on.

For every release in the supported range (post releases included, pre-releases not), the wheel is
downloaded without installing it (`pip download --no-deps`, cached) and its .py files are parsed with
`ast` (nothing is imported or executed). Checked per release:

- every patch target of every integration in `eagle_probe.integrations.ALL` exists (read from the
  integrations, not listed here), with the leading parameters the wrappers read (EXPECTED_PARAMS);
  targets that the version table names for some releases only (acceptance hooks, ...) are expected
  exactly where the table says;
- every attribute the probe reads exists where it reads it (ATTRIBUTES_READ);
- every field of the release's row in `eagle_probe.versions.RULES` holds in its source (RULE_CLAIMS:
  the capture-id rule in the body of set_eagle3_layers_to_capture, the default ids, which functions
  configure capture with no ids during CUDA-graph set-up, the aux return format, embedding capture,
  the capture-mode flag's module, the TBO helper's name, where acceptance is read and that the bonus
  token is subtracted, the rank sources, the spec-v2 switch, the draft's num_aux).

A broken claim is reported as (release, claim, what is wrong). The same claims run against the
installed SGLang's source with `SourceTree.installed()` (used by `eagle-probe compat --source`).
"""

from __future__ import annotations

import ast
import glob
import json
import os
import re
import subprocess
import sys
import urllib.request
import zipfile
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from .. import versions
from ..versions import (PLUS_ONE_ALWAYS, PLUS_ONE_IF_FIRST_IS_ONE, RANKS_RUNTIME_CONTEXT,
                       V1_WORKER, VersionRules)

PYPI_JSON = "https://pypi.org/pypi/sglang/json"
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_CACHE = os.path.join(_REPO, ".cache", "sglang-wheels")
# Wheels are platform-specific from 0.5.11 on; the .py files are the same in every build. Pin one build
# so the check does not depend on the machine it runs on.
WHEEL_PLATFORM = ("--platform", "manylinux_2_34_x86_64", "--python-version", "3.11", "--implementation", "cp")

DS = versions.DEEPSEEK_V2
FORWARD_BATCH = "sglang.srt.model_executor.forward_batch_info"
MODEL_RUNNER = "sglang.srt.model_executor.model_runner"

# Leading parameters (after self) each wrapper reads by position or name, keyed by patch target.
# A target of ALL that is not listed here is checked for existence only (and says so).
EXPECTED_PARAMS: Dict[str, Tuple[str, ...]] = {
    f"{DS}.DeepseekV2ForCausalLM.set_eagle3_layers_to_capture": ("layer_ids",),
    f"{DS}.DeepseekV2Model.forward": ("input_ids", "positions", "forward_batch"),
    f"{MODEL_RUNNER}.ModelRunner.load_model": (),
    "sglang.srt.models.llama_eagle3.LlamaModel.forward": ("input_ids", "positions", "forward_batch", "input_embeds"),
    "sglang.srt.models.llama_eagle3.LlamaForCausalLMEagle3.load_weights": ("weights",),
    "sglang.srt.models.kimi_k25_eagle3.Eagle3MLAModel.forward": ("input_ids", "positions", "forward_batch",
                                                                 "input_embeds"),
}
ACCEPTANCE_PARAMS = {V1_WORKER: ("batch",), versions.V2_WORKER: ("result", "batch")}


# --------------------------------------------------------------------------------------------------
# Source access (a wheel or an installed package), never imported


class SourceTree:
    """The sglang package's .py files, by module name, from a wheel or a directory."""

    def __init__(self, label: str, read: Callable[[str], Optional[bytes]], paths: Iterable[str]):
        self.label = label
        self._read = read
        self.paths = sorted(p for p in paths if p.endswith(".py"))
        self._path_set = set(self.paths)
        self._trees: Dict[str, Optional[ast.Module]] = {}
        self._texts: Dict[str, Optional[str]] = {}

    @classmethod
    def from_wheel(cls, path: str, label: Optional[str] = None) -> "SourceTree":
        archive = zipfile.ZipFile(path)
        names = [n for n in archive.namelist() if n.startswith("sglang/")]
        return cls(label or os.path.basename(path), lambda n: archive.read(n), names)

    @classmethod
    def installed(cls) -> Optional["SourceTree"]:
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

    def _path(self, module: str) -> Optional[str]:
        base = module.replace(".", "/")
        for candidate in (base + ".py", base + "/__init__.py"):
            if candidate in self._path_set:
                return candidate
        return None

    def has_module(self, module: str) -> bool:
        return self._path(module) is not None

    def text(self, module: str) -> Optional[str]:
        if module not in self._texts:
            path = self._path(module)
            self._texts[module] = None if path is None else self._read(path).decode("utf-8", "replace")
        return self._texts[module]

    def tree(self, module: str) -> Optional[ast.Module]:
        if module not in self._trees:
            text = self.text(module)
            self._trees[module] = None if text is None else ast.parse(text)
        return self._trees[module]

    def modules(self, prefix: str = "sglang") -> List[str]:
        out = []
        for path in self.paths:
            name = path[:-3].replace("/", ".")
            name = name[: -len(".__init__")] if name.endswith(".__init__") else name
            if name == prefix or name.startswith(prefix + "."):
                out.append(name)
        return out

    def split(self, dotted: str) -> Tuple[Optional[str], str]:
        """'a.b.C.f' -> ('a.b', 'C.f'): the longest prefix that is a module here."""
        parts = dotted.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            module = ".".join(parts[:cut])
            if self.has_module(module):
                return module, ".".join(parts[cut:])
        return None, dotted


def _top_level_bindings(body):
    """Statements at module level (descending into if/try, not into defs)."""
    for node in body:
        if isinstance(node, (ast.If, ast.Try)):
            yield from _top_level_bindings(node.body)
            yield from _top_level_bindings(node.orelse)
            for handler in getattr(node, "handlers", ()):
                yield from _top_level_bindings(handler.body)
            yield from _top_level_bindings(getattr(node, "finalbody", ()))
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


def find_name(src: SourceTree, module: str, name: str, depth: int = 0) -> Optional[Found]:
    """Where `name` is bound at module level (following `from x import name` inside sglang)."""
    tree = src.tree(module)
    if tree is None or depth > 8:
        return None
    found = None
    for node in _top_level_bindings(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            found = Found(module, node)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            found = Found(module, node)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            found = Found(module, node)
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    origin = _absolute(module, node, src.text(module) is not None and
                                       src._path(module).endswith("__init__.py"))
                    inner = find_name(src, origin, alias.name, depth + 1) if origin.startswith("sglang") else None
                    found = inner or Found(module, node)
    return found


def _class_member(src: SourceTree, cls: Found, attr: str, depth: int = 0) -> Optional[Found]:
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
            hit = _class_member(src, base_found, attr, depth + 1)
            if hit is not None:
                return hit
    return None


def find(src: SourceTree, module: str, qualname: str) -> Optional[Found]:
    """Resolve module + 'Class.method' (or 'function') the way Patcher's getattr chain would."""
    first, *rest = qualname.split(".")
    found = find_name(src, module, first)
    for part in rest:
        if found is None:
            return None
        found = _class_member(src, found, part)
    return found


def _params(node) -> List[str]:
    args = [a.arg for a in node.args.posonlyargs + node.args.args]
    if args and args[0] in ("self", "cls"):
        args = args[1:]
    return args + [a.arg for a in node.args.kwonlyargs]


def _decorators(node) -> List[str]:
    return [ast.unparse(d) for d in getattr(node, "decorator_list", ())]


def _self_attrs_assigned(cls_node: ast.ClassDef) -> set:
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


def _calls(node) -> Iterable[ast.Call]:
    return (n for n in ast.walk(node) if isinstance(n, ast.Call))


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


# --------------------------------------------------------------------------------------------------
# Claims


@dataclass(frozen=True)
class Claim:
    what: str  # the claim in words, naming the SGLang place it is about
    check: Callable[[SourceTree], Optional[str]]  # None when it holds, else what is wrong


def defines(module: str, qualname: str, params: Optional[Sequence[str]] = None, kind: str = "function",
            what: Optional[str] = None) -> Claim:
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
                got = _params(node)
                if tuple(got[: len(params)]) != tuple(params):
                    return f"parameters {got} do not start with {list(params)} ({found.where})"
        elif kind == "property":
            if not isinstance(node, ast.FunctionDef) or "property" not in _decorators(node):
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
        assigned = _self_attrs_assigned(found.node)
        # fields set in a base class defined in sglang count too
        for base in found.node.bases:
            name = base.id if isinstance(base, ast.Name) else None
            base_found = find_name(src, found.module, name) if name else None
            if base_found is not None and isinstance(base_found.node, ast.ClassDef):
                assigned |= _self_attrs_assigned(base_found.node)
        missing = [a for a in attrs if a not in assigned]
        return None if not missing else f"never assigns self.{', self.'.join(missing)}"

    return Claim(f"{module}.{cls} sets {', '.join(attrs)}", check)


def _function(src, module, qualname):
    found = find(src, module, qualname)
    if found is None or not isinstance(found.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None, f"{module}.{qualname} not found"
    return found, None


def body_check(module: str, qualname: str, what: str, test: Callable[[ast.AST], Optional[str]]) -> Claim:
    def check(src):
        found, error = _function(src, module, qualname)
        return error if error else test(found.node)

    return Claim(f"{module}.{qualname}: {what}", check)


# ---- claims about the capture-id rule and defaults (body of set_eagle3_layers_to_capture) ----------

_PLUS_ONE = re.compile(r"^\[(\w+) \+ 1 for \1 in layer_ids\]$")


def _capture_assignments(node) -> List[Tuple[ast.Assign, List[str]]]:
    """Assignments to self.model.layers_to_capture with the if-conditions that lead to them."""
    out = []

    def visit(stmts, conditions):
        for stmt in stmts:
            if isinstance(stmt, ast.If):
                test = ast.unparse(stmt.test)
                visit(stmt.body, conditions + [test])
                visit(stmt.orelse, conditions + [f"not ({test})"])
            elif isinstance(stmt, ast.Assign) and any(ast.unparse(t) == "self.model.layers_to_capture"
                                                      for t in stmt.targets):
                out.append((stmt, conditions))

    visit(node.body, [])
    return out


def _capture_rule_test(rule: str):
    def test(node):
        ids_branch = [(ast.unparse(a.value), [x for x in c if x != "not (layer_ids is None)"])
                      for a, c in _capture_assignments(node) if "not (layer_ids is None)" in c]
        shapes = [(bool(_PLUS_ONE.match(v)), v, c) for v, c in ids_branch]
        if rule == PLUS_ONE_ALWAYS:
            if len(shapes) == 1 and shapes[0][0] and not shapes[0][2]:
                return None
        elif rule == PLUS_ONE_IF_FIRST_IS_ONE:
            plus = [s for s in shapes if s[0]]
            plain = [s for s in shapes if not s[0]]
            if (len(plus) == 1 and re.fullmatch(r"(layer_ids and )?layer_ids\[0\] == 1", " ".join(plus[0][2]))
                    and len(plain) == 1 and plain[0][1] in ("list(layer_ids)", "layer_ids")):
                return None
        return f"ids branch assigns {[(v, c) for _, v, c in shapes]}, not rule {rule}"

    return test


def _default_ids_test(node):
    for assign, conditions in _capture_assignments(node):
        if conditions and conditions[-1] == "layer_ids is None":
            value = ast.unparse(assign.value)
            if re.fullmatch(r"\[2, (\w+) // 2, \1 - 3\]", value):
                source = [ast.unparse(n.value) for n in ast.walk(node) if isinstance(n, ast.Assign)
                          and any(ast.unparse(t) == value[4:value.index(" //")] for t in n.targets)]
                if source and source[0] != "self.config.num_hidden_layers":
                    return f"n is {source[0]}, not self.config.num_hidden_layers"
                return None
            return f"defaults are {value}"
    return "no assignment for layer_ids is None"


# ---- graph set-up ---------------------------------------------------------------------------------

def _no_arg_setter_calls(node) -> List[int]:
    return [c.lineno for c in _calls(node) if _call_name(c) == "set_eagle3_layers_to_capture"
            and not c.args and not c.keywords]


def graph_setup_calls_defaults(caller: str) -> Claim:
    def check(src):
        module, qualname = src.split(caller)
        if module is None:
            return f"module of {caller} not found"
        found, error = _function(src, module, qualname)
        if error:
            return error
        return None if _no_arg_setter_calls(found.node) else "makes no set_eagle3_layers_to_capture() call"

    return Claim(f"{caller} calls set_eagle3_layers_to_capture() with no ids (default layers during graph set-up)",
                 check)


def no_default_setter_calls() -> Claim:
    def check(src):
        hits = []
        for module in src.modules("sglang.srt"):
            if module.startswith("sglang.srt.models."):
                continue
            text = src.text(module)
            if ("set_eagle3_layers_to_capture" not in text
                    or not re.search(r"set_eagle3_layers_to_capture\(\s*\)", text)):
                continue
            hits += [f"{module}:{line}" for line in _no_arg_setter_calls(src.tree(module))]
        return None if not hits else f"no-id calls at {', '.join(hits)}"

    return Claim("nothing outside sglang.srt.models calls set_eagle3_layers_to_capture() with no ids "
                 "(graph set-up uses the configured ids)", check)


# ---- aux format and embedding capture (body of DeepseekV2Model.forward) ---------------------------

def _aux_list_test(node):
    returns = [ast.unparse(n.value) for n in ast.walk(node) if isinstance(n, ast.Return) and n.value is not None]
    packer = [c for c in _calls(node) if _call_name(c) == "AuxHiddenStatePacker"]
    if packer:
        return "builds an AuxHiddenStatePacker (packed format)"
    inits = [n for n in ast.walk(node) if isinstance(n, ast.Assign) and ast.unparse(n.value) == "[]"
             and any(ast.unparse(t) == "aux_hidden_states" for t in n.targets)]
    if inits and "(hidden_states, aux_hidden_states)" in returns:
        return None
    return f"no list aux_hidden_states returned (returns: {returns})"


def _aux_packed_test(node):
    packer = [c for c in _calls(node) if _call_name(c) == "AuxHiddenStatePacker"]
    finalize = [c for c in _calls(node) if _call_name(c) == "finalize"]
    return None if packer and finalize else "no AuxHiddenStatePacker(...).finalize() in the forward"


def _adds_residual(node):
    for n in ast.walk(node):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add) and ast.unparse(n) == "hidden_states + residual":
            return True
    return False


def _embedding_not_capturable_test(node):
    captures = [c for c in _calls(node) if _call_name(c) == "append" and c.args and _adds_residual(c.args[0])]
    if captures or any(_call_name(c) == "tensor_model_parallel_all_gather" and c.args and _adds_residual(c.args[0])
                       for c in _calls(node)):
        return None
    return "does not capture hidden_states + residual in its own loop"


def _embedding_capturable_test(node):
    keywords = [k for c in _calls(node) for k in c.keywords if k.arg == versions.LAYER_CAPTURE_KWARG]
    return None if keywords else f"passes no {versions.LAYER_CAPTURE_KWARG}= to the decoder layers"


def _takes_param(name):
    def test(node):
        args = node.args
        names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
        return None if name in names else f"has no parameter {name} (parameters: {names})"
    return test


def _calls_name(name):
    def test(node):
        return None if any(_call_name(c) == name for c in _calls(node)) else f"does not call {name}"
    return test


# ---- acceptance ------------------------------------------------------------------------------------

def _assigns_result_field(field):
    def test(node):
        for n in ast.walk(node):
            if isinstance(n, ast.Assign) and any(ast.unparse(t) == f"result.{field}" for t in n.targets):
                has_sub = any(isinstance(b, ast.BinOp) and isinstance(b.op, ast.Sub) for b in ast.walk(n.value))
                return None if has_sub else f"result.{field} = {ast.unparse(n.value)} subtracts nothing (bonus kept?)"
        return f"never assigns result.{field}"
    return test


def dataclass_field(module: str, cls: str, field: str) -> Claim:
    def check(src):
        found = find(src, module, cls)
        if found is None or not isinstance(found.node, ast.ClassDef):
            return f"class {module}.{cls} not found"
        fields = [n.target.id for n in found.node.body
                  if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]
        return None if field in fields else f"fields are {fields}"

    return Claim(f"{module}.{cls} has field {field}", check)


def env_default(name: str, value: Optional[bool]) -> Claim:
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


# --------------------------------------------------------------------------------------------------
# The declarative tables


# Attributes the probe reads (integrations/, ranks.py), true in every supported release.
ATTRIBUTES_READ: Tuple[Claim, ...] = (
    sets_attributes(DS, "DeepseekV2Model", ("layers_to_capture", "first_k_dense_replace", "start_layer", "end_layer")),
    body_check(DS, "DeepseekV2Model.forward", "reads self.layers_to_capture and forward_batch.can_run_tbo",
               lambda node: None if {"self.layers_to_capture", "forward_batch.can_run_tbo"} <= {
                   ast.unparse(n) for n in ast.walk(node) if isinstance(n, ast.Attribute)} else "does not read both"),
    sets_attributes(DS, "DeepseekV2ForCausalLM", ("model", "config", "pp_group", "capture_aux_hidden_states")),
    defines(FORWARD_BATCH, "ForwardBatch.can_run_tbo", kind="property"),
    dataclass_field(FORWARD_BATCH, "ForwardBatch", "forward_mode"),
    dataclass_field(FORWARD_BATCH, "ForwardBatch", "tbo_split_seq_index"),
    sets_attributes(MODEL_RUNNER, "ModelRunner", ("is_draft_worker", "model")),
    defines("sglang.srt.distributed.parallel_state", "model_parallel_is_initialized"),
    defines("sglang.srt.distributed.parallel_state", "get_tensor_model_parallel_rank"),
    defines("sglang.srt.distributed.parallel_state", "get_tensor_model_parallel_world_size"),
    defines("sglang.srt.distributed.parallel_state", "get_pp_group"),
)

_SETTER = "DeepseekV2ForCausalLM.set_eagle3_layers_to_capture"
_MODEL_FORWARD = "DeepseekV2Model.forward"


def _rule_claims(rules: VersionRules) -> List[Claim]:
    """Each field of a row of versions.RULES as claims about that release's source."""
    out = [body_check(DS, _SETTER, f"maps ids by {rules.capture_id_rule}", _capture_rule_test(rules.capture_id_rule)),
           body_check(DS, _SETTER, f"defaults (ids None) are {rules.default_ids}", _default_ids_test)]
    if rules.graph_setup_uses_default_layers:
        out += [graph_setup_calls_defaults(c) for c in rules.graph_setup_callers]
    else:
        out.append(no_default_setter_calls())
    out.append(body_check(DS, _MODEL_FORWARD, f"returns aux states as a {rules.aux_format}",
                          _aux_list_test if rules.aux_format == "list" else _aux_packed_test))
    out.append(body_check(DS, _MODEL_FORWARD,
                          "captures the residual in the decoder layer (index 0 = embedding output)"
                          if rules.embedding_capturable else
                          "captures hidden_states + residual in its loop (index 0: residual is None)",
                          _embedding_capturable_test if rules.embedding_capturable else _embedding_not_capturable_test))
    if rules.embedding_capturable:
        out.append(body_check(DS, "DeepseekV2DecoderLayer.forward", f"takes {versions.LAYER_CAPTURE_KWARG}= (the "
                              "all-layer dumps hand each layer their collector there)",
                              _takes_param(versions.LAYER_CAPTURE_KWARG)))
    out.append(defines(rules.capture_flag_module, "get_is_capture_mode"))
    out.append(defines(DS, rules.tbo_helper, what=f"{DS} binds the TBO helper {rules.tbo_helper}"))
    out.append(body_check(DS, _MODEL_FORWARD, f"runs TBO layers through {rules.tbo_helper}",
                          _calls_name(rules.tbo_helper)))
    for hook in rules.acceptance:
        out.append(defines(hook.module, hook.qualname, ACCEPTANCE_PARAMS[hook.worker],
                           what=f"acceptance ({hook.worker} worker, {hook.when}): {hook.target} exists"))
        if hook.field_owner is not None:
            out.append(dataclass_field(*hook.field_owner, hook.field))
        else:
            out.append(body_check(hook.module, hook.qualname, f"sets result.{hook.field} with the bonus token "
                                  f"{'kept' if hook.includes_bonus else 'subtracted'}",
                                  _assigns_result_field(hook.field)))
    for module in rules.absent_modules:
        out.append(Claim(f"{module} does not exist in this release",
                         lambda src, module=module: "exists" if src.has_module(module) else None))
    if not any(h.worker == V1_WORKER for h in rules.acceptance):
        out.append(absent("sglang.srt.speculative.eagle_worker", "EAGLEWorker", "no v1 worker in this row"))
    out.append(env_default(versions.SPEC_V2_ENV, rules.spec_v2_default))
    if rules.rank_source == RANKS_RUNTIME_CONTEXT:
        out.append(defines("sglang.srt.runtime_context", "get_parallel"))
    else:
        out.append(Claim("sglang.srt.runtime_context does not exist (ranks from parallel_state)",
                         lambda src: "exists" if src.has_module("sglang.srt.runtime_context") else None))
    if rules.dp_rank_from_dp_attention:
        out.append(defines("sglang.srt.layers.dp_attention", "get_attention_dp_rank"))
    else:
        out.append(absent("sglang.srt.layers.dp_attention", "get_attention_dp_rank", "dp rank from runtime_context"))
    out.append(module_mentions("sglang.srt.models.llama_eagle3", "num_aux_hidden_states", rules.draft_reads_num_aux,
                               "the EAGLE-3 draft sizes fc by num_aux_hidden_states" if rules.draft_reads_num_aux
                               else "the EAGLE-3 draft sizes fc for 3 aux states (num_aux_hidden_states not read)"))
    return out


def target_claims(rules: VersionRules, integrations=None) -> Tuple[List[Claim], List[str]]:
    """Claims for the patch targets of the integrations; plus notes on targets not expected here."""
    if integrations is None:
        from ..runtime.integrations import ALL as integrations
    specific = versions.version_specific_targets()
    claims, notes = [], []
    for integration in integrations:
        for target in integration.targets:
            dotted = f"{target.module}.{target.qualname}"
            rows = specific.get(dotted)
            if target.module in rules.absent_modules:
                notes.append(f"{integration.name}: {dotted} not expected: {target.module} is not in this release")
                continue
            if rows is not None and rules not in rows:
                notes.append(f"{integration.name}: {dotted} not expected in this release (version table)")
                continue
            params = EXPECTED_PARAMS.get(dotted)
            if params is None:
                for hook in rules.acceptance:
                    if hook.target == dotted:
                        params = ACCEPTANCE_PARAMS[hook.worker]
            claim = defines(target.module, target.qualname, params,
                            what=f"patch target of {integration.name}: {dotted}"
                                 + ("" if params is not None
                                    else " exists (signature not declared in contract.EXPECTED_PARAMS)")
                                 + ("" if params is None else f"({', '.join(params)}, ...)"))
            claims.append(claim)
    wrapped = {f"{t.module}.{t.qualname}" for i in integrations for t in i.targets}
    for hook in rules.acceptance:
        claims.append(Claim(f"the probe wraps the acceptance hook {hook.target} ({hook.worker} worker, {hook.when})",
                            lambda src, hook=hook: None if hook.target in wrapped else
                            "no integration in eagle_probe.integrations.ALL patches it"))
    return claims, notes


def claims_for(rules: VersionRules, integrations=None) -> Tuple[List[Claim], List[str]]:
    targets, notes = target_claims(rules, integrations)
    return targets + list(ATTRIBUTES_READ) + _rule_claims(rules), notes


@dataclass
class Result:
    release: str
    rules_first: str
    checked: int
    failures: List[Tuple[str, str]]  # (claim, what is wrong)
    notes: List[str]


def check_tree(src: SourceTree, release: str, integrations=None, rules: Optional[VersionRules] = None) -> Result:
    """Every claim for `release` (its row of the table, unless `rules` is given) against `src`."""
    if rules is None:
        rules = versions.rules_for(versions.parse_version(release))
    claims, notes = claims_for(rules, integrations)
    failures = []
    for claim in claims:
        try:
            problem = claim.check(src)
        except Exception as exc:  # a parse problem is a broken claim, not a crash of the check
            problem = f"check raised {type(exc).__name__}: {exc}"
        if problem is not None:
            failures.append((claim.what, problem))
    return Result(release, rules.first_text, len(claims), failures, notes)


# --------------------------------------------------------------------------------------------------
# Releases and wheels


def list_releases(timeout: float = 60) -> List[str]:
    """Final releases (post releases included, pre-releases not) in the supported range, from PyPI."""
    try:
        with urllib.request.urlopen(PYPI_JSON, timeout=timeout) as response:
            data = json.load(response)
        candidates = [v for v, files in data["releases"].items()
                      if any(f.get("packagetype") == "bdist_wheel" and not f.get("yanked") for f in files)]
    except Exception as exc:
        out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "sglang"], capture_output=True,
                             text=True, timeout=timeout)
        match = re.search(r"Available versions: (.*)", out.stdout)
        if not match:
            raise RuntimeError(f"cannot list sglang releases from PyPI: {exc}; pip index: {out.stderr.strip()[-300:]}")
        candidates = [v.strip() for v in match.group(1).split(",")]
    out = []
    for text in candidates:
        if not re.fullmatch(r"\d+\.\d+\.\d+(\.post\d+)?", text):
            continue  # rc, dev, local builds
        parsed = versions.parse_version(text)
        if versions.is_supported(parsed):
            out.append(text)
    return sorted(out, key=versions.parse_version)


def cached_wheel(release: str, cache: str) -> Optional[str]:
    hits = sorted(glob.glob(os.path.join(cache, f"sglang-{release}-*.whl")))
    return hits[0] if hits else None


def download_wheel(release: str, cache: str = DEFAULT_CACHE, timeout: float = 600) -> str:
    """The release's wheel in `cache` (downloaded with pip, not installed)."""
    hit = cached_wheel(release, cache)
    if hit:
        return hit
    os.makedirs(cache, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q", "--no-deps",
               "--only-binary=:all:", *WHEEL_PLATFORM, "-d", cache, f"sglang=={release}"]
    out = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    hit = cached_wheel(release, cache)
    if hit is None:
        raise RuntimeError(f"pip download sglang=={release} failed: {(out.stderr or out.stdout).strip()[-500:]}")
    return hit


def check_releases(releases: Sequence[str], cache: str = DEFAULT_CACHE, integrations=None,
                   progress: Optional[Callable[[str], None]] = None) -> List[Result]:
    results = []
    for release in releases:
        try:
            src = SourceTree.from_wheel(download_wheel(release, cache), label=release)
            result = check_tree(src, release, integrations)
        except Exception as exc:
            rules = versions.rules_for(versions.parse_version(release))
            result = Result(release, rules.first_text, 0, [("wheel downloaded and readable", str(exc))], [])
        results.append(result)
        if progress is not None:
            progress(format_result(result))
    return results


def format_result(result: Result) -> str:
    head = (f"{result.release:<14} rules from {result.rules_first:<8} {result.checked:>3} claims  "
            + ("ok" if not result.failures else f"{len(result.failures)} BROKEN"))
    lines = [head] + [f"    BROKEN {result.release}: {claim}: {problem}" for claim, problem in result.failures]
    return "\n".join(lines)


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="contract_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("releases", nargs="*", help="releases to check (default: every release in the supported "
                        "range on PyPI)")
    parser.add_argument("--cache", default=os.environ.get("EAGLE_PROBE_WHEEL_CACHE", DEFAULT_CACHE))
    parser.add_argument("--installed", action="store_true", help="check the installed SGLang's source instead")
    parser.add_argument("--list", action="store_true", help="print the claims for each release and exit")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.installed:
        src = SourceTree.installed()
        release = versions.installed_sglang_version()
        if src is None or release is None:
            print("contract_check: SGLang is not installed here", file=sys.stderr)
            return 2
        results = [check_tree(src, release)]
        print(format_result(results[0]))
    else:
        releases = args.releases or list_releases()
        if args.list:
            for release in releases:
                claims, notes = claims_for(versions.rules_for(versions.parse_version(release)))
                print(release)
                print("\n".join(f"    {c.what}" for c in claims) + "".join(f"\n    note: {n}" for n in notes))
            return 0
        print(f"contract_check: {len(releases)} releases: {' '.join(releases)}", flush=True)
        results = check_releases(releases, args.cache, progress=None if args.json else lambda t: print(t, flush=True))
    if args.json:
        print(json.dumps([r.__dict__ for r in results], indent=1))
    broken = [(r.release, c) for r in results for c, _ in r.failures]
    if broken:
        print(f"contract_check: {len(broken)} broken (release, claim) pairs", file=sys.stderr)
        return 1
    return 0
