// fp16 storage for kernels, without cuda_fp16.h (NVRTC has none here). Include as "lazygraph/half.cuh".
//
// half_t is storage only: kernels load halves, convert to float, compute in float and convert back once.
// It has the size and alignment of the host's lazygraph::half, so a `const lg::half_t*` parameter is declared
// `const half*` on the host. Conversions use the hardware's cvt (round to nearest even, like the host's
// half::from_float; a NaN becomes the canonical 0x7fff, not the host's 0x7e00).
#pragma once

namespace lg {

struct __align__(2) half_t {
  unsigned short bits;
};

/// Eight halves, the unit of a 16-byte vector load.
struct Half8 {
  uint4 raw;
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

/// Two floats rounded to halves and packed, `lo` at the lower address.
__device__ __forceinline__ unsigned int pack_half2(float lo, float hi) {
  unsigned int v;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(v) : "f"(hi), "f"(lo));  // the first source goes to the upper half
  return v;
}

/// Eight halves as floats.
__device__ __forceinline__ void unpack_half8(const Half8& h, float (&f)[8]) {
  const float2 a = unpack_half2(h.raw.x);
  const float2 b = unpack_half2(h.raw.y);
  const float2 c = unpack_half2(h.raw.z);
  const float2 d = unpack_half2(h.raw.w);
  f[0] = a.x;
  f[1] = a.y;
  f[2] = b.x;
  f[3] = b.y;
  f[4] = c.x;
  f[5] = c.y;
  f[6] = d.x;
  f[7] = d.y;
}

/// Eight floats rounded to halves.
__device__ __forceinline__ Half8 pack_half8(const float (&f)[8]) {
  return Half8{
      make_uint4(pack_half2(f[0], f[1]), pack_half2(f[2], f[3]), pack_half2(f[4], f[5]), pack_half2(f[6], f[7]))};
}

/// Loads halves p[0..8) with one 16-byte load. `p` must be 16-byte aligned.
__device__ __forceinline__ Half8 load_half8(const half_t* p) { return Half8{*reinterpret_cast<const uint4*>(p)}; }

/// Like load_half8, for data that no thread writes during the kernel (weights): read through the
/// non-coherent path without allocating in L1, so a weight stream does not evict what other loads reuse.
__device__ __forceinline__ Half8 load_half8_streaming(const half_t* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return Half8{v};
}

/// Stores halves p[0..8) with one 16-byte store. `p` must be 16-byte aligned.
__device__ __forceinline__ void store_half8(half_t* p, const Half8& h) { *reinterpret_cast<uint4*>(p) = h.raw; }

/// Loads p[0..8) as floats (16-byte aligned).
__device__ __forceinline__ void load_float8(const half_t* p, float (&f)[8]) { unpack_half8(load_half8(p), f); }

/// True when `p` is aligned for 16-byte vector access.
__device__ __forceinline__ bool is_aligned16(const void* p) {
  return (reinterpret_cast<unsigned long long>(p) & 15ULL) == 0;
}

}  // namespace lg
