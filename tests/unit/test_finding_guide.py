"""Every finding code has its full meaning and fix in the guide the documentation is generated from."""

from eagle_probe.analysis.finding_guide import GUIDE
from eagle_probe.analysis.findings import CODES


def test_guide_and_codes_name_the_same_findings():
    assert set(GUIDE) == set(CODES)


def test_every_entry_says_where_what_and_how_to_fix():
    empty = [code for code, guide in GUIDE.items() if not (guide.raised_by and guide.detail and guide.fix)]
    assert empty == []
