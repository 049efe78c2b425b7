// The index of the largest of n logits, written to out[b] as an int (greedy sampling), for each row b = blockIdx.x of
// logits ([rows][n]): argmax over fp16 logits, argmax_bf16 over bf16. Ties go to the lowest index; NaNs never win;
// if every logit is NaN (or n == 0), out[b] = -1.
//
// Launch: one block of 32 * k threads (k = 1..32) per row: grid = the row count, e.g. block 1024.
#include "lazygraph/nn/argmax.cuh"

namespace {

template <class T>
__device__ __forceinline__ void argmax_body(const T* logits, int* out, int n) {
  lg::early_launch_prologue();  // may be launched early (LaunchConfig::early_launch)
  const int best = lg::nn::block_argmax(logits + static_cast<long long>(blockIdx.x) * n, n);
  if (threadIdx.x == 0) out[blockIdx.x] = best;
}

}  // namespace

extern "C" __global__ void argmax(const lg::half_t* logits, int* out, int n) { argmax_body(logits, out, n); }

extern "C" __global__ void argmax_bf16(const lg::bf16_t* logits, int* out, int n) { argmax_body(logits, out, n); }
