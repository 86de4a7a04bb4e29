"""`eagle-probe compat`: for the installed SGLang, every integration's targets (resolved / skipped and
why) and the version rules in force, from the code the probe itself uses (versions.rules_for,
integrations.ALL, integrations.base.resolve_target). Imports the target modules; patches nothing.
"""

import importlib
import sys

from .. import families, versions
from ..analysis.config_rules import ADAPTIVE_SINCE, speculation_shapes
from ..runtime.install import off_summary


def _target_status(integration, target, rules, supported, import_modules, found=False):
    from ..runtime.patcher import resolve_target

    dotted = f"{target.module}.{target.qualname}"
    expected = versions.target_expected(target.module, target.qualname, rules)
    entry = {"integration": integration.name, "target": dotted, "expected": expected,
             "inner_forward": target.inner_forward, "observes": target.observes}
    if not supported:
        entry.update(status="skipped", reason=f"SGLang outside the supported range {versions.SUPPORTED_RANGE_TEXT}")
        return entry
    module = sys.modules.get(target.module)
    if module is None and import_modules:
        try:
            module = importlib.import_module(target.module)
        except ModuleNotFoundError as exc:
            missing = exc.name or ""
            if target.module == missing or target.module.startswith(missing + "."):
                reason = (f"module not in installed SGLang ({missing})"
                          + ("" if expected else "; the version table says so"))
            else:  # the module exists but imports something this environment lacks
                reason = (f"module cannot be imported here: it needs '{missing}', which is not installed "
                          f"(SGLang itself would fail the same import)")
            entry.update(status="skipped", reason=reason)
            return entry
        except Exception as exc:
            entry.update(status="skipped", reason=f"module import failed: {type(exc).__name__}: {exc}"[:300])
            return entry
    if module is None:
        entry.update(status="unknown", reason="module not imported (run without --no-import to resolve)")
        return entry
    try:
        owner, _, _, owned = resolve_target(target, module)
    except (AttributeError, KeyError) as exc:
        entry.update(status="skipped", reason=f"not found in installed SGLang: {exc}"
                     + ("" if expected else "; the version table says so"))
        return entry
    if not owned and found:  # a target found at load time is wrapped once, on the class that defines it
        attr = target.qualname.rpartition(".")[2]
        defining = next((k for k in owner.__mro__ if attr in vars(k)), owner)
        entry.update(status="resolved", reason=f"inherited, wrapped on {defining.__module__}.{defining.__qualname__}")
    else:
        entry.update(status="resolved", reason="" if owned else f"inherited, wrapped on {owner.__name__}")
    if not expected:
        entry["reason"] = (entry["reason"] + "; " if entry["reason"] else "") + \
            "present although the version table does not expect it here"
    if target.inner_forward:
        entry["reason"] = (entry["reason"] + "; " if entry["reason"] else "") + (
            "inner forward: off under --enable-torch-compile (auto; before 0.5.23 also --enable-piecewise-cuda-graph); "
            "replayed CUDA graphs run no inner forward (values come from the EAGLE worker boundary)")
    return entry


def compat_report(import_modules: bool = True, source_check: bool = False) -> dict:
    from ..runtime.integrations import ALL

    sglang_version = versions.installed_sglang_version()
    parsed = None if sglang_version is None else versions.parse_version(sglang_version)
    supported = parsed is not None and versions.is_supported(parsed)
    rules = versions.rules_for(parsed)
    report = {
        "sglang_version": sglang_version,
        "supported_range": versions.SUPPORTED_RANGE_TEXT,
        "supported": supported,
        "rules_in_force": supported,  # outside the range nothing is wrapped; "rules" is the nearest row
        "off": off_summary(sglang_version) if sglang_version is not None else "all integrations (SGLang not installed)",
        "rules_range": versions.rules_range_text(rules),
        "rules": rules.as_dict(),
        "families": families.table(parsed),
        "untabled": dict(families.UNTABLED),
        "speculation_shapes": shapes_for(parsed),
        "targets": [],
    }
    if sglang_version is None:
        return report
    report["targets"] = [_target_status(i, t, rules, supported, import_modules, found)
                         for i in ALL for found, targets in ((False, i.targets), (True, i.expand(parsed) if
                                                                                    i.expand is not None else ()))
                         for t in targets]
    if source_check:
        from .contract import SourceTree, check_tree

        src = SourceTree.installed()
        result = check_tree(src, sglang_version) if src is not None else None
        if result is not None:
            from .contract.families import check_families, claims_for_release

            result.checked += len(claims_for_release(sglang_version))
            result.failures += check_families(src, sglang_version)
        report["source_check"] = None if result is None else {
            "claims": result.checked, "broken": [{"claim": c, "problem": p} for c, p in result.failures]}
    return report


def shapes_for(parsed) -> list:
    """The shapes of speculation the release serves and what the probe reads for each
    (analysis.config_rules.speculation_shapes: 0.5.23's facts, read from its wheel); none for another release."""
    if parsed is None or tuple(parsed[:3]) != ADAPTIVE_SINCE:
        return []
    return speculation_shapes()


def render_shapes(report: dict) -> list:
    shapes = report.get("speculation_shapes") or []
    if not shapes:
        return ["shapes of speculation: not tabled for this release (the table holds SGLang 0.5.23's)"]
    lines = ["shapes of speculation (what each needs; what the probe reads of each verify step):"]
    for s in shapes:
        lines.append(f"  {s['shape']}: {s['flags']}; depth {s['depth']}")
        lines.append(f"    needs: {s['needs']}")
        lines += [f"    probe reads: {r}" for r in s["probe_reads"]]
        lines.append(f"    probe shows: {s['probe_shows']}")
    return lines


def render(report: dict) -> str:
    lines = []
    version = report["sglang_version"] or "not installed"
    state = "supported" if report["supported"] else "NOT SUPPORTED"
    lines.append(f"eagle-probe compat: SGLang {version} ({state}; supported range {report['supported_range']})")
    if report.get("off"):
        lines.append(f"  off: {report['off']}")
    rules = report["rules"]
    verified = (f"verified on real code with {rules['tested']}" if rules["verified"]
                else "read from the source, not run here")
    if report["supported"]:
        lines.append(f"rules in force: the row for {report['rules_range']} ({verified}; proven per release by the "
                     "contract check)")
    else:  # nothing is wrapped, so no rule is applied; show the nearest row for orientation only
        lines.append(f"rules in force: none (the probe stays off); nearest row of the table, {report['rules_range']}, "
                     "for reference:")
    for key, value in rules.items():
        if key in ("verified", "tested", "first", "acceptance"):
            continue
        lines.append(f"  {key}: {value}")
    for hook in rules["acceptance"]:
        lines.append(f"  acceptance [{hook['worker']} worker, {hook['when']}]: {hook['target']} -> {hook['read']} "
                     f"({'includes' if hook['includes_bonus'] else 'excludes'} the bonus token)")
    lines += render_families(report)
    lines += render_shapes(report)
    if report["targets"]:
        lines.append("integrations:")
        width = max(len(t["integration"]) for t in report["targets"])
        for t in report["targets"]:
            reason = f": {t['reason']}" if t["reason"] else ""
            if t["status"] == "skipped" and t["expected"] and report["supported"] and t.get("observes"):
                reason += f"; off: {t['observes']}"
            lines.append(f"  {t['integration']:<{width}}  {t['status']:<8} {t['target']}{reason}")
    check = report.get("source_check")
    if check is not None:
        lines.append(f"source check of the installed SGLang: {check['claims']} claims, "
                     + ("all hold" if not check["broken"] else f"{len(check['broken'])} broken"))
        lines += [f"  BROKEN: {b['claim']}: {b['problem']}" for b in check["broken"]]
    return "\n".join(lines)


def _yes(value: bool) -> str:
    return "yes" if value else "no"


def render_families(report: dict) -> list:
    """The target-family table of the release: one line per family, then the classes with no row."""
    rows = report.get("families") or []
    lines = [f"target families ({len(rows)}; rule letters: A +1, B +1 only if ids[0] == 1, C as given if "
             f"max(ids) == N else +1, D +1 also on the default; proven per release by the contract check):"]
    header = ("family", "rule", "default", "captures", "emb", "final", "TBO", "PP guard", "since", "this row")
    table = [header] + [(r["family"], f"{r['rule_letter']} {r['rule']}", r["default_ids"], r["captures"],
                         _yes(r["embedding_capturable"]),
                         "IndexError" if r["final_raises"] else _yes(r["final_capturable"]), r["tbo"],
                         _yes(r["pp_guard"]), r["since"], r["releases"]) for r in rows]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(header))]
    for row in table:
        lines.append("  " + "  ".join(f"{str(v):<{w}}" for v, w in zip(row, widths)).rstrip())
    for r in rows:
        names = ", ".join(c.rpartition(".")[2] for c in r["classes"] + r["inherited"] + r["delegates"])
        lines.append(f"  {r['family']}: {names} -> inner {r['inner']}" + (f" ({r['note']})" if r["note"] else ""))
    untabled = report.get("untabled") or {}
    if untabled:
        lines.append("classes with set_eagle3_layers_to_capture and no row (observed, rule unverified): "
                     + "; ".join(f"{k} ({v})" for k, v in sorted(untabled.items())))
    return lines


def exit_status(report: dict) -> int:
    """0: supported and every target the table expects resolved (and the source check, if run, holds)."""
    if not report["supported"]:
        return 1
    if any(t["expected"] and t["status"] != "resolved" for t in report["targets"]):
        return 1
    check = report.get("source_check")
    return 1 if check is not None and check["broken"] else 0
