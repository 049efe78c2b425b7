#!/usr/bin/env bash
# On the GPU machine, after tests/gpu_machine.sh has built build-gpu/: runs the benchmarks, tables to stdout.
#   usage: examples/bench/run_gpu.sh [all|graph|stream|gemv|persistent|quantized|expr|nccl|compile|models|shapes|batch|prefill|paged|serving|moe]   (default all)
#          examples/bench/run_gpu.sh prefill [bench_prefill options...]   (e.g. --shape tinyllama --tokens 512)
#          examples/bench/run_gpu.sh moe [bench_moe options...]           (e.g. --shape olmoe-1b-7b --layers 4)
# The models benchmarks write their results to $OUT/models, $OUT/shapes, $OUT/batch8, $OUT/prefill (or under
# ./bench-results) and need python3 with PyTorch; prefill also with Hugging Face transformers.
set -euo pipefail
cd "$(dirname "$0")/../.."
which="${1:-all}"
shift $(($# > 0 ? 1 : 0))
ninja -C build-gpu >/dev/null
if [ "$which" = all ] || [ "$which" = graph ]; then ./build-gpu/examples/bench_graph; echo; fi
if [ "$which" = all ] || [ "$which" = stream ]; then ./build-gpu/examples/bench_weight_stream; echo; fi
if [ "$which" = all ] || [ "$which" = gemv ]; then ./build-gpu/examples/bench_gemv; echo; fi
if [ "$which" = all ] || [ "$which" = persistent ]; then
  ./build-gpu/examples/bench_persistent
  echo
  results="${OUT:-$PWD/bench-results}/persistent"
  mkdir -p "$results"
  ./build-gpu/examples/bench_persistent_decoder "$results"
  python3 examples/bench/torch_persistent_decoder.py "$results"
  echo
fi
if [ "$which" = all ] || [ "$which" = quantized ]; then
  ./build-gpu/examples/bench_quantized
  echo
  # Accuracy on a trained model too: a small byte-level Llama trained here for two minutes (needs PyTorch and
  # transformers), then the decoders on it and on the seeded shapes.
  trained="${OUT:-$PWD/bench-results}/quantized"
  mkdir -p "$trained"
  if python3 examples/bench/train_tiny_llama.py "$trained" --seconds 120 >"$trained/train.log" 2>&1; then
    ./build-gpu/examples/bench_quantized_decoder --checkpoint "$trained/model" --tokens "$trained/tokens.txt"
  else
    echo "(no trained model: train_tiny_llama.py failed, see $trained/train.log)"
    ./build-gpu/examples/bench_quantized_decoder
  fi
  echo
fi
if [ "$which" = all ] || [ "$which" = expr ]; then ./build-gpu/examples/bench_expr; echo; fi
if [ "$which" = all ] || [ "$which" = nccl ]; then
  ./build-gpu/examples/bench_nccl
  echo
  ./build-gpu/examples/bench_tensor_parallel
  echo
fi
if [ "$which" = all ] || [ "$which" = compile ]; then ./build-gpu/examples/bench_compile; echo; fi
if [ "$which" = all ] || [ "$which" = paged ]; then ./build-gpu/examples/bench_paged_attention; echo; fi
if [ "$which" = all ] || [ "$which" = serving ]; then
  # With transformers' continuous batching beside it (torch_serving.py, which bench_serving runs with --torch).
  ./build-gpu/examples/bench_serving --torch --out "${OUT:-$PWD/bench-results}/serving"
  echo
fi
if [ "$which" = all ] || [ "$which" = models ]; then
  results="${OUT:-$PWD/bench-results}/models"
  mkdir -p "$results"
  ./build-gpu/examples/bench_models --out "$results" --forwards 300
  echo
  python3 examples/bench/torch_models.py "$results"
fi
if [ "$which" = all ] || [ "$which" = shapes ]; then
  # Shapes beyond the default run: SwiGLU stacks of 400+ MB and decoders of 1+ GB (issue 13's targets), with the
  # profile of each, against PyTorch.
  results="${OUT:-$PWD/bench-results}/shapes"
  mkdir -p "$results"
  ./build-gpu/examples/bench_models --out "$results" --forwards 200 --profile \
    --mlp 768,3072,32 --mlp 1024,4096,24 --mlp 1536,4096,12 --mlp 2048,5632,6 --mlp 2560,6912,4 --mlp 3072,8192,3 \
    --decoder d=2048,heads=16,kv_heads=4,layers=16,ffn=5632,vocab=32000 \
    --decoder d=4096,heads=32,kv_heads=8,layers=4,ffn=11008,vocab=32000
  echo
  python3 examples/bench/torch_models.py "$results"
fi
if [ "$which" = all ] || [ "$which" = batch ]; then
  results="${OUT:-$PWD/bench-results}/batch8"
  mkdir -p "$results"
  ./build-gpu/examples/bench_models --out "$results" --forwards 200 --batch 8 --mlp 512,1536,16 --mlp 2048,5632,6 \
    --decoder d=512 --decoder d=2048,heads=16,kv_heads=4,layers=16,ffn=5632,vocab=32000
fi
if [ "$which" = all ] || [ "$which" = prefill ]; then
  # Time to first token on the TinyLlama and Llama-3.2-1B shapes against the GEMM floor (bench_prefill) and against
  # transformers on the same seeded weights (torch_prefill.py, which ends with the comparison table).
  results="${OUT:-$PWD/bench-results}/prefill"
  mkdir -p "$results"
  ./build-gpu/examples/bench_prefill --out "$results" "$@"
  echo
  python3 examples/bench/torch_prefill.py "$results"
fi
if [ "$which" = all ] || [ "$which" = moe ]; then
  # Mixture-of-experts decode steps of the Qwen3-30B-A3B and OLMoE-1B-7B shapes (61 and 14 GB in bf16, seeded on the
  # device) against the bytes they read and against transformers (eager and CUDA graph: torch_moe.py, which bench_moe
  # runs on each shape after freeing its own decoder of it).
  results="${OUT:-$PWD/bench-results}/moe"
  mkdir -p "$results"
  if [ "$which" = moe ] && [ $# -gt 0 ]; then
    ./build-gpu/examples/bench_moe --torch --out "$results" "$@"
  else
    ./build-gpu/examples/bench_moe --torch --out "$results"
  fi
fi
