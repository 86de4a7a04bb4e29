"""Running the contract check: a release's claims against a source tree (`check_tree`), every release's
wheel in turn (`check_releases`), one line per release with its broken claims (`format_result`), and the
command line of tools/contract_check.py (`main`)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ... import versions
from ...versions import VersionRules
from .rules import claims_for
from .source import SourceTree
from .wheels import DEFAULT_CACHE, download_wheel, list_releases


@dataclass
class Result:
    release: str
    rules_first: str
    checked: int
    failures: list[tuple[str, str]]  # (claim, what is wrong)
    notes: list[str]


def check_tree(src: SourceTree, release: str, integrations=None, rules: VersionRules | None = None) -> Result:
    """Every claim for `release` (its row of the table, unless `rules` is given) against `src`."""
    if rules is None:
        rules = versions.rules_for(versions.parse_version(release))
    claims, notes = claims_for(rules, integrations, versions.parse_version(release))
    failures = []
    for claim in claims:
        try:
            problem = claim.check(src)
        except Exception as exc:  # a parse problem is a broken claim, not a crash of the check
            problem = f"check raised {type(exc).__name__}: {exc}"
        if problem is not None:
            failures.append((claim.what, problem))
    return Result(release, rules.first_text, len(claims), failures, notes)


def check_releases(releases: Sequence[str], cache: str = DEFAULT_CACHE, integrations=None,
                   progress: Callable[[str], None] | None = None) -> list[Result]:
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

    from . import __doc__ as package_doc  # the description is the package docstring's first paragraph

    parser = argparse.ArgumentParser(prog="contract_check", description=package_doc.split("\n\n")[0])
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
