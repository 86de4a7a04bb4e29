#!/usr/bin/env bash
# Create or reuse .venv-0.5.8/ with SGLang 0.5.8 (see scripts/setup.sh).
exec bash "$(dirname "$0")/setup.sh" 0.5.8
