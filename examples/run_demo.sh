#!/usr/bin/env bash
# Builds lazygraph (installing what a fresh Debian 12 machine lacks) and runs the quickstart demo.
set -euo pipefail
source "$(dirname "$0")/../.ci/bootstrap.sh"
cd "$lg_root"
configure build
ninja -C build >/dev/null
exec ./build/examples/01_quickstart
