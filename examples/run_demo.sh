#!/usr/bin/env bash
# Builds lazygraph (installing what a fresh Debian 12 machine lacks) and runs the quickstart demo. Prints a
# line per phase and ninja's progress; a failed build prints the compiler's messages and what failed. Builds what
# the demo needs (the core library and the demo) in the default configuration; `ninja -C build` builds the rest.
set -euo pipefail
source "$(dirname "$0")/../.ci/bootstrap.sh"
cd "$lg_root"
configure build
build build examples/01_quickstart
echo "== running build/examples/01_quickstart"
exec ./build/examples/01_quickstart
