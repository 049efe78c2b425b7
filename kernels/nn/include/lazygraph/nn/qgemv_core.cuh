// The core of the quantized matrix-vector kernels (kernels/nn/qgemv.cu): weights of int8 (one scale per row) or int4
// (one scale, and for the asymmetric variant one zero point, per group of 32, 64 or 128 columns), in the byte layout
// include/lazygraph/nn/quantized.hpp describes, multiplied with 1 to 8 fp16 or bf16 vectors on tensor cores. The
// loop is gemv_core.cuh's tensor-core path (gemv_rows_mma: 8 rows a tile, the batch as the mma's M) with other
// loads: a lane's 16-byte load holds 32 int4 or 16 int8 columns of its row, which it turns into exact small integers
// of the element type in registers (below) and feeds to 8 or 4 mmas, with the x chunks of the same columns.
//
// Dequantizing. int4: with the interleaved layout, bits 4s..4s+3 and 16+4s..16+4s+3 of a word are two consecutive
// columns, so one lop3 of the word shifted by 4s, mask 0x000F000F and the element type's magic number (fp16 1024 =
// 0x6400, bf16 128 = 0x4300, each with an exponent whose unit in the last place is 1) gives the pair as magic + u,
// exactly; u is the nibble (asymmetric) or the nibble with bit 3 flipped (symmetric: two's complement q + 8, the flip
// is in lop3's constant). One fma per pair subtracts magic + zero (zero 8 when symmetric) and leaves q - zero, exact.
// int8, fp16: one byte_perm puts two bytes (xor 0x80: q + 128) under 0x64, 1024 + u each, and an fma subtracts 1152.
// int8, bf16: bf16 cannot hold 128 + u exactly past 256, so each byte goes through fp32 (0x4B000000 | u is 2^23 + u)
// and pairs are rounded to bf16, exactly, since |q| <= 127.
//
// Scales are applied in fp32 after the mmas, so the products q * x are exact and only their sums round: int8 scales
// the row's whole dot product once; int4 scales each group's partial sum. The layout puts each mma's 16 columns in one
// group (a 32-column quarter of a 128-column block; each lane's word of it holds 8), which is why int4 rows are whole
// blocks of 128.
#pragma once

#include "lazygraph/nn/gemv_core.cuh"

namespace lg::nn {

/// One quantized weight matrix as the kernels take it, by value: nn::QuantizedMatrix on the host (same layout).
struct QuantizedMatrix {
  const unsigned char* values;  ///< [rows][R] bytes (quantized.hpp's layout), 16-byte aligned
  const void* scales;           ///< [rows][cols / group] of the element type
  const unsigned char* zeros;   ///< [rows][cols / group] zero points 0..15; null when symmetric
  int kind;                     ///< nn::WeightFormat: 1 int8 per channel, 2 int4 in groups
  int group;                    ///< columns per scale: cols for int8; 32, 64 or 128 for int4
};

/// The format template argument of the kernels (nn::WeightFormat's values).
constexpr int kInt8 = 1;
constexpr int kInt4 = 2;

/// Columns of one 16-byte load of a row.
constexpr int columns_per_load(int format) { return format == kInt4 ? 32 : 16; }

/// Whether a matrix of `cols` columns is one the format-F kernels read: the kind, its group and the alignment.
template <int F>
__device__ __forceinline__ bool quantized_supported(const QuantizedMatrix& w, int cols) {
  if (w.kind != F || !lg::is_aligned16(w.values) || w.scales == nullptr) return false;
  if (F == kInt8) return w.group == cols && cols % 16 == 0 && w.zeros == nullptr;
  return (w.group == 32 || w.group == 64 || w.group == 128) && cols % 128 == 0;
}

/// M quantized matrices of `cols` columns each, row r of matrix m in w[m].
template <int M, class T>
struct QuantizedRows {
  using Element = T;
  static constexpr int count = M;
  QuantizedMatrix w[M];
  int cols;
  int row_bytes;  ///< bytes of a row's values
  int groups;     ///< scales per row
  __device__ __forceinline__ const unsigned char* values(int m, int r) const {
    return w[m].values + static_cast<long long>(r) * row_bytes;
  }
  __device__ __forceinline__ const T* scales(int m, int r) const {
    return static_cast<const T*>(w[m].scales) + static_cast<long long>(r) * groups;
  }
  __device__ __forceinline__ const unsigned char* zeros(int m, int r) const {
    return w[m].zeros == nullptr ? nullptr : w[m].zeros + static_cast<long long>(r) * groups;
  }
};

/// Bytes of one row's values in format F.
template <int F>
__device__ __forceinline__ int quantized_row_bytes(int cols) {
  return F == kInt4 ? cols / 2 : cols;
}

/// The element type's magic number for dequantizing: its pattern for 2^k with a unit in the last place of 1, so
/// that magic | u is magic + u for the small u below it (fp16 1024, bf16 128), repeated in both halves.
__device__ __forceinline__ unsigned magic2(lg::half_t) { return 0x64006400U; }
__device__ __forceinline__ unsigned magic2(lg::bf16_t) { return 0x43004300U; }

/// a * b + c on pairs of T (fp16x2 or bf16x2), rounded once.
__device__ __forceinline__ unsigned fma2(lg::half_t, unsigned a, unsigned b, unsigned c) {
  unsigned d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ __forceinline__ unsigned fma2(lg::bf16_t, unsigned a, unsigned b, unsigned c) {
  unsigned d;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
#else
  d = 0;
  __trap();
#endif
  return d;
}
__device__ __forceinline__ unsigned one2(lg::half_t) { return 0x3C003C00U; }
__device__ __forceinline__ unsigned one2(lg::bf16_t) { return 0x3F803F80U; }

__device__ __forceinline__ unsigned lop3_and_xor(unsigned a, unsigned mask, unsigned c) {
  unsigned d;
  asm("lop3.b32 %0, %1, %2, %3, 0x6A;" : "=r"(d) : "r"(a), "r"(mask), "r"(c));  // (a & mask) ^ c
  return d;
}

/// The 8 int4 elements of `word` (interleaved layout) as four pairs of T, q - zero exactly, in column order.
/// `flip`: magic2 with bit 3 of each nibble field set for symmetric weights, magic2 alone for asymmetric ones;
/// `minus_bias`: -(magic + zero) in both halves.
template <class T>
__device__ __forceinline__ uint4 dequantize_int4(unsigned word, unsigned flip, unsigned minus_bias) {
  const unsigned one = one2(T{});
  uint4 out;
  out.x = fma2(T{}, lop3_and_xor(word, 0x000F000FU, flip), one, minus_bias);
  out.y = fma2(T{}, lop3_and_xor(word >> 4, 0x000F000FU, flip), one, minus_bias);
  out.z = fma2(T{}, lop3_and_xor(word >> 8, 0x000F000FU, flip), one, minus_bias);
  out.w = fma2(T{}, lop3_and_xor(word >> 12, 0x000F000FU, flip), one, minus_bias);
  return out;
}

/// The 4 int8 elements of `word` (two's complement, in column order) as two pairs of T, exactly.
__device__ __forceinline__ uint2 dequantize_int8(lg::half_t, unsigned word) {
  const unsigned u = word ^ 0x80808080U;    // q + 128
  const unsigned minus_bias = 0xE480E480U;  // -1152 = -(1024 + 128) in both halves
  return make_uint2(fma2(lg::half_t{}, __byte_perm(u, 0x64646464U, 0x4140), one2(lg::half_t{}), minus_bias),
                    fma2(lg::half_t{}, __byte_perm(u, 0x64646464U, 0x4342), one2(lg::half_t{}), minus_bias));
}
__device__ __forceinline__ uint2 dequantize_int8(lg::bf16_t, unsigned word) {
  const unsigned u = word ^ 0x80808080U;
  float f[4];
  f[0] = __int_as_float(static_cast<int>(__byte_perm(u, 0x4B000000U, 0x7540))) - 8388736.0f;  // 2^23 + 128
  f[1] = __int_as_float(static_cast<int>(__byte_perm(u, 0x4B000000U, 0x7541))) - 8388736.0f;
  f[2] = __int_as_float(static_cast<int>(__byte_perm(u, 0x4B000000U, 0x7542))) - 8388736.0f;
  f[3] = __int_as_float(static_cast<int>(__byte_perm(u, 0x4B000000U, 0x7543))) - 8388736.0f;
  return make_uint2(lg::pack2(lg::bf16_t{}, f[0], f[1]), lg::pack2(lg::bf16_t{}, f[2], f[3]));
}

/// The 16-byte load of a quantized row: read once, not kept in L1 (as load8_streaming).
__device__ __forceinline__ uint4 load16_streaming(const unsigned char* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

/// prefetch_tile_weights for quantized rows: the values of this block's tiles (whole rows when the kernel's values fit
/// kWholePrefetchBytes, else the first steps' bytes), then lets the next kernel launch early.
template <class W>
__device__ __forceinline__ void prefetch_quantized(const W& w, int rows) {
  constexpr int M = W::count;
  const int threads = blockDim.x * blockDim.y * blockDim.z;
  const int tid = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  const bool whole = static_cast<long long>(rows) * w.row_bytes * M <= kWholePrefetchBytes;
  const int first_bytes = min(w.row_bytes, static_cast<int>(blockDim.y) * (4 / M) * 64);
  const int row_lines = ((whole ? w.row_bytes : first_bytes) + 127) / 128;
  const int block_rows = kMmaRows * static_cast<int>(blockDim.z);  // the rows of the block's tiles at a time
  for (int row0 = blockIdx.x * block_rows; row0 < rows; row0 += gridDim.x * block_rows) {
    const int pass_rows = min(block_rows, rows - row0);
    for (int i = tid; i < pass_rows * row_lines; i += threads) {
      const int row = row0 + i / row_lines;
#pragma unroll
      for (int m = 0; m < M; ++m) lg::prefetch_l2(w.values(m, row) + 128LL * (i % row_lines));
    }
    if (!whole) break;
  }
  lg::allow_dependent_launch();
}

/// The 16-byte loads of one step (see qgemv_rows_mma) of this lane's row of every matrix: up to U per matrix,
/// `warps` steps apart, none past the row's last step, each clamped to the row's last load.
template <int U, class W>
__device__ __forceinline__ void load_step(const W& w, int row, int s0, int warps, int t, int chunks,
                                          uint4 (&out)[W::count][U]) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if ((s0 + u * warps) * 4 >= chunks) break;  // the row's last step (uniform over the warp)
    const int chunk = min((s0 + u * warps) * 4 + t, chunks - 1);
#pragma unroll
    for (int m = 0; m < W::count; ++m) out[m][u] = load16_streaming(w.values(m, row) + 16LL * chunk);
  }
}

/// gemv_rows_mma over quantized rows of format F (kInt8 or kInt4): finish(row, b, v) once per row and vector
/// b < batch, v[m] the scaled result of matrix m, each from its own thread; preload(row, b) as gemv_rows_mma's. All
/// matrices share the format, the group and the symmetry (the kernels check it).
///
/// Block (32, K, R): R tiles of 8 rows at a time, K warps per tile sharing out its columns (K * R <= 8; any grid).
/// A quantized row is 2 or 4 times fewer bytes than an fp16 one, so one tile per block of 8 warps would leave most
/// of a warp's loads past the row's end for rows of a few thousand columns; BasicQuantizedKernels::config picks K so
/// that the tile's steps go round its warps about once. Each warp loads its next step's weights before it works on
/// the current one's, so the weight stream does not stop while it dequantizes.
template <int F, class W, class X, class Finish, class Preload = NoPreload>
__device__ __forceinline__ void qgemv_rows_mma(const W& w, const X& x, int rows, int cols, int batch, float eps,
                                               Finish finish, Preload preload = {}) {
  using T = typename W::Element;
  constexpr int M = W::count;
  constexpr int U = 4 / M;  // 16-byte loads per lane and matrix of a step; the next step's are in flight meanwhile
  __shared__ float tile_part[8][M][kMmaRows][8];  // [warp][matrix][row][vector]
  __shared__ float square_part[8][8];             // [warp][vector]

  const int lane = threadIdx.x;
  const int k_warp = threadIdx.y;  // the warp's place in its tile
  const int warps = blockDim.y;    // warps per tile
  const int slot = threadIdx.z;    // the block's tile this warp works on
  const int warp = slot * warps + k_warp;
  const int tid = k_warp * 32 + lane;  // the thread's place in its tile's warps
  const int g = lane / 4;
  const int t = lane % 4;
  const int vector = min(g, batch - 1);
  const int chunks = cols / columns_per_load(F);  // 16-byte loads per row
  const int x_chunks = cols / 8;
  const int steps = (chunks + 3) / 4;
  const int tiles = (rows + kMmaRows - 1) / kMmaRows;
  const int group_shift = 31 - __clz(w.w[0].group);              // groups are powers of two
  const int group_mask = min(4, max(1, w.w[0].group / 32)) - 1;  // int4: a lane's words per group, less one
  const bool symmetric = w.w[0].zeros == nullptr;
  const unsigned flip = magic2(T{}) | (symmetric ? 0x00080008U : 0U);
  const unsigned symmetric_bias = (magic2(T{}) | 0x00080008U) | 0x80008000U;  // -(magic + 8)
  bool waited = false;
  const auto wait = [&](int tile) {
    lg::wait_for_prior_grids();
    waited = true;
    const int out_row = tile * kMmaRows + tid / 8;
    if (tid < kMmaRows * 8 && tid % 8 < batch && out_row < rows) preload(out_row, tid % 8);
  };

  for (int tile0 = blockIdx.x * blockDim.z; tile0 < tiles; tile0 += gridDim.x * blockDim.z) {  // uniform: the block
    const int tile = tile0 + slot;
    const bool active = tile < tiles;                    // uniform over the tile's warps
    const int row = min(tile * kMmaRows + g, rows - 1);  // the row this lane loads
    // The rows of this lane's results, c[m][0] and c[m][1] (int4 scales them per group).
    const int row_a = min(tile * kMmaRows + 2 * t, rows - 1);
    const int row_b = min(tile * kMmaRows + 2 * t + 1, rows - 1);
    float c[M][2];
#pragma unroll
    for (int m = 0; m < M; ++m) c[m][0] = c[m][1] = 0.0f;
    float sq = 0.0f;

    uint4 next[M][U];
    if (active && k_warp < steps) load_step<U>(w, row, k_warp, warps, t, chunks, next);
    for (int s0 = k_warp; active && s0 < steps; s0 += warps * U) {  // uniform over the warp, as mma.sync requires
      uint4 wv[M][U];
#pragma unroll
      for (int m = 0; m < M; ++m) {
#pragma unroll
        for (int u = 0; u < U; ++u) wv[m][u] = next[m][u];
      }
      if (s0 + warps * U < steps) load_step<U>(w, row, s0 + warps * U, warps, t, chunks, next);
      if (!waited) wait(tile);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int step = s0 + u * warps;
        if (step >= steps) break;  // uniform over the warp
        const bool inside = step * 4 + t < chunks;
        const int chunk = min(step * 4 + t, chunks - 1);
        if constexpr (F == kInt4) {
          // Word j of block `block` holds columns 128 block + 32 j + 8 t + 0..7: x chunk 16 block + 4 j + t.
          const int block = chunk / 4;
          float d[M][4];
#pragma unroll
          for (int m = 0; m < M; ++m) d[m][0] = d[m][1] = d[m][2] = d[m][3] = 0.0f;
          typename X::Raw xr[4];  // the four x chunks first, so that their loads overlap
#pragma unroll
          for (int j = 0; j < 4; ++j) xr[j] = x.load(vector, min(16 * block + 4 * j + t, x_chunks - 1));
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            float q;
            uint4 a = X::fragment(xr[j], q);
            if (!inside) a = make_uint4(0, 0, 0, 0);
            sq += inside ? q : 0.0f;
            const unsigned first[4] = {a.x, 0U, a.y, 0U};
            const unsigned second[4] = {a.z, 0U, a.w, 0U};
            const int grp = (128 * block + 32 * j) >> group_shift;
#pragma unroll
            for (int m = 0; m < M; ++m) {
              const unsigned word = j == 0 ? wv[m][u].x : j == 1 ? wv[m][u].y : j == 2 ? wv[m][u].z : wv[m][u].w;
              const unsigned bias =
                  symmetric ? symmetric_bias
                            : (magic2(T{}) | static_cast<unsigned>(w.zeros(m, row)[grp]) * 0x00010001U) | 0x80008000U;
              const uint4 b = dequantize_int4<T>(word, flip, bias);
              mma_16816(d[m], first, b.x, b.y, T{});
              mma_16816(d[m], second, b.z, b.w, T{});
            }
            if (((j + 1) & group_mask) == 0) {  // the group ends: its sums times its scales
#pragma unroll
              for (int m = 0; m < M; ++m) {
                c[m][0] = fmaf(d[m][0], lg::to_float(w.scales(m, row_a)[grp]), c[m][0]);
                c[m][1] = fmaf(d[m][1], lg::to_float(w.scales(m, row_b)[grp]), c[m][1]);
                d[m][0] = d[m][1] = d[m][2] = d[m][3] = 0.0f;
              }
            }
          }
        } else {
          // Word j holds columns 16 chunk + 4 j + 0..3: half of x chunk 2 chunk + j / 2.
          const typename X::Raw xr[2] = {x.load(vector, min(2 * chunk, x_chunks - 1)),
                                         x.load(vector, min(2 * chunk + 1, x_chunks - 1))};
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            float q;
            uint4 a = X::fragment(xr[h], q);
            if (!inside) a = make_uint4(0, 0, 0, 0);
            sq += inside ? q : 0.0f;
            const unsigned first[4] = {a.x, 0U, a.y, 0U};
            const unsigned second[4] = {a.z, 0U, a.w, 0U};
#pragma unroll
            for (int m = 0; m < M; ++m) {
              const uint2 b0 = dequantize_int8(T{}, h == 0 ? wv[m][u].x : wv[m][u].z);
              const uint2 b1 = dequantize_int8(T{}, h == 0 ? wv[m][u].y : wv[m][u].w);
              float d[4] = {c[m][0], c[m][1], 0.0f, 0.0f};
              mma_16816(d, first, b0.x, b0.y, T{});
              mma_16816(d, second, b1.x, b1.y, T{});
              c[m][0] = d[0];
              c[m][1] = d[1];
            }
          }
        }
      }
    }
    if (active && !waited) wait(tile);  // a warp without steps still waits before the block's results are written

    sq += __shfl_xor_sync(0xffffffffu, sq, 1);
    sq += __shfl_xor_sync(0xffffffffu, sq, 2);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      tile_part[warp][m][2 * t][g] = c[m][0];
      tile_part[warp][m][2 * t + 1][g] = c[m][1];
    }
    if (t == 0) square_part[warp][g] = sq;
    __syncthreads();
    for (int i = tid; active && i < kMmaRows * 8; i += 32 * warps) {
      const int r = i / 8;
      const int b = i % 8;
      const int out_row = tile * kMmaRows + r;
      if (b >= batch || out_row >= rows) continue;
      float scale = 1.0f;
      if (X::sum_squares) {
        float squares = 0.0f;
        for (int k = 0; k < warps; ++k) squares += square_part[slot * warps + k][b];
        scale = 1.0f / sqrtf(squares / static_cast<float>(cols) + eps);
      }
      float v[M];
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float sum = 0.0f;
        for (int k = 0; k < warps; ++k) sum += tile_part[slot * warps + k][m][r][b];
        if (F == kInt8) sum *= lg::to_float(w.scales(m, out_row)[0]);  // the row's one scale
        v[m] = sum * scale;
      }
      finish(out_row, b, v);
    }
    __syncthreads();  // the partials are read before the next tiles overwrite them
  }
  if (!waited) lg::wait_for_prior_grids();  // a block without a tile
}

}  // namespace lg::nn
