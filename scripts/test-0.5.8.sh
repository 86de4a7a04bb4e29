#!/usr/bin/env bash
# The SGLang 0.5.8 tier: set up .venv-0.5.8 if needed, then run the 0.5.8 real-SGLang tests in it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-0.5.8.sh
exec .venv-0.5.8/bin/python -m pytest -q "$@" tests/real_sglang_058
