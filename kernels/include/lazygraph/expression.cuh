// Device helpers of the kernels that fused elementwise expressions generate (include/lazygraph/detail/kernels/
// expression.hpp writes them; include as "lazygraph/expression.cuh"). Every value is computed in float: loads widen
// float, half and bfloat16 to float, stores round once to the output's type.
//
// Kept small, because NVRTC compiles it again for every new expression: the half and bfloat16 parts are there only
// when the source defines LG_EXPR_HALF or LG_EXPR_BF16 before including it (the generated source does, for the types
// it uses), and nothing else of the kernel library is pulled in.
//
// The vector forms move V elements with 16-byte accesses: V * sizeof(T) must be a multiple of 16 and the pointer
// 16-byte aligned (the host checks every pointer before it picks the vector path).
#pragma once

#ifdef LG_EXPR_HALF
#include "lazygraph/half.cuh"
#endif
#ifdef LG_EXPR_BF16
#include "lazygraph/bfloat16.cuh"
#endif

namespace lg {
namespace expr {

/// The global index of this thread in a 1-D launch.
__device__ __forceinline__ long long global_index() {
  return static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
}

/// The number of threads in a 1-D launch, the stride of a grid-stride loop.
__device__ __forceinline__ long long grid_stride() { return static_cast<long long>(gridDim.x) * blockDim.x; }

/// The first statement of a kernel that may be launched early (LaunchConfig::early_launch; as
/// lg::early_launch_prologue of kernel_common.cuh): lets the next kernel start, then waits for the work before.
__device__ __forceinline__ void early_launch_prologue() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/// One float.
__device__ __forceinline__ float load(const float* p) { return *p; }
/// Stores one float.
__device__ __forceinline__ void store(float* p, float v) { *p = v; }

/// p[0..V) with V / 4 16-byte loads.
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

/// Stores f[0..V) to p with V / 4 16-byte stores.
template <int V>
__device__ __forceinline__ void store_vec(float* p, const float (&f)[V]) {
#pragma unroll
  for (int i = 0; i < V / 4; ++i) {
    reinterpret_cast<float4*>(p)[i] = make_float4(f[4 * i], f[4 * i + 1], f[4 * i + 2], f[4 * i + 3]);
  }
}

#ifdef LG_EXPR_HALF
/// One half as float.
__device__ __forceinline__ float load(const half_t* p) { return to_float(*p); }
/// Stores one element, rounded to half (to nearest even).
__device__ __forceinline__ void store(half_t* p, float v) { *p = to_half(v); }

/// p[0..V) of halves as floats, with V / 8 16-byte loads.
template <int V>
__device__ __forceinline__ void load_vec(const half_t* p, float (&f)[V]) {
  static_assert(V % 8 == 0, "16-bit vectors hold a multiple of 8 elements");
#pragma unroll
  for (int i = 0; i < V / 8; ++i) {
    const uint4 q = reinterpret_cast<const uint4*>(p)[i];
    const unsigned int w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 h = unpack_half2(w[k]);
      f[8 * i + 2 * k] = h.x;
      f[8 * i + 2 * k + 1] = h.y;
    }
  }
}

/// Stores f[0..V) rounded to halves with V / 8 16-byte stores.
template <int V>
__device__ __forceinline__ void store_vec(half_t* p, const float (&f)[V]) {
#pragma unroll
  for (int i = 0; i < V / 8; ++i) {
    reinterpret_cast<uint4*>(p)[i] =
        make_uint4(pack_half2(f[8 * i], f[8 * i + 1]), pack_half2(f[8 * i + 2], f[8 * i + 3]),
                   pack_half2(f[8 * i + 4], f[8 * i + 5]), pack_half2(f[8 * i + 6], f[8 * i + 7]));
  }
}

/// `x` rounded to half precision (and widened back): the value of cast<half>(x).
__device__ __forceinline__ float round_half(float x) { return to_float(to_half(x)); }
#endif

#ifdef LG_EXPR_BF16
/// One bfloat16 as float.
__device__ __forceinline__ float load(const bf16_t* p) { return to_float(*p); }
/// Stores one element, rounded to bfloat16 (to nearest even).
__device__ __forceinline__ void store(bf16_t* p, float v) { *p = to_bf16(v); }

/// p[0..V) of bfloat16s as floats, with V / 8 16-byte loads.
template <int V>
__device__ __forceinline__ void load_vec(const bf16_t* p, float (&f)[V]) {
  static_assert(V % 8 == 0, "16-bit vectors hold a multiple of 8 elements");
#pragma unroll
  for (int i = 0; i < V / 8; ++i) {
    const uint4 q = reinterpret_cast<const uint4*>(p)[i];
    const unsigned int w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 h = unpack_bf16x2(w[k]);
      f[8 * i + 2 * k] = h.x;
      f[8 * i + 2 * k + 1] = h.y;
    }
  }
}

/// Stores f[0..V) rounded to bfloat16s with V / 8 16-byte stores.
template <int V>
__device__ __forceinline__ void store_vec(bf16_t* p, const float (&f)[V]) {
#pragma unroll
  for (int i = 0; i < V / 8; ++i) {
    reinterpret_cast<uint4*>(p)[i] =
        make_uint4(pack_bf16x2(f[8 * i], f[8 * i + 1]), pack_bf16x2(f[8 * i + 2], f[8 * i + 3]),
                   pack_bf16x2(f[8 * i + 4], f[8 * i + 5]), pack_bf16x2(f[8 * i + 6], f[8 * i + 7]));
  }
}

/// `x` rounded to bfloat16 (and widened back): the value of cast<bfloat16>(x).
__device__ __forceinline__ float round_bf16(float x) { return to_float(to_bf16(x)); }
#endif

/// x * sigmoid(x) = x / (1 + exp(-x)), as the hand-written silu kernels compute it.
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

}  // namespace expr
}  // namespace lg
