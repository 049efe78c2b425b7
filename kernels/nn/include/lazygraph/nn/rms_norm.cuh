// RMS normalisation's arithmetic, shared by kernels/nn/rms_norm.cu and the kernels that norm a vector themselves
// before using it (gemv.cu's rms_norm_store_gemv), so that they give rms_norm's bits. Include as
// "lazygraph/nn/rms_norm.cuh".
#pragma once

#include "lazygraph/block_reduce.cuh"
#include "lazygraph/element.cuh"

namespace lg::nn {

/// Elements a thread loads at once: the loads of one pass go out together instead of one after another.
constexpr int kNormInFlight = 8;

/// The block's thread number in linear order (x fastest), as block_sum numbers them.
__device__ __forceinline__ int linear_thread() {
  return static_cast<int>((threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x);
}

/// 1 / sqrt(mean(row^2) + eps) over the row's d elements: thread t of the block's n (linear_thread) sums row[i] for
/// i = t, t + n, ... in that order, then block_sum adds the threads'. The bits depend on n, not on the block's shape.
/// Every thread of the block calls it (it synchronises the block).
template <class T>
__device__ __forceinline__ float inverse_rms(const T* row, int d, float eps) {
  const int tid = linear_thread();
  const int threads = static_cast<int>(blockDim.x * blockDim.y * blockDim.z);
  float ss = 0.0f;
  for (int i0 = tid; i0 < d; i0 += kNormInFlight * threads) {
    float v[kNormInFlight];
#pragma unroll
    for (int k = 0; k < kNormInFlight; ++k) v[k] = lg::to_float(row[min(i0 + k * threads, d - 1)]);
#pragma unroll
    for (int k = 0; k < kNormInFlight; ++k) {
      if (i0 + k * threads < d) ss += v[k] * v[k];
    }
  }
  return 1.0f / sqrtf(lg::block_sum(ss) / static_cast<float>(d) + eps);
}

/// out[i] = x[i] * inv_rms * g[i] in fp32, rounded once to T, for this thread's i (as inverse_rms takes them). `out`
/// may be `x`: each element is read before it is written, by the thread that writes it.
template <class T>
__device__ __forceinline__ void store_normed(const T* x, const T* g, T* out, int d, float inv_rms) {
  const int tid = linear_thread();
  const int threads = static_cast<int>(blockDim.x * blockDim.y * blockDim.z);
  for (int i0 = tid; i0 < d; i0 += kNormInFlight * threads) {
    float v[kNormInFlight];
    float w[kNormInFlight];
#pragma unroll
    for (int k = 0; k < kNormInFlight; ++k) {
      const int i = min(i0 + k * threads, d - 1);
      v[k] = lg::to_float(x[i]);
      w[k] = lg::to_float(g[i]);
    }
#pragma unroll
    for (int k = 0; k < kNormInFlight; ++k) {
      if (i0 + k * threads < d) out[i0 + k * threads] = lg::from_float<T>(v[k] * inv_rms * w[k]);
    }
  }
}

}  // namespace lg::nn
