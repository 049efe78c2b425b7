// bf16 storage for kernels, without cuda_bf16.h (NVRTC has none here). Include as "lazygraph/bfloat16.cuh".
//
// bf16_t is storage only, like half_t: load, widen to float (exact: a bfloat16 is the top half of a float),
// compute in float, round back once. It has the size and alignment of the host's lazygraph::bfloat16, so a
// `const lg::bf16_t*` parameter is declared `const bfloat16*` on the host. Rounding is to nearest even, as the
// host's bfloat16::from_float; a NaN stays a NaN (sm_80 and later round in hardware, which gives the canonical NaN
// 0x7fff; earlier GPUs in software, which keeps the sign and the top payload bits).
#pragma once

namespace lg {

struct __align__(2) bf16_t {
  unsigned short bits;
};

__device__ __forceinline__ float to_float(bf16_t h) { return __uint_as_float(static_cast<unsigned int>(h.bits) << 16); }

/// The nearest bfloat16 to `f`, ties to even.
__device__ __forceinline__ bf16_t to_bf16(float f) {
  bf16_t h;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
#else
  const unsigned int x = __float_as_uint(f);
  h.bits = (x & 0x7fffffffu) > 0x7f800000u ? static_cast<unsigned short>((x >> 16) | 0x40u)
                                           : static_cast<unsigned short>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
#endif
  return h;
}

/// The two bfloat16s packed in `v` (the lower address in the low 16 bits), as floats.
__device__ __forceinline__ float2 unpack_bf16x2(unsigned int v) {
  return make_float2(__uint_as_float(v << 16), __uint_as_float(v & 0xffff0000u));
}

/// Two floats rounded to bfloat16 and packed, `lo` at the lower address.
__device__ __forceinline__ unsigned int pack_bf16x2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned int v;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(v) : "f"(hi), "f"(lo));  // the first source goes to the upper half
  return v;
#else
  return static_cast<unsigned int>(to_bf16(lo).bits) | (static_cast<unsigned int>(to_bf16(hi).bits) << 16);
#endif
}

}  // namespace lg
