// The index of the largest of n fp16 logits, written to out[b] as an int (greedy sampling), for each row
// b = blockIdx.x of logits ([rows][n]). Ties go to the lowest index; NaNs never win; if every logit is NaN (or
// n == 0), out[b] = -1.
//
// Launch: one block of 32 * k threads (k = 1..32) per row: grid = the row count, e.g. block 1024.
#include "lazygraph/nn/argmax.cuh"

extern "C" __global__ void argmax(const lg::half_t* logits, int* out, int n) {
  lg::early_launch_prologue();  // may be launched early (LaunchConfig::early_launch)
  const int best = lg::nn::block_argmax(logits + static_cast<long long>(blockIdx.x) * n, n);
  if (threadIdx.x == 0) out[blockIdx.x] = best;
}
