// Token embedding lookup: out[i] = table[*token * d + i] for i < d, fp16.
//
// The token is read from device memory, so a captured graph replays with whatever token was copied there
// (or written by argmax) last. It is not checked against the table's row count, which the kernel cannot know.
//
// Launch: 1-D, any grid and block (grid-stride), e.g. grid_for(d, 256).
#include "lazygraph/half.cuh"
#include "lazygraph/kernel_common.cuh"

extern "C" __global__ void embedding(const lg::half_t* table, const int* token, lg::half_t* out, int d) {
  lg::early_launch_prologue();  // may be launched early (LaunchConfig::early_launch)
  const lg::half_t* row = table + static_cast<long long>(*token) * d;
  for (long long i = lg::global_index(); i < d; i += lg::grid_stride()) out[i] = row[i];
}
