// Device helpers of the kernels that fused elementwise expressions generate (include/lazygraph/detail/kernels/
// expression.hpp writes them; include as "lazygraph/expression.cuh"). Every value is computed in float: loads widen
// float, half and bfloat16 to float, stores round once to the output's type.
//
// The vector forms move V elements with 16-byte accesses: V * sizeof(T) must be a multiple of 16 and the pointer
// 16-byte aligned (the host checks every pointer before it picks the vector path).
#pragma once

#include "lazygraph/element.cuh"
#include "lazygraph/kernel_common.cuh"

namespace lg {
namespace expr {

/// One element as float.
__device__ __forceinline__ float load(const float* p) { return *p; }
__device__ __forceinline__ float load(const half_t* p) { return to_float(*p); }
__device__ __forceinline__ float load(const bf16_t* p) { return to_float(*p); }

/// One element, rounded to the pointer's type (to nearest even).
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(half_t* p, float v) { *p = to_half(v); }
__device__ __forceinline__ void store(bf16_t* p, float v) { *p = to_bf16(v); }

/// p[0..V) as floats, with V / 4 16-byte loads.
template <int V>
__device__ __forceinline__ void load_vec(const float* p, float (&f)[V]) {
  static_assert(V % 4 == 0, "float vectors hold a multiple of 4 elements");
#pragma unroll
  for (int i = 0; i < V / 4; ++i) {
    const float4 q = reinterpret_cast<const float4*>(p)[i];
    f[4 * i] = q.x;
    f[4 * i + 1] = q.y;
    f[4 * i + 2] = q.z;
    f[4 * i + 3] = q.w;
  }
}

/// p[0..V) of 16-bit elements (half_t or bf16_t) as floats, with V / 8 16-byte loads.
template <int V, class T>
__device__ __forceinline__ void load_vec(const T* p, float (&f)[V]) {
  static_assert(V % 8 == 0, "16-bit vectors hold a multiple of 8 elements");
#pragma unroll
  for (int i = 0; i < V / 8; ++i) {
    float g[8];
    unpack8(load8(p + 8 * i), g);
#pragma unroll
    for (int j = 0; j < 8; ++j) f[8 * i + j] = g[j];
  }
}

/// Stores f[0..V) to p with V / 4 16-byte stores.
template <int V>
__device__ __forceinline__ void store_vec(float* p, const float (&f)[V]) {
#pragma unroll
  for (int i = 0; i < V / 4; ++i) {
    reinterpret_cast<float4*>(p)[i] = make_float4(f[4 * i], f[4 * i + 1], f[4 * i + 2], f[4 * i + 3]);
  }
}

/// Stores f[0..V) rounded to T (half_t or bf16_t) with V / 8 16-byte stores.
template <int V, class T>
__device__ __forceinline__ void store_vec(T* p, const float (&f)[V]) {
#pragma unroll
  for (int i = 0; i < V / 8; ++i) {
    float g[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) g[j] = f[8 * i + j];
    store8(p + 8 * i, pack8<T>(g));
  }
}

/// `x` rounded to half precision (and widened back): the value of cast<half>(x).
__device__ __forceinline__ float round_half(float x) { return to_float(to_half(x)); }
/// `x` rounded to bfloat16 (and widened back): the value of cast<bfloat16>(x).
__device__ __forceinline__ float round_bf16(float x) { return to_float(to_bf16(x)); }

/// x * sigmoid(x) = x / (1 + exp(-x)), as the hand-written silu kernels compute it.
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

}  // namespace expr
}  // namespace lg
