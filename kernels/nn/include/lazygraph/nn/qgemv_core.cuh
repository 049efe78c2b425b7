// The core of the quantized matrix-vector kernels (kernels/nn/qgemv.cu): weights of int8 (one scale per row), int4
// (one scale, and for the asymmetric variant one zero point, per group of 32, 64 or 128 columns) or fp8 e4m3 (one
// scale per group of 128 columns), in the tiled byte
// layout include/lazygraph/nn/quantized.hpp describes, multiplied with 1 to 8 fp16 or bf16 vectors on tensor cores.
//
// The weights are the mma's A operand (m16n8k16: 16 rows of a tile times 16 columns), the vectors its B operand (the
// batch as its 8 columns; lanes of vectors past the batch compute what nobody reads). A warp's 16-byte loads of one
// step are 512 contiguous bytes, and each lane's 16 bytes are already its A fragments for the step's mmas (4 for
// int4, 2 for int8): no shuffle, no shared memory, every load byte used. A step's x is two (int4) or one (int8)
// 16-byte chunks per lane, shared by the 16 rows. Measured per 512 bytes of weights this is about a third of the
// instructions of the B-operand design it replaced (8 rows a tile, half of each mma zeros, 4 x loads per 16 bytes).
//
// Dequantizing, exactly, in registers. int4: a 32-bit word holds two rows' 4 columns of one mma; bits 4n..4n+3 and
// 16+4n..16+4n+3 are one A register's pair. One lop3 per pair puts the nibbles under the element type's magic number
// (fp16 1024 = 0x6400, bf16 128 = 0x4300: an exponent whose unit in the last place is 1), giving magic + u, and
// flips bit 3 for symmetric weights (u = q + 8). fp16 takes the odd nibbles in place, 16 u under the exponent (1024 +
// 16 u is exact too), and one fma by 1/16 undoes that: one shift a word instead of three. bf16's 7-bit mantissa has
// no room for 16 u, so it shifts. One fma per pair subtracts magic + zero (8 when symmetric): q - zero, exact.
// int8, stored offset binary (q + 128): fp16 puts each byte under 0x64 with a byte permute (1024 + u) and one fma
// subtracts 1152; bf16 cannot hold 128 + u past 256, so bytes go through fp32 (2^23 + u) and pairs are rounded to
// bf16, exactly since |q| <= 127. fp8 e4m3, placed as int8: a byte permute puts each byte in the high half of a
// 16-bit lane and one shift and lop3 move its exponent and mantissa down a bit under its sign, which makes the fp16
// of the e4m3 value times 2^-8 (subnormals included; quantized.hpp stores the scale times 2^8); bf16 goes through
// fp32, exactly (4 significant bits, within both ranges).
//
// Scales multiply fp32 sums: int4 each group's partial sum (each mma's columns lie in one group), fp8 each step's
// (a step's 32 columns lie in one group of 128), int8 the row's whole dot product once, so products q * x are exact
// and only their sums round.
#pragma once

#include "lazygraph/nn/gemv_core.cuh"

namespace lg::nn {

/// One quantized weight matrix as the kernels take it, by value: nn::QuantizedMatrix on the host (same layout).
struct QuantizedMatrix {
  const unsigned char* values;  ///< tiles of 16 rows (quantized.hpp's layout), 16-byte aligned
  const void* scales;           ///< tiles of scale pairs of the element type, 4-byte aligned
  const unsigned char* zeros;   ///< zero points 0..15 at the scales' indices; null when symmetric
  const int* order;             ///< stored column j multiplies x[order[j]] (16-byte aligned); null: x[j]. int4z only
  int kind;                     ///< nn::WeightFormat: 1 int8 per channel, 2 int4 in groups, 3 fp8 in groups
  int group;                    ///< columns per scale: cols for int8; 32, 64 or 128 for int4; 128 for fp8
};

/// The format template argument of the kernels: int8 per channel, symmetric int4, int4 with zero points, fp8 e4m3.
constexpr int kInt8 = 1;
constexpr int kInt4 = 2;
constexpr int kInt4Zero = 3;
constexpr int kFp8 = 4;

/// Whether format F is 4-bit.
constexpr bool is_int4(int format) { return format == kInt4 || format == kInt4Zero; }
/// nn::WeightFormat's value for format F (QuantizedMatrix::kind): 1 int8 per channel, 2 int4 in groups, 3 fp8.
constexpr int weight_kind(int format) { return format == kInt8 ? 1 : format == kFp8 ? 3 : 2; }

/// Rows of a tile: the mma's M.
constexpr int kTileRows = 16;

/// Warps of a block at most (blocks of 1024 threads, one per multiprocessor; or two blocks of 512).
constexpr int kMaxWarps = 32;

/// Columns of one step: a warp's 512 bytes of a tile.
constexpr int columns_per_step(int format) { return is_int4(format) ? 64 : 32; }

/// Whether a matrix of `cols` columns is one the format-F kernels read: the kind, its group and the alignment.
template <int F>
__device__ __forceinline__ bool quantized_supported(const QuantizedMatrix& w, int cols) {
  if (w.kind != weight_kind(F) || !lg::is_aligned16(w.values) || w.scales == nullptr ||
      reinterpret_cast<unsigned long long>(w.scales) % 4 != 0 || (w.order != nullptr && F != kInt4Zero) ||
      !lg::is_aligned16(w.order)) {
    return false;
  }
  if (F == kInt8) return w.group == cols && cols % 32 == 0 && w.zeros == nullptr;
  if (F == kFp8) return w.group == 128 && cols % 128 == 0 && w.zeros == nullptr;
  return (w.group == 32 || w.group == 64 || w.group == 128) && cols % 64 == 0 && (cols & (w.group - 1)) == 0 &&
         (w.zeros != nullptr) == (F == kInt4Zero) && reinterpret_cast<unsigned long long>(w.zeros) % 2 == 0;
}

/// Scales per row of a matrix of `cols` columns in format F that quantized_supported accepted: cols / group without a
/// division (int4 and fp8 groups are powers of two; int8's one group is the row). Every thread of every quantized
/// kernel computes it before its first weight load, where an integer division took about 30 instructions.
template <int F>
__device__ __forceinline__ int quantized_groups(const QuantizedMatrix& w, int cols) {
  return F == kInt8 ? 1 : cols >> (31 - __clz(w.group));
}

/// M quantized matrices of one shape and format, read a tile at a time.
template <int M, class T>
struct QuantizedTiles {
  using Element = T;
  static constexpr int count = M;
  QuantizedMatrix w[M];
  // 32-bit sizes and indices (a matrix's scale pairs and a tile's bytes number far less than 2^31), so that an
  // address is one wide multiply-add, not 64-bit arithmetic: the loads' address math is most of a step's instructions.
  int tile_bytes;  ///< 16 rows' values
  int groups;      ///< scales per row
  __device__ __forceinline__ const unsigned char* values(int m, int tile) const {
    return w[m].values + static_cast<long long>(tile) * tile_bytes;
  }
  /// The index of the scale pair of rows g and g + 8 of `tile`, group k (in pairs).
  __device__ __forceinline__ int pair(int tile, int k, int g) const { return (tile * groups + k) * 8 + g; }
  /// Rows g and g + 8's scales of group k, as one T pair (row g's in the low half).
  __device__ __forceinline__ unsigned scale_pair(int m, int tile, int k, int g) const {
    return __ldg(static_cast<const unsigned*>(w[m].scales) + pair(tile, k, g));
  }
  /// Rows g and g + 8's zero points of group k: row g's in bits 0..7, row g + 8's in bits 8..15.
  __device__ __forceinline__ unsigned zero_pair(int m, int tile, int k, int g) const {
    return __ldg(reinterpret_cast<const unsigned short*>(w[m].zeros) + pair(tile, k, g));
  }
};

/// Bytes of 16 rows' values in format F.
template <int F>
__device__ __forceinline__ int quantized_tile_bytes(int cols) {
  return kTileRows * (is_int4(F) ? cols / 2 : cols);
}

__device__ __forceinline__ unsigned one2(lg::half_t) { return 0x3C003C00U; }
__device__ __forceinline__ unsigned one2(lg::bf16_t) { return 0x3F803F80U; }

__device__ __forceinline__ unsigned lop3_and_xor(unsigned a, unsigned mask, unsigned c) {
  unsigned d;
  asm("lop3.b32 %0, %1, %2, %3, 0x6A;" : "=r"(d) : "r"(a), "r"(mask), "r"(c));  // (a & mask) ^ c
  return d;
}

/// How int4 words of one group become A registers (see the file comment): the lop3 constants (magic, and bit 3 of
/// each nibble flipped when symmetric) and the fma biases, -(magic + zero), per row of the lane's pair.
template <class T>
struct Int4Decoder;

template <>
struct Int4Decoder<lg::half_t> {
  static constexpr unsigned kMagic = 0x64006400U;  // 1024
  unsigned even_flip;                              // lop3 constant for nibbles in bits 0..3 of a half-word (row g)
  unsigned odd_flip;                               // ... in bits 4..7 (row g + 8), 16 u under the exponent
  __device__ __forceinline__ explicit Int4Decoder(bool symmetric)
      : even_flip(kMagic | (symmetric ? 0x00080008U : 0U)), odd_flip(kMagic | (symmetric ? 0x00800080U : 0U)) {}
  /// -(1024 + z) for row g, -(64 + z) for row g + 8 (its pairs are 1024 + 16 u, times 1/16): exact bit patterns.
  __device__ __forceinline__ static uint2 biases(unsigned zero_g, unsigned zero_g8) {
    return make_uint2((0xE400U | zero_g) * 0x00010001U, (0xD400U | (zero_g8 << 4)) * 0x00010001U);
  }
  __device__ __forceinline__ static uint2 symmetric_biases() { return biases(8, 8); }
  /// The A registers of one mma from its word: rows g, g + 8 of columns 0-1, then of columns 2-3.
  __device__ __forceinline__ void decode(unsigned word, uint2 bias, unsigned (&a)[4]) const {
    const unsigned high = word >> 8;
    a[0] = fma2(lg::half_t{}, lop3_and_xor(word, 0x000F000FU, even_flip), 0x3C003C00U, bias.x);
    a[1] = fma2(lg::half_t{}, lop3_and_xor(word, 0x00F000F0U, odd_flip), 0x2C002C00U, bias.y);  // 1/16
    a[2] = fma2(lg::half_t{}, lop3_and_xor(high, 0x000F000FU, even_flip), 0x3C003C00U, bias.x);
    a[3] = fma2(lg::half_t{}, lop3_and_xor(high, 0x00F000F0U, odd_flip), 0x2C002C00U, bias.y);
  }
};

template <>
struct Int4Decoder<lg::bf16_t> {
  static constexpr unsigned kMagic = 0x43004300U;  // 128
  unsigned flip;
  __device__ __forceinline__ explicit Int4Decoder(bool symmetric) : flip(kMagic | (symmetric ? 0x00080008U : 0U)) {}
  /// -(128 + z) for each row: exact bit patterns.
  __device__ __forceinline__ static uint2 biases(unsigned zero_g, unsigned zero_g8) {
    return make_uint2((0xC300U | zero_g) * 0x00010001U, (0xC300U | zero_g8) * 0x00010001U);
  }
  __device__ __forceinline__ static uint2 symmetric_biases() { return biases(8, 8); }
  __device__ __forceinline__ void decode(unsigned word, uint2 bias, unsigned (&a)[4]) const {
    a[0] = fma2(lg::bf16_t{}, lop3_and_xor(word, 0x000F000FU, flip), 0x3F803F80U, bias.x);
    a[1] = fma2(lg::bf16_t{}, lop3_and_xor(word >> 4, 0x000F000FU, flip), 0x3F803F80U, bias.y);
    a[2] = fma2(lg::bf16_t{}, lop3_and_xor(word >> 8, 0x000F000FU, flip), 0x3F803F80U, bias.x);
    a[3] = fma2(lg::bf16_t{}, lop3_and_xor(word >> 12, 0x000F000FU, flip), 0x3F803F80U, bias.y);
  }
};

/// The two pairs of T of one int8 word (4 offset-binary bytes of one row), exactly: columns 0-1, then 2-3.
__device__ __forceinline__ uint2 dequantize_int8(lg::half_t, unsigned word) {
  const unsigned minus_bias = 0xE480E480U;  // -1152 = -(1024 + 128) in both halves
  return make_uint2(fma2(lg::half_t{}, __byte_perm(word, 0x64646464U, 0x4140), 0x3C003C00U, minus_bias),
                    fma2(lg::half_t{}, __byte_perm(word, 0x64646464U, 0x4342), 0x3C003C00U, minus_bias));
}
__device__ __forceinline__ uint2 dequantize_int8(lg::bf16_t, unsigned word) {
  float f[4];
  f[0] = __int_as_float(static_cast<int>(__byte_perm(word, 0x4B000000U, 0x7540))) - 8388736.0f;  // 2^23 + 128
  f[1] = __int_as_float(static_cast<int>(__byte_perm(word, 0x4B000000U, 0x7541))) - 8388736.0f;
  f[2] = __int_as_float(static_cast<int>(__byte_perm(word, 0x4B000000U, 0x7542))) - 8388736.0f;
  f[3] = __int_as_float(static_cast<int>(__byte_perm(word, 0x4B000000U, 0x7543))) - 8388736.0f;
  return make_uint2(lg::pack2(lg::bf16_t{}, f[0], f[1]), lg::pack2(lg::bf16_t{}, f[2], f[3]));
}

/// The pair of fp16 of two e4m3 bytes, each the byte's value times 2^-8, from `y`, the bytes in bits 8..15 and
/// 24..31: each lane's sign stays in place, the other 7 bits move down one, under an exponent 8 below e4m3's bias.
__device__ __forceinline__ unsigned fp8_pair_bits(unsigned y) { return ((y >> 1) & 0x3F803F80U) | (y & 0x80008000U); }

/// The two pairs of T of one fp8 word (4 e4m3 bytes of one row), each value times 2^-8, exactly: columns 0-1, then
/// 2-3.
__device__ __forceinline__ uint2 dequantize_fp8(lg::half_t, unsigned word) {
  return make_uint2(fp8_pair_bits(__byte_perm(word, 0U, 0x1404)), fp8_pair_bits(__byte_perm(word, 0U, 0x3424)));
}
__device__ __forceinline__ uint2 dequantize_fp8(lg::bf16_t, unsigned word) {
  const uint2 h = dequantize_fp8(lg::half_t{}, word);
  const float2 a = lg::unpack2(lg::half_t{}, h.x);
  const float2 b = lg::unpack2(lg::half_t{}, h.y);
  return make_uint2(lg::pack2(lg::bf16_t{}, a.x, a.y), lg::pack2(lg::bf16_t{}, b.x, b.y));
}

/// Whether the GPU converts pairs of e4m3 to fp16 in one instruction (compute capability 8.9 and newer): qgemv_tiles
/// then decodes fp8 with it (convert_fp8), to the values themselves rather than times 2^-8, and takes the 2^-8 out of
/// each row's fp32 sum once. Every product and partial sum is then 2^8 times dequantize_fp8's, which scales exactly in
/// fp32 (short of subnormal sums), so the results have that path's bits, for a third of its instructions a word.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
constexpr bool kNativeFp8 = true;
#else
constexpr bool kNativeFp8 = false;
#endif

/// The two pairs of T of one fp8 word, the e4m3 values themselves (kNativeFp8 only): columns 0-1, then 2-3.
__device__ __forceinline__ uint2 convert_fp8(lg::half_t, unsigned word) {
  uint2 r = make_uint2(0U, 0U);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %2;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n cvt.rn.f16x2.e4m3x2 %1, hi;\n}"
      : "=r"(r.x), "=r"(r.y)
      : "r"(word));
#else
  __trap();
#endif
  return r;
}
__device__ __forceinline__ uint2 convert_fp8(lg::bf16_t, unsigned word) {
  const uint2 h = convert_fp8(lg::half_t{}, word);
  const float2 a = lg::unpack2(lg::half_t{}, h.x);
  const float2 b = lg::unpack2(lg::half_t{}, h.y);
  return make_uint2(lg::pack2(lg::bf16_t{}, a.x, a.y), lg::pack2(lg::bf16_t{}, b.x, b.y));
}

/// The 16-byte load of a quantized tile: read once, not kept in L1 (as load8_streaming).
__device__ __forceinline__ uint4 load16_streaming(const unsigned char* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

/// The sum of x^2 over a chunk, in fp32 (GainedX only).
template <class X>
__device__ __forceinline__ float x_squares(const typename X::Raw& r) {
  return squares8(r.x);
}

/// The start of every quantized kernel: lets the next kernel launch early, and asks L2 for nothing. gemv.cu's kernels
/// first prefetch their rows into L2 (prefetch_tile_weights); these must not. A quantized kernel's blocks fill their
/// multiprocessors (32 warps at 64 registers), so the next kernel's become resident only as this one's leave, and
/// whatever a block does before its first loads is on the step's critical path: the prefetches cost a Llama-3.2-1B
/// int8 step 55 us (689 -> 635 us on an H100) and an int4 step 28 us, for loads that follow at once anyway.
__device__ __forceinline__ void start_quantized() { lg::allow_dependent_launch(); }

/// What one lane loads for a step of one matrix in format F: its 16 bytes of weights and, for int4, the scale (and
/// zero point) pairs of the step's two halves (one group for groups of 64 and 128, so the same pair twice), for fp8
/// the scale pair of the step's group. Only
/// what the format reads, so that no register holds a field nobody uses.
template <int F>
struct StepLoad;
template <>
struct StepLoad<kInt8> {
  uint4 values;
};
template <>
struct StepLoad<kInt4> {
  uint4 values;
  unsigned scale[2];
};
template <>
struct StepLoad<kFp8> {
  uint4 values;
  unsigned scale;
};
template <>
struct StepLoad<kInt4Zero> {
  uint4 values;
  unsigned scale[2];
  unsigned zeros;  ///< the halves' zero pairs, the first in bits 0..15
};

/// The loads of up to U steps `warps` apart, s0 first, of this lane of every matrix; none past the tile's last step.
/// `split`: groups of 32, a step's halves in two groups (else one group holds the whole step).
template <int F, int U, class W>
__device__ __forceinline__ void load_steps(const W& w, int tile, int s0, int warps, int steps, int lane,
                                           int group_shift, bool split, StepLoad<F> (&out)[W::count][U]) {
  const int g = lane / 4;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int s = s0 + u * warps;
    if (s >= steps) break;  // uniform over the warp
#pragma unroll
    for (int m = 0; m < W::count; ++m) {
      out[m][u].values = load16_streaming(w.values(m, tile) + (512 * s + 16 * lane));
      if constexpr (F == kFp8) out[m][u].scale = w.scale_pair(m, tile, s >> 2, g);  // 4 steps of 32 a group of 128
      if constexpr (is_int4(F)) {
        const int k0 = (64 * s) >> group_shift;
        out[m][u].scale[0] = w.scale_pair(m, tile, k0, g);
        out[m][u].scale[1] = split ? w.scale_pair(m, tile, k0 + 1, g) : out[m][u].scale[0];
        if constexpr (F == kInt4Zero) {
          const unsigned first = w.zero_pair(m, tile, k0, g);
          out[m][u].zeros = first | (split ? w.zero_pair(m, tile, k0 + 1, g) : first) << 16;
        }
      }
    }
  }
}

/// Vector b's x chunk `chunk` of the stored columns: x's own chunk, or with a column order (int4 with zero points
/// only: GPTQ's desc_act) the columns it names.
template <bool kOrdered, class X>
__device__ __forceinline__ typename X::Raw load_x(const X& x, const int* order, int b, int chunk) {
  if constexpr (kOrdered) {
    return x.gather(b, order, chunk);
  } else {
    return x.load(b, chunk);
  }
}

/// A compile-time flag, for generic lambdas.
template <bool B>
struct Flag {
  static constexpr bool value = B;
};

/// c += d times the scales of rows g (c[0], c[1]) and g + 8 (c[2], c[3]) in `pair`.
template <class T>
__device__ __forceinline__ void add_scaled(float (&c)[4], const float (&d)[4], unsigned pair) {
  const float2 s = lg::unpack2(T{}, pair);
  c[0] = fmaf(d[0], s.x, c[0]);
  c[1] = fmaf(d[1], s.x, c[1]);
  c[2] = fmaf(d[2], s.y, c[2]);
  c[3] = fmaf(d[3], s.y, c[3]);
}

/// The row loop of the quantized kernels, over tiles of 16 rows of format F (kInt8, kInt4, kInt4Zero or kFp8):
/// finish(row, b, v) once per row and vector b < batch, v[m] the scaled result of matrix m, each from its own thread;
/// with kPairs, finish(row, b, v, p), p[m] the result of row ^ 1, the other row of its pair (RoPE's pairs; rows must
/// then be even, so that the other row exists). A thread's b is always its index in the block's tile warps modulo 8, so
/// it may read per-vector data before the loop. preload(row, b) as gemv_rows_mma's. All matrices share the format, the
/// group and the symmetry (the kernels check it), and the column order: the first matrix's is every matrix's (the host
/// gives matrices that share x one order; nn::QuantizedWeight::input_order).
///
/// Block (32, K, R): R tiles at a time, K warps per tile sharing out its steps (K * R <= 32; any grid);
/// BasicQuantizedKernels::config picks the shape: 32 warps per multiprocessor, as one block or two. Each warp loads
/// its next U steps (and their scales) before it works on the current ones, the next tile's first steps during the
/// current tile's last, so the weight stream does not stop while it dequantizes or sums up a tile. U is 2 steps of
/// one matrix, 1 of two: few registers, so that 32 warps fit a multiprocessor (measured on an H200: 13% less time
/// for the Llama-3.2-1B step's int4 kernels than 16 warps with U = 4 / M). RMSNorm's sum of
/// x^2 is the same for every tile, so the block computes it once, its threads sharing the columns out, at the end of
/// its first tile's steps.
/// Where a block's warps work: a kernel's block (32, K, R) of its grid, or a persistent program's tile on its 1-D
/// block of warps (K its warps, R 1), the tile's place of its call's tiles taking the block's.
struct QuantizedWarps {
  int lane;    ///< the thread's lane
  int k_warp;  ///< the warp's place in its tile's K
  int warps;   ///< K, warps per tile of rows
  int slot;    ///< which of the block's R tiles of rows the warp works on
  int slots;   ///< R
  int block;   ///< the block's (or the program tile's) place
  int blocks;  ///< how many of them share the rows
};

template <class P>
__device__ __forceinline__ QuantizedWarps quantized_warps(const P& place) {
  if constexpr (lg::kIsGridPlace<P>) {
    return {static_cast<int>(threadIdx.x),
            static_cast<int>(threadIdx.y),
            static_cast<int>(blockDim.y),
            static_cast<int>(threadIdx.z),
            static_cast<int>(blockDim.z),
            place.block(),
            place.blocks()};
  } else {
    return {static_cast<int>(threadIdx.x % 32),
            static_cast<int>(threadIdx.x / 32),
            static_cast<int>(blockDim.x / 32),
            0,
            1,
            place.block(),
            place.blocks()};
  }
}

template <int F, bool kPairs, bool kSharedSquares, bool kOrdered, class P, class W, class X, class Finish,
          class Preload>
__device__ __forceinline__ void qgemv_tiles_loop(const P& place, const W& w, const X& x, int rows, int cols, int batch,
                                                 float eps, Finish& finish, Preload& preload, float* tile_parts,
                                                 float* square_parts) {
  using T = typename W::Element;
  constexpr int M = W::count;
  // Steps loaded at a time per lane and matrix; the next ones are in flight meanwhile.
  constexpr int U = M == 1 ? 2 : 1;

  const QuantizedWarps where = quantized_warps(place);
  const int lane = where.lane;
  const int k_warp = where.k_warp;  // the warp's place in its tile
  const int warps = where.warps;    // warps per tile
  const int slot = where.slot;      // the block's tile this warp works on
  const int warp = slot * warps + k_warp;
  // [warp][matrix][row][vector] and [warp][vector]
  const auto tile_part = [&](int wp, int m, int row, int b) -> float& {
    return tile_parts[((wp * M + m) * kTileRows + row) * 8 + b];
  };
  const auto square_part = [&](int wp, int b) -> float& { return square_parts[wp * 8 + b]; };
  const int tid = k_warp * 32 + lane;  // the thread's place in its tile's warps
  const int g = lane / 4;
  const int t = lane % 4;
  const int vector = min(g, batch - 1);
  const int steps = cols / columns_per_step(F);
  const int tiles = (rows + kTileRows - 1) / kTileRows;
  const int group_shift = 31 - __clz(w.w[0].group);  // int4 groups are powers of two
  constexpr bool symmetric = F != kInt4Zero;
  const bool split_groups = is_int4(F) && w.w[0].group == 32;  // a step's halves are two groups
  const Int4Decoder<T> decoder(symmetric);                     // unused for int8
  // RMSNorm's sums of x^2 (X::sum_squares), during the block's first pass over its tiles, two ways. By default each
  // warp sums the x it reads for its steps anyway, each tile's warps covering every column (lane 4 g + t: vector g):
  // no extra loads, which is what a small matrix wants (its time is latency). kSharedSquares, for a large matrix
  // whose blocks make several passes (the LM head: there the per-warp sums cost a third of a step's instructions):
  // the block shares the columns out once: lane % 8 is the vector, chunks of 8 columns go round the block's threads,
  // a thread reading one of its chunks per step of its first tile (their latencies overlap the step's own) and the
  // rest after it. Each warp's sums go to square_part before the first tile's barrier. Either way the order of a
  // vector's sum depends on the block's shape only, not on the batch.
  constexpr bool shared_squares = X::sum_squares && kSharedSquares;
  const int square_vector = lane % 8;
  const int square_stride = 4 * warps * where.slots;  // threads / 8
  int square_chunk = shared_squares && square_vector < batch ? (warp * 32 + lane) / 8 : cols / 8;
  float square_sum = 0.0f;
  bool first_tile = true;
  float rms_scale = 0.0f;  // 1 / rms(x[b]) of the vector b this thread finishes (its tid % 8), once known
  bool waited = false;
  const auto wait = [&](int tile) {
    place.wait();
    waited = true;
    const int out_row = tile * kTileRows + tid / 8;
    if (tid < kTileRows * 8 && tid % 8 < batch && out_row < rows) preload(out_row, tid % 8);
  };

  // The loads run ahead across tiles: a tile's last steps load the next tile's first ones, which stay in flight
  // while the block sums up the tile.
  const int first_tile0 = where.block * where.slots;
  const int tile_stride = where.blocks * where.slots;
  StepLoad<F> next[M][U];
  if (first_tile0 + slot < tiles) {
    load_steps<F, U>(w, first_tile0 + slot, k_warp, warps, steps, lane, group_shift, split_groups, next);
  }
  // A program tile's wait holds a block barrier: every thread waits here, its first weights in flight, rather than
  // each warp at its first step as a kernel's do.
  if constexpr (!lg::kIsGridPlace<P>) wait(first_tile0 + slot);
  for (int tile0 = first_tile0; tile0 < tiles; tile0 += tile_stride) {  // uniform: the block
    const int tile = tile0 + slot;
    const bool active = tile < tiles;  // uniform over the tile's warps
    float c[M][4];
#pragma unroll
    for (int m = 0; m < M; ++m) c[m][0] = c[m][1] = c[m][2] = c[m][3] = 0.0f;

    for (int s0 = k_warp; active && s0 < steps; s0 += warps * U) {  // uniform over the warp, as mma.sync requires
      StepLoad<F> cur[M][U];
#pragma unroll
      for (int m = 0; m < M; ++m) {
#pragma unroll
        for (int u = 0; u < U; ++u) cur[m][u] = next[m][u];
      }
      const bool same_tile = s0 + warps * U < steps;
      const int load_tile = same_tile ? tile : tile + tile_stride;
      if (load_tile < tiles) {
        load_steps<F, U>(w, load_tile, same_tile ? s0 + warps * U : k_warp, warps, steps, lane, group_shift,
                         split_groups, next);
      }
      if (!waited) wait(tile);
      if (shared_squares && square_chunk < cols / 8) {
        square_sum += x_squares<X>(x.load(square_vector, square_chunk));
        square_chunk += square_stride;
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int s = s0 + u * warps;
        if (s >= steps) break;  // uniform over the warp
        if constexpr (is_int4(F)) {
          // Lane t's x: columns 64 s + 8 t .. + 7 (mmas 0 and 1) and 64 s + 32 + 8 t .. + 7 (mmas 2 and 3).
          const typename X::Raw xr[2] = {load_x<kOrdered>(x, w.w[0].order, vector, 8 * s + t),
                                         load_x<kOrdered>(x, w.w[0].order, vector, 8 * s + 4 + t)};
          if (X::sum_squares && first_tile && !shared_squares) {
            square_sum += x_squares<X>(xr[0]) + x_squares<X>(xr[1]);
          }
          const uint4 b[2] = {X::fragment(xr[0]), X::fragment(xr[1])};
          // The step's 4 mmas; with groups of 32 its halves are scaled apart, else the step is one group's.
          const auto mmas = [&](auto split) {
#pragma unroll
            for (int m = 0; m < M; ++m) {
              const StepLoad<F>& l = cur[m][u];
              uint2 bias[2];
              if constexpr (symmetric) {
                bias[0] = bias[1] = Int4Decoder<T>::symmetric_biases();
              } else {
                bias[0] = Int4Decoder<T>::biases(l.zeros & 0xFFU, l.zeros >> 8 & 0xFFU);
                bias[1] = Int4Decoder<T>::biases(l.zeros >> 16 & 0xFFU, l.zeros >> 24);
              }
              const unsigned words[4] = {l.values.x, l.values.y, l.values.z, l.values.w};
              float d[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
              for (int j = 0; j < 4; ++j) {
                unsigned a[4];
                decoder.decode(words[j], bias[j / 2], a);
                const uint4& bj = b[j / 2];
                mma_16816(d[decltype(split)::value ? j / 2 : 0], a, j % 2 == 0 ? bj.x : bj.z, j % 2 == 0 ? bj.y : bj.w,
                          T{});
              }
              if constexpr (decltype(split)::value) add_scaled<T>(c[m], d[0], l.scale[0]);
              add_scaled<T>(c[m], d[decltype(split)::value ? 1 : 0], l.scale[1]);
            }
          };
          if (split_groups) {
            mmas(Flag<true>{});
          } else {
            mmas(Flag<false>{});
          }
        } else {
          // Lane t's x: columns 32 s + 8 t .. + 7; words 2j and 2j + 1 are rows g and g + 8 of mma j.
          const typename X::Raw xr = x.load(vector, 4 * s + t);
          if (X::sum_squares && first_tile && !shared_squares) square_sum += x_squares<X>(xr);
          const uint4 b = X::fragment(xr);
#pragma unroll
          for (int m = 0; m < M; ++m) {
            const uint4 v = cur[m][u].values;
            const auto decode = [](unsigned word) {
              if constexpr (F == kFp8 && kNativeFp8) {
                return convert_fp8(T{}, word);
              } else if constexpr (F == kFp8) {
                return dequantize_fp8(T{}, word);
              } else {
                return dequantize_int8(T{}, word);
              }
            };
            const uint2 r0 = decode(v.x);
            const uint2 r1 = decode(v.y);
            const uint2 r2 = decode(v.z);
            const uint2 r3 = decode(v.w);
            const unsigned a0[4] = {r0.x, r1.x, r0.y, r1.y};
            const unsigned a1[4] = {r2.x, r3.x, r2.y, r3.y};
            if constexpr (F == kFp8) {  // the step's group's scales multiply its sums
              float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
              mma_16816(d, a0, b.x, b.y, T{});
              mma_16816(d, a1, b.z, b.w, T{});
              add_scaled<T>(c[m], d, cur[m][u].scale);
            } else {
              mma_16816(c[m], a0, b.x, b.y, T{});
              mma_16816(c[m], a1, b.z, b.w, T{});
            }
          }
        }
      }
    }
    if (active && !waited) wait(tile);  // a warp without steps still waits before the block's results are written
    if (X::sum_squares && first_tile) {
      // The chunks of x^2 the steps left, then the warp's sums per vector (read after the barrier below).
      if (!waited) {
        place.wait();
        waited = true;
      }
      float part = square_sum;
      if constexpr (shared_squares) {
        for (; square_chunk < cols / 8; square_chunk += square_stride) {
          part += x_squares<X>(x.load(square_vector, square_chunk));
        }
        part += __shfl_xor_sync(0xffffffffu, part, 8);
        part += __shfl_xor_sync(0xffffffffu, part, 16);
        if (lane < 8) square_part(warp, lane) = part;
      } else {
        part += __shfl_xor_sync(0xffffffffu, part, 1);
        part += __shfl_xor_sync(0xffffffffu, part, 2);
        if (t == 0) square_part(warp, g) = part;
      }
    }
    first_tile = false;
#pragma unroll
    for (int m = 0; m < M; ++m) {
      tile_part(warp, m, g, 2 * t) = c[m][0];
      tile_part(warp, m, g, 2 * t + 1) = c[m][1];
      tile_part(warp, m, g + 8, 2 * t) = c[m][2];
      tile_part(warp, m, g + 8, 2 * t + 1) = c[m][3];
    }
    __syncthreads();
    for (int i = tid; active && i < kTileRows * 8; i += 32 * warps) {
      const int r = i / 8;
      const int b = i % 8;
      const int out_row = tile * kTileRows + r;
      if (b >= batch || out_row >= rows) continue;
      if (X::sum_squares && rms_scale == 0.0f) {  // this thread's first result: its vector's sum over the warps
        // The block's warps' sums, or the tile's, from the first one's: with a sum from 0 the compiler computed the
        // result of no warps before the loop, in every thread (a division, a square root and a reciprocal). The same
        // bits: a sum of squares is never -0, so 0 + s is s.
        const int first = shared_squares ? 0 : slot * warps;
        const int count = shared_squares ? warps * where.slots : warps;
        float squares_sum = square_part(first, b);
        for (int k = first + 1; k < first + count; ++k) squares_sum += square_part(k, b);
        rms_scale = 1.0f / sqrtf(squares_sum / static_cast<float>(cols) + eps);
      }
      const float scale = X::sum_squares ? rms_scale : 1.0f;
      const auto result = [&](int row, float(&v)[M]) {  // row within the tile
#pragma unroll
        for (int m = 0; m < M; ++m) {
          float sum = 0.0f;
          for (int k = 0; k < warps; ++k) sum += tile_part(slot * warps + k, m, row, b);
          if (F == kInt8) {  // the row's one scale
            const unsigned pair = w.scale_pair(m, tile, 0, row % 8);
            sum *= row < 8 ? lg::unpack2(T{}, pair).x : lg::unpack2(T{}, pair).y;
          }
          if (F == kFp8 && kNativeFp8) sum *= 0.00390625f;  // 2^-8: convert_fp8's values, scales stored times 2^8
          v[m] = sum * scale;
        }
      };
      float v[M];
      result(r, v);
      if constexpr (kPairs) {
        float p[M];
        result(r ^ 1, p);
        finish(out_row, b, v, p);
      } else {
        finish(out_row, b, v);
      }
    }
    __syncthreads();  // the partials are read before the next tiles overwrite them
  }
  if (!waited) place.wait();  // a block without a tile
}

/// Bytes of shared memory a persistent program's tile of qgemv_tiles over M matrices takes from its call
/// (TileConfig::shared_bytes): the warps' partial sums, for `warps` warps a block.
constexpr unsigned quantized_tile_shared_bytes(int matrices, int warps) {
  return static_cast<unsigned>(4 * warps * (matrices * kTileRows * 8 + 8));
}

/// See qgemv_tiles_loop, in a kernel (GridPlace, the default) or a persistent program's tile (TilePlace: its block's
/// warps share each tile of 16 rows; the partial sums in the call's shared memory, quantized_tile_shared_bytes, a
/// trap when it gave less). A matrix with a column order runs its own instance of the loop, so that the gathers'
/// registers are not taken from the loop every other matrix runs; the two share their shared memory.
template <int F, bool kPairs = false, bool kSharedSquares = false, class W, class X, class Finish,
          class Preload = NoPreload, class P = lg::GridPlace>
__device__ __forceinline__ void qgemv_tiles(const W& w, const X& x, int rows, int cols, int batch, float eps,
                                            Finish finish, Preload preload = {}, const P& place = {}) {
  float* tile_parts;
  float* square_parts;
  if constexpr (lg::kIsGridPlace<P>) {
    __shared__ float tile_part[kMaxWarps][W::count][kTileRows][8];  // [warp][matrix][row][vector]
    __shared__ float square_part[kMaxWarps][8];                     // [warp][vector]
    tile_parts = &tile_part[0][0][0][0];
    square_parts = &square_part[0][0];
  } else {
    const int warps = static_cast<int>(blockDim.x / 32);
    unsigned char* buffer = place.buffer(quantized_tile_shared_bytes(W::count, warps));
    if (buffer == nullptr) __trap();
    tile_parts = reinterpret_cast<float*>(buffer);
    square_parts = tile_parts + warps * W::count * kTileRows * 8;
  }
  if constexpr (F == kInt4Zero) {
    if (w.w[0].order != nullptr) {
      qgemv_tiles_loop<F, kPairs, kSharedSquares, true>(place, w, x, rows, cols, batch, eps, finish, preload,
                                                        tile_parts, square_parts);
      return;
    }
  }
  qgemv_tiles_loop<F, kPairs, kSharedSquares, false>(place, w, x, rows, cols, batch, eps, finish, preload, tile_parts,
                                                     square_parts);
}

}  // namespace lg::nn
