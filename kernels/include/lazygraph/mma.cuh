#pragma once
// Tensor-core building blocks (sm_80 and newer): ldmatrix loads of 8 x 8 tiles of 16-bit elements from shared memory,
// the m16n8k16 matrix product with fp32 accumulation in fp16 and bf16, and the hardware's 2^x. Defined only when
// compiling for sm_80 or newer: a kernel that must also compile for older GPUs guards its use with __CUDA_ARCH__ (and
// traps there).
#include "lazygraph/async_copy.cuh"
#include "lazygraph/element.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800

namespace lg {

/// Four 8 x 8 matrices of 16-bit elements from shared memory: lane 8 i + r gives the address of row r of matrix i;
/// lane l receives in m[i] the elements (l / 4, 2 (l % 4)) and (l / 4, 2 (l % 4) + 1) of matrix i.
__device__ __forceinline__ void load_matrices(unsigned (&m)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(m[0]), "=r"(m[1]), "=r"(m[2]), "=r"(m[3])
               : "r"(shared_address(row))
               : "memory");
}
/// load_matrices transposed: lane l receives the elements (2 (l % 4), l / 4) and (2 (l % 4) + 1, l / 4).
__device__ __forceinline__ void load_matrices_transposed(unsigned (&m)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(m[0]), "=r"(m[1]), "=r"(m[2]), "=r"(m[3])
               : "r"(shared_address(row))
               : "memory");
}

/// c += a b for one m16n8k16 tile: a 16 x 16 of T (row-major fragment), b 16 x 8 (column-major), c fp32.
/// Lane l (g = l / 4, t = l % 4) holds a = {(g, 2t..2t+1), (g + 8, 2t..), (g, 2t + 8..), (g + 8, 2t + 8..)},
/// b = {(2t..2t+1, g), (2t + 8..2t + 9, g)}, c = {(g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1)}.
__device__ __forceinline__ void mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1, half_t) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1, bf16_t) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// 2^x (the hardware's approximation, relative error about 2^-22; 2^-inf = 0), subnormal results flushed to zero:
/// without .ftz each costs three more instructions, and a probability below 2^-126 adds nothing a half or bf16 keeps.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace lg

#endif
