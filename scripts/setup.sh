#!/usr/bin/env bash
# Create or reuse a virtual environment with a pinned SGLang release (CPU-capable) and this project in it.
#   bash scripts/setup.sh          -> .venv/        SGLang 0.5.23 (the main one, about 6 GB: torch's CUDA libraries)
#   bash scripts/setup.sh 0.5.8    -> .venv-0.5.8/  SGLang 0.5.8 (the oldest supported release's test tier, about
#                                     0.3 GB), and .venv-0.5.8/outside-range/ with SGLang 0.5.7 (the release before
#                                     the range). It sets up .venv first and reads torch and the other shared
#                                     packages from it (a .pth line after its own site-packages), so that only what
#                                     0.5.8 pins differently (transformers, openai, ...) is installed twice.
set -euo pipefail
cd "$(dirname "$0")/.."
release=${1:-0.5.23}
extra=()
case "$release" in
  # need_gb: the venv plus pip's downloads of torch and the nvidia libraries; min_gb: the venv alone
  0.5.23) venv=.venv; need_gb=9; min_gb=6 ;;
  0.5.8) venv=.venv-0.5.8; need_gb=1; min_gb=1; extra=(requirements/sglang-outside-range.txt) ;;
  *) echo "eagle-probe setup: unknown release '$release' (accepted: 0.5.23, 0.5.8)" >&2; exit 2 ;;
esac
[ "$release" = 0.5.8 ] && bash scripts/setup.sh  # the shared packages come from .venv
runtime=requirements/runtime-$release.txt
nodeps=requirements/sglang-$release-nodeps.txt
docs=()  # the documentation site's tools (mkdocs build --strict runs in the test command) go into the main venv
[ "$release" = 0.5.23 ] && docs=(requirements/docs.txt)
PY=${PYTHON:-python3}
stamp=$venv/.eagle-probe-setup
shared_stamp=()
[ "$release" = 0.5.8 ] && shared_stamp=(.venv/.eagle-probe-setup)
want=$(cat "$runtime" "$nodeps" "${extra[@]}" "${docs[@]}" "${shared_stamp[@]}" setup.cfg pyproject.toml \
       | sha256sum | cut -d' ' -f1)
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
# pip keeps no copy of the downloads (several GB of CUDA libraries) and says plainly when the disk is too full.
export PIP_NO_CACHE_DIR=${PIP_NO_CACHE_DIR:-1}
for dir in . "${TMPDIR:-/tmp}"; do  # below min_gb pip cannot succeed: stop; below need_gb it may: say so, go on
  free_kb=$(df -Pk "$dir" | awk 'NR == 2 {print $4}')
  if [ "$free_kb" -lt $((need_gb * 1024 * 1024)) ]; then
    said="eagle-probe setup: $(readlink -f "$dir") has $((free_kb / 1024)) MB free; installing SGLang $release into"
    said="$said $venv needs about $need_gb GB there"
    if [ "$free_kb" -lt $((min_gb * 1024 * 1024)) ]; then
      echo "$said, at least $min_gb GB. Free some space (or point TMPDIR elsewhere) and rerun." >&2
      exit 1
    fi
    echo "$said; trying (if pip fails with 'No space left on device', free some space and rerun)." >&2
  fi
done
if [ "$release" = 0.5.8 ] && [ -d "$venv" ] && [ ! -f "$venv/.eagle-probe-shared" ]; then
  rm -rf "$venv"  # a full venv from before the shared layout: rebuilt in the shared layout (about 30 s)
fi
if [ ! -x "$venv/bin/python" ]; then
  "$PY" -m venv "$venv"
  if [ "$release" = 0.5.8 ]; then
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    .venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > "$site/_eagle_probe_shared.pth"
    touch "$venv/.eagle-probe-shared"
  fi
fi
log=$(mktemp)
pip_q() {
  if ! "$venv/bin/python" -m pip install --disable-pip-version-check -q "$@" >"$log" 2>&1; then
    grep -v "^WARNING: Location" "$log" | tail -n 40 >&2
    echo "eagle-probe setup: pip install $* failed" >&2
    exit 1
  fi
}
echo "eagle-probe setup: installing SGLang $release into $venv (first time takes a few minutes)" >&2
pip_q -r "$runtime"
for pins in "${docs[@]}"; do pip_q -r "$pins"; done
# SGLang's own dependency list pulls GPU kernel packages; its CPU path needs only these (0.5.8's sgl-kernel
# imports are met by the test-only stand-in in sglang_cpu/shims_058.py).
pip_q --no-deps -r "$nodeps"
pip_q --no-deps -e .
for pins in "${extra[@]}"; do  # not importable from the venv itself: only with PYTHONPATH set to it
  pip_q --no-deps --upgrade --target "$venv/outside-range" -r "$pins"
done
if [ ${#docs[@]} -gt 0 ]; then "$venv/bin/mkdocs" --version >/dev/null \
  || { echo "eagle-probe setup: mkdocs is missing from $venv (see pip output above)" >&2; exit 1; }; fi
"$venv/bin/python" -c "import sglang, torch, transformers, eagle_probe, wrapt, structlog, prometheus_client
assert sglang.__version__ == '$release', sglang.__version__" \
  || { echo "eagle-probe setup: $venv is incomplete (see pip output above)" >&2; exit 1; }
echo "$want" > "$stamp"
