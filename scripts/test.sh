#!/usr/bin/env bash
# Set up and run the test suite (the README's test command; CI runs it through .ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
if [ -z "${PQ_CORPUS:-}" ] && [ -d ../shared/corpus ]; then
  export PQ_CORPUS="$(cd ../shared/corpus && pwd)"
fi
export PQ_CACHE="${PQ_CACHE:-$PWD/.venv/pq-cache}"
# the formatter, the linter and the type checker are part of the test: CI fails on any of them
.venv/bin/ruff format --check --quiet patch_queue tests scripts bench
.venv/bin/ruff check --quiet patch_queue tests scripts bench
.venv/bin/mypy patch_queue
# one worker per core (pytest-xdist), each taking a whole test file at a time: a module's fixtures are built once;
# the files in the order tests/conftest.py gives (the slowest first, so the workers end together), not by test count
.venv/bin/python -m pytest -q -n auto --dist loadfile --no-loadscope-reorder "$@"
