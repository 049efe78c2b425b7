// Reductions over a warp and over a block: block_sum over a block of any shape (its threads in linear order),
// block_max over a 1-D block. Include as "lazygraph/block_reduce.cuh".
#pragma once

#include "lazygraph/kernel_common.cuh"

namespace lg {

/// Maximum over the 32 lanes of a warp; every lane gets it.
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/// Sum over a block (its threads in linear order, x fastest: warp w is threads 32 w to 32 w + 31; the block's
/// thread count a multiple of 32); every thread gets it. Every thread of the block must call it (it synchronises the
/// block); consecutive calls are safe. A 1-D block and a (32, K, R) block of as many threads give the same bits.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  const int tid = static_cast<int>((threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x);
  const int lane = tid % 32;
  const int warp = tid / 32;
  const int warps = static_cast<int>(blockDim.x * blockDim.y * blockDim.z) / 32;
  v = warp_sum(v);
  __syncthreads();  // a previous call's readers are done with `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  return warp_sum(lane < warps ? partial[lane] : 0.0f);
}

/// Maximum over a 1-D block (blockDim.x a multiple of 32); every thread gets it. Same rules as block_sum.
__device__ __forceinline__ float block_max(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  return warp_max(lane < warps ? partial[lane] : -__int_as_float(0x7f800000));
}

}  // namespace lg
