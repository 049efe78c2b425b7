# Sourced by tests/run_all.sh and examples/run_demo.sh: installs what a fresh Debian 12 machine lacks (when
# run as root), then offers `configure DIR [meson options...]`, which sets up a build directory once.
# Exits with a message naming the packages when they are missing and it cannot install them.

lg_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
lg_packages=(g++ meson ninja-build pkg-config cmake python3 librange-v3-dev doctest-dev doxygen)

lg_missing=()
for p in "${lg_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || lg_missing+=("$p")
done
if ((${#lg_missing[@]})); then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing ${lg_missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${lg_missing[@]}" >/dev/null
  elif ! command -v meson >/dev/null || ! command -v ninja >/dev/null; then
    echo "missing Debian packages: ${lg_missing[*]}; run: sudo apt-get install ${lg_missing[*]}" >&2
    exit 1
  fi
fi
if [ ! -f "${LAZYGRAPH_TOOLKIT:-/usr/local/cuda}/include/nvrtc.h" ]; then
  echo "no CUDA toolkit at ${LAZYGRAPH_TOOLKIT:-/usr/local/cuda}: install it there or set LAZYGRAPH_TOOLKIT" >&2
  exit 1
fi

configure() {
  local dir="$1"
  shift
  if [ ! -f "$lg_root/$dir/build.ninja" ]; then
    meson setup "$lg_root/$dir" "$lg_root" -Dtoolkit_dir="${LAZYGRAPH_TOOLKIT:-/usr/local/cuda}" "$@" >/dev/null
  fi
}
