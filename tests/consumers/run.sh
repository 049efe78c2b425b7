#!/usr/bin/env bash
# Suite 'consumers': another project builds and runs tests/consumers/consumer.cpp against lazygraph, one way each.
# With NN=true (BUILD_ROOT's option nn) the program uses the models library as well as the core (it opens a seeded
# checkpoint), through liblazygraph_nn's own way in; with NN=false the core library only.
#   usage: run.sh meson|pkg-config|cmake SOURCE_ROOT BUILD_ROOT TOOLKIT_DIR NN [CMAKE_PREFIX_PATH]
#   meson       lazygraph as a Meson subproject through a copy of subprojects/lazygraph.wrap.example (the
#               subproject folder is a link to SOURCE_ROOT), the consumer asking only for dependency('lazygraph_nn')
#               (dependency('lazygraph') with NN=false). Asserts that it builds only the libraries (no lazygraph test
#               is registered in the consumer, no lazygraph example or test target), imposes no -Werror, and that
#               the consumer's tests pass; then, with -Dlazygraph:tests=enabled, that a lazygraph compile-fail test
#               passes inside the consumer's build too.
#   pkg-config  `meson install --destdir` of BUILD_ROOT, then g++ with `pkg-config --cflags --libs lazygraph_nn`
#               (lazygraph with NN=false). Then the installed tree's programs and the consumer run with the loader
#               cache bypassed (ld.so --inhibit-cache, the staged libdir given as --library-path): they find the
#               toolkit's libraries through their RPATH, as the build tree's copies do.
#   cmake       the same install, then a CMake project with find_package(lazygraph COMPONENTS nn) and lazygraph::nn
#               (lazygraph::lazygraph with NN=false).
# TOOLKIT_DIR and CMAKE_PREFIX_PATH are BUILD_ROOT's options toolkit_dir and cmake_prefix_path (comma-separated:
# where range-v3 and doctest come from on the GPU machine), for the subproject build.
# Exit 77 (skipped) only when the tool the way needs (pkg-config, cmake) is not installed.
set -euo pipefail
kind="$1"
src="$(cd "$2" && pwd)"
build="$(cd "$3" && pwd)"
here="$(cd "$(dirname "$0")" && pwd)"
toolkit="$4"
nn="$5"
cmake_prefix_path="${6:-}"
work="$(mktemp -d -t "lazygraph-consumer-$kind.XXXXXX")"
trap 'rm -rf "$work"' EXIT

fail() {
  echo "FAILED ($kind consumer): $*"
  exit 1
}
step() {  # step LOG COMMAND...: runs it, showing its output only when it fails
  local log="$work/$1.log"
  shift
  local rc=0
  "$@" >"$log" 2>&1 || rc=$?
  if [ $rc -ne 0 ]; then
    cat "$log"
    fail "$* (exit $rc)"
  fi
}
check_output() {  # the consumer program's output, from any of the three builds
  grep -q '^consumer: lazygraph linked, [1-9][0-9]* embedded kernel modules; GPU: ' <<<"$1" ||
    fail "the consumer printed something unexpected: $1"
  if [ "$nn" = true ]; then
    grep -q '^consumer: lazygraph_nn linked, [1-9][0-9]* embedded kernel modules; opened a seeded checkpoint' <<<"$1" ||
      fail "the consumer did not report the models library's checks: $1"
  fi
  echo "$1"
}
run_consumer() {  # run_consumer COMMAND...: runs the consumer program, which must exit 0, and checks its output
  local out rc=0
  out="$("$@" 2>&1)" || rc=$?
  [ $rc = 0 ] || fail "the consumer exited $rc: $out"
  check_output "$out"
}
if [ "$nn" = true ]; then
  nn_define=-DLAZYGRAPH_CONSUMER_NN=1
  pc_name=lazygraph_nn
else
  nn_define=-DLAZYGRAPH_CONSUMER_NN=0
  pc_name=lazygraph
fi

install_lazygraph() {
  step install meson install -C "$build" --no-rebuild --destdir "$work/root"
  pc="$(find "$work/root" -name lazygraph.pc | head -1)"
  [ -n "$pc" ] || fail "meson install put no lazygraph.pc under the destdir"
  if [ "$nn" = true ]; then
    [ -f "$(dirname "$pc")/lazygraph_nn.pc" ] || fail "meson install put no lazygraph_nn.pc beside $pc"
  fi
  prefix="$(sed -n 's/^prefix=//p' "$pc")"
  staged="$work/root$prefix"
  libdir="$(dirname "$(find "$staged" -name 'liblazygraph.so*' -o -name liblazygraph.a | head -1)")"
}
# The loader without its cache (/etc/ld.so.cache, where these machines list the toolkit's lib folder too), finding
# lazygraph's libraries in the staged libdir: what a program finds beyond that, it finds through its RPATH.
run_uncached() {  # run_uncached PROGRAM [ARGS...]
  local loader
  loader="$(readelf -l "$1" | sed -n 's/.*Requesting program interpreter: \(.*\)]$/\1/p')"
  [ -n "$loader" ] || fail "readelf names no program interpreter for $1"
  "$loader" --inhibit-cache --library-path "$libdir" "$@"
}
check_rpath() {  # check_rpath FILE DIR...: FILE's old-style RPATH (which a library's dlopen also serves) has each DIR
  local file="$1" rpath
  shift
  rpath="$(readelf -d "$file" | sed -n 's/.*(RPATH) *Library rpath: \[\(.*\)\]$/\1/p')"
  for dir in "$@"; do
    grep -qx -- "$dir" <<<"$(tr ':' '\n' <<<"$rpath")" ||
      fail "installed $(basename "$file") has RPATH [$rpath] (readelf -d), without $dir"
  done
}

case "$kind" in
meson)
  mkdir -p "$work/project/subprojects"
  cp "$here/meson_subproject/meson.build" "$here/meson_subproject/meson_options.txt" "$here/consumer.cpp" \
    "$work/project/"
  cp "$src/subprojects/lazygraph.wrap.example" "$work/project/subprojects/lazygraph.wrap"
  ln -s "$src" "$work/project/subprojects/lazygraph"
  # Unoptimized (the consumer's buildtype debug), without debug information, and a unity build of up to 32 files to a
  # compile (the models library in one, the core in two): the check is that the subproject builds, links and runs,
  # and this way it compiles in a fraction of the time: 272 s on the 2-core CI machine without debug=false and unity;
  # here, 93 s of CPU with four files to a compile, 53 s with 32.
  setup_args=(--force-fallback-for=lazygraph --wrap-mode=nodownload -Dlazygraph:toolkit_dir="$toolkit"
    -Dnn="$nn" -Dlazygraph:nn="$nn" -Ddebug=false -Dunity=subprojects -Dunity_size=32)
  [ -n "$cmake_prefix_path" ] && setup_args+=(--cmake-prefix-path="$cmake_prefix_path")
  step setup meson setup "$work/b" "$work/project" "${setup_args[@]}"
  problems=()
  # Meson 1.0 lists "consumer", newer ones "lazygraph_consumer:consumer".
  tests="$(meson test -C "$work/b" --no-rebuild --list 2>/dev/null | sed 's/^lazygraph_consumer://')"
  [ "$tests" = "consumer" ] ||
    problems+=("the consumer's test list is not just its own test: $(tr '\n' ' ' <<<"$tests" | cut -c1-300)")
  targets="$(meson introspect "$work/b" --targets |
    python3 -c 'import json,sys; print(" ".join(sorted(t["name"] for t in json.load(sys.stdin))))')"
  want="consumer embedded_kernels lazygraph"
  [ "$nn" = true ] && want="$want lazygraph_nn nn_embedded_kernels"
  [ "$targets" = "$want" ] ||
    problems+=("as a subproject lazygraph must build only its libraries ($want); the build has the targets: $targets")
  werror="$(grep -c -- '-Werror' "$work/b/compile_commands.json" || true)"
  [ "$werror" = 0 ] || problems+=("$werror compile commands in the consumer's build have -Werror")
  for p in "${problems[@]}"; do echo "FAILED (meson consumer): $p"; done
  [ ${#problems[@]} = 0 ] || exit 1
  step build ninja -C "$work/b"
  step test meson test -C "$work/b" --no-rebuild
  check_output "$(grep '^consumer: ' "$work/b/meson-logs/testlog.txt" || true)"
  # Asked for, lazygraph's tests run in the consumer's build, and pass: compile-fail reads the compile
  # commands where Meson writes them (the top-level build root). One is enough to prove it.
  step reconfigure meson setup --reconfigure "$work/b" "$work/project" "${setup_args[@]}" -Dlazygraph:tests=enabled
  step compile-fail meson test -C "$work/b" --no-rebuild lazygraph:record_zeros
  echo "subproject: only the libraries built, no -Werror, consumer test passed; lazygraph:record_zeros passed"
  ;;
pkg-config)
  command -v pkg-config >/dev/null || { echo "skipped: pkg-config is not installed"; exit 77; }
  install_lazygraph
  export PKG_CONFIG_PATH
  PKG_CONFIG_PATH="$(dirname "$pc")"
  flags="$(pkg-config --define-variable=prefix="$staged" --cflags --libs "$pc_name")" ||
    fail "pkg-config --cflags --libs $pc_name"
  echo "pkg-config --cflags --libs $pc_name: $flags"
  # shellcheck disable=SC2086  # the flags are words
  step compile g++ -std=c++20 "$nn_define" "$here/consumer.cpp" -o "$work/consumer" $flags
  run_consumer run_uncached "$work/consumer"
  # The installed programs and libraries: the toolkit's lib folder in their RPATH, and they run without the cache.
  cuda_libdir="$toolkit/lib64"
  if [ -e "$libdir/liblazygraph.so" ]; then  # not with -Ddefault_library=static
    check_rpath "$(readlink -f "$libdir/liblazygraph.so")" "$cuda_libdir"
  fi
  for program in "$staged"/bin/lazygraph-*; do
    check_rpath "$program" "$prefix/$(realpath --relative-to="$staged" "$libdir")" "$cuda_libdir"
  done
  [ -x "$staged/bin/lazygraph-info" ] || fail "meson install put no bin/lazygraph-info under the destdir"
  info="$(LAZYGRAPH_CACHE_DIR="$work/cache" run_uncached "$staged/bin/lazygraph-info" 2>&1)" ||
    { echo "$info"; fail "the installed lazygraph-info failed with the loader cache bypassed"; }
  grep -q '^  version: *[0-9]' <<<"$info" || fail "the installed lazygraph-info printed no NVRTC version: $info"
  echo "installed: lazygraph-info ran with the loader cache bypassed (NVRTC $(sed -n 's/^  version: *//p' <<<"$info"))"
  if [ "$nn" = true ] && [ -x "$staged/bin/lazygraph-run" ]; then
    step lazygraph-run run_uncached "$staged/bin/lazygraph-run" --version
    echo "installed: lazygraph-run --version ran with the loader cache bypassed"
  fi
  ;;
cmake)
  command -v cmake >/dev/null || { echo "skipped: cmake is not installed"; exit 77; }
  install_lazygraph
  [ -f "$libdir/cmake/lazygraph/lazygraphConfig.cmake" ] || fail "no $libdir/cmake/lazygraph/lazygraphConfig.cmake"
  [ -f "$libdir/cmake/lazygraph/lazygraphConfigVersion.cmake" ] || fail "no lazygraphConfigVersion.cmake"
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  cmake_nn=OFF
  [ "$nn" = true ] && cmake_nn=ON
  step cmake-configure cmake -S "$here/cmake" -B "$work/cb" "${generator[@]}" -DCMAKE_PREFIX_PATH="$staged" \
    -DCONSUMER_NN="$cmake_nn"
  step cmake-build cmake --build "$work/cb"
  run_consumer "$work/cb/consumer"  # CMake's build RPATH finds the staged libraries
  ;;
*)
  fail "unknown consumer kind (meson, pkg-config or cmake)"
  ;;
esac
