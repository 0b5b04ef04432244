#!/usr/bin/env bash
# The main job: set up, adopt the pinned vllm-omni release when patches/ holds no patch bodies,
# refresh onto the newest vllm-ascend release, build npu_worker/, print a summary.
# Exit code: that of `pq refresh` (0 clean, 3 conflicts left for a maintainer).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ -z "${PQ_UPSTREAM_GIT:-}" ] && [ -f ../shared/corpus/vllm-ascend.bundle ]; then
  export PQ_UPSTREAM_GIT="$(cd ../shared/corpus && pwd)/vllm-ascend.bundle"
fi
[ -d .git ] || git init -q
pq=.venv/bin/pq
release=$(.venv/bin/python -c 'import tomllib; print(tomllib.load(open("patches/queue.toml","rb"))["downstream"]["release"])')
base=$(.venv/bin/python -c 'import tomllib; print(tomllib.load(open("patches/queue.toml","rb"))["upstream"]["public_commit"])')
if ! ls patches/*.patch >/dev/null 2>&1; then
  echo "== adopting vllm-omni==$release at the pinned upstream $base"
  "$pq" adopt "vllm-omni==$release" --at "$base" --force
fi
mkdir -p reports
status=0
"$pq" refresh --no-stop --report reports/refresh.json --markdown reports/refresh.md || status=$?
"$pq" status || true
echo "== summary: refresh exit $status; reports in reports/refresh.json and reports/refresh.md; package in npu_worker/"
exit "$status"
