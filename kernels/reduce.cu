// Sum of n floats into *out. *out must be zero before the launch: each block adds its partial sum
// atomically, so the result's rounding depends on block order (within float rounding of the exact sum).
#include "lazygraph/kernel_common.cuh"

extern "C" __global__ void sum_f32(const float* in, float* out, int n) {
  __shared__ float warp_sums[32];
  float v = 0.0f;
  for (long long i = lg::global_index(); i < n; i += lg::grid_stride()) v += in[i];
  v = lg::warp_sum(v);
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int warps = (blockDim.x + 31) / 32;
    v = lane < warps ? warp_sums[lane] : 0.0f;
    v = lg::warp_sum(v);
    if (lane == 0) atomicAdd(out, v);
  }
}
