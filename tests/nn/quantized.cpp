// Host tests of lazygraph::nn's quantized weights (quantized.hpp), the reference the GPU quantizer and kernels will be
// checked against: the error bound of round to nearest for every format, the exact bytes of hand-made rows, the
// clipping search, all-zero groups, the byte counts, and one test per refused input.
#include <doctest/doctest.h>

#include <lazygraph/nn/quantized.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;
using namespace lazygraph::nn;

namespace {

/// Every format the quantizer offers.
std::vector<QuantizedFormat> all_formats() {
  std::vector<QuantizedFormat> out;
  for (const ScaleType type : {ScaleType::f16, ScaleType::bf16}) {
    out.push_back({WeightFormat::int8_channel, 0, false, type});
    for (const int group : {32, 64, 128}) {
      for (const bool asymmetric : {false, true}) out.push_back({WeightFormat::int4_group, group, asymmetric, type});
    }
  }
  return out;
}

/// `n` random weights in [-scale, scale), never zero.
std::vector<float> random_weights(std::size_t n, float scale) {
  std::vector<float> w = lgtest::random_floats(n);
  for (float& x : w) x *= scale;
  return w;
}

/// The scale round to nearest aims at for elements [first, first + count) of `w`, in double.
double ideal_scale(const QuantizedLayout& layout, const std::vector<float>& w, std::size_t first, std::size_t count) {
  double low = 0;
  double high = 0;
  for (std::size_t i = first; i < first + count; ++i) {
    low = std::min(low, static_cast<double>(w[i]));
    high = std::max(high, static_cast<double>(w[i]));
  }
  const auto [q_min, q_max] = layout.q_range();
  if (layout.format().asymmetric) return (high - low) / (q_max - q_min);
  return std::max(-low, high) / q_max;
}

/// The squared error of each group of `q` against `w`.
std::vector<double> group_errors(const QuantizedWeight& q, const std::vector<float>& w) {
  const QuantizedLayout& layout = q.layout();
  const std::vector<float> d = q.dequantize();
  std::vector<double> out(layout.scale_count());
  for (std::size_t i = 0; i < w.size(); ++i) {
    const double e = static_cast<double>(w[i]) - static_cast<double>(d[i]);
    const std::size_t row = i / static_cast<std::size_t>(layout.cols());
    const std::size_t col = i % static_cast<std::size_t>(layout.cols());
    out[row * static_cast<std::size_t>(layout.groups_per_row()) + col / static_cast<std::size_t>(layout.group())] +=
        e * e;
  }
  return out;
}

std::uint32_t word(std::span<const std::uint8_t> bytes, std::size_t index) {
  std::uint32_t out = 0;
  std::memcpy(&out, bytes.data() + 4 * index, 4);  // little-endian, as a GPU reads it (and as this host is)
  return out;
}

}  // namespace

TEST_CASE("round to nearest leaves every element within half a step of the stored scale, for every format") {
  // The bound is exactly scale / 2, with `scale` the stored (rounded) one: q is computed with it, and a rounded scale
  // too small for the range is replaced by the next larger value, so nothing saturates. No slack is needed for the
  // double arithmetic either: a float weight over an 11- or 8-bit scale is never within 2^-53 of a half-integer
  // without being one, so rint picks the nearest q, and w - (q - zero) * scale is exact in double.
  constexpr int rows = 6;
  constexpr int cols = 256;
  for (const QuantizedFormat& format : all_formats()) {
    for (const float magnitude : {0.05F, 3.0F}) {
      CAPTURE(format_name(format));
      CAPTURE(magnitude);
      const std::vector<float> w = random_weights(std::size_t{rows} * cols, magnitude);
      const QuantizedWeight q = quantize(format, "blk.w", rows, cols, w);
      const QuantizedLayout& layout = q.layout();
      const auto [q_min, q_max] = layout.q_range();
      // The scale's own rounding: within a relative half unit of the ideal, or one value above it after a bump.
      const double unit = format.scale_type == ScaleType::f16 ? 0x1p-10 : 0x1p-7;
      const std::vector<float> d = q.dequantize();
      std::size_t outside = 0;
      std::size_t bad_scales = 0;
      for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < cols; ++c) {
          const std::size_t i = static_cast<std::size_t>(r) * cols + static_cast<std::size_t>(c);
          const double s = q.scale(r, c);
          const int v = q.value(r, c);
          const int z = q.zero(r, c);
          CHECK(v >= q_min);
          CHECK(v <= q_max);
          CHECK(d[i] == q.dequantized(r, c));
          CHECK(d[i] == static_cast<float>(v - z) * static_cast<float>(s));
          if (std::abs(static_cast<double>(w[i]) - static_cast<double>(d[i])) > s / 2) ++outside;
          if (c % layout.group() == 0) {
            const double ideal = ideal_scale(layout, w, i, static_cast<std::size_t>(layout.group()));
            if (!(s >= ideal * (1 - unit / 2) && s <= ideal * (1 + 1.5 * unit))) ++bad_scales;
          }
        }
      }
      CHECK(outside == 0);
      CHECK(bad_scales == 0);
    }
  }
}

TEST_CASE("symmetric formats quantize w and -w to q and -q") {
  constexpr int rows = 4;
  constexpr int cols = 128;
  for (const QuantizedFormat& format : all_formats()) {
    if (format.asymmetric) continue;
    CAPTURE(format_name(format));
    std::vector<float> w = random_weights(std::size_t{rows} * cols, 1.0F);
    const QuantizedWeight plus = quantize(format, "w", rows, cols, w);
    for (float& x : w) x = -x;
    const QuantizedWeight minus = quantize(format, "w", rows, cols, w);
    std::size_t mismatches = 0;
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c) mismatches += plus.value(r, c) == -minus.value(r, c) ? 0 : 1;
    }
    CHECK(mismatches == 0);
    CHECK(std::equal(plus.scale_bits().begin(), plus.scale_bits().end(), minus.scale_bits().begin()));
  }
}

TEST_CASE("int4 symmetric: two's-complement nibbles, interleaved in blocks of 128, rows of K / 2 bytes") {
  // Row 0's q values (each in [-7, 7], and 7 in every group of 32, so every scale is exactly 1); row 1 is row 0
  // times 2. The pattern is irregular so that any misplaced element shows.
  std::vector<int> q0(256);
  for (std::size_t k = 0; k < q0.size(); ++k) q0[k] = k % 32 == 0 ? 7 : static_cast<int>((k * 37 + 11) % 15) - 7;
  std::vector<float> w;
  for (const int q : q0) w.push_back(static_cast<float>(q));
  for (const int q : q0) w.push_back(static_cast<float>(2 * q));
  const QuantizedWeight q = quantize({WeightFormat::int4_group, 32, false, ScaleType::f16}, "w", 2, 256, w);
  REQUIRE(q.values().size() == 256);
  REQUIRE(q.layout().row_value_bytes() == 128);
  // Word 4t + j of a block holds elements 32j + 8t + e, e in 0..7, element e at bits 4 (e / 2) + 16 (e % 2).
  for (std::size_t k = 0; k < 256; ++k) {
    CAPTURE(k);
    const std::size_t block = k / 128;
    const std::size_t j = k % 128 / 32;
    const std::size_t t = k % 32 / 8;
    const std::size_t e = k % 8;
    const std::uint32_t nibble = (word(q.values(), block * 16 + 4 * t + j) >> (4 * (e / 2) + 16 * (e % 2))) & 0xFU;
    CHECK(nibble == (static_cast<std::uint32_t>(q0[k]) & 0xFU));
    CHECK(q.value(0, static_cast<int>(k)) == q0[k]);
    CHECK(q.value(1, static_cast<int>(k)) == q0[k]);               // row 1 starts at byte 128, same q
    CHECK(q.dequantized(1, static_cast<int>(k)) == 2.0F * q0[k]);  // with scale 2
  }
  for (std::size_t i = 0; i < 128; ++i) CHECK(q.values()[128 + i] == q.values()[i]);  // ... and the same bytes
  // One word spelled out: word 0 holds elements 0..7, the even ones in its low half-word.
  std::uint32_t expected = 0;
  for (std::uint32_t e = 0; e < 8; ++e) {
    expected |= (static_cast<std::uint32_t>(q0[e]) & 0xFU) << (4 * (e / 2) + 16 * (e % 2));
  }
  CHECK(word(q.values(), 0) == expected);
  REQUIRE(q.scale_bits().size() == 16);
  CHECK(q.scale_bits()[0] == 0x3C00);  // 1.0 in fp16
  CHECK(q.scale_bits()[8] == 0x4000);  // 2.0 in fp16: row 1's first group
  CHECK(q.zeros().empty());
}

TEST_CASE("int4 asymmetric: q in [0, 15] with a zero point byte per group") {
  // w = (q - 3) * 0.5 for q = 0..15, repeated: every group spans [-1.5, 6], scale 0.5, zero point 3.
  std::vector<float> w;
  for (int i = 0; i < 128; ++i) w.push_back(static_cast<float>((i % 16) - 3) * 0.5F);
  const QuantizedWeight q = quantize({WeightFormat::int4_group, 32, true, ScaleType::bf16}, "w", 1, 128, w);
  REQUIRE(q.values().size() == 64);
  // Word 0 holds elements 0..7 (q 0..7): the even ones in the low half-word, the odd ones in the high.
  CHECK(word(q.values(), 0) == 0x75316420U);
  // Word 4 (the second lane's first word) holds elements 8..15 (q 8..15).
  CHECK(word(q.values(), 4) == 0xFDB9ECA8U);
  REQUIRE(q.scale_bits().size() == 4);
  CHECK(q.scale_bits()[0] == 0x3F00);  // 0.5 in bf16
  REQUIRE(q.zeros().size() == 4);
  CHECK(q.zeros()[0] == 3);
  for (int k = 0; k < 128; ++k) CHECK(q.dequantized(0, k) == w[static_cast<std::size_t>(k)]);
}

TEST_CASE("int8: one two's-complement byte per element, q in [-127, 127], one scale per row") {
  const std::vector<int> q0 = {127, -127, 1, -1, 0, 64, -64, 5, -5, 100, -100, 2, 3, 4, 6, 7};
  std::vector<float> w;
  for (const int q : q0) w.push_back(static_cast<float>(q) * 0.25F);
  for (const int q : q0) w.push_back(static_cast<float>(-q) * 4.0F);
  const QuantizedWeight q = quantize({WeightFormat::int8_channel, 0, false, ScaleType::f16}, "w", 2, 16, w);
  REQUIRE(q.values().size() == 32);
  const std::vector<std::uint8_t> row0 = {0x7F, 0x81, 0x01, 0xFF, 0x00, 0x40, 0xC0, 0x05,
                                          0xFB, 0x64, 0x9C, 0x02, 0x03, 0x04, 0x06, 0x07};
  CHECK(std::equal(row0.begin(), row0.end(), q.values().begin()));
  for (std::size_t k = 0; k < 16; ++k) {
    CHECK(q.values()[16 + k] == static_cast<std::uint8_t>(-row0[k]));  // row 1 at byte 16 holds -q
  }
  REQUIRE(q.scale_bits().size() == 2);
  CHECK(q.scale_bits()[0] == 0x3400);  // 0.25 in fp16
  CHECK(q.scale_bits()[1] == 0x4400);  // 4.0 in fp16
  CHECK(q.layout().group() == 16);
  CHECK(q.layout().groups_per_row() == 1);
}

TEST_CASE("the clipping search is never worse than round to nearest, and better where a group has an outlier") {
  constexpr int rows = 8;
  constexpr int cols = 256;
  for (const QuantizedFormat& format : all_formats()) {
    CAPTURE(format_name(format));
    std::vector<float> w = random_weights(std::size_t{rows} * cols, 1.0F);
    for (std::size_t i = 0; i < w.size(); i += 37) w[i] *= 6.0F;  // an outlier in most groups
    const QuantizedWeight plain = quantize(format, "w", rows, cols, w);
    const QuantizedWeight clipped = quantize(format, "w", rows, cols, w, {.clip_search = true});
    const std::vector<double> plain_errors = group_errors(plain, w);
    const std::vector<double> clipped_errors = group_errors(clipped, w);
    std::size_t worse = 0;
    std::size_t better = 0;
    for (std::size_t g = 0; g < plain_errors.size(); ++g) {
      worse += clipped_errors[g] > plain_errors[g] ? 1 : 0;
      better += clipped_errors[g] < plain_errors[g] ? 1 : 0;
    }
    CHECK(worse == 0);
    // int4's few levels gain from clipping; int8's 255 rarely do (the clipped outlier costs more than finer steps win).
    if (format.kind == WeightFormat::int4_group) CHECK(better > 0);
    // Saturated values stay in range.
    const auto [q_min, q_max] = clipped.layout().q_range();
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c) {
        CHECK(clipped.value(r, c) >= q_min);
        CHECK(clipped.value(r, c) <= q_max);
      }
    }
  }
}

TEST_CASE("an all-zero group gets scale 0 and dequantizes to exact zeros, beside groups that are not") {
  for (const QuantizedFormat& format : all_formats()) {
    CAPTURE(format_name(format));
    constexpr int rows = 2;
    constexpr int cols = 256;
    std::vector<float> w = random_weights(std::size_t{rows} * cols, 1.0F);
    const auto zeros = static_cast<std::size_t>(format.kind == WeightFormat::int8_channel ? cols : format.group);
    std::fill_n(w.begin() + cols, zeros, 0.0F);  // row 1's first group (int8: row 1)
    w[cols + 1] = -0.0F;
    for (const bool clip : {false, true}) {
      const QuantizedWeight q = quantize(format, "w", rows, cols, w, {.clip_search = clip});
      const std::vector<float> d = q.dequantize();
      for (std::size_t k = 0; k < zeros; ++k) CHECK(d[static_cast<std::size_t>(cols) + k] == 0.0F);
      CHECK(q.scale(1, 0) == 0.0F);
      CHECK(q.scale(0, 0) > 0.0F);
      CHECK(d[0] == q.dequantized(0, 0));
    }
  }
}

TEST_CASE("weights far below the scale type's smallest step quantize to zero within half a step") {
  const std::vector<float> w(128, 1e-9F);  // fp16's smallest positive value is 2^-24, about 6e-8
  const QuantizedWeight q = quantize({WeightFormat::int4_group, 64, false, ScaleType::f16}, "tiny", 1, 128, w);
  CHECK(q.scale(0, 0) == 0x1p-24F);
  CHECK(q.value(0, 0) == 0);
  CHECK(std::abs(w[0] - q.dequantized(0, 0)) <= q.scale(0, 0) / 2);
}

TEST_CASE("bytes() counts values, scales and zero points") {
  const QuantizedLayout int4({"a"}, {WeightFormat::int4_group, 128, false, ScaleType::f16}, 4096, 4096);
  CHECK(int4.value_bytes() == 4096U * 2048U);
  CHECK(int4.scale_bytes() == 4096U * 32U * 2U);
  CHECK(int4.zero_bytes() == 0U);
  CHECK(int4.bytes() == 8650752U);
  const QuantizedLayout int4_asym({"a"}, {WeightFormat::int4_group, 128, true, ScaleType::bf16}, 4096, 4096);
  CHECK(int4_asym.bytes() == 8650752U + 4096U * 32U);
  const QuantizedLayout int8({"a"}, {WeightFormat::int8_channel, 0, false, ScaleType::f16}, 4096, 4096);
  CHECK(int8.bytes() == 4096U * 4096U + 4096U * 2U);

  const std::vector<float> w = random_weights(8 * 256, 1.0F);
  const QuantizedWeight q = quantize({WeightFormat::int4_group, 64, true, ScaleType::f16}, "w", 8, 256, w);
  CHECK(q.bytes() == 1024U + 64U + 32U);
  CHECK(q.values().size() + 2 * q.scale_bits().size() + q.zeros().size() == q.bytes());
}

TEST_CASE("bad shapes and formats are refused, naming the tensor") {
  const auto refused = [](QuantizedFormat format, int rows, int cols, const char* expected) {
    CAPTURE(format_name(format));
    CAPTURE(expected);
    CHECK_THROWS_WITH_AS(QuantizedLayout("model.layers.3.mlp.up_proj.weight", format, rows, cols),
                         doctest::Contains("tensor model.layers.3.mlp.up_proj.weight: "), UsageError);
    CHECK_THROWS_WITH_AS(QuantizedLayout("model.layers.3.mlp.up_proj.weight", format, rows, cols),
                         doctest::Contains(expected), UsageError);
    const std::vector<float> w(
        static_cast<std::size_t>(std::max(rows, 0)) * static_cast<std::size_t>(std::max(cols, 0)), 0.5F);
    CHECK_THROWS_WITH_AS((void)quantize(format, "lm_head.weight", rows, cols, w), doctest::Contains("lm_head.weight"),
                         UsageError);
  };
  const QuantizedFormat g128{WeightFormat::int4_group, 128, false, ScaleType::f16};
  const QuantizedFormat int8{WeightFormat::int8_channel, 0, false, ScaleType::f16};
  refused(g128, 0, 128, "0 x 128");
  refused(g128, 4, 0, "4 x 0");
  refused(g128, -1, 128, "-1 x 128");
  refused({WeightFormat::int4_group, 48, false, ScaleType::f16}, 4, 96, "group size 48 is not 32, 64 or 128");
  refused({WeightFormat::int4_group, 16, true, ScaleType::f16}, 4, 96, "group size 16 is not 32, 64 or 128");
  refused({WeightFormat::int4_group, 256, false, ScaleType::f16}, 4, 256, "group size 256 is not 32, 64 or 128");
  refused(g128, 4, 192, "group size 128 does not divide the input dimension (192)");
  refused({WeightFormat::int4_group, 32, false, ScaleType::f16}, 4, 48, "does not divide the input dimension (48)");
  refused({WeightFormat::int4_group, 32, false, ScaleType::f16}, 4, 96, "a multiple of 128");
  refused(int8, 4, 24, "multiple of 16");
  refused({WeightFormat::int8_channel, 0, true, ScaleType::f16}, 4, 32, "int8 is symmetric only");
  refused({WeightFormat::dense, 0, false, ScaleType::f16}, 4, 32, "not a quantized format");
  // The sizes that pass.
  CHECK_NOTHROW(QuantizedLayout("w", int8, 1, 16));
  CHECK_NOTHROW(QuantizedLayout("w", {WeightFormat::int4_group, 32, false, ScaleType::f16}, 1, 128));
}

TEST_CASE("bad weights are refused, naming the tensor and the element") {
  const QuantizedFormat format{WeightFormat::int4_group, 32, false, ScaleType::f16};
  std::vector<float> w = random_weights(4 * 128, 1.0F);
  CHECK_THROWS_WITH_AS((void)quantize(format, "q_proj", 4, 128, std::span<const float>(w).first(511)),
                       doctest::Contains("tensor q_proj: 511 weights given for a 4 x 128 matrix (512)"), UsageError);
  w[2 * 128 + 5] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH_AS((void)quantize(format, "q_proj", 4, 128, w),
                       doctest::Contains("tensor q_proj: weight at row 2, column 5 is"), UsageError);
  w[2 * 128 + 5] = 0.5F;
  w[3 * 128 + 127] = -std::numeric_limits<float>::infinity();
  CHECK_THROWS_WITH_AS((void)quantize(format, "q_proj", 4, 128, w),
                       doctest::Contains("tensor q_proj: weight at row 3, column 127 is -inf, not finite"), UsageError);
  // A group beyond fp16 scales' range: refused with fp16 scales, quantized with bf16 ones.
  w[3 * 128 + 127] = 0.5F;
  w[1 * 128 + 40] = 1e6F;
  CHECK_THROWS_WITH_AS((void)quantize(format, "q_proj", 4, 128, w),
                       doctest::Contains("tensor q_proj: row 1, group 1 needs a scale beyond the range of fp16"),
                       UsageError);
  const QuantizedWeight q = quantize({WeightFormat::int4_group, 32, false, ScaleType::bf16}, "q_proj", 4, 128, w);
  CHECK(q.value(1, 40) == 7);
}

TEST_CASE("a quantized weight from parts is checked against its layout, naming the tensor") {
  const QuantizedLayout asym("k_proj", {WeightFormat::int4_group, 32, true, ScaleType::f16}, 2, 128);
  const std::vector<std::uint16_t> scales(8, 0x3C00);
  CHECK_NOTHROW(QuantizedWeight(asym, std::vector<std::uint8_t>(128), scales, std::vector<std::uint8_t>(8, 15)));
  CHECK_THROWS_WITH_AS(QuantizedWeight(asym, std::vector<std::uint8_t>(127), scales, std::vector<std::uint8_t>(8)),
                       doctest::Contains("tensor k_proj: value bytes: 127 given, the layout has 128"), UsageError);
  CHECK_THROWS_WITH_AS(QuantizedWeight(asym, std::vector<std::uint8_t>(128), scales, std::vector<std::uint8_t>(2)),
                       doctest::Contains("tensor k_proj: zero points: 2 given"), UsageError);
  CHECK_THROWS_WITH_AS(QuantizedWeight(asym, std::vector<std::uint8_t>(128), std::vector<std::uint16_t>(7, 0x3C00),
                                       std::vector<std::uint8_t>(8)),
                       doctest::Contains("tensor k_proj: scales: 7 given"), UsageError);
  CHECK_THROWS_WITH_AS(QuantizedWeight(asym, std::vector<std::uint8_t>(128), scales, std::vector<std::uint8_t>(8, 16)),
                       doctest::Contains("tensor k_proj: zero point 0 (16) is above 15"), UsageError);
  CHECK_THROWS_WITH_AS(QuantizedWeight(asym, std::vector<std::uint8_t>(128), std::vector<std::uint16_t>(8, 0x7C00),
                                       std::vector<std::uint8_t>(8)),
                       doctest::Contains("tensor k_proj: scale 0"), UsageError);
  const QuantizedLayout int8("o_proj", {WeightFormat::int8_channel, 0, false, ScaleType::bf16}, 1, 16);
  std::vector<std::uint8_t> values(16);
  values[9] = 0x80;
  CHECK_THROWS_WITH_AS(QuantizedWeight(int8, values, {0x3F80}, {}),
                       doctest::Contains("tensor o_proj: int8 value at byte 9 is -128"), UsageError);
  values[9] = 0x81;
  const QuantizedWeight q(int8, values, {0x3F80}, {});
  CHECK(q.value(0, 9) == -127);
  CHECK(q.dequantized(0, 9) == -127.0F);
  CHECK_THROWS_WITH_AS((void)q.value(1, 0), doctest::Contains("tensor o_proj: element (1, 0) is outside the 1 x 16"),
                       UsageError);
  CHECK_THROWS_AS((void)q.scale(0, 16), UsageError);
}

TEST_CASE("format_name says what a format is, for messages") {
  CHECK(format_name({WeightFormat::int4_group, 128, true, ScaleType::bf16}) == "int4 g128 asymmetric, bf16 scales");
  CHECK(format_name({WeightFormat::int4_group, 32, false, ScaleType::f16}) == "int4 g32, fp16 scales");
  CHECK(format_name({WeightFormat::int8_channel, 0, false, ScaleType::f16}) == "int8 per channel, fp16 scales");
}
