"""The source tests behind the version table's claims: each reads the body of one SGLang function (or scans
sglang.srt) and says whether it does what a field of a `versions.RULES` row says: how
set_eagle3_layers_to_capture maps and defaults the ids, who calls it with no ids during graph set-up, how
DeepseekV2Model.forward returns and captures the aux states, and how acceptance is counted. A test takes a
def node and returns None when it holds, else what is wrong; `rules` turns them into claims."""

from __future__ import annotations

import ast
import re

from ... import versions
from ...versions import PLUS_ONE_ALWAYS, PLUS_ONE_IF_FIRST_IS_ONE
from .claims import Claim
from .source import call_name, calls, find_function

# ---- the capture-id rule and defaults (body of set_eagle3_layers_to_capture) ----------------------

_PLUS_ONE = re.compile(r"^\[(\w+) \+ 1 for \1 in layer_ids\]$")


def _capture_assignments(node) -> list[tuple[ast.Assign, list[str]]]:
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


def capture_rule_test(rule: str):
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


def default_ids_test(node):
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

def _no_arg_setter_calls(node) -> list[int]:
    return [c.lineno for c in calls(node) if call_name(c) == "set_eagle3_layers_to_capture"
            and not c.args and not c.keywords]


def graph_setup_calls_defaults(caller: str) -> Claim:
    def check(src):
        module, qualname = src.split(caller)
        if module is None:
            return f"module of {caller} not found"
        found, error = find_function(src, module, qualname)
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
            # a cheap text filter first: parsing every module of sglang.srt would be slow
            if ("set_eagle3_layers_to_capture" not in text
                    or not re.search(r"set_eagle3_layers_to_capture\(\s*\)", text)):
                continue
            hits += [f"{module}:{line}" for line in _no_arg_setter_calls(src.tree(module))]
        return None if not hits else f"no-id calls at {', '.join(hits)}"

    return Claim("nothing outside sglang.srt.models calls set_eagle3_layers_to_capture() with no ids "
                 "(graph set-up uses the configured ids)", check)


# ---- aux format and embedding capture (body of DeepseekV2Model.forward) ---------------------------

def aux_list_test(node):
    returns = [ast.unparse(n.value) for n in ast.walk(node) if isinstance(n, ast.Return) and n.value is not None]
    packer = [c for c in calls(node) if call_name(c) == "AuxHiddenStatePacker"]
    if packer:
        return "builds an AuxHiddenStatePacker (packed format)"
    inits = [n for n in ast.walk(node) if isinstance(n, ast.Assign) and ast.unparse(n.value) == "[]"
             and any(ast.unparse(t) == "aux_hidden_states" for t in n.targets)]
    if inits and "(hidden_states, aux_hidden_states)" in returns:
        return None
    return f"no list aux_hidden_states returned (returns: {returns})"


def aux_packed_test(node):
    packer = [c for c in calls(node) if call_name(c) == "AuxHiddenStatePacker"]
    finalize = [c for c in calls(node) if call_name(c) == "finalize"]
    return None if packer and finalize else "no AuxHiddenStatePacker(...).finalize() in the forward"


def _adds_residual(node):
    for n in ast.walk(node):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add) and ast.unparse(n) == "hidden_states + residual":
            return True
    return False


def embedding_not_capturable_test(node):
    captures = [c for c in calls(node) if call_name(c) == "append" and c.args and _adds_residual(c.args[0])]
    if captures or any(call_name(c) == "tensor_model_parallel_all_gather" and c.args and _adds_residual(c.args[0])
                       for c in calls(node)):
        return None
    return "does not capture hidden_states + residual in its own loop"


def embedding_capturable_test(node):
    keywords = [k for c in calls(node) for k in c.keywords if k.arg == versions.LAYER_CAPTURE_KWARG]
    return None if keywords else f"passes no {versions.LAYER_CAPTURE_KWARG}= to the decoder layers"


def takes_param(name):
    def test(node):
        args = node.args
        names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
        return None if name in names else f"has no parameter {name} (parameters: {names})"
    return test


def calls_name(name, expected=True):
    def test(node):
        called = any(call_name(c) == name for c in calls(node))
        if called == expected:
            return None
        return f"does not call {name}" if expected else f"calls {name}"
    return test


# ---- acceptance ------------------------------------------------------------------------------------

def assigns_result_field(field):
    def test(node):
        for n in ast.walk(node):
            if isinstance(n, ast.Assign) and any(ast.unparse(t) == f"result.{field}" for t in n.targets):
                has_sub = any(isinstance(b, ast.BinOp) and isinstance(b.op, ast.Sub) for b in ast.walk(n.value))
                return None if has_sub else f"result.{field} = {ast.unparse(n.value)} subtracts nothing (bonus kept?)"
        return f"never assigns result.{field}"
    return test


def returns_committed_token_lists(node):
    """The v2 resolver returns a list built by one append per request of its loop over batch.reqs, of a slice of
    next_token_ids ending at the request's accept length (the committed tokens: vocabulary coverage reads them)."""
    returned = {n.value.id for n in ast.walk(node) if isinstance(n, ast.Return) and isinstance(n.value, ast.Name)}
    sliced = any(isinstance(n, ast.Subscript) and ast.unparse(n.value) == "next_token_ids"
                 and isinstance(n.slice, ast.Slice) and "accept_lens" in ast.unparse(n.slice) for n in ast.walk(node))
    for loop in (n for n in ast.walk(node) if isinstance(n, ast.For) and "batch.reqs" in ast.unparse(n.iter)):
        for stmt in loop.body:
            call = stmt.value if isinstance(stmt, ast.Expr) else None
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "append"
                    and ast.unparse(call.func.value) in returned):
                return None if sliced else "appends no slice of next_token_ids up to accept_lens"
    return "returns no list appended once per request of a loop over batch.reqs"
def returns_last(name):
    """Every tuple the function returns ends with `name` (the v1 verify's can_run_cuda_graph, read as output[-1])."""
    def test(node):
        tuples = [n.value for n in ast.walk(node) if isinstance(n, ast.Return) and isinstance(n.value, ast.Tuple)]
        if not tuples:
            return "returns no tuple"
        wrong = [ast.unparse(t) for t in tuples if not (isinstance(t.elts[-1], ast.Name) and t.elts[-1].id == name)]
        return f"returns tuples not ending with {name}: {wrong}" if wrong else None
    return test


def retraction_sites_problem(src, module: str, qualname: str):
    """None when every `X.is_retracted = True` in sglang.srt is inside `module.qualname`, else where the others are."""
    method = qualname.rpartition(".")[2]
    found, elsewhere = False, []
    for name in src.modules("sglang.srt"):
        if "is_retracted" not in (src.text(name) or ""):  # parse only the modules that name it
            continue
        tree = src.tree(name)
        for func in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            for node in ast.walk(func):
                if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "is_retracted"
                                                         for t in node.targets)
                        and isinstance(node.value, ast.Constant) and node.value.value is True):
                    if name == module and func.name == method:
                        found = True
                    else:
                        elsewhere.append(f"{name}.{func.name}")
    if not found:
        return f"{qualname} does not set is_retracted = True"
    return f"also set in {sorted(set(elsewhere))}" if elsewhere else None


# ---- plain reads the target wrapper makes instead of calling SGLang's accessors (runtime/integrations) --------------

def returns_test(*bodies: str):
    """A function whose body is one `return EXPR`, EXPR one of `bodies` (as ast.unparse writes it)."""
    def test(node):
        statements = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        got = ast.unparse(statements[0].value) if len(statements) == 1 and isinstance(statements[0], ast.Return) \
            and statements[0].value is not None else None
        return None if got in bodies else f"body is {ast.unparse(node.body[-1])!r}, not `return` {' / '.join(bodies)}"

    return test


def capture_flag_claim(module: str) -> Claim:
    """get_is_capture_mode returns `is_capture_mode`, or `is_capture_mode or is_in_breakable_cuda_graph()` where that
    function returns `_in_breakable_cuda_graph`: the flags runtime/context/graph_capture.flag_dicts reads."""
    single, double = "is_capture_mode", "is_capture_mode or is_in_breakable_cuda_graph()"

    def check(src):
        found, error = find_function(src, module, "get_is_capture_mode")
        if error:
            return error
        problem = returns_test(single, double)(found.node)
        if problem or ast.unparse(found.node.body[-1].value) == single:
            return problem
        breakable, error = find_function(src, found.module, "is_in_breakable_cuda_graph")
        return error or returns_test("_in_breakable_cuda_graph")(breakable.node)

    return Claim(f"{module}.get_is_capture_mode returns is_capture_mode [or is_in_breakable_cuda_graph(), which "
                 "returns _in_breakable_cuda_graph] (the target wrapper reads those flags directly)", check)


# ---- the EAGLE worker boundary and the graph runners' entry points ---------------------------------------------

def _calls_to(node, name):
    return [c for c in ast.walk(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
            and c.func.attr == name]


def passes_argument(method: str, index: int, expression: str):
    """Every call of `.method(...)` in the body passes `expression` as positional argument `index`."""
    def test(node):
        found = _calls_to(node, method)
        if not found:
            return f"does not call .{method}(...)"
        got = [ast.unparse(c.args[index]) if len(c.args) > index else None for c in found]
        return None if all(g == expression for g in got) else f"passes {got} as argument {index}"
    return test


def passes_keyword(keyword: str, expression: str):
    """Some call in the body passes `keyword=expression`."""
    def test(node):
        for call in (c for c in ast.walk(node) if isinstance(c, ast.Call)):
            if any(k.arg == keyword and ast.unparse(k.value) == expression for k in call.keywords):
                return None
        return f"no call passes {keyword}={expression}"
    return test


def reads_attribute(expression: str):
    def test(node):
        return None if any(isinstance(n, ast.Attribute) and ast.unparse(n) == expression for n in ast.walk(node)) \
            else f"does not read {expression}"
    return test


def calls_attributes(*expressions: str):
    def test(node):
        called = {ast.unparse(c.func) for c in ast.walk(node) if isinstance(c, ast.Call)}
        missing = [e for e in expressions if e not in called]
        return f"does not call {missing}" if missing else None
    return test
