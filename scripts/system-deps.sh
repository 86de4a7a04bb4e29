#!/usr/bin/env bash
# System packages the test suite needs beyond Python, from Debian:
# - chromium, for the headless test of `eagle-probe summarize --html` (tests/browser);
# - prometheus (gives /usr/bin/prometheus and /usr/bin/promtool), for tests/prometheus: a real Prometheus
#   scraping a real SGLang server with the probe, running every dashboard and alert expression.
# Idempotent: installs only what is missing. Without root (or apt-get) it prints what to run and exits 0;
# the tests that need a missing package then skip with that reason.
set -euo pipefail

missing=()
if command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ]; then
    echo "system-deps: chromium already installed ($(command -v chromium || echo /usr/bin/chromium))"
else
    missing+=(chromium)
fi
if { command -v prometheus >/dev/null 2>&1 || [ -x /usr/bin/prometheus ]; } \
   && { command -v promtool >/dev/null 2>&1 || [ -x /usr/bin/promtool ]; }; then
    echo "system-deps: prometheus already installed ($(command -v prometheus || echo /usr/bin/prometheus))"
else
    missing+=(prometheus)
fi

if [ "${#missing[@]}" -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" != "0" ]; then
    echo "system-deps: WARNING: missing ${missing[*]} and this is not root; run as root:" >&2
    echo "    apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
    echo "system-deps: the tests that need them will skip (outside CI) until they are installed." >&2
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "system-deps: WARNING: no apt-get here; install ${missing[*]} by hand (binaries chromium, prometheus, promtool)." >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
# The prometheus package's maintainer scripts try to start a system service; in a container without an
# init system that step fails harmlessly, and the tests start their own Prometheus on loopback anyway.
apt-get install -y -q --no-install-recommends "${missing[@]}"
for pkg in "${missing[@]}"; do
    case "$pkg" in
        chromium) echo "system-deps: installed $(chromium --version 2>/dev/null || echo chromium)" ;;
        prometheus) echo "system-deps: installed $(prometheus --version 2>&1 | head -n1 || echo prometheus)" ;;
    esac
done
