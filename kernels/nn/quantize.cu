// Weight-only quantization on the GPU: the device side of nn::DeviceQuantizer. It computes what the host quantizer
// (src/nn/quantized.cpp, `quantize`) computes, bit for bit, and writes include/lazygraph/nn/quantized.hpp's layout:
//   quantize_groups(w, rows, cols, group, q_min, q_max, asymmetric, bf16_scales, ratios, q, scales, zeros, problems)
//       one warp per (row, group) of the row-major weights w [rows][cols] (fp32, fp16 or bf16: quantize_groups_f32,
//       _f16, _bf16): the scale (and zero point) of each clip ratio tried (the first `ratios` of nn::clip_ratios),
//       the one with the least squared error, and the group's q [rows][cols] (row-major bytes, two's complement),
//       scales [rows][groups] (bits of fp16 or bf16) and zeros [rows][groups]. problems[0]: the smallest flat index
//       of a weight that is not finite; problems[1]: the smallest row * groups + group whose scale overflows (both
//       atomicMin'd, ~0 when none; the host names them).
//   quantize_blocks_fp8(w, rows, cols, bf16_scales, q, scales, problems)
//       fp8: one block of 256 threads per 128 x 128 block of w (_f32, _f16, _bf16; blockIdx.x = block row * groups +
//       block column, the last block row of rows % 128 rows): scale = the block's largest magnitude / 448 stored
//       times 2^8, and each weight's e4m3 byte in q (row-major), the block's scale in each of its rows' entries of
//       scales [rows][groups]; problems as quantize_groups', the overflowing block named by its first row.
//   pack_int4(q, rows, cols, values)      one thread per 32-bit word of the tiled int4 values (16-byte aligned bytes)
//   pack_int8(q, rows, cols, values)      one thread per 32-bit word of the tiled int8 values (offset binary)
//   pack_fp8(q, rows, cols, values)       the same for the fp8 values, q holding their e4m3 bytes as they are
//   pack_scales(scales_rm, zeros_rm, rows, groups, scales, zeros)   one thread per tiled scale (zeros may be null)
// Padding rows of the last tile become zero weights (q 0, scale 0, zero 0).
//
// Bit for bit: the host works in double with round to nearest even (llrint; fp8: to the nearest e4m3 value, ties to
// even, src/nn/formats/fp8_block.cpp's nearest_fp8), and so does this code (rint, nearest_fp8 below). Its
// squared error, which picks the clip ratio, is summed in the order a warp sums it: lane l adds the elements l, l +
// 32, ... in order, then the 32 partial sums combine by the butterfly of __shfl_xor_sync over 16, 8, 4, 2, 1; the host
// quantizer sums the same way (src/nn/quantized.cpp, warp_order_sum).
#include "lazygraph/element.cuh"
#include "lazygraph/kernel_common.cuh"

namespace {

/// nn::clip_ratios[r].
__device__ __forceinline__ double clip_ratio(int r) {
  switch (r) {
    case 0:
      return 1.00;
    case 1:
      return 0.95;
    case 2:
      return 0.90;
    case 3:
      return 0.85;
    case 4:
      return 0.80;
    default:
      return 0.75;
  }
}

__device__ __forceinline__ double value_of(float w) { return w; }
__device__ __forceinline__ double value_of(lg::half_t w) { return lg::to_float(w); }
__device__ __forceinline__ double value_of(lg::bf16_t w) { return lg::to_float(w); }

/// The bits of `f` rounded to nearest even in the scale type, and back.
__device__ __forceinline__ unsigned scale_bits(float f, bool bf16) {
  return bf16 ? lg::from_float<lg::bf16_t>(f).bits : lg::from_float<lg::half_t>(f).bits;
}
__device__ __forceinline__ double scale_value(unsigned bits, bool bf16) {
  return bf16 ? lg::to_float(lg::bf16_t{static_cast<unsigned short>(bits)})
              : lg::to_float(lg::half_t{static_cast<unsigned short>(bits)});
}

__device__ __forceinline__ long long clamp_ll(long long v, long long lo, long long hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

/// The sum over the warp in the butterfly order of the file comment (every lane gets it).
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int offset = 16; offset >= 1; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

/// One clip ratio's choice for a group whose range is [low, high] (both include 0): the scale's bits and the zero
/// point, as the host's quantize_group; false when the scale overflows the scale type.
__device__ __forceinline__ bool choose_scale(double low, double high, double ratio, int q_min, int q_max,
                                             bool asymmetric, bool bf16, unsigned& bits, int& zero, double& scale) {
  double exact;
  if (asymmetric) {
    low *= ratio;
    high *= ratio;
    exact = (high - low) / (q_max - q_min);
  } else {
    high = fmax(-low, high) * ratio;
    low = -high;
    exact = high / q_max;
  }
  bits = 0;
  zero = 0;
  scale = 0;
  if (exact == 0) return true;  // an all-zero group
  bits = scale_bits(__double2float_rn(exact), bf16);
  if (scale_value(bits, bf16) == 0) bits = 1;
  for (;; ++bits) {
    scale = scale_value(bits, bf16);
    if (!isfinite(scale)) return false;
    zero = asymmetric ? static_cast<int>(clamp_ll(__double2ll_rn(-low / scale), q_min, q_max)) : 0;
    if (__double2ll_rn(low / scale) + zero >= q_min && __double2ll_rn(high / scale) + zero <= q_max) return true;
  }
}

/// q of weight w for a choice, as the host stores it.
__device__ __forceinline__ int q_of(double w, double scale, int zero, int q_min, int q_max) {
  if (scale == 0) return 0;
  return static_cast<int>(clamp_ll(__double2ll_rn(w / scale) + zero, q_min, q_max));
}

template <class S>
__device__ __forceinline__ void quantize_groups_body(const S* w, int rows, int cols, int group, int q_min, int q_max,
                                                     int asymmetric, int bf16_scales, int ratios, signed char* q,
                                                     unsigned short* scales, unsigned char* zeros,
                                                     unsigned long long* problems) {
  const int groups = cols / group;
  const long long warp = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= static_cast<long long>(rows) * groups) return;  // uniform over the warp
  const int row = static_cast<int>(warp / groups);
  const int k = static_cast<int>(warp % groups);
  const long long first = static_cast<long long>(row) * cols + static_cast<long long>(k) * group;
  const bool asym = asymmetric != 0;
  const bool bf16 = bf16_scales != 0;

  double low = 0;
  double high = 0;
  long long bad = -1;
  for (int i = lane; i < group; i += 32) {
    const double v = value_of(w[first + i]);
    if (!isfinite(v) && bad < 0) bad = first + i;
    low = fmin(low, v);
    high = fmax(high, v);
  }
  if (bad >= 0) atomicMin(problems, static_cast<unsigned long long>(bad));
  if (__any_sync(0xffffffffu, bad >= 0)) return;
#pragma unroll
  for (int offset = 16; offset >= 1; offset /= 2) {
    low = fmin(low, __shfl_xor_sync(0xffffffffu, low, offset));
    high = fmax(high, __shfl_xor_sync(0xffffffffu, high, offset));
  }

  unsigned best_bits = 0;
  int best_zero = 0;
  double best_scale = 0;
  double best_error = 0;
  for (int r = 0; r < ratios; ++r) {
    unsigned bits;
    int zero;
    double scale;
    if (!choose_scale(low, high, clip_ratio(r), q_min, q_max, asym, bf16, bits, zero, scale)) {
      if (lane == 0) atomicMin(problems + 1, static_cast<unsigned long long>(warp));  // ratio 1 fails first
      return;
    }
    double error = 0;
    for (int i = lane; i < group; i += 32) {
      const double v = value_of(w[first + i]);
      const int qi = q_of(v, scale, zero, q_min, q_max);
      const double e = v - static_cast<double>(static_cast<float>(qi - zero)) * scale;
      error += e * e;
    }
    error = warp_sum(error);
    if (r == 0 || error < best_error) {
      best_bits = bits;
      best_zero = zero;
      best_scale = scale;
      best_error = error;
    }
  }
  for (int i = lane; i < group; i += 32) {
    q[first + i] = static_cast<signed char>(q_of(value_of(w[first + i]), best_scale, best_zero, q_min, q_max));
  }
  if (lane == 0) {
    scales[warp] = static_cast<unsigned short>(best_bits);
    zeros[warp] = static_cast<unsigned char>(best_zero);
  }
}

/// fp8's q (512 times an e4m3 value) nearest to x, ties to even mantissa, as the host's nearest_fp8
/// (src/nn/formats/fp8_block.cpp): steps of 1 below 16, of 2^(e - 3) in the binade [2^e, 2^(e + 1)).
__device__ __forceinline__ double nearest_fp8(double x) {
  const double a = fmin(fabs(x), 0x1p40);
  double step = 1;
  if (a >= 16) {
    int e = 0;
    (void)frexp(a, &e);
    step = ldexp(1.0, e - 4);
  }
  const double r = rint(a / step) * step;
  return x < 0 ? -r : r;
}

/// The e4m3 byte of q (512 times an e4m3 value, |q| <= 229376), as the host's encode_fp8.
__device__ __forceinline__ unsigned encode_fp8(int q) {
  const unsigned sign = q < 0 ? 0x80u : 0u;
  const unsigned a = static_cast<unsigned>(q < 0 ? -q : q);
  if (a < 8) return sign | a;
  const int exponent = 31 - __clz(static_cast<int>(a)) - 2;  // a = (8 + m) << (exponent - 1)
  return sign | static_cast<unsigned>(exponent) << 3 | ((a >> (exponent - 1)) - 8u);
}

/// fp8's largest q, 512 * 448, and what one unit of q stands for before scaling, 2^-17 (fp8_block.cpp).
constexpr int kFp8QMax = 229376;
constexpr double kFp8Unit = 1.0 / 131072;

/// A block of largest magnitude `amax`'s scale bits and what one unit of q stands for (scale * 2^-17; 0 for an
/// all-zero block), as the host's quantize_group; false when the scale overflows the scale type.
__device__ __forceinline__ bool choose_fp8_scale(double amax, bool bf16, unsigned& bits, double& step) {
  const double exact = amax / (kFp8QMax * kFp8Unit);
  bits = 0;
  step = 0;
  if (exact == 0) return true;
  bits = scale_bits(__double2float_rn(exact), bf16);
  if (scale_value(bits, bf16) == 0) bits = 1;
  for (;; ++bits) {
    const double scale = scale_value(bits, bf16);
    if (!isfinite(scale)) return false;
    step = scale * kFp8Unit;
    if (nearest_fp8(amax / step) <= kFp8QMax) return true;
  }
}

template <class S>
__device__ __forceinline__ void quantize_blocks_fp8_body(const S* w, int rows, int cols, int bf16_scales,
                                                         signed char* q, unsigned short* scales,
                                                         unsigned long long* problems) {
  constexpr int kBlock = 128;
  const int groups = cols / kBlock;
  const int first_row = static_cast<int>(blockIdx.x) / groups * kBlock;
  const int k = static_cast<int>(blockIdx.x) % groups;
  const int count = min(kBlock, rows - first_row) * kBlock;
  const auto at = [&](int i) {
    return static_cast<long long>(first_row + i / kBlock) * cols + static_cast<long long>(k) * kBlock + i % kBlock;
  };
  double amax = 0;
  long long bad = -1;
  for (int i = static_cast<int>(threadIdx.x); i < count; i += static_cast<int>(blockDim.x)) {
    const double v = value_of(w[at(i)]);
    if (!isfinite(v) && bad < 0) bad = at(i);
    amax = fmax(amax, fabs(v));
  }
  if (bad >= 0) atomicMin(problems, static_cast<unsigned long long>(bad));
  if (__syncthreads_or(bad >= 0)) return;
#pragma unroll
  for (int offset = 16; offset >= 1; offset /= 2) amax = fmax(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  __shared__ double warp_amax[32];
  __shared__ unsigned block_bits;
  __shared__ double block_step;
  __shared__ int overflow;
  if (threadIdx.x % 32 == 0) warp_amax[threadIdx.x / 32] = amax;
  __syncthreads();
  if (threadIdx.x == 0) {
    double m = 0;
    for (unsigned i = 0; i < blockDim.x / 32; ++i) m = fmax(m, warp_amax[i]);
    unsigned bits;
    double step;
    overflow = choose_fp8_scale(m, bf16_scales != 0, bits, step) ? 0 : 1;
    if (overflow != 0) atomicMin(problems + 1, static_cast<unsigned long long>(first_row) * groups + k);
    block_bits = bits;
    block_step = step;
  }
  __syncthreads();
  if (overflow != 0) return;
  const double step = block_step;
  for (int i = static_cast<int>(threadIdx.x); i < count; i += static_cast<int>(blockDim.x)) {
    int qi = 0;
    if (step != 0) qi = static_cast<int>(fmin(fmax(nearest_fp8(value_of(w[at(i)]) / step), -kFp8QMax), kFp8QMax));
    q[at(i)] = static_cast<signed char>(encode_fp8(qi));
  }
  for (int r = static_cast<int>(threadIdx.x); r < count / kBlock; r += static_cast<int>(blockDim.x)) {
    scales[static_cast<long long>(first_row + r) * groups + k] = static_cast<unsigned short>(block_bits);
  }
}

/// The row-major q of (row, col), 0 for a padding row.
__device__ __forceinline__ int q_at(const signed char* q, int rows, int cols, int row, int col) {
  return row < rows ? q[static_cast<long long>(row) * cols + col] : 0;
}

__device__ __forceinline__ void pack_int4_body(const signed char* q, int rows, int cols, unsigned char* bytes) {
  unsigned* const values = reinterpret_cast<unsigned*>(bytes);  // 16-byte aligned (a device allocation)
  const long long index = lg::global_index();
  const long long tile_words = 16LL * cols / 2 / 4;
  const long long tiles = (rows + 15) / 16;
  if (index >= tiles * tile_words) return;
  const int tile = static_cast<int>(index / tile_words);
  const int in_tile = static_cast<int>(index % tile_words);  // the word in the tile
  const int s = in_tile / 128;                               // 512-byte steps: 128 words
  const int lane = in_tile % 128 / 4;
  const int j = in_tile % 4;
  const int g = lane / 4;
  const int t = lane % 4;
  unsigned word = 0;
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    const int h = n % 2;
    const int c = n / 4 + 2 * (n / 2 % 2);
    const int col = 64 * s + 32 * (j / 2) + 8 * t + 4 * (j % 2) + c;
    word |= (static_cast<unsigned>(q_at(q, rows, cols, tile * 16 + g + 8 * h, col)) & 0xFU) << (4 * n);
  }
  values[index] = word;
}

/// The 8-bit formats' packing: each byte q + offset (int8: 128, offset binary; fp8: 0, its e4m3 byte as it is).
template <int Offset>
__device__ __forceinline__ void pack_bytes_body(const signed char* q, int rows, int cols, unsigned char* bytes) {
  unsigned* const values = reinterpret_cast<unsigned*>(bytes);
  const long long index = lg::global_index();
  const long long tile_words = 16LL * cols / 4;
  const long long tiles = (rows + 15) / 16;
  if (index >= tiles * tile_words) return;
  const int tile = static_cast<int>(index / tile_words);
  const int in_tile = static_cast<int>(index % tile_words);
  const int s = in_tile / 128;
  const int lane = in_tile % 128 / 4;
  const int w = in_tile % 4;  // word 2 j + h
  const int g = lane / 4;
  const int t = lane % 4;
  unsigned word = 0;
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    const int col = 32 * s + 8 * t + 4 * (w / 2) + c;
    word |= (static_cast<unsigned>(q_at(q, rows, cols, tile * 16 + g + 8 * (w % 2), col) + Offset) & 0xFFu) << (8 * c);
  }
  values[index] = word;
}

__device__ __forceinline__ void pack_int8_body(const signed char* q, int rows, int cols, unsigned char* values) {
  pack_bytes_body<128>(q, rows, cols, values);
}
__device__ __forceinline__ void pack_fp8_body(const signed char* q, int rows, int cols, unsigned char* values) {
  pack_bytes_body<0>(q, rows, cols, values);
}

__device__ __forceinline__ void pack_scales_body(const unsigned short* scales_rm, const unsigned char* zeros_rm,
                                                 int rows, int groups, unsigned short* scales, unsigned char* zeros) {
  const long long index = lg::global_index();
  const long long tiles = (rows + 15) / 16;
  if (index >= tiles * groups * 16) return;
  const int h = static_cast<int>(index % 2);
  const int g = static_cast<int>(index / 2 % 8);
  const long long rest = index / 16;
  const int k = static_cast<int>(rest % groups);
  const int row = static_cast<int>(rest / groups) * 16 + g + 8 * h;
  const long long from = static_cast<long long>(row) * groups + k;
  scales[index] = row < rows ? scales_rm[from] : 0;
  if (zeros != nullptr) zeros[index] = row < rows ? zeros_rm[from] : 0;
}

}  // namespace

/* lazygraph:variants
axis S = float _f32 | lg::half_t _f16 | lg::bf16_t _bf16

quantize_groups[S] __launch_bounds__(256) = quantize_groups_body(const S* w, int rows, int cols, int group, int q_min,
    int q_max, int asymmetric, int bf16_scales, int ratios, signed char* q, unsigned short* scales,
    unsigned char* zeros, unsigned long long* problems)
quantize_blocks_fp8[S] __launch_bounds__(256) = quantize_blocks_fp8_body(const S* w, int rows, int cols,
    int bf16_scales, signed char* q, unsigned short* scales, unsigned long long* problems)
pack_int4 __launch_bounds__(256) = pack_int4_body(const signed char* q, int rows, int cols, unsigned char* values)
pack_int8 __launch_bounds__(256) = pack_int8_body(const signed char* q, int rows, int cols, unsigned char* values)
pack_fp8 __launch_bounds__(256) = pack_fp8_body(const signed char* q, int rows, int cols, unsigned char* values)
pack_scales __launch_bounds__(256) = pack_scales_body(const unsigned short* scales_rm, const unsigned char* zeros_rm,
    int rows, int groups, unsigned short* scales, unsigned char* zeros)
*/
