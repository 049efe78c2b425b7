// fp16 storage for kernels, without cuda_fp16.h (NVRTC has none here). Include as "lazygraph/half.cuh".
//
// half_t is storage only: kernels load halves, convert to float, compute in float and convert back once.
// 16-byte vectors of 8 halves (or bf16s): lazygraph/element.cuh.
// It has the size and alignment of the host's lazygraph::half, so a `const lg::half_t*` parameter is declared
// `const half*` on the host. Conversions use the hardware's cvt (round to nearest even, like the host's
// half::from_float; a NaN becomes the canonical 0x7fff, not the host's 0x7e00).
#pragma once

namespace lg {

struct __align__(2) half_t {
  unsigned short bits;
};

__device__ __forceinline__ float to_float(half_t h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
  return f;
}

__device__ __forceinline__ half_t to_half(float f) {
  half_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
  return h;
}

/// The two halves packed in `v` (the lower address in the low 16 bits), as floats.
__device__ __forceinline__ float2 unpack_half2(unsigned int v) {
  unsigned short lo;
  unsigned short hi;
  asm("mov.b32 {%0, %1}, %2;" : "=h"(lo), "=h"(hi) : "r"(v));
  return make_float2(to_float(half_t{lo}), to_float(half_t{hi}));
}

/// Two floats rounded to halves and packed, `lo` at the lower address (the paired cvt from sm_80, two before it: the
/// same bits).
__device__ __forceinline__ unsigned int pack_half2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned int v;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(v) : "f"(hi), "f"(lo));  // the first source goes to the upper half
  return v;
#else
  return static_cast<unsigned int>(to_half(lo).bits) | (static_cast<unsigned int>(to_half(hi).bits) << 16);
#endif
}

/// True when `p` is aligned for 16-byte vector access.
__device__ __forceinline__ bool is_aligned16(const void* p) {
  return (reinterpret_cast<unsigned long long>(p) & 15ULL) == 0;
}

}  // namespace lg
