// RMS normalisation: out_b = x_b / sqrt(mean(x_b^2) + eps) * weight, in fp32, rounded once, for the vectors
// x_b = x[b * d .. (b + 1) * d); `rms_norm` over fp16, `rms_norm_bf16` over bf16.
//
// Launch: one block of 32 * k threads (k = 1..32) per vector: grid = the vector count, e.g. block 256 (or 1024 for d
// in the thousands).
// `out` may alias `x` (each element is read before it is written, by the thread that writes it).
//
// rms_norm_add(in, weight, x, d, eps) (and _bf16): x_b += rmsnorm(in_b) * weight, the normed row rounded to the
// element type first (a post-norm before the residual add, Gemma 3's); launched as rms_norm, `in` and `x` apart.
#include "lazygraph/nn/rms_norm.cuh"

namespace {

using lg::nn::inverse_rms;
using lg::nn::kNormInFlight;
using lg::nn::store_normed;

template <class T>
__device__ __forceinline__ void rms_norm_body(const T* x, const T* weight, T* out, int d, float eps) {
  lg::early_launch_prologue();  // may be launched early (LaunchConfig::early_launch)
  x += static_cast<long long>(blockIdx.x) * d;
  out += static_cast<long long>(blockIdx.x) * d;
  store_normed(x, weight, out, d, inverse_rms(x, d, eps));
}

template <class T>
__device__ __forceinline__ void rms_norm_add_body(const T* in, const T* weight, T* x, int d, float eps) {
  lg::early_launch_prologue();
  in += static_cast<long long>(blockIdx.x) * d;
  x += static_cast<long long>(blockIdx.x) * d;
  const float inv_rms = inverse_rms(in, d, eps);
  const int threads = static_cast<int>(blockDim.x);
  for (int i0 = static_cast<int>(threadIdx.x); i0 < d; i0 += kNormInFlight * threads) {
    float v[kNormInFlight];
    float g[kNormInFlight];
    float r[kNormInFlight];
#pragma unroll
    for (int k = 0; k < kNormInFlight; ++k) {
      const int i = min(i0 + k * threads, d - 1);
      v[k] = lg::to_float(in[i]);
      g[k] = lg::to_float(weight[i]);
      r[k] = lg::to_float(x[i]);
    }
#pragma unroll
    for (int k = 0; k < kNormInFlight; ++k) {
      if (i0 + k * threads >= d) continue;
      const float normed = lg::to_float(lg::from_float<T>(v[k] * inv_rms * g[k]));
      x[i0 + k * threads] = lg::from_float<T>(r[k] + normed);
    }
  }
}

}  // namespace

extern "C" __global__ void rms_norm_add(const lg::half_t* in, const lg::half_t* weight, lg::half_t* x, int d,
                                        float eps) {
  rms_norm_add_body(in, weight, x, d, eps);
}

extern "C" __global__ void rms_norm_add_bf16(const lg::bf16_t* in, const lg::bf16_t* weight, lg::bf16_t* x, int d,
                                             float eps) {
  rms_norm_add_body(in, weight, x, d, eps);
}

extern "C" __global__ void rms_norm(const lg::half_t* x, const lg::half_t* weight, lg::half_t* out, int d, float eps) {
  rms_norm_body(x, weight, out, d, eps);
}

extern "C" __global__ void rms_norm_bf16(const lg::bf16_t* x, const lg::bf16_t* weight, lg::bf16_t* out, int d,
                                         float eps) {
  rms_norm_body(x, weight, out, d, eps);
}
