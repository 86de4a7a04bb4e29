#!/usr/bin/env bash
# Create or reuse .venv/ with pinned SGLang (CPU-capable) and this project installed in it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
stamp=.venv/.eagle-probe-setup
want=$(cat requirements/*.txt setup.cfg pyproject.toml | sha256sum | cut -d' ' -f1)
if [ -x .venv/bin/python ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
log=$(mktemp)
pip_q() {
  if ! .venv/bin/python -m pip install --disable-pip-version-check -q "$@" >"$log" 2>&1; then
    grep -v "^WARNING: Location" "$log" | tail -n 40 >&2
    echo "eagle-probe setup: pip install $* failed" >&2
    exit 1
  fi
}
echo "eagle-probe setup: installing into .venv (first time takes a few minutes)" >&2
pip_q -r requirements/runtime-0.5.23.txt
# SGLang's own dependency list pulls GPU kernel packages; its CPU path needs only these.
pip_q --no-deps -r requirements/sglang-0.5.23-nodeps.txt
pip_q --no-deps -e .
.venv/bin/python -c "import sglang, torch, transformers, eagle_probe, wrapt, structlog, prometheus_client" \
  || { echo "eagle-probe setup: .venv is incomplete (see pip output above)" >&2; exit 1; }
echo "$want" > "$stamp"
