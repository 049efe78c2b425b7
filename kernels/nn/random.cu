// Deterministic pseudo-random tensors: element i = round(offset + scale * u(i)), u uniform over [-1, 1),
//   u(i) = float(mix(key + i) >> 8) * 2^-23 - 1   (exact in fp32; all integer arithmetic wraps modulo 2^32)
// with `mix` the 32-bit integer hash of lazygraph/nn/hash.cuh and `key` chosen by the caller (the models derive it
// from a seed and a tensor id; see docs/nn.md), rounded to fp16 (fill_uniform_f16) or bf16 (fill_uniform_bf16).
// The same formula on the CPU and in PyTorch gives the same bits, so weights need no files and are generated at
// memory speed, not read from disk.
//
//   fill_uniform_f16(out, n, key, scale, offset), fill_uniform_bf16(out, n, key, scale, offset)
// Launch: 1-D, any grid and block (grid-stride), e.g. grid_for(n, 256) capped at a few thousand blocks.
#include "lazygraph/element.cuh"
#include "lazygraph/kernel_common.cuh"
#include "lazygraph/nn/hash.cuh"

namespace {

template <class T>
__device__ __forceinline__ void fill_uniform_body(T* out, long long n, unsigned key, float scale, float offset) {
  for (long long i = lg::global_index(); i < n; i += lg::grid_stride()) {
    const unsigned h = lg::nn::mix(key + static_cast<unsigned>(i));
    const float u = __fmul_rn(static_cast<float>(h >> 8), 1.0f / 8388608.0f) - 1.0f;
    // __fmul_rn / __fadd_rn: no contraction into an fma, so the rounding matches the CPU's and PyTorch's.
    out[i] = lg::from_float<T>(__fadd_rn(offset, __fmul_rn(scale, u)));
  }
}

}  // namespace

extern "C" __global__ void fill_uniform_f16(lg::half_t* out, long long n, unsigned key, float scale, float offset) {
  fill_uniform_body(out, n, key, scale, offset);
}

extern "C" __global__ void fill_uniform_bf16(lg::bf16_t* out, long long n, unsigned key, float scale, float offset) {
  fill_uniform_body(out, n, key, scale, offset);
}
