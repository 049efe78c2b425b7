#pragma once
// Asynchronous copies from global into shared memory (cp.async, sm_80 and newer): a kernel issues a tile's copies,
// commits them as a group, and waits for all but the newest N groups before it reads the tile, so that loads stay
// in flight without holding registers. Defined only when compiling for sm_80 or newer: a kernel that must also
// compile for older GPUs guards its use with __CUDA_ARCH__ (and traps there).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800

namespace lg {

/// The shared-memory address of a generic pointer into shared memory, as the shared-memory instructions take it.
__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

/// Copies 16 bytes from global `from` to shared `to` asynchronously; `fill` false writes 16 zero bytes instead (and
/// reads nothing). Both addresses 16-byte aligned. kL2Bytes 256 also asks L2 to fetch the aligned 256 bytes around
/// `from` (cp.async's L2::256B): for a stream of 128-byte pieces of long rows, the next piece of each row is then in L2
/// when it is asked for; 0 leaves the fetch's size to L2.
template <int kL2Bytes = 0>
__device__ __forceinline__ void copy16_async(void* to, const void* from, bool fill) {
  static_assert(kL2Bytes == 0 || kL2Bytes == 256, "L2 fetches of 256 bytes, or L2's own");
  if constexpr (kL2Bytes == 256) {
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(shared_address(to)), "l"(from),
                 "r"(fill ? 16 : 0)
                 : "memory");
  } else {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(shared_address(to)), "l"(from),
                 "r"(fill ? 16 : 0)
                 : "memory");
  }
}

/// Closes this thread's copies issued since the last commit into one group.
__device__ __forceinline__ void commit_async() { asm volatile("cp.async.commit_group;" ::: "memory"); }

/// Waits until at most N of this thread's committed groups of copies are still in flight (their data is then in
/// shared memory for this thread; a __syncthreads makes every thread's visible to all).
template <int N>
__device__ __forceinline__ void wait_async() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

}  // namespace lg

#endif
