#!/usr/bin/env bash
# Create or reuse .venv-0.5.8/ with SGLang 0.5.8 (CPU-capable) and this project installed in it:
# the second real-SGLang tier (the first release the probe supports). Same layout as scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv-0.5.8
stamp=$VENV/.eagle-probe-setup
want=$(cat requirements/runtime-0.5.8.txt requirements/sglang-0.5.8-nodeps.txt setup.cfg pyproject.toml | sha256sum | cut -d' ' -f1)
if [ -x $VENV/bin/python ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x $VENV/bin/python ] || "$PY" -m venv $VENV
log=$(mktemp)
pip_q() {
  if ! $VENV/bin/python -m pip install --disable-pip-version-check -q "$@" >"$log" 2>&1; then
    grep -v "^WARNING: Location" "$log" | tail -n 40 >&2
    echo "eagle-probe setup-0.5.8: pip install $* failed" >&2
    exit 1
  fi
}
echo "eagle-probe setup-0.5.8: installing into $VENV (first time takes a few minutes)" >&2
pip_q -r requirements/runtime-0.5.8.txt
# SGLang's own dependency list pulls GPU kernel packages (and sgl-kernel, replaced on the CPU by the
# test-only stand-in in sglang_cpu/shims_058.py); its CPU path needs only these.
pip_q --no-deps -r requirements/sglang-0.5.8-nodeps.txt
pip_q --no-deps -e .
$VENV/bin/python -c "import sglang, torch, transformers, eagle_probe, wrapt, structlog, prometheus_client; assert sglang.__version__ == '0.5.8', sglang.__version__" \
  || { echo "eagle-probe setup-0.5.8: $VENV is incomplete (see pip output above)" >&2; exit 1; }
echo "$want" > "$stamp"
