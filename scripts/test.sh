#!/usr/bin/env bash
# Set up what the tests need (.venv/ with SGLang 0.5.23, .venv-0.5.8/ with SGLang 0.5.8, and as root Debian's
# chromium and prometheus), lint with ruff, then run every tier: unit, contract checks over every release, real
# SGLang in-process and real servers on 0.5.23, a real Prometheus, headless Chromium, and the 0.5.8 tier.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/system-deps.sh
status=0
.venv/bin/ruff check . || status=$?  # lint (pyproject.toml: line length 120)
# The site: a broken link or a page missing from the nav fails (not -q: under -q mkdocs 1.6 counts no warnings).
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict -d "$(mktemp -d)" || status=$?
.venv/bin/python -m pytest -q "$@" tests || status=$?
bash scripts/test-0.5.8.sh || status=$?
exit "$status"
