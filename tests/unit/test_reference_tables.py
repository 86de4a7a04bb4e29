"""The generated reference pages list every finding code and every target family the code knows, and say how each
family is proven: the families called proven behind a real server are exactly those the real-server tests serve
(tests/unit/test_docs.py checks that the committed pages are what the generator gives now)."""

import pathlib
import re

from eagle_probe import families
from eagle_probe.analysis import findings

ROOT = pathlib.Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"


def table_rows(text: str, header: str):
    """The cells of each body row of the table whose header row starts with `header`."""
    start = text.index(header)
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))])
    return rows


def test_the_findings_page_has_one_row_per_code_with_its_severity():
    rows = table_rows((REFERENCE / "findings.md").read_text(encoding="utf-8"), "| code | severity |")
    listed = {re.match(r"\[`([a-z_0-9]+)`\]", row[0]).group(1): row[1] for row in rows}
    assert len(listed) == len(rows), "a code is listed twice"
    assert set(listed) == set(findings.CODES)
    for code, (severity, _) in findings.CODES.items():
        assert listed[code] == severity, (code, listed[code])


def _family_rows():
    text = (REFERENCE / "families.md").read_text(encoding="utf-8")
    return table_rows(text, "| family | releases | classes")


def test_every_family_row_names_its_setter_class_and_inner_class():
    rows = _family_rows()
    assert len(rows) == len(families.FAMILIES)
    for row, cells in zip(families.FAMILIES, rows):
        assert cells[0] == row.label and f"`{row.classes[0]}`" in cells[2] and cells[3] == f"`{row.inner}`"


def test_the_families_proven_behind_a_real_server_are_the_ones_the_tests_serve():
    proven = {row.name: cells[12] for row, cells in zip(families.FAMILIES, _family_rows())}
    assert set(proven.values()) == {"real server", "contract only"}
    served = {name for name, p in proven.items() if p == "real server"}
    assert served == {"llama", "qwen3", "qwen3_moe", "glm4_moe", "deepseek_v2"}
    assert proven["gpt_oss"] == "contract only"
