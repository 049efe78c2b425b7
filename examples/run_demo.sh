#!/usr/bin/env bash
# Builds lazygraph (installing what a fresh Debian 12 machine lacks) and runs the quickstart demo. Prints a
# line per phase and ninja's progress; a failed build prints the compiler's messages and what failed.
set -euo pipefail
source "$(dirname "$0")/../.ci/bootstrap.sh"
cd "$lg_root"
configure build
build build
echo "== running build/examples/01_quickstart"
exec ./build/examples/01_quickstart
