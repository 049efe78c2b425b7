#!/usr/bin/env bash
# Test 'broken-build-shows-error': the README's two commands show a failed build. In a throwaway copy of the
# source tree (no build folders), a declaration the compiler rejects is appended to a header that every library
# file includes. Then examples/run_demo.sh and tests/run_all.sh (which reuses the copy's build/) must each
#   - exit non-zero,
#   - print the compiler's message (the copy's broken line and g++'s "invalid conversion"),
#   - print the phase that failed ("== building build FAILED") and the failed step's object file,
# and run_all.sh must still close with "0 passed, 1 failed, 0 skipped". The demo must also have printed its
# configure phase. Before these scripts showed failures, both printed nothing at all.
#   usage: broken_build.sh SOURCE_ROOT
set -uo pipefail
src="$(cd "$1" && pwd)"
# The two commands set up a Debian machine; where their packages are missing (the offline GPU machine, which
# builds with tests/gpu_machine.sh instead) they could not run, so this test cannot either.
read -ra packages <<<"$(sed -n 's/^lg_packages=(\(.*\))$/\1/p' "$src/.ci/bootstrap.sh")"
[ ${#packages[@]} -gt 0 ] || { echo "FAILED: no lg_packages=(...) line in .ci/bootstrap.sh"; exit 1; }
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
    { echo "skipped: the README's commands need the Debian package $p, which is not installed here"; exit 77; }
done
tmp="$(mktemp -d -t lazygraph-broken-build.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
tar -C "$src" --exclude='./build*' --exclude=./.git --exclude=./.debs --exclude=./gpu-logs \
  --exclude=./subprojects/packagecache -cf - . | tar -C "$tmp" -xf -
marker="lazygraph_broken_build_check"
printf '\ninline int %s = "not an int";\n' "$marker" >>"$tmp/include/lazygraph/driver/error.hpp"

failed=0
expect() {  # expect SCRIPT OUTPUT REGEX WHAT
  if ! grep -Eq -- "$3" <<<"$2"; then
    echo "FAILED: $1 did not print $4 (/$3/)"
    failed=1
  fi
}
check() {  # check SCRIPT: runs it in the copy and checks what it printed
  local out rc=0
  out="$("$tmp/$1" 2>&1)" || rc=$?
  out="$(sed 's/\x1b\[[0-9;]*[mK]//g' <<<"$out")"  # g++'s colours
  echo "---- $1 exited $rc; its last 25 lines:"
  tail -25 <<<"$out"
  if [ $rc -eq 0 ]; then
    echo "FAILED: $1 exited 0 on a broken build"
    failed=1
  fi
  expect "$1" "$out" "error\.hpp:[0-9]+:[0-9]+: error: invalid conversion" "the compiler's error message"
  expect "$1" "$out" "$marker = \"not an int\"" "the source line the compiler rejected"
  expect "$1" "$out" "^== building build FAILED" "which phase failed"
  expect "$1" "$out" "^   .*\.o$" "the failed step (an object file)"
  REPLY="$out"
}
check examples/run_demo.sh
expect examples/run_demo.sh "$REPLY" "^== configuring build$" "its configure phase"
check tests/run_all.sh
[ "$(tail -1 <<<"$REPLY")" = "0 passed, 1 failed, 0 skipped" ] || {
  echo "FAILED: tests/run_all.sh did not close with '0 passed, 1 failed, 0 skipped'"
  failed=1
}
exit $failed
