// Helpers shared by the kernels in kernels/. Compiled by NVRTC only; include as "lazygraph/kernel_common.cuh".
#pragma once

namespace lg {

/// The global index of this thread in a 1-D launch.
__device__ __forceinline__ long long global_index() {
  return static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
}

/// The number of threads in a 1-D launch, the stride of a grid-stride loop.
__device__ __forceinline__ long long grid_stride() { return static_cast<long long>(gridDim.x) * blockDim.x; }

/// Sum over the 32 lanes of a warp; every lane gets the total.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

}  // namespace lg
