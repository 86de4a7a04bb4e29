"""What a release's source says about one target class, read from its AST: the setter's id rule, default set and
guards (SetterFacts), and what the inner model's forward captures (ForwardFacts). The family claims compare these
with the table in eagle_probe/families.py."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from ... import families

SETTER = "set_eagle3_layers_to_capture"
MODELS = "sglang.srt.models"


# --------------------------------------------------------------------------------------------------
# The setter as a small program


@dataclass
class SetterFacts:
    rule: str | None = None  # a families.RULE_* constant, or None when unrecognised
    default: str | None = None  # families.DEFAULT_* formula, or None
    n_source: str | None = None  # the expression N was read from
    pp_guard: bool = False
    delegate: str | None = None  # attribute the ids are handed to unchanged (self.<delegate>.set_...)
    sinks: list[tuple[list[str], str, str]] = field(default_factory=list)  # (conditions, target, value)
    problems: list[str] = field(default_factory=list)


class _Subst(ast.NodeTransformer):
    def __init__(self, env: dict[str, ast.AST]):
        self.env = env

    def visit_Name(self, node):  # noqa: N802 (ast API)
        if isinstance(node.ctx, ast.Load) and node.id in self.env:
            return ast.parse(ast.unparse(self.env[node.id]), mode="eval").body
        return node


def _subst(node: ast.AST, env: dict[str, ast.AST]) -> str:
    import copy

    return ast.unparse(_Subst(env).visit(copy.deepcopy(node)))


_PP_GUARD = re.compile(r"^not (self\.pp_group|get_parallel\(\)\.pp_group|get_pp_group\(\)|self\.\w+\.pp_group)"
                       r"\.is_last_rank$")


def setter_facts(node: ast.FunctionDef) -> SetterFacts:
    """Follow every path through the setter body and classify what it assigns."""
    facts = SetterFacts()
    args = [a.arg for a in node.args.args]
    param = args[1] if len(args) > 1 else "layer_ids"
    paths = []  # (conditions, env) that fall off the end or return

    def run(stmts, conditions, env):
        for index, stmt in enumerate(stmts):
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # docstring
            if isinstance(stmt, ast.Return):
                return
            if isinstance(stmt, ast.If):
                test = _subst(stmt.test, env)
                rest = stmts[index + 1:]
                if (_PP_GUARD.match(test) and len(stmt.body) == 1 and isinstance(stmt.body[0], ast.Return)
                        and not stmt.orelse):
                    facts.pp_guard = True
                    run(rest, conditions, env)
                    return
                run(list(stmt.body) + rest, conditions + [test], dict(env))
                run(list(stmt.orelse) + rest, conditions + [f"not ({test})"], dict(env))
                return
            if isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    text = ast.unparse(target)
                    if isinstance(target, ast.Name):
                        env[target.id] = ast.parse(_subst(stmt.value, env), mode="eval").body
                    elif text.endswith(".layers_to_capture") or text == "layers_to_capture":
                        facts.sinks.append((conditions, text, _subst(stmt.value, env)))
                continue
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                call = stmt.value
                func = ast.unparse(call.func)
                if func.endswith("." + SETTER) and call.args:
                    arg = call.args[0]
                    if isinstance(arg, ast.Name) and arg.id == param and param not in env:
                        facts.delegate = func[: -len("." + SETTER)]
                    else:
                        facts.sinks.append((conditions, func, _subst(arg, env)))
                continue
            # loops (per-layer flags), hasattr checks of delegates and raises: no positions assigned
        paths.append((conditions, env))

    run(node.body, [], {})
    _classify(facts, param)
    return facts


def _norm(text: str, param: str) -> str:
    text = re.sub(rf"\b{re.escape(param)}\b", "IDS", text)
    return re.sub(r"\[(\w+) \+ 1 for \1 in ", "[v + 1 for v in ", text)


_DEFAULT = re.compile(r"^\[2, (.+) // 2, \1 - 3\]$")
_DEFAULT_PLUS = re.compile(r"^\[v \+ 1 for v in \[2, (.+) // 2, \1 - 3\]\]$")


def _classify(facts: SetterFacts, param: str) -> None:
    if facts.delegate is not None:
        return
    none_test, not_none = f"{param} is None", f"not ({param} is None)"
    default = [(c, v) for c, _, v in facts.sinks if none_test in c]
    # hasattr() branches that assign the same positions two ways (Qwen3-VL) are one path
    given = sorted({(tuple(x for x in c if x != not_none and "hasattr(" not in x), _norm(v, param))
                    for c, _, v in facts.sinks if not_none in c})
    default = sorted({(tuple(x for x in c if "hasattr(" not in x), v) for c, v in default})
    if len(default) == 1:
        value = _norm(default[0][1], param)
        match = _DEFAULT.match(value)
        plus = _DEFAULT_PLUS.match(value)
        if match:
            facts.default, facts.n_source = families.DEFAULT_FORMULA, match.group(1)
        elif plus:
            facts.default, facts.n_source = families.DEFAULT_PLUS_ONE_FORMULA, plus.group(1)
        else:
            facts.problems.append(f"default branch assigns {value}")
    else:
        facts.problems.append(f"{len(default)} assignments when {param} is None")
    plus_one, as_given = "[v + 1 for v in IDS]", ("list(IDS)", "IDS")
    shapes = sorted((" and ".join(_norm(x, param) for x in c), v) for c, v in given)
    if len(shapes) == 1 and shapes[0] == ("", plus_one):
        facts.rule = families.RULE_PLUS_ONE_WITH_DEFAULT if facts.default == families.DEFAULT_PLUS_ONE_FORMULA \
            else families.RULE_PLUS_ONE
    elif len(shapes) == 2:
        conds = {v in as_given: c for c, v in shapes if v in as_given or v == plus_one}
        if set(conds) == {True, False}:
            first = re.fullmatch(r"(IDS and )?IDS\[0\] == 1", conds[False])
            first_neg = re.fullmatch(r"not \((IDS and )?IDS\[0\] == 1\)", conds[True])
            top = re.fullmatch(r"(IDS and )?max\(IDS\) == (.+)", conds[True])
            top_neg = re.fullmatch(r"not \((IDS and )?max\(IDS\) == (.+)\)", conds[False])
            if first and first_neg:
                facts.rule = families.RULE_PLUS_ONE_IF_FIRST_IS_ONE
            elif top and top_neg and top.group(2) == facts.n_source:
                facts.rule = families.RULE_AS_GIVEN_IF_MAX_IS_N
    if facts.rule is None:
        facts.problems.append(f"ids branch assigns {shapes}")


# --------------------------------------------------------------------------------------------------
# The inner model's forward


@dataclass
class ForwardFacts:
    capture_how: str | None = None  # families.CAPTURES_LOOP_SUM, ... (how the forward captures)
    captures: str | None = None  # families.CAPTURES_RESIDUAL or CAPTURES_BRANCH_OUTPUT
    embedding_capturable: bool | None = None
    final_capturable: bool = False
    flags: bool = False  # the loop reads per-layer _is_layer_to_capture flags
    tbo: str = families.TBO_NONE
    problems: list[str] = field(default_factory=list)


_CAPTURE_KWARGS = ("captured_last_layer_outputs", "capture_output")
_GUARDED = {"hidden_states + residual if residual is not None else hidden_states",
            "hidden_states if residual is None else hidden_states + residual"}


def _in_capture_set(node: ast.AST) -> list[str]:
    """Left sides of `X in self.layers_to_capture` tests."""
    return [ast.unparse(n.left) for n in ast.walk(node) if isinstance(n, ast.Compare) and len(n.ops) == 1
            and isinstance(n.ops[0], ast.In) and ast.unparse(n.comparators[0]).endswith("layers_to_capture")]


def forward_facts(node: ast.FunctionDef) -> ForwardFacts:
    """How an inner model's forward captures, read from its body."""
    facts = ForwardFacts()
    loops = [n for n in ast.walk(node) if isinstance(n, ast.For)]
    in_loop = {id(n) for loop in loops for n in ast.walk(loop)}
    loop_vars = {ast.unparse(e) for n in loops for e in ast.walk(n.target) if isinstance(e, ast.Name)}
    kinds = set()
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        if any(k.arg in _CAPTURE_KWARGS for k in call.keywords) and id(call) in in_loop:
            kinds.add(families.CAPTURES_LAYER_KEYWORD)
        name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
        if name not in ("append", "tensor_model_parallel_all_gather") or not call.args or id(call) not in in_loop:
            continue
        text = ast.unparse(call.args[0])
        if text == "hidden_states + residual":
            kinds.add(families.CAPTURES_LOOP_SUM)
        elif text in _GUARDED:
            kinds.add(families.CAPTURES_LOOP_SUM_GUARDED)
        elif text == "hidden_states":
            kinds.add(families.CAPTURES_LAYER_INPUT)
        elif re.match(r"^([\w.\[\]]+\.)?snapshot\(hidden_states", text):
            kinds.add(families.CAPTURES_SNAPSHOT)
    facts.flags = "_is_layer_to_capture" in ast.unparse(node)
    if not kinds:
        facts.problems.append("no capture found in the forward's layer loop")
    elif len(kinds) > 1:
        facts.problems.append(f"several capture kinds: {sorted(kinds)}")
    else:
        facts.capture_how = kinds.pop()
        facts.embedding_capturable = facts.capture_how != families.CAPTURES_LOOP_SUM
        facts.captures = families.CAPTURES_RESIDUAL
        if facts.capture_how == families.CAPTURES_LAYER_INPUT:
            # the layer returns (hidden_states, residual): what enters the next layer is the branch output
            split = any(isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Tuple) and id(n) in in_loop
                        and [ast.unparse(e) for e in n.targets[0].elts][:2] == ["hidden_states", "residual"]
                        for n in ast.walk(node))
            facts.captures = families.CAPTURES_BRANCH_OUTPUT if split else families.CAPTURES_RESIDUAL
    facts.final_capturable = any(left not in loop_vars for left in _in_capture_set(node))
    for stmt in (n for n in ast.walk(node) if isinstance(n, ast.If)):
        if "can_run_tbo" not in ast.unparse(stmt.test):
            continue
        body = ast.unparse(ast.Module(body=stmt.body, type_ignores=[]))
        if "first_k_dense_replace" in body:
            facts.tbo = families.TBO_FROM_FIRST_K_DENSE
        elif re.search(r"model_forward_(stages|maybe_tbo)\(", body) and not any(
                isinstance(n, ast.For) for s in stmt.body for n in ast.walk(s)):
            facts.tbo = families.TBO_ALL
    return facts


# --------------------------------------------------------------------------------------------------
# Claims
