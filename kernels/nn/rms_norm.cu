// RMS normalisation: out_b = x_b / sqrt(mean(x_b^2) + eps) * weight, in fp32, rounded once, for the vectors
// x_b = x[b * d .. (b + 1) * d); `rms_norm` over fp16, `rms_norm_bf16` over bf16.
//
// Launch: one block of 32 * k threads (k = 1..32) per vector: grid = the vector count, e.g. block 256 (or 1024 for d
// in the thousands).
// `out` may alias `x` (each element is read before it is written, by the thread that writes it).
#include "lazygraph/block_reduce.cuh"
#include "lazygraph/element.cuh"

namespace {

template <class T>
__device__ __forceinline__ void rms_norm_body(const T* x, const T* weight, T* out, int d, float eps) {
  lg::early_launch_prologue();  // may be launched early (LaunchConfig::early_launch)
  x += static_cast<long long>(blockIdx.x) * d;
  out += static_cast<long long>(blockIdx.x) * d;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    const float v = lg::to_float(x[i]);
    ss += v * v;
  }
  const float inv_rms = 1.0f / sqrtf(lg::block_sum(ss) / static_cast<float>(d) + eps);
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    out[i] = lg::from_float<T>(lg::to_float(x[i]) * inv_rms * lg::to_float(weight[i]));
  }
}

}  // namespace

extern "C" __global__ void rms_norm(const lg::half_t* x, const lg::half_t* weight, lg::half_t* out, int d, float eps) {
  rms_norm_body(x, weight, out, d, eps);
}

extern "C" __global__ void rms_norm_bf16(const lg::bf16_t* x, const lg::bf16_t* weight, lg::bf16_t* out, int d,
                                         float eps) {
  rms_norm_body(x, weight, out, d, eps);
}
