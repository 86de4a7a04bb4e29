#!/usr/bin/env bash
# Set up .venv if needed, then run the whole test suite (unit, real SGLang in-process, real server).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@" tests
