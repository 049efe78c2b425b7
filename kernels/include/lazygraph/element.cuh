// One spelling for kernels written once for fp16 and bf16 storage: `template <class T>` over lg::half_t and
// lg::bf16_t, with the conversions and 16-byte vector accesses below chosen by T. Include as
// "lazygraph/element.cuh". Arithmetic stays in float; only loads, stores and rounding depend on T.
#pragma once

#include "lazygraph/bfloat16.cuh"
#include "lazygraph/half.cuh"

namespace lg {

/// `f` rounded to the storage type T (half_t or bf16_t), to nearest even.
template <class T>
__device__ __forceinline__ T from_float(float f);
template <>
__device__ __forceinline__ half_t from_float<half_t>(float f) {
  return to_half(f);
}
template <>
__device__ __forceinline__ bf16_t from_float<bf16_t>(float f) {
  return to_bf16(f);
}

/// Eight elements of T, the unit of a 16-byte vector load.
template <class T>
struct Pack8 {
  uint4 raw;
};

/// The two elements packed in `v` (the lower address in the low 16 bits), as floats.
__device__ __forceinline__ float2 unpack2(half_t, unsigned int v) { return unpack_half2(v); }
__device__ __forceinline__ float2 unpack2(bf16_t, unsigned int v) { return unpack_bf16x2(v); }
/// Two floats rounded to T and packed, `lo` at the lower address.
__device__ __forceinline__ unsigned int pack2(half_t, float lo, float hi) { return pack_half2(lo, hi); }
__device__ __forceinline__ unsigned int pack2(bf16_t, float lo, float hi) { return pack_bf16x2(lo, hi); }

/// Eight elements as floats.
template <class T>
__device__ __forceinline__ void unpack8(const Pack8<T>& p, float (&f)[8]) {
  const float2 a = unpack2(T{}, p.raw.x);
  const float2 b = unpack2(T{}, p.raw.y);
  const float2 c = unpack2(T{}, p.raw.z);
  const float2 d = unpack2(T{}, p.raw.w);
  f[0] = a.x;
  f[1] = a.y;
  f[2] = b.x;
  f[3] = b.y;
  f[4] = c.x;
  f[5] = c.y;
  f[6] = d.x;
  f[7] = d.y;
}

/// Eight floats rounded to T.
template <class T>
__device__ __forceinline__ Pack8<T> pack8(const float (&f)[8]) {
  return Pack8<T>{
      make_uint4(pack2(T{}, f[0], f[1]), pack2(T{}, f[2], f[3]), pack2(T{}, f[4], f[5]), pack2(T{}, f[6], f[7]))};
}

/// Loads p[0..8) with one 16-byte load. `p` must be 16-byte aligned.
template <class T>
__device__ __forceinline__ Pack8<T> load8(const T* p) {
  return Pack8<T>{*reinterpret_cast<const uint4*>(p)};
}

/// Like load8, for data that no thread writes during the kernel (weights): read through the non-coherent path
/// without allocating in L1, so a weight stream does not evict what other loads reuse. kL2Bytes 256 also asks L2 to
/// fetch the aligned 256 bytes around p (ld's L2::256B), for loads that take a long row's 256 bytes in pieces smaller
/// than that, from several warps; 0 leaves the fetch's size to L2.
template <int kL2Bytes = 0, class T>
__device__ __forceinline__ Pack8<T> load8_streaming(const T* p) {
  static_assert(kL2Bytes == 0 || kL2Bytes == 256, "L2 fetches of 256 bytes, or L2's own");
  uint4 v;
  if constexpr (kL2Bytes == 256) {
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
  } else {
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
  }
  return Pack8<T>{v};
}

/// Stores p[0..8) with one 16-byte store. `p` must be 16-byte aligned.
template <class T>
__device__ __forceinline__ void store8(T* p, const Pack8<T>& v) {
  *reinterpret_cast<uint4*>(p) = v.raw;
}

/// Loads p[0..8) as floats (16-byte aligned).
template <class T>
__device__ __forceinline__ void load_float8(const T* p, float (&f)[8]) {
  unpack8(load8(p), f);
}

}  // namespace lg
