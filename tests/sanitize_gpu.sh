#!/usr/bin/env bash
# Runs the gpu test suite under each compute-sanitizer tool (memcheck with leak check, racecheck, synccheck,
# initcheck) on a GPU machine, after tests/gpu_machine.sh has built build-gpu/. Prints one line per tool with
# its error count and exits non-zero when any tool reported an error. Logs go to $OUT (or ./gpu-logs).
#   usage: tests/sanitize_gpu.sh [tool ...]        (default: all four)
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
logs="${OUT:-$root/gpu-logs}"
mkdir -p "$logs"
sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
tests="$root/build-gpu/tests/lazygraph_tests"
[ -x "$tests" ] || { echo "no $tests: run tests/gpu_machine.sh first" >&2; exit 2; }
export LAZYGRAPH_CACHE_DIR="$root/build-gpu/tests/kernel-cache"
tools=("$@")
[ ${#tools[@]} -gt 0 ] || tools=(memcheck racecheck synccheck initcheck)
status=0
for tool in "${tools[@]}"; do
  extra=()
  [ "$tool" = memcheck ] && extra=(--leak-check full)
  log="$logs/sanitize-$tool.log"
  start=$(date +%s)
  "$sanitizer" --tool "$tool" "${extra[@]}" --error-exitcode 99 --print-limit 200 \
    "$tests" --test-suite=gpu --no-colors=true >"$log" 2>&1
  rc=$?
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
  cases=$(grep -E "^\[doctest\] test cases" "$log" | tail -1)
  echo "$tool: exit $rc; ${summary:-no summary}; ${cases:-no doctest summary}; $(($(date +%s) - start)) s"
  [ $rc -eq 0 ] || status=1
done
exit $status
