"""Contract claims for the target-family table (eagle_probe.families), per release, over a parsed wheel.

For each release and each family row of that release, the setter `set_eagle3_layers_to_capture` of every outer
class of the row is read as a small program (its if-branches followed, local names substituted) and reduced
to facts: the id -> position rule, the default set, the pipeline-parallel guard, delegation. The inner model's
forward is reduced to: how it captures (residual sum in the loop, the layer's capture keyword, the input of the
layer as is, per-layer flags), whether the final layer's output (position N) is captured after the loop, and
what Two-Batch-Overlap does to the captures. Each fact is compared with the row; a failure names the release,
the family and the claim. A family that the table says is absent from a release is proven absent, and every
class that defines the setter in a release must belong to a row (or to families.UNTABLED).

Nothing is imported from SGLang; the wheel's .py files are parsed with `ast` (eagle_probe.commands.contract).
"""

from __future__ import annotations

import argparse
import ast
import sys
from functools import partial

from ... import families, versions
from .claims import Claim
from .family_source import MODELS, SETTER, forward_facts, setter_facts
from .source import SourceTree, find, find_name


def _split(dotted: str) -> tuple[str, str]:
    module, _, cls = dotted.rpartition(".")
    return f"{MODELS}.{module}", cls


def _setter_node(src: SourceTree, dotted: str):
    module, cls = _split(dotted)
    found = find(src, module, f"{cls}.{SETTER}")
    if found is None or not isinstance(found.node, ast.FunctionDef):
        return None, found
    return found.node, found


def _own_setter(src: SourceTree, dotted: str) -> ast.FunctionDef | None:
    module, cls = _split(dotted)
    found = find_name(src, module, cls)
    if found is None or not isinstance(found.node, ast.ClassDef):
        return None
    for node in found.node.body:
        if isinstance(node, ast.FunctionDef) and node.name == SETTER:
            return node
    return None


def _claim(release: str, row: families.Family, what: str, check) -> Claim:
    return Claim(f"{release} family {row.name}: {what}", check)


def _own_setter_facts(src: SourceTree, dotted: str):
    """(SetterFacts of the setter `dotted` defines itself, None), or (None, what is missing)."""
    node = _own_setter(src, dotted)
    if node is None:
        return None, f"{dotted} defines no {SETTER}"
    return setter_facts(node), None


def _setter_check(row: families.Family, dotted: str, src: SourceTree):
    facts, missing = _own_setter_facts(src, dotted)
    if missing:
        return missing
    wrong = list(facts.problems or ())
    if facts.rule != row.rule:
        wrong.append(f"rule is {facts.rule}, not {row.rule}")
    if facts.default != row.default_ids:
        wrong.append(f"default is {facts.default}, not {row.default_ids}")
    if row.n_source is not None and facts.n_source != row.n_source:
        wrong.append(f"N is read from {facts.n_source}, not {row.n_source}")
    if facts.pp_guard != row.pp_guard:
        wrong.append(f"PP guard {'present' if facts.pp_guard else 'absent'}")
    return "; ".join(wrong) or None


def _delegate_check(dotted: str, src: SourceTree):
    facts, missing = _own_setter_facts(src, dotted)
    if missing:
        return missing
    return None if facts.delegate is not None else f"does not hand the ids on unchanged ({facts.sinks})"


def _inherit_check(row: families.Family, dotted: str, src: SourceTree):
    module, cls = _split(dotted)
    if find_name(src, module, cls) is None:
        return None  # not in this release (the list is read from 0.5.23)
    node, found = _setter_node(src, dotted)
    if node is None:
        return f"{dotted} has no {SETTER}"
    if _own_setter(src, dotted) is not None:
        return f"{dotted} defines its own {SETTER}"
    wanted = {_split(c)[0] for c in row.classes}
    return None if found.module in wanted else f"inherits it from {found.where}"


def _inner_setter_check(row: families.Family, src: SourceTree):
    node, _ = _setter_node(src, row.inner_setter)
    if node is None:
        return f"{row.inner_setter}.{SETTER} not found"
    params = [a.arg for a in node.args.args][1:]
    assigns = [n for n in ast.walk(node) if isinstance(n, ast.Assign)
               and ast.unparse(n.targets[0]) == "self.layers_to_capture"
               and params and ast.unparse(n.value) == params[0]]
    bounded = "len(self.layers)" in ast.unparse(node) or "< len(" in ast.unparse(node)
    if not assigns:
        return "does not store the positions as given"
    if bounded == row.final_raises:
        return (f"flags self.layers[p] {'with' if bounded else 'without'} a bounds check (table: position "
                f"N {'raises IndexError' if row.final_raises else 'is skipped'})")
    return None


def _link_check(inner_cls: str, dotted: str, src: SourceTree):
    module, cls = _split(dotted)
    found = find_name(src, module, cls)
    if found is None or not isinstance(found.node, ast.ClassDef):
        return f"class {dotted} not found"
    names = {n.id for n in ast.walk(found.node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(found.node) if isinstance(n, ast.Attribute)}
    return None if inner_cls in names else f"{cls} never names {inner_cls}"


def _forward_check(row: families.Family, src: SourceTree):
    module, cls = _split(row.inner)
    found = find(src, module, f"{cls}.forward")
    if found is None or not isinstance(found.node, ast.FunctionDef):
        return f"{row.inner}.forward not found"
    facts = forward_facts(found.node)
    wrong = list(facts.problems)
    if facts.capture_how != row.capture_how:
        wrong.append(f"captures by {facts.capture_how}, not {row.capture_how}")
    if facts.captures is not None and facts.captures != row.captures:
        wrong.append(f"captures the {facts.captures}, not the {row.captures}")
    if facts.embedding_capturable is not None and facts.embedding_capturable != row.embedding_capturable:
        wrong.append(f"embedding capturable: {facts.embedding_capturable}")
    if facts.final_capturable != row.final_capturable:
        wrong.append(f"final layer's output captured after the loop: {facts.final_capturable}")
    if facts.tbo != row.tbo:
        wrong.append(f"TBO: {facts.tbo}, not {row.tbo}")
    return "; ".join(wrong) or None


def family_claims(row: families.Family, release: str) -> list[Claim]:
    """Claims that `row` describes `release`'s source."""
    out: list[Claim] = []
    for dotted in row.classes:
        out.append(_claim(release, row, f"{dotted}.{SETTER} maps ids by {row.rule}, defaults to {row.default_ids}, "
                          f"{'returns early off the last PP rank' if row.pp_guard else 'has no PP guard'}",
                          partial(_setter_check, row, dotted)))
    for dotted in row.delegates:
        out.append(_claim(release, row, f"{dotted}.{SETTER} hands the ids unchanged to its language model",
                          partial(_delegate_check, dotted)))
    for dotted in row.inherited:
        out.append(_claim(release, row, f"{dotted} (where it exists) inherits {SETTER} from the family's class",
                          partial(_inherit_check, row, dotted)))
    if row.inner_setter is not None:
        out.append(_claim(release, row, f"{row.inner_setter}.{SETTER} stores the positions as given and flags "
                          f"self.layers[p] {'unchecked (position N raises IndexError)' if row.final_raises else ''}",
                          partial(_inner_setter_check, row)))
    inner_cls = row.inner.rpartition(".")[2]
    for dotted in row.classes:
        out.append(_claim(release, row, f"{dotted} builds its model from {row.inner}",
                          partial(_link_check, inner_cls, dotted)))
    out.append(_claim(release, row, f"{row.inner}.forward captures the {row.captures} by {row.capture_how} (embedding "
                      f"{'capturable' if row.embedding_capturable else 'not capturable'}, final layer "
                      f"{'capturable' if row.final_capturable else 'never captured'}), TBO: {row.tbo}",
                      partial(_forward_check, row)))
    return out


def absent_claims(name: str, release: str) -> list[Claim]:
    """A family absent from a release: none of its classes (from any row) defines a setter there."""
    dotted = sorted({c for row in families.FAMILIES if row.name == name for c in row.classes + row.delegates})

    def check(src):
        present = [c for c in dotted if _own_setter(src, c) is not None]
        return None if not present else f"present: {present}"

    return [Claim(f"{release} family {name}: absent ({', '.join(dotted)} define no {SETTER})", check)]


def setter_classes(src: SourceTree) -> list[str]:
    """'module.Class' (relative to sglang.srt.models) of every class that defines the setter."""
    out = []
    for module in src.modules(MODELS):
        text = src.text(module) or ""
        if f"def {SETTER}" not in text:
            continue
        try:
            tree = ast.parse(text.lstrip("\ufeff"))
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and any(isinstance(m, ast.FunctionDef) and m.name == SETTER
                                                      for m in node.body):
                out.append(f"{module[len(MODELS) + 1:]}.{node.name}")
    return out


def coverage_claim(release: str) -> Claim:
    version = versions.parse_version(release)

    def check(src):
        known = set(families.UNTABLED)
        for row in families.rows_for(version):
            known |= set(row.classes) | set(row.delegates)
            if row.inner_setter:
                known.add(row.inner_setter)
        missing = [c for c in setter_classes(src) if c not in known]
        return None if not missing else f"classes with a setter in no row and not in families.UNTABLED: {missing}"

    return Claim(f"{release}: every class that defines {SETTER} belongs to a family row or is listed untabled",
                 check)


def untabled_subclass_claims(release: str) -> list[Claim]:
    """Each listed subclass of an untabled class (where it exists) inherits that class's setter."""
    out = []
    for dotted, owner in families.UNTABLED_SUBCLASSES.items():
        def check(src, dotted=dotted, owner=owner):
            module, cls = _split(dotted)
            if find_name(src, module, cls) is None:
                return None  # not in this release
            node, found = _setter_node(src, dotted)
            own = _own_setter(src, owner)
            if node is None and own is None:
                return None  # neither serves EAGLE-3 in this release
            if node is None or own is None or node is not own:
                return f"does not inherit {owner}.{SETTER} ({'no setter' if node is None else found.where})"
            return None

        out.append(Claim(f"{release}: {dotted} (where both exist) inherits {owner}.{SETTER} (untabled)", check))
    return out


def claims_for_release(release: str) -> list[Claim]:
    version = versions.parse_version(release)
    out = [coverage_claim(release)] + untabled_subclass_claims(release)
    present = set()
    for row in families.rows_for(version):
        present.add(row.name)
        out += family_claims(row, release)
    for name in families.family_names():
        if name not in present:
            out += absent_claims(name, release)
    return out


def check_families(src: SourceTree, release: str) -> list[tuple[str, str]]:
    """(claim, what is wrong) for every broken family claim of `release` against `src`."""
    failures = []
    for claim in claims_for_release(release):
        try:
            problem = claim.check(src)
        except Exception as exc:  # a parse problem is a broken claim, not a crash
            problem = f"check raised {type(exc).__name__}: {exc}"
        if problem is not None:
            failures.append((claim.what, problem))
    return failures


def main(argv=None) -> int:
    """`python -m eagle_probe.commands.contract.families [RELEASE ...] [--installed]`: the family claims per
    release (default: every release of families.RELEASES, wheels cached as the contract check caches them)."""
    import os

    from .contract import DEFAULT_CACHE, download_wheel

    parser = argparse.ArgumentParser(prog="contract_families", description=main.__doc__)
    parser.add_argument("releases", nargs="*")
    parser.add_argument("--cache", default=os.environ.get("EAGLE_PROBE_WHEEL_CACHE", DEFAULT_CACHE))
    parser.add_argument("--installed", action="store_true", help="check the installed SGLang's source")
    args = parser.parse_args(argv)
    if args.installed:
        src, release = SourceTree.installed(), versions.installed_sglang_version()
        if src is None or release is None:
            print("contract_families: SGLang is not installed here", file=sys.stderr)
            return 2
        targets = [(release, lambda: src)]
    else:
        releases = args.releases or [versions.format_version(v) for v in families.RELEASES]
        targets = [(r, lambda r=r: SourceTree.from_wheel(download_wheel(r, args.cache), label=r)) for r in releases]
    broken = 0
    for release, load in targets:
        failures = check_families(load(), release)
        broken += len(failures)
        print(f"{release:<14} {len(claims_for_release(release)):>3} family claims  "
              + ("ok" if not failures else f"{len(failures)} BROKEN"))
        for claim, problem in failures:
            print(f"    BROKEN {claim}: {problem}")
    return 1 if broken else 0


if __name__ == "__main__":
    raise SystemExit(main())
