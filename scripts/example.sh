#!/usr/bin/env bash
# Set up .venv if needed, then run the main job on the built-in tiny example.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python examples/tiny_server.py "$@"
