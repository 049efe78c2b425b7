#!/usr/bin/env bash
# On the GPU machine, after tests/gpu_machine.sh has built build-gpu/: runs the benchmarks, tables to stdout.
set -euo pipefail
cd "$(dirname "$0")/../.."
ninja -C build-gpu >/dev/null
./build-gpu/examples/bench_graph
echo
./build-gpu/examples/bench_gemv
