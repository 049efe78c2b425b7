// The index of the largest of n logits (fp16 or bf16), computed by a whole block, shared by the argmax and sample
// kernels. Include as "lazygraph/nn/argmax.cuh". Ties go to the lowest index; NaNs never win; -1 if every logit is NaN
// or n == 0.
#pragma once

#include "lazygraph/element.cuh"
#include "lazygraph/kernel_common.cuh"

namespace lg::nn {

/// Whether candidate (v, i) beats the best so far (best, best_index); best_index < 0 means none yet.
__device__ __forceinline__ bool beats(float v, int i, float best, int best_index) {
  if (v != v) return false;  // NaN
  if (best_index < 0) return true;
  return v > best || (v == best && i < best_index);
}

/// Reduces (best, best_index) over the warp: every lane ends with the warp's winner.
__device__ __forceinline__ void warp_reduce_best(float& best, int& best_index) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, best, offset);
    const int i = __shfl_xor_sync(0xffffffffu, best_index, offset);
    if (i >= 0 && beats(v, i, best, best_index)) {
      best = v;
      best_index = i;
    }
  }
}

/// The argmax of logits[0..n) over a 1-D block of 32 * k threads; every thread gets it. Every thread of the block
/// must call it (it synchronises the block).
template <class T>
__device__ int block_argmax(const T* logits, int n) {
  float best = 0.0f;
  int best_index = -1;
  auto consider = [&](float v, int i) {
    if (beats(v, i, best, best_index)) {
      best = v;
      best_index = i;
    }
  };
  // 16-byte loads of 8 logits where the pointer allows (several in flight per thread), single ones after.
  int scalar_from = 0;
  if (is_aligned16(logits)) {
    const int chunks = n / 8;
#pragma unroll 4
    for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
      float f[8];
      load_float8(logits + 8LL * c, f);
#pragma unroll
      for (int i = 0; i < 8; ++i) consider(f[i], 8 * c + i);
    }
    scalar_from = 8 * chunks;
  }
  for (int i = scalar_from + static_cast<int>(threadIdx.x); i < n; i += blockDim.x) consider(to_float(logits[i]), i);
  warp_reduce_best(best, best_index);
  __shared__ float warp_best[32];
  __shared__ int warp_index[32];
  __shared__ int winner;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  if (lane == 0) {
    warp_best[warp] = best;
    warp_index[warp] = best_index;
  }
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x / 32;
    best = lane < warps ? warp_best[lane] : 0.0f;
    best_index = lane < warps ? warp_index[lane] : -1;
    warp_reduce_best(best, best_index);
    if (lane == 0) winner = best_index;
  }
  __syncthreads();
  return winner;
}

}  // namespace lg::nn
