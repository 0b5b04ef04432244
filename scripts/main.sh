#!/usr/bin/env bash
# The main job: set up, reproduce the series from the lineage in patches/queue.toml when patches/
# holds no patch bodies (merging origin's recorded edits, refs/pq/resolutions, into this clone's), take in
# the newest vllm-omni release (`pq merge`: the maintainers' own NPU changes; nothing when the series holds
# it), refresh onto the newest vllm-ascend release, build npu_worker/, print a summary naming both
# (`pq status` shows it again later; `pq continue` rewrites the reports).
# Exit code: that of `pq reproduce` when it fails (1); else that of `pq merge` when it does not finish (3
# conflicts, 1 errors of `pq check`: the merge is pending; resolve, `pq continue`, then run this again to
# refresh); else that of `pq refresh` (0 clean, 3 conflicts, 1 errors of `pq check` in the result: the refresh
# is pending, `pq status` lists them).
# PQ=<command> uses that pq instead of setting up .venv (the tests run this script that way).
# PQ_TIMINGS=<file>: append the seconds of each step to it, `step NAME SECONDS` (set-up, download, reproduce,
# merge, refresh), and pq adds `within download|check SECONDS` lines for the parts of its commands that fetch
# sources and check the result (bench/bench.py reads them).
set -euo pipefail
cd "$(dirname "$0")/.."
clock() {  # seconds since the epoch: to the microsecond in bash 5 (whatever the locale's decimal mark), else whole
  local t="${EPOCHREALTIME:-}"
  if [ -n "$t" ]; then echo "${t/,/.}"; else date +%s; fi
}
last="$(clock)"
step() {
  local now
  now="$(clock)"
  [ -z "${PQ_TIMINGS:-}" ] || awk -v n="$1" -v a="$last" -v b="$now" 'BEGIN { printf "step %s %.3f\n", n, b - a }' >>"$PQ_TIMINGS"
  last="$now"
}
path_hint=""
if [ -z "${PQ:-}" ]; then
  bash scripts/setup.sh
  PQ=.venv/bin/pq
  # printed at the end however the script ends (the next step, `pq continue`, needs pq on PATH)
  trap 'echo "$path_hint"' EXIT
  path_hint="== pq is in .venv/bin: put it on PATH for the next steps (pq continue, pq status, ...): export PATH=\"$PWD/.venv/bin:\$PATH\" (or: source .venv/bin/activate)"
  step set-up
fi
if [ -z "${PQ_UPSTREAM_GIT:-}" ] && [ -f ../shared/corpus/vllm-ascend.bundle ]; then
  PQ_UPSTREAM_GIT="$(cd ../shared/corpus && pwd)/vllm-ascend.bundle"
  export PQ_UPSTREAM_GIT
fi
[ -d .git ] || git init -q
if git remote get-url origin >/dev/null 2>&1; then
  # origin's recorded edits: fetched into refs/pq/remotes/origin/resolutions, then a fast-forward of
  # refs/pq/resolutions, or (this clone recorded too) the union of both stores, each clash said (this
  # clone's entry kept); nothing is lost (`pq resolutions log`)
  # an origin that cannot be reached (offline) is said and passed over: `pq reproduce` then names any
  # recorded edit this clone lacks
  echo "== taking origin's recorded edits (refs/pq/resolutions)"
  $PQ resolutions merge origin \
    || echo "== origin's recorded edits were not taken (the error above says why): reproducing from this clone's own"
fi
step download
echo "== reproducing the series from the lineage in patches/queue.toml"
$PQ reproduce
step reproduce
mkdir -p reports
echo "== taking in the newest vllm-omni release (pq merge)"
set +e
$PQ merge --report reports/merge.json --markdown reports/merge.md 2>&1 | tee reports/merge.log
merged=${PIPESTATUS[0]}
set -e
step merge
downstream="$(grep -E '^(merged |already up to date)' reports/merge.log | tail -1 || true)"
if [ "$merged" -ne 0 ]; then
  echo "== summary: merge exit $merged: the merge of the newest vllm-omni release is pending (resolve, then \`pq continue\`, then run this again to refresh onto the newest vllm-ascend); reports in reports/merge.json and reports/merge.md; package in npu_worker/"
  exit "$merged"
fi
status=0
# a refresh that finishes is imported against the real releases (pq check --import: its environment, 2.6 GB, is
# built once in pq's cache; offline or out of space it is a warning, not a failure); PQ_IMPORT_TEST=0 skips it
import_test=--import
[ "${PQ_IMPORT_TEST:-1}" = 0 ] && import_test=--no-import
$PQ refresh --no-stop "$import_test" --report reports/refresh.json --markdown reports/refresh.md || status=$?
step refresh
echo "== summary: vllm-omni: ${downstream:-merge exit 0}; vllm-ascend: refresh exit $status; reports in reports/refresh.json and reports/refresh.md; package in npu_worker/"
exit "$status"
