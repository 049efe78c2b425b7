// Helpers shared by the kernels in kernels/. Compiled by NVRTC only; include as "lazygraph/kernel_common.cuh".
#pragma once

namespace lg {

/// The global index of this thread in a 1-D launch.
__device__ __forceinline__ long long global_index() {
  return static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
}

/// The number of threads in a 1-D launch, the stride of a grid-stride loop.
__device__ __forceinline__ long long grid_stride() { return static_cast<long long>(gridDim.x) * blockDim.x; }

/// Programmatic dependent launch (LaunchConfig::early_launch, sm_90+). A kernel launched early may run while
/// the work before it finishes: it must call wait_for_prior_grids() before it reads or writes memory that work
/// touches (only data nothing earlier writes, such as weights, may be read or prefetched before). Launched
/// normally, or on GPUs before sm_90, both calls do nothing.
__device__ __forceinline__ void wait_for_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/// Lets the kernel after this one (if launched early) start as soon as every block of this grid has called
/// this or exited, instead of when the grid completes. Its results stay protected by the next kernel's
/// wait_for_prior_grids(), which waits for this grid's completion.
__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/// The first statement of a kernel that may be launched early and has nothing to prefetch.
__device__ __forceinline__ void early_launch_prologue() {
  allow_dependent_launch();
  wait_for_prior_grids();
}

/// Asks for the 128-byte line holding `p` to be brought into L2 (a hint: it writes no register and the kernel
/// goes on without waiting for it).
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

/// Sum over the 32 lanes of a warp; every lane gets the total.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

}  // namespace lg
