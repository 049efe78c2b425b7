#!/usr/bin/env bash
# Every test suite: host, no-driver, gpu and reliability (skipped without a GPU), compile-fail, examples, checks and
# consumers in a normal build, then the host suite of the two test programs (lazygraph_tests, the core layers;
# lazygraph_nn_tests, the nn layer) again under AddressSanitizer + UndefinedBehaviorSanitizer (unoptimized: at -O2
# that build takes five times as long to compile, and only the test programs and the libraries they link are built
# there). Both are unity builds (-Dunity=on -Dunity_size=8: Meson compiles a target's sources eight to a file), which
# takes a third less compile time than file by file, as the files of a target share most of their headers and
# template instances (eight to a file built the normal build in 149 s on an idle 2-core machine, four in 183 s); a
# file of the libraries or the tests must therefore not reuse a name another file of its target defines in an
# anonymous namespace. The normal build is optimized at -O1 (asserts on) without
# debug information (-Doptimization=1 -Ddebug=false): -g costs a third more compile time, -O2 half as much again, and
# no test depends on either; a default build (-O2 -g, as examples/run_demo.sh and the GPU machine's build-gpu make)
# runs the same tests. To debug a failure: `meson configure build -Ddebug=true`. The sanitizer build's debug
# information is -g1 (line tables, no variables): its reports keep their files and lines, and it compiles a little
# faster than with -g (304 s against 323-334 s on the 2-core CI machine, a gain within that machine's variation from
# run to run: 292-334 s with -g). Under AddressSanitizer the host suite runs less its 'nvrtc' part (compiling every nn
# kernel: NVRTC's time, not the library's). Prints a line per phase ("== "), ninja's progress and each test; a failed
# build prints the compiler's messages and what failed. Then a table of suites with how many test cases ran, the
# reason of every skip, and the closing line
#   N passed, N failed, N skipped
# (tests as Meson counts them; a failed build counts as one failed). Exits non-zero when anything failed.
set -euo pipefail
source "$(dirname "$0")/../.ci/bootstrap.sh"
cd "$lg_root"
start=$SECONDS

build_failed() {
  echo "0 passed, 1 failed, 0 skipped"
  exit 1
}

status=0
configure build -Dunity=on -Dunity_size=8 -Doptimization=1 -Ddebug=false || build_failed
build build || build_failed
echo "== testing build: every suite"
meson test -C build --no-rebuild --print-errorlogs || status=1

configure build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug -Dcpp_args=-g1 -Dunity=on \
  -Dunity_size=8 -Dexamples=disabled -Dtools=disabled || build_failed
build build-asan tests/lazygraph_tests tests/lazygraph_nn_tests || build_failed
echo "== testing build-asan: suite host under AddressSanitizer and UndefinedBehaviorSanitizer"
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
  meson test -C build-asan --no-rebuild --print-errorlogs --suite host --no-suite nvrtc || status=1

echo "== summary after $((SECONDS - start)) s"
python3 "$lg_root/tests/scripts/summarize.py" build build-asan || status=1
exit $status
