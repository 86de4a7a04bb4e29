#!/usr/bin/env bash
# Set up .venv if needed, then run the main job on the built-in tiny example: the seed's failure in miniature (a
# trained tiny target and EAGLE-3 draft served with the wrong layers), named by the probe and fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python examples/seed_story.py "$@"
