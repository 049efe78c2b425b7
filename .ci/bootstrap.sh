# Sourced by tests/run_all.sh and examples/run_demo.sh: installs what a fresh Debian 12 machine lacks (when
# run as root), then offers
#   configure DIR [meson options...]   sets up a build directory once (with -Dwerror=true: the project's own
#                                      builds treat warnings as errors; a consumer's build of lazygraph does not)
#   build DIR [TARGET...]              builds it (all default targets, or only those named), showing ninja's
#                                      progress and, on failure, the compiler's messages
# Each phase prints a line starting with "== "; a failure always prints what failed, on stderr.
# Exits with a message naming the packages when they are missing and it cannot install them.

lg_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# nlohmann-json3-dev, libpcre2-dev, libutf8proc-dev, libsentencepiece-dev and sentencepiece serve only the models
# library (liblazygraph_nn, built unless -Dnn=false: its tokenizer's regexes, Unicode normalization and
# tokenizer.model files) and lazygraph-run; both commands configure it, so that `ninja -C build` builds everything.
# libcpp-httplib-dev is lazygraph-serve's HTTP server (without it that command alone is not built).
lg_packages=(g++ meson ninja-build pkg-config cmake python3 librange-v3-dev doctest-dev doxygen nlohmann-json3-dev libpcre2-dev libutf8proc-dev libsentencepiece-dev sentencepiece libcpp-httplib-dev)

lg_missing=()
for p in "${lg_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || lg_missing+=("$p")
done
if ((${#lg_missing[@]})); then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing ${lg_missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${lg_missing[@]}" >/dev/null
  elif ! command -v meson >/dev/null || ! command -v ninja >/dev/null; then
    echo "missing Debian packages: ${lg_missing[*]}; run: sudo apt-get install ${lg_missing[*]}" >&2
    exit 1
  fi
fi
lg_toolkit="${LAZYGRAPH_TOOLKIT:-/usr/local/cuda}"
if [ ! -f "$lg_toolkit/include/nvrtc.h" ]; then
  echo "no CUDA toolkit at $lg_toolkit: install it there or set LAZYGRAPH_TOOLKIT" >&2
  exit 1
fi

configure() {
  local dir="$1"
  shift
  [ -f "$lg_root/$dir/build.ninja" ] && return 0
  echo "== configuring $dir"
  local log
  log="$(mktemp)"
  if ! meson setup "$lg_root/$dir" "$lg_root" -Dwerror=true -Dtoolkit_dir="$lg_toolkit" "$@" >"$log" 2>&1; then
    cat "$log" >&2
    echo "== configuring $dir FAILED: meson setup $dir -Dwerror=true -Dtoolkit_dir=$lg_toolkit $* (output above)" >&2
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
}

build() {
  local -  # the pipefail below stays in this function
  set -o pipefail
  local dir="$1" start=$SECONDS
  shift
  local log="$lg_root/$dir/build.log"
  echo "== building $dir${1:+ ($*)} (output also in $dir/build.log)"
  # Not a terminal: ninja prints one line per finished step and, for a failed one, the command and the
  # compiler's messages, all on stdout.
  if NINJA_STATUS="[%f/%t %es] " ninja -C "$lg_root/$dir" "$@" 2>&1 | tee "$log"; then
    echo "== built $dir in $((SECONDS - start)) s"
    return 0
  fi
  {
    echo "== building $dir FAILED after $((SECONDS - start)) s; failed steps:"
    grep '^FAILED: ' "$log" | sed -E 's/^FAILED: (.*[^ ]) *$/   \1/' || echo "   (no failed step named: see the output above)"
    echo "   the compiler's messages are above, and in $dir/build.log"
  } >&2
  return 1
}
