#!/usr/bin/env bash
# Set up what the tests need (.venv/ with SGLang 0.5.23, .venv-0.5.8/ with SGLang 0.5.8, and as root Debian's
# chromium and prometheus), lint with ruff, then run every tier: unit, contract checks over every release, real
# SGLang in-process and real servers on 0.5.23, a real Prometheus, headless Chromium, and the 0.5.8 tier.
# It ends with the slowest tests and fixtures, the time of each tier and of each step, and the total against the
# README's budget (EAGLE_PROBE_TEST_BUDGET_MIN).
set -euo pipefail
cd "$(dirname "$0")/.."
budget_min=${EAGLE_PROBE_TEST_BUDGET_MIN:-40}
started=$SECONDS
steps=()
step() {  # step NAME COMMAND...: run it, remember its time and exit status, carry on either way
    local name=$1 t0=$SECONDS rc=0
    shift
    "$@" || rc=$?
    steps+=("$(printf '%-22s %6d s  exit %d' "$name" $((SECONDS - t0)) "$rc")")
    [ "$rc" -eq 0 ] || status=$rc
}
status=0
step "setup (0.5.23)" bash scripts/setup.sh
# .venv-0.5.8 installs in the background (mostly download and unpacking) while the 0.5.23 tiers run; its tier waits.
setup058_log=$(mktemp)
bash scripts/setup-0.5.8.sh >"$setup058_log" 2>&1 &
setup058_pid=$!
setup058_wait() { local rc=0; wait "$setup058_pid" || rc=$?; cat "$setup058_log"; return "$rc"; }
step "system packages" bash scripts/system-deps.sh
[ "$status" -eq 0 ] || { setup058_wait || true; printf '%s\n' "${steps[@]}" >&2; exit "$status"; }
step "ruff" .venv/bin/ruff check .  # lint (pyproject.toml: line length 120)
step "types (mypy)" .venv/bin/mypy  # analysis/ and the shared vocabulary ([tool.mypy] in pyproject.toml)
# The site: a broken link or a page missing from the nav fails (not -q: under -q mkdocs 1.6 counts no warnings).
step "docs (mkdocs)" env NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict -d "$(mktemp -d)"
step "tests (0.5.23)" .venv/bin/python -m pytest -q --durations=15 "$@" tests
step "setup (0.5.8, waited)" setup058_wait  # the time it still took after the 0.5.23 tests
step "tests (0.5.8 tier)" bash scripts/test-0.5.8.sh --durations=15
total=$((SECONDS - started))
echo
echo "===== scripts/test.sh: time per step ====="
printf '%s\n' "${steps[@]}"
printf '%-22s %6d s  (%d min %d s; budget %d min)\n' "total" "$total" $((total / 60)) $((total % 60)) "$budget_min"
if [ "$total" -gt $((budget_min * 60)) ]; then
    echo "OVER BUDGET: the test command took $((total / 60)) min $((total % 60)) s, more than the README's" \
         "$budget_min minutes; look at the slowest tests and tiers above"
fi
exit "$status"
