#!/usr/bin/env bash
# Create .venv and install pq with its pinned dependencies (and the development tools with --dev).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
if [ "${1:-}" = "--dev" ]; then
  .venv/bin/python -m pip install --quiet -e '.[dev]'
else
  .venv/bin/python -m pip install --quiet -e .
fi
