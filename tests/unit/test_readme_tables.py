"""The README's tables list every finding code and every target family the code knows, and say how each family is
proven: the families it calls proven behind a real server are exactly those the real-server tests serve."""

import ast
import pathlib
import re

from eagle_probe import families
from eagle_probe.analysis import findings

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
SERVED_ELSEWHERE = {"deepseek_v2"}  # DeepSeek-V3: tests/e2e/test_spec_server.py and the other e2e tests


def section(title: str) -> str:
    match = re.search(rf"^(#+) {re.escape(title)}\n", README, re.M)
    assert match, f"README has no section {title!r}"
    level = len(match.group(1))
    end = re.compile(rf"^#{{1,{level}}} ", re.M).search(README, match.end())
    return README[match.end():end.start() if end else len(README)]


def table_rows(text: str, header: str):
    """The cells of each body row of the table whose header row starts with `header`."""
    start = text.index(header)
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    return rows


def served_by_the_family_server_test():
    tree = ast.parse((ROOT / "tests/e2e/test_family_servers.py").read_text(encoding="utf-8"))
    [cases] = [node.value for node in tree.body if isinstance(node, ast.Assign)
               and any(isinstance(t, ast.Name) and t.id == "CASES" for t in node.targets)]
    return {ast.literal_eval(key) for key in cases.keys}


def test_the_findings_table_has_one_row_per_code_with_its_severity():
    rows = table_rows(section("Findings"), "| code | severity |")
    listed = {row[0].strip("`"): row[1] for row in rows}
    assert len(listed) == len(rows), "a code is listed twice"
    assert set(listed) == set(findings.CODES)
    for code, (severity, _) in findings.CODES.items():
        assert listed[code].startswith(severity), (code, listed[code])


def _family_rows():
    rows = table_rows(section("Target families"), "| family (classes, incl. inherited) |")
    out = {}
    for row in families.FAMILIES:
        name = row.classes[0].rpartition(".")[2]
        [cells] = [cells for cells in rows if f"`{name}`" in cells[0]]
        out.setdefault(row.name, cells)
    return rows, out


def test_the_family_table_lists_every_family_and_how_it_is_proven():
    rows, by_family = _family_rows()
    assert set(by_family) == set(families.family_names())
    assert {c[0] for c in by_family.values()} == {c[0] for c in rows}  # no row without a family
    proven = {name: cells[-1] for name, cells in by_family.items()}
    assert all(p == "real server" or p.startswith("contract only") for p in proven.values()), proven
    served = {name for name, p in proven.items() if p == "real server"}
    assert served == served_by_the_family_server_test() | SERVED_ELSEWHERE
    assert proven["gpt_oss"].startswith("contract only") and "sinks=" in proven["gpt_oss"]


def test_what_is_wrapped_names_every_familys_setter_and_inner_class():
    text = section("What is wrapped")
    for row in families.FAMILIES:
        assert f"`{row.classes[0]}`" in text, row.name
        assert f"`{row.inner}`" in text, row.name
