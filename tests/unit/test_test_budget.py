"""The README states the test command's budget that scripts/test.sh checks its total against (one number)."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as handle:
        return handle.read()


def test_readme_and_test_script_state_one_budget():
    [script_budget] = re.findall(r"budget_min=\$\{EAGLE_PROBE_TEST_BUDGET_MIN:-(\d+)\}", _read("scripts", "test.sh"))
    readme_budgets = set(re.findall(r"test budget: (\d+) minutes", _read("README.md")))
    assert readme_budgets == {script_budget}
