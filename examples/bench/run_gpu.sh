#!/usr/bin/env bash
# On the GPU machine, after tests/gpu_machine.sh has built build-gpu/: runs the benchmarks, tables to stdout.
#   usage: examples/bench/run_gpu.sh [all|graph|gemv|compile|models]   (default all)
# The models benchmark writes its results to $OUT/models (or ./bench-results) and needs python3 with PyTorch.
set -euo pipefail
cd "$(dirname "$0")/../.."
which="${1:-all}"
ninja -C build-gpu >/dev/null
if [ "$which" = all ] || [ "$which" = graph ]; then ./build-gpu/examples/bench_graph; echo; fi
if [ "$which" = all ] || [ "$which" = gemv ]; then ./build-gpu/examples/bench_gemv; echo; fi
if [ "$which" = all ] || [ "$which" = compile ]; then ./build-gpu/examples/bench_compile; echo; fi
if [ "$which" = all ] || [ "$which" = models ]; then
  results="${OUT:-$PWD/bench-results}/models"
  mkdir -p "$results"
  ./build-gpu/examples/bench_models "$results" 300
  echo
  python3 examples/bench/torch_models.py "$results"
fi
