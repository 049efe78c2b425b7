// fp8 in groups: the e4m3 bytes of an FP8 checkpoint kept as they are (1 sign, 4 exponent bits of bias 7, 3 mantissa
// bits; 0x7F and 0xFF are NaN, and there is no infinity), one scale per group of 128 columns along K, symmetric. A
// checkpoint's 128 x 128 block scale is the scale of each of its block's 128 rows' groups, and a per-channel scale
// that of each group of its row, so both are this one format. Placed as int8 (32 columns a step, a byte per value).
//
// The kernels turn a byte into an fp16 with bit operations alone (sign to bit 15, the other 7 bits to bits 7..13):
// that fp16 is the e4m3 value times 2^-8, exactly, subnormals included (e4m3's bias is 8 below fp16's). So the value
// stored as q is 512 times the e4m3 value (an integer), standing for 2^-8 times that value (value_unit 2^-17), and
// the scale is stored times 2^8: the weight, q * value_unit * scale, is the checkpoint's e4m3 value times its scale.
// Storing the scale times 2^8 also keeps the scales of ordinary blocks (amax / 448, about 1e-4) normal fp16 numbers.
//
// lazygraph quantizes into it as FP8 checkpoints are made: per 128 x 128 block (the last ones of fewer rows), scale =
// the block's largest magnitude / 448 (e4m3's largest finite value), stored times 2^8 and rounded once to the scale
// type, and each weight w becomes the e4m3 value nearest to w / scale (the stored scale), ties to even, saturating at
// +-448. A weight quantized so and one read from a checkpoint are the same bytes, read by the same kernels.
#include <cmath>

#include "storage_format.hpp"

namespace lazygraph::nn::detail {

static_assert(static_cast<int>(WeightFormat::fp8_block) == 3, "the kernels' kFp8 kind (qgemv_core.cuh) is this value");

namespace {
constexpr int fp8_groups[] = {128};

/// As int8's: word 2j + h holds row g + 8h, columns 8t + 4j + c (c in 0..3) in byte c.
LanePlace place_fp8(int column, int h) {
  const int j = column % 8 / 4;
  const int c = column % 4;
  return {4 * (2 * j + h) + c, false};
}

/// 512 times the e4m3 value of `bits` (a NaN byte, which QuantizedWeight refuses, decodes as +-15 << 14).
int decode_fp8(unsigned bits, bool /*asymmetric*/) {
  const auto exponent = static_cast<int>(bits >> 3U & 0xFU);
  const auto mantissa = static_cast<int>(bits & 7U);
  const int magnitude = exponent == 0 ? mantissa : (8 + mantissa) << (exponent - 1);
  return (bits & 0x80U) != 0 ? -magnitude : magnitude;
}

/// The byte whose decode_fp8 is q, for a q that e4m3 stores (512 times an e4m3 value).
unsigned encode_fp8(int q) {
  const unsigned sign = q < 0 ? 0x80U : 0U;
  const auto a = static_cast<unsigned>(q < 0 ? -q : q);
  if (a < 8) return sign | a;
  int top = 0;  // the highest set bit of a
  while ((a >> static_cast<unsigned>(top + 1)) != 0) ++top;
  const int exponent = top - 2;  // a = (8 + m) << (exponent - 1)
  const unsigned mantissa = (a >> static_cast<unsigned>(exponent - 1)) - 8U;
  return sign | static_cast<unsigned>(exponent) << 3U | mantissa;
}
/// The q (512 times an e4m3 value) nearest to x, ties to even mantissa: within a binade [2^e, 2^(e+1)) of q, e >= 4,
/// e4m3's 3 mantissa bits step by 2^(e-3); below 16 (subnormals and the first binade) by 1. Past q's range it goes
/// on as if e4m3 had more exponents (the quantizer saturates); x is capped first so that the result stays exact.
double nearest_fp8(double x) {
  const double a = std::fmin(std::fabs(x), 0x1p40);
  double step = 1;
  if (a >= 16) {
    int e = 0;
    (void)std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): the binade starts at 2^(e - 1)
    step = std::ldexp(1.0, e - 4);
  }
  const double r = std::rint(a / step) * step;
  return x < 0 ? -r : r;
}
}  // namespace

extern const StorageFormat fp8_block_format{
    .kind = WeightFormat::fp8_block,
    .name = "fp8",
    .family = "fp8 e4m3 in groups",
    .groups = fp8_groups,
    .allows_asymmetric = false,
    .lacks = "which has no zero points",
    .q_range = {-229376, 229376},  // +-448 * 512
    .asymmetric_q_range = {-229376, 229376},
    .value_bits = 8,
    .step_columns = 32,
    .place = place_fp8,
    .encode = encode_fp8,
    .decode = decode_fp8,
    .forbidden_byte = 0x7F,
    .forbidden_why = "an e4m3 NaN (0x7F or 0xFF)",
    .pack_kernel = "pack_fp8",
    .kernel_suffix = "_fp8",
    .asymmetric_kernel_suffix = "",
    .forbidden_mask = 0x7FU,
    .value_unit = 1.0 / 131072,  // 2^-17: q / 512 is the e4m3 value, times 2^-8
    .nearest = nearest_fp8,
    .quantize_rows = 128,
    .block_quantize_kernel = "quantize_blocks_fp8",
    .e4m3_values = true,
};

}  // namespace lazygraph::nn::detail
