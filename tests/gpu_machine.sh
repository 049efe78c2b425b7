#!/usr/bin/env bash
# For a GPU machine without network (see README): builds from Debian packages carried in .debs/ and runs
# every suite, printing the GPU's name and the summary. Logs go to $OUT (or ./gpu-logs) when set.
#   usage: tests/gpu_machine.sh [extra command to run in the build afterwards, e.g. a benchmark]
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
logs="${OUT:-$root/gpu-logs}"
mkdir -p "$logs"
prefix="$root/.debs/prefix"
if [ ! -d "$prefix/usr" ]; then
  for f in .debs/*.deb; do dpkg -x "$f" "$prefix"; done
fi
# The tokenizer's PCRE2 and utf8proc, when this machine lacks them, from the carried packages: copies of their .pc
# files pointing at the prefix (the originals name /usr), and their shared libraries alone on LD_LIBRARY_PATH (not
# the whole prefix, whose other libraries would replace the system's in every program).
fallback="$prefix/fallback"
mkdir -p "$fallback/pkgconfig" "$fallback/lib"
for pkg in libpcre2-8:libpcre2-8.so libutf8proc:libutf8proc.so; do
  if ! pkg-config --exists "${pkg%%:*}"; then
    for pc in "$prefix"/usr/lib/*/pkgconfig/"${pkg%%:*}".pc; do
      [ -f "$pc" ] || continue
      sed "s|^prefix=/usr\$|prefix=$prefix/usr|" "$pc" >"$fallback/pkgconfig/${pkg%%:*}.pc"
      ln -sf "$(dirname "$(dirname "$pc")")/${pkg#*:}"* "$fallback/lib/"
    done
  fi
done
export PKG_CONFIG_PATH="$fallback/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export LD_LIBRARY_PATH="$fallback/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$logs/gpu.txt"
if [ ! -f build-gpu/build.ninja ]; then
  meson setup build-gpu --cmake-prefix-path="$prefix/usr" --wrap-mode=nodownload >"$logs/setup.log" 2>&1 ||
    { tail -30 "$logs/setup.log"; exit 1; }
fi
ninja -C build-gpu >"$logs/build.log" 2>&1 || { grep -E "error|FAILED" -A5 "$logs/build.log" | head -60; exit 1; }
# The gpu suite's parts (tests/meson.build: gpu_parts) run side by side, 8 processes on the one GPU.
start=$SECONDS
meson test -C build-gpu --no-rebuild --print-errorlogs --num-processes 8 >"$logs/tests.log" 2>&1
status=$?
grep -E "^ *[0-9]+/[0-9]+ " "$logs/tests.log"
# The gpu suites' own doctest summaries (cases and assertions), from Meson's log rather than a second run.
python3 - build-gpu/meson-logs/testlog.json <<'EOF' | tee "$logs/gpu-suite.txt"
import json, re, sys
for line in open(sys.argv[1], encoding="utf-8"):
    r = json.loads(line)
    if re.split(r" / |:", r["name"])[-1].startswith(("gpu-", "nn-gpu-")):  # Meson 1.0 and newer names
        said = [l for l in (r.get("stdout") or "").splitlines() if l.startswith(("[doctest] test cases", "[doctest] assertions"))]
        print(r["name"], *said, sep="\n  ")
EOF
echo "every suite in $((SECONDS - start)) s" | tee "$logs/time.txt"
python3 tests/scripts/summarize.py build-gpu | tee "$logs/summary.txt"
if [ $status -ne 0 ]; then grep -B2 -A40 -E "FAIL|ERROR" "$logs/tests.log" | head -120; fi
if [ $# -gt 0 ]; then "$@"; fi
exit $status
