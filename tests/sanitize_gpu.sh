#!/usr/bin/env bash
# Runs the gpu test suite of both test programs (lazygraph_tests, the core layers; lazygraph_nn_tests, the nn layer)
# under each compute-sanitizer tool (memcheck with leak check, racecheck, synccheck, initcheck) on a GPU machine,
# after tests/gpu_machine.sh has built build-gpu/. Every pass of every tool runs each test case in its own process,
# SANITIZE_JOBS (default 8) at a time, and those that create NCCL communicators SANITIZE_NCCL_JOBS (default 4; those
# that time a failing join one at a time) at a time: under racecheck a serial run of the nn suite takes over 20 minutes, and initcheck's serial run of the core
# suite never finished. A case still running after SANITIZE_CASE_TIMEOUT seconds (default 900) is stopped and named
# as timed out, so that a run always finishes. SANITIZE_PROGRAMS names the programs to check (default both);
# SANITIZE_SHARD=K/N runs only the K-th of N shares of every pass's cases (case i when (i - 1) % N == K - 1), so that
# a run can be split over commands of limited length; SANITIZE_SKIP names a file of test case names, one a line, that
# every pass of every tool of the run leaves out (those a stopped run of the same tool passed: exit status 0 in their
# .rc, the name in their log's duration line; run one tool per command when using it, and keep the stopped run's logs,
# which the next run of the same shard replaces); SANITIZE_PASSES names the passes to run (default "main api nccl":
# every test but those below; the tests of failing driver calls; the tests that create NCCL communicators). The tool `asan` instead builds build-gpu-asan/ with
# AddressSanitizer + UndefinedBehaviorSanitizer and runs the gpu and reliability suites of the programs there
# (host-side memory errors on the GPU path: use-after-scope, use-after-free, overflows, leaks).
# Prints one line per tool, program and pass with its error count, then one line per failed case (its number and
# name), and exits non-zero when any tool reported an error or any case failed or timed out.
# Logs go to $OUT (or ./gpu-logs): sanitize-TOOL.log for lazygraph_tests, sanitize-TOOL-nn.log for lazygraph_nn_tests,
# and beside each, .expected-api-errors and .nccl for the second pass. While a pass runs, LOG.cases-K-of-N/ (its
# shard's) holds the log and exit status of each case that has finished (a run stopped from outside leaves them there).
#   usage: tests/sanitize_gpu.sh [tool ...]        (default: memcheck racecheck synccheck initcheck)
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
logs="${OUT:-$root/gpu-logs}"
mkdir -p "$logs"
sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
read -r -a programs <<<"${SANITIZE_PROGRAMS:-lazygraph_tests lazygraph_nn_tests}"
for program in "${programs[@]}"; do
  [ -x "$root/build-gpu/tests/$program" ] || { echo "no $root/build-gpu/tests/$program: run tests/gpu_machine.sh first" >&2; exit 2; }
done
export LAZYGRAPH_CACHE_DIR="$root/build-gpu/tests/kernel-cache"
tools=("$@")
[ ${#tools[@]} -gt 0 ] || tools=(memcheck racecheck synccheck initcheck)
# Tests whose point is a driver call that fails — out of memory, a corrupt module image, a graph update the
# driver refuses (cuGraphExecUpdate), a missing kernel name, an event without timing, a capture the tool itself
# invalidates by loading a module on another thread — run with API-error reports off, in a pass of their own.
expected_api_errors="*larger than the device's memory*,*that the driver rejects*,*reports why and where*,*re-instantiates only on request*,*finds its kernels by name*,*an image the driver cannot load*,*events made without timing cannot be timed*,*another thread from loading kernels*,*out of memory while making a cache entry*"
# Tests that create NCCL communicators, in the same pass: NCCL itself makes failing calls while it sets one up (it
# asks cudaFuncGetAttributes about kernels built for other GPUs, and ncclMemAlloc tries memory handle types the
# system may not permit), which are its own, not errors of ours.
# synccheck only: tests that run a block-synchronizing kernel inside a conditional body. synccheck reports "Barrier
# error, divergent threads in warp" at the __syncthreads of such a kernel when it runs in the body of a WHILE node,
# and nowhere else: the core kernel sum_f32 (warp_sum, then __syncthreads with every thread present) does it in the
# test "a while_ body may hold a kernel that synchronizes its blocks" and is clean outside bodies; the decoder's
# qkv_rope_append does it in generate's loop and is clean in the step and forward graphs, the same binary. A
# limitation of the tool with conditional bodies: after its first report it kills the context, so every later test
# would fail. The persistent kernel as a WHILE body (tests/kernels/persistent_program.cpp) gets the same report at its
# first __syncthreads, with every thread of the block present (2x H200, compute-sanitizer 2025.3.1). memcheck and
# racecheck run these tests. Besides the tests named for generate, those that call it: the engine's tests (its step
# model's generate), the recorded routes' test and the rank of one that runs every path (2025.3.1, H200, this pass:
# the same report at qkv_rope_append and qk_norm_rope_append inside generate's loop, then a lost context).
synccheck_excluded="*generate*,*requests through the engine over a*,*recorded routes are route_token*,*a rank of one runs every path of the Decoder*,*8 threads calling one MLP and one decoder*,*decode after prefill on tensor cores*,*a while_ body may hold a kernel that synchronizes*,*a persistent program is the body of a while_ loop*"
# racecheck only:
# - the tests of cuBLASLt GEMMs (kernels/gemm.cpp, and the nn prefill that runs on them). racecheck reports hazards
#   inside cuBLASLt's own Hopper kernels (nvjet_sm90_*), which order their shared memory through asynchronous barriers
#   the tool does not follow, and none in ours; memcheck and synccheck run these tests.
# - the kernels that set a loop's condition (cudaGraphSetConditional from the device): kernels/control.cu's
#   while_guard (LoopBound) and kernels/nn/generate.cu's generate_advance. racecheck 2025.3 corrupts its own heap when
#   it instruments either inside a WHILE body that also holds a decode step: glibc aborts ("malloc(): unaligned
#   fastbin chunk detected", SIGSEGV) in the tool's own threads after 0 hazards. Measured on the step's kernels as a
#   WHILE body of 2 iterations (tests/nn/models.cpp, "... small enough for racecheck"), H200, compute-sanitizer
#   2025.3.1: it crashes as it is, with ordinary launches instead of early ones, and with --racecheck-memcpy-async no;
#   it passes with no kernel instrumented, and with each kernel family alone instrumented (gemv, qkv, attention,
#   rms_norm, embedding, argmax: 0 hazards) except while_guard, which alone reproduces the crash. Both kernels run one
#   thread and use no shared memory, so racecheck has nothing to find in them: it leaves them uninstrumented
#   (--kernel-name-exclude) and checks everything else, generate's whole loop included.
racecheck_options=(--kernel-name-exclude kns=while_guard --kernel-name-exclude kns=generate_advance)
racecheck_excluded_sources="*gemm.cpp,*nn/prefill.cpp"
# and by name the paged decoder's prompts on tensor cores (tests/nn/decoder.cpp, decoder_step_model.cpp), whose
# GEMMs are cuBLASLt's: with nvjet left uninstrumented the tool stopped on "Internal Sanitizer Error: The Sanitizer
# failed to handle a hardware exception", and with everything instrumented the first case ran past 100 s (H200,
# 2025.3.1). Their own kernel, the paged flash attention, is racechecked in tests/nn/prefill_attention.cpp: 0 hazards.
racecheck_excluded="*prompts on tensor cores*"
# and the test that times how long a failed NCCL join takes: under racecheck the 500 ms join took 29.5 s, past the
# test's 5.5 s bound, with 0 hazards (H200, 2025.3.1). synccheck runs it.
racecheck_excluded+=",*a rank whose peer never comes gets a TimeoutError*"
# memcheck and initcheck: the tests that launch a graph with conditional nodes (WHILE, IF) right behind other work
# on its stream (the uploads of its inputs, a re-instantiation). Under these two tools such a launch fails with
# CUDA_ERROR_ILLEGAL_ADDRESS and no access reported, and the context is lost; without a tool they pass, and under the
# tool they pass when their kernels were compiled in the same process (which leaves the stream idle by the time of
# the launch) or when the test waits for its stream before it captures (H200, compute-sanitizer 2025.3.1: the same
# three tests, with the cache warm, fail as they are and pass with a stream.synchronize() before each capture).
# NVIDIA/warp#1406 reports the same failure for a WHILE graph captured after recent allocations, without lazygraph.
# The persistent program as a WHILE body failed the same way under memcheck (39 reports, every one a driver call
# after the launch returning CUDA_ERROR_ILLEGAL_ADDRESS, no access named; it passes without the tool), and so did the
# decode step as a WHILE body (tests/nn/models.cpp, both cases) after the one access memcheck names: while_guard's
# 4-byte read of its bound's state at offset 0 of an 8-byte allocation, "out of bounds and inside the nearest
# allocation" at the same address, a contradiction.
# racecheck runs these tests (synccheck leaves out the persistent one, above).
conditional_excluded="*while_ runs its body exactly*,*a persistent program is the body of a while_ loop*,*as a WHILE body runs bound-many times*,*a while_ body may hold a kernel that synchronizes*,*the bound stops a loop*,*conditional ops nest*,*a captured graph with conditions is never updated*,*a built graph with conditions updates kernels*,*LoopBound's while_guard runs*"
# initcheck only:
# - tests whose stream waits on a host function the test itself opens later (tests/common/gate.hpp): under initcheck
#   the test's next driver call does not return while that host function waits, so they hang (memcheck, racecheck
#   and synccheck run them);
# - a test that times how long a failed NCCL join takes: initcheck makes NCCL's setup 3x slower than its bound.
initcheck_excluded="*fork_join runs each branch on its own stream*,*a stream that waits for an event runs its later work*,*a rank whose peer never comes gets a TimeoutError*"
# memcheck only: the test that times how long a failed NCCL join takes. memcheck makes NCCL's setup slower than the
# test's bound (the 500 ms join took over 5.5 s, H200, compute-sanitizer 2025.3.1), and reports as a leak the 4 bytes
# of pinned host memory NCCL allocates (cuMemHostAlloc within ncclCommInitRankConfig) for the communicator that the
# join abandons: NCCL's own, not ours. synccheck runs it.
# And "a while_ body may hold collectives": a WHILE graph launched right behind its inputs' uploads, as those above
# (conditional_excluded). Under memcheck it failed once with a wrong value, then in three more runs with
# CUDA_ERROR_ILLEGAL_ADDRESS and no access named; it passes without the tool and under synccheck and initcheck. The
# same test with the all_reduce replaced by two copies (no NCCL) fails the same way under memcheck, and passes with
# a stream.synchronize() before its capture; with the all_reduce, that synchronize is not enough (H200,
# compute-sanitizer 2025.3.1). Its body's three nodes are ordered by the capture itself, the same in
# both variants, so this is the tool's failure with conditional bodies, not a missing edge.
memcheck_excluded="*a rank whose peer never comes gets a TimeoutError*,*a while_ body may hold collectives*"
nccl_sources="*collective.cpp,*collective_log.cpp,*communicator.cpp,*multi_device_graph.cpp,*symmetric_buffer.cpp,*peer_exchange.cpp,*tensor_parallel.cpp,*tensor_parallel_decoder.cpp,*decoder_rank.cpp,*peer_all_reduce.cpp"
parallel="${SANITIZE_JOBS:-8}"
nccl_jobs="${SANITIZE_NCCL_JOBS:-4}"
# The NCCL tests that time how long a failing join takes: they run one at a time, after the others (run serially,
# memcheck's NCCL pass of the core program took more than 575 s on an H200).
nccl_timed="*a rank whose peer never comes gets a TimeoutError*"
case_timeout="${SANITIZE_CASE_TIMEOUT:-900}"
read -r -a passes <<<"${SANITIZE_PASSES:-main api nccl}"
for pass in "${passes[@]}"; do
  case "$pass" in main | api | nccl) ;; *) echo "SANITIZE_PASSES: unknown pass $pass (main, api, nccl)" >&2; exit 2 ;; esac
done
runs_pass() { [[ " ${passes[*]} " == *" $1 "* ]]; }
# SANITIZE_SKIP's names, as the keys of `skip`.
declare -A skip=()
if [ -n "${SANITIZE_SKIP:-}" ]; then
  [ -r "$SANITIZE_SKIP" ] || { echo "SANITIZE_SKIP=$SANITIZE_SKIP: not a readable file" >&2; exit 2; }
  while IFS= read -r name || [ -n "$name" ]; do
    name=${name%$'\r'}
    [ -n "$name" ] && skip["$name"]=1
  done <"$SANITIZE_SKIP"
fi
shard="${SANITIZE_SHARD:-1/1}"
shard_index="${shard%/*}"
shard_count="${shard#*/}"
if ! [[ "$shard_index" =~ ^[0-9]+$ && "$shard_count" =~ ^[0-9]+$ ]] || [ "$shard_index" -lt 1 ] ||
  [ "$shard_index" -gt "$shard_count" ]; then
  echo "SANITIZE_SHARD=$shard: give K/N with 1 <= K <= N" >&2
  exit 2
fi

# case_names TESTS DOCTEST FILTER ...: the names of the test cases the filters pass, one a line, in the order doctest
# runs them (the order --first and --last count in).
case_names() {
  local tests=$1
  shift
  "$tests" "$@" --list-test-cases --no-colors=true 2>/dev/null | awk '
    /^\[doctest\] listing all test case names/ { listing = 1; next }
    listing && /^=+$/ { if (names) exit; names = 1; next }
    names { print }'
}

# each_case TOOL TESTS LOG JOBS [TOOL OPTION ...] -- DOCTEST FILTER ...: runs each test case the filters pass (those of
# this shard) in its own process under the tool, JOBS at a time, each stopped after $case_timeout seconds, and writes
# their logs in order to LOG, each after a line naming the case. LOG ends with a line per failed case ("FAILED case I:
# NAME (exit C)", "(timed out ...)") and one line: the cases, the failed ones' numbers and the tool's error count over
# all. Returns non-zero when any case failed.
each_case() {
  local tool=$1 tests=$2 log=$3 jobs=$4
  shift 4
  local -a options=() filters=() names=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do options+=("$1"); shift; done
  shift
  filters=("$@")
  mapfile -t names < <(case_names "$tests" "${filters[@]}")
  local n=${#names[@]} counted dir i rc ran=0 skipped=0 failed="" errors=0
  counted=$("$tests" "${filters[@]}" --count 2>/dev/null | sed -n 's/.*passing the current filters: \([0-9]*\).*/\1/p')
  if [ "$counted" != "$n" ]; then
    echo "$tests listed $n cases where --count says ${counted:-nothing}" >"$log"
    return 2
  fi
  # Each case's log and exit status go beside LOG as they finish, so that a run stopped from outside keeps them.
  dir="$log.cases-$shard_index-of-$shard_count"
  rm -rf "$dir"
  mkdir -p "$dir"
  for ((i = 1; i <= n; i++)); do
    [ $(((i - 1) % shard_count)) -eq $((shard_index - 1)) ] || continue
    if [ -n "${skip[${names[i - 1]}]+x}" ]; then
      skipped=$((skipped + 1))
      continue
    fi
    ran=$((ran + 1))
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
    (
      # timeout signals its whole process group: the tool and the test program under it.
      timeout -k 30 "$case_timeout" "$sanitizer" --tool "$tool" "${options[@]}" --error-exitcode 99 --print-limit 200 \
        "$tests" "${filters[@]}" --first="$i" --last="$i" --duration=true --no-colors=true >"$dir/$i.log" 2>&1
      echo $? >"$dir/$i.rc"
    ) &
  done
  wait
  : >"$log"
  local summary=""
  for ((i = 1; i <= n; i++)); do
    [ -f "$dir/$i.rc" ] || continue
    rc=$(cat "$dir/$i.rc")
    echo "==== case $i: ${names[i - 1]} (exit $rc)" >>"$log"
    cat "$dir/$i.log" >>"$log"
    case "$rc" in
      0) ;;
      124 | 137)
        failed="$failed $i"
        summary+="FAILED case $i: ${names[i - 1]} (timed out after $case_timeout s)"$'\n' ;;
      *)
        failed="$failed $i"
        summary+="FAILED case $i: ${names[i - 1]} (exit $rc)"$'\n' ;;
    esac
    # memcheck, synccheck and initcheck: "ERROR SUMMARY: N errors"; racecheck: "(N errors, M warnings)".
    errors=$((errors + $(sed -n -e 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' \
      -e 's/.*RACECHECK SUMMARY: .*(\([0-9]*\) errors.*/\1/p' "$dir/$i.log" | awk '{s += $1} END {print s + 0}')))
  done
  rm -rf "$dir"
  printf '%s' "$summary" >>"$log"
  local left_out=""
  [ $skipped -gt 0 ] && left_out=", $skipped left out by SANITIZE_SKIP"
  echo "$ran of $n cases (shard $shard$left_out), each in its own process; failed:${failed:- none}; $errors errors reported" >>"$log"
  [ -z "$failed" ]
}

# report LABEL RC LOG START: the pass's line, then its failed cases.
report() {
  echo "$1: exit $2; $(tail -1 "$3"); $(($(date +%s) - $4)) s"
  grep -E "^FAILED case [0-9]+: " "$3" | sed 's/^/  /'
}

status=0
for tool in "${tools[@]}"; do
  if [ "$tool" = asan ]; then
    start=$(date +%s)
    log="$logs/sanitize-asan.log"
    if [ ! -f "$root/build-gpu-asan/build.ninja" ]; then
      meson setup "$root/build-gpu-asan" "$root" --cmake-prefix-path="$root/.debs/prefix/usr" --wrap-mode=nodownload \
        -Db_sanitize=address,undefined -Db_lundef=false -Dexamples=disabled >"$log" 2>&1 || { tail -20 "$log"; exit 2; }
    fi
    ninja -C "$root/build-gpu-asan" tests/lazygraph_tests tests/lazygraph_nn_tests >>"$log" 2>&1 || { tail -30 "$log"; exit 2; }
    # The CUDA driver maps memory where ASan keeps its shadow gap. Leaks are checked at exit, except those of the
    # CUDA and NCCL libraries, which keep allocations for the process's life (tests/sanitize_gpu.supp).
    rc=0
    for program in "${programs[@]}"; do
      for suite in gpu reliability; do
        ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=1:halt_on_error=1 \
          LSAN_OPTIONS="suppressions=$root/tests/sanitize_gpu.supp" UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
          "$root/build-gpu-asan/tests/$program" --test-suite=$suite --no-colors=true >>"$log" 2>&1 || rc=1
      done
    done
    errors=$(grep -cE "ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:" "$log")
    cases=$(grep -E "^\[doctest\] test cases" "$log" | tr '\n' ' ')
    echo "asan: exit $rc; $errors sanitizer errors; $cases; $(($(date +%s) - start)) s"
    [ $rc -eq 0 ] || status=1
    continue
  fi
  extra=()
  [ "$tool" = memcheck ] && extra=(--leak-check full)
  [ "$tool" = racecheck ] && extra=("${racecheck_options[@]}")
  excluded=""
  [ "$tool" = synccheck ] && excluded=",$synccheck_excluded"
  [ "$tool" = racecheck ] && excluded=",$racecheck_excluded"
  [ "$tool" = memcheck ] && excluded=",$conditional_excluded,$memcheck_excluded"
  [ "$tool" = initcheck ] && excluded=",$conditional_excluded,$initcheck_excluded"
  excluded_sources=""
  [ "$tool" = racecheck ] && excluded_sources=",$racecheck_excluded_sources"
  # The same exclusions as doctest arguments, for the passes that select by other filters (none when empty).
  excludes=()
  [ -n "$excluded" ] && excludes+=(--test-case-exclude="${excluded#,}")
  source_excludes=()
  [ -n "$excluded_sources" ] && source_excludes+=(--source-file-exclude="${excluded_sources#,}")
  for program in "${programs[@]}"; do
    tests="$root/build-gpu/tests/$program"
    log="$logs/sanitize-$tool.log"
    [ "$program" = lazygraph_nn_tests ] && log="$logs/sanitize-$tool-nn.log"
    # Pass 1: every test but those below, with every failed driver call reported as an error.
    if runs_pass main; then
      start=$(date +%s)
      each_case "$tool" "$tests" "$log" "$parallel" "${extra[@]}" -- --test-suite=gpu \
        --test-case-exclude="$expected_api_errors$excluded" --source-file-exclude="$nccl_sources$excluded_sources"
      rc=$?
      report "$tool ($program)" $rc "$log" "$start"
      [ $rc -eq 0 ] || status=1
    fi
    # Pass 2: with API errors not reported (memory, race, sync and init errors still are), the tests whose point is a
    # failing driver call, one at a time (some take all the device's memory), then those that create NCCL
    # communicators.
    if runs_pass api; then
      start=$(date +%s)
      each_case "$tool" "$tests" "$log.expected-api-errors" 1 "${extra[@]}" --report-api-errors no -- \
        --test-suite=gpu --test-case="$expected_api_errors" "${excludes[@]}" \
        --source-file-exclude="$nccl_sources$excluded_sources"
      rc=$?
      report "$tool ($program, expected API errors)" $rc "$log.expected-api-errors" "$start"
      [ $rc -eq 0 ] || status=1
    fi
    if runs_pass nccl; then
      start=$(date +%s)
      each_case "$tool" "$tests" "$log.nccl" "$nccl_jobs" "${extra[@]}" --report-api-errors no -- \
        --test-suite=gpu --source-file="$nccl_sources" --test-case-exclude="$nccl_timed$excluded" \
        "${source_excludes[@]}"
      rc=$?
      report "$tool ($program, NCCL, API errors not reported)" $rc "$log.nccl" "$start"
      [ $rc -eq 0 ] || status=1
      # The tests that time a failing join, one at a time after the others, so that no other case slows them.
      start=$(date +%s)
      each_case "$tool" "$tests" "$log.nccl-timed" 1 "${extra[@]}" --report-api-errors no -- \
        --test-suite=gpu --source-file="$nccl_sources" --test-case="$nccl_timed" "${excludes[@]}" \
        "${source_excludes[@]}"
      rc=$?
      report "$tool ($program, NCCL timed, API errors not reported)" $rc "$log.nccl-timed" "$start"
      [ $rc -eq 0 ] || status=1
    fi
  done
done
exit $status
