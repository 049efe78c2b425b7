// RMS normalisation: out_b = x_b / sqrt(mean(x_b^2) + eps) * weight, in fp32, rounded once, for the vectors
// x_b = x[b * d .. (b + 1) * d); `rms_norm` over fp16, `rms_norm_bf16` over bf16.
//
// Launch: one block of 32 * k threads (k = 1..32) per vector: grid = the vector count, e.g. block 256 (or 1024 for d
// in the thousands).
// `out` may alias `x` (each element is read before it is written, by the thread that writes it).
//
// rms_norm_add(in, weight, x, d, eps) (and _bf16): x_b += rmsnorm(in_b) * weight, the normed row rounded to the
// element type first (a post-norm before the residual add, Gemma 3's); launched as rms_norm, `in` and `x` apart.
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

/// x[row] += T(rmsnorm(in[row]) * g): a post-norm (Gemma 3's post-attention and post-feedforward norms), which the
/// block's output passes through before the residual add; the normed row is rounded to T before the add, as
/// transformers rounds the norm's output. One block per row; in and x may not overlap.
template <class T>
__device__ __forceinline__ void rms_norm_add_body(const T* in, const T* weight, T* x, int d, float eps) {
  lg::early_launch_prologue();
  in += static_cast<long long>(blockIdx.x) * d;
  x += static_cast<long long>(blockIdx.x) * d;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    const float v = lg::to_float(in[i]);
    ss += v * v;
  }
  const float inv_rms = 1.0f / sqrtf(lg::block_sum(ss) / static_cast<float>(d) + eps);
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    const float normed = lg::to_float(lg::from_float<T>(lg::to_float(in[i]) * inv_rms * lg::to_float(weight[i])));
    x[i] = lg::from_float<T>(lg::to_float(x[i]) + normed);
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
