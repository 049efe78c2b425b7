// Thread block clusters (sm_90 and newer; LaunchConfig::cluster on the host): a block's rank in its cluster, the
// cluster barrier, and reads of another block's shared memory (distributed shared memory). Include as
// "lazygraph/cluster.cuh". Every function traps before sm_90, where a kernel cannot be launched in clusters.
#pragma once

#include "lazygraph/kernel_common.cuh"

namespace lg {

/// This block's rank in its cluster, 0 .. cluster_blocks() - 1 (x fastest).
__device__ __forceinline__ unsigned cluster_rank() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
#else
  __trap();
  return 0;
#endif
}

/// Blocks in this block's cluster (1 for a launch without clusters).
__device__ __forceinline__ unsigned cluster_blocks() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned n;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
  return n;
#else
  __trap();
  return 0;
#endif
}

/// This thread's arrival at the cluster barrier, releasing its earlier writes (shared memory included) to the
/// cluster. Every thread of every block of the cluster arrives, then waits (cluster_wait), in turn; a thread may work
/// between the two. Both are the `.aligned` forms: all threads of a warp call them together (never inside a branch
/// that splits the warp).
__device__ __forceinline__ void cluster_arrive() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#else
  __trap();
#endif
}

/// Waits until every thread of the cluster has arrived (cluster_arrive); their writes before arriving are visible
/// from here on.
__device__ __forceinline__ void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
  __trap();
#endif
}

/// The whole barrier: every write of the cluster's threads before it is visible to all of them after it.
__device__ __forceinline__ void cluster_sync() {
  cluster_arrive();
  cluster_wait();
}

/// The 32-bit value at `local` (an address in this block's shared memory) in the shared memory of block `rank` of the
/// cluster, which must not have left: a block whose shared memory others read waits at a cluster barrier after their
/// reads before it ends.
__device__ __forceinline__ unsigned load_bits_from_block(const void* local, unsigned rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const auto from = static_cast<unsigned>(__cvta_generic_to_shared(local));
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(from), "r"(rank));
  unsigned v;
  asm volatile("ld.shared::cluster.b32 %0, [%1];" : "=r"(v) : "r"(remote) : "memory");
  return v;
#else
  __trap();
  return 0;
#endif
}

/// A float of block `rank`'s shared memory (load_bits_from_block's rules).
__device__ __forceinline__ float load_from_block(const float* local, unsigned rank) {
  return __uint_as_float(load_bits_from_block(local, rank));
}

/// An int of block `rank`'s shared memory (load_bits_from_block's rules).
__device__ __forceinline__ int load_from_block(const int* local, unsigned rank) {
  return static_cast<int>(load_bits_from_block(local, rank));
}

}  // namespace lg
