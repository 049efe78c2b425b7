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
#include "common/quantized_formats.hpp"

using namespace lazygraph;
using namespace lazygraph::nn;

namespace {

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
  for (const QuantizedFormat& format : lgtest::every_quantized_format()) {
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
  for (const QuantizedFormat& format : lgtest::every_quantized_format()) {
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

TEST_CASE("int4 symmetric: two's-complement nibbles in tiles of 16 rows, each lane's rows g and g + 8 together") {
  // 18 rows (a second tile of 2 real rows and 14 padding rows) of 128 columns; row r's q values are an irregular
  // pattern in [-7, 7] with 7 in every group of 32, so every scale is exactly r + 1.
  constexpr int rows = 18;
  constexpr int cols = 128;
  const auto q_at = [](int r, int k) { return k % 32 == 0 ? 7 : (k * 37 + r * 11 + 5) % 15 - 7; };
  std::vector<float> w;
  for (int r = 0; r < rows; ++r) {
    for (int k = 0; k < cols; ++k) w.push_back(static_cast<float>(q_at(r, k) * (r + 1)));
  }
  const QuantizedWeight q = quantize({WeightFormat::int4_group, 32, false, ScaleType::f16}, "w", rows, cols, w);
  REQUIRE(q.layout().tiles() == 2);
  REQUIRE(q.values().size() == 2U * 16U * 64U);
  // The rule, spelled out independently of value_position: tile i at 16 R i (R = 64), step s (64 columns) at 512 s,
  // lane 4g + t at 16 (4g + t); word j = 2 (c / 32) + c % 8 / 4 of column c in the step; nibble 4 (c % 2) +
  // 2 (c % 4 / 2) + h for row g + 8h.
  std::vector<bool> seen(q.values().size() * 2);
  for (int r = 0; r < rows; ++r) {
    for (int k = 0; k < cols; ++k) {
      CAPTURE(r);
      CAPTURE(k);
      const int g = r % 8;
      const int h = r % 16 / 8;
      const int c = k % 64;
      const int lane = 4 * g + c % 32 / 8;
      const int j = 2 * (c / 32) + c % 8 / 4;
      const int n = 4 * (c % 2) + 2 * (c % 4 / 2) + h;
      const std::size_t word_index = (1024 * static_cast<std::size_t>(r / 16) + 512 * static_cast<std::size_t>(k / 64) +
                                      16 * static_cast<std::size_t>(lane)) /
                                         4 +
                                     static_cast<std::size_t>(j);
      const std::uint32_t nibble = (word(q.values(), word_index) >> (4 * n)) & 0xFU;
      CHECK(nibble == (static_cast<std::uint32_t>(q_at(r, k)) & 0xFU));
      CHECK(q.value(r, k) == q_at(r, k));
      CHECK(q.dequantized(r, k) == static_cast<float>(q_at(r, k) * (r + 1)));
      CHECK_FALSE(seen[8 * word_index + static_cast<std::size_t>(n)]);  // no two elements share a nibble
      seen[8 * word_index + static_cast<std::size_t>(n)] = true;
    }
  }
  // One word spelled out: lane 0's word 0 holds rows 0 and 8, columns 0..3; bits 0..3 and 16..19 row 0's columns
  // 0 and 1, bits 8..11 and 24..27 its columns 2 and 3, the nibbles between them row 8's.
  std::uint32_t expected = 0;
  for (int c = 0; c < 4; ++c) {
    for (int h = 0; h < 2; ++h) {
      expected |= (static_cast<std::uint32_t>(q_at(8 * h, c)) & 0xFU) << (4 * (4 * (c % 2) + 2 * (c / 2) + h));
    }
  }
  CHECK(word(q.values(), 0) == expected);
  // Padding rows are zeros, with scale 0.
  for (int r = rows; r < 32; ++r) {
    for (int k = 0; k < cols; ++k) {
      const QuantizedLayout::ValuePosition at = q.layout().value_position(r, k);
      CHECK(((at.high_nibble ? q.values()[at.byte] >> 4U : q.values()[at.byte]) & 0xFU) == 0);
    }
  }
  // Scales: ((tile * G + group) * 8 + g) * 2 + h, G = 4.
  REQUIRE(q.scale_bits().size() == 2U * 16U * 4U);
  CHECK(q.scale_bits()[0] == 0x3C00);       // row 0, group 0: 1.0
  CHECK(q.scale_bits()[1] == 0x4880);       // row 8, group 0: 9.0
  CHECK(q.scale_bits()[2] == 0x4000);       // row 1, group 0: 2.0
  CHECK(q.scale_bits()[16 + 2] == 0x4000);  // row 1, group 1
  CHECK(q.scale_bits()[64 + 2] == 0x4C80);  // row 17 (tile 1, g 1), group 0: 18.0
  CHECK(q.scale_bits()[64 + 1] == 0);       // row 24: padding
  CHECK(q.zeros().empty());
}

TEST_CASE("int4 asymmetric: q in [0, 15] with a zero point byte per group") {
  // w = (q - 3) * 0.5 for q = 0..15, repeated: every group spans [-1.5, 6], scale 0.5, zero point 3.
  std::vector<float> w;
  for (int i = 0; i < 128; ++i) w.push_back(static_cast<float>((i % 16) - 3) * 0.5F);
  const QuantizedWeight q = quantize({WeightFormat::int4_group, 32, true, ScaleType::bf16}, "w", 1, 128, w);
  REQUIRE(q.values().size() == 16U * 64U);
  // Lane 0's word 0: row 0's columns 0..3 (q 0..3) at nibbles 0, 4, 2, 6; row 8 is padding.
  CHECK(word(q.values(), 0) == 0x03010200U);
  // Its word 1: columns 4..7 (q 4..7).
  CHECK(word(q.values(), 1) == 0x07050604U);
  // Lane 1's word 0: columns 8..11 (q 8..11).
  CHECK(word(q.values(), 4) == 0x0B090A08U);
  REQUIRE(q.scale_bits().size() == 16U * 4U);
  CHECK(q.scale_bits()[0] == 0x3F00);   // 0.5 in bf16
  CHECK(q.scale_bits()[16] == 0x3F00);  // group 1
  REQUIRE(q.zeros().size() == 16U * 4U);
  CHECK(q.zeros()[0] == 3);
  CHECK(q.zeros()[1] == 0);  // padding row 8
  for (int k = 0; k < 128; ++k) CHECK(q.dequantized(0, k) == w[static_cast<std::size_t>(k)]);
}

TEST_CASE("int8: one offset-binary byte per element, q in [-127, 127], one scale per row") {
  const std::vector<int> q0 = {127, -127, 1, -1, 0, 64, -64, 5, -5, 100, -100, 2, 3, 4, 6, 7};
  constexpr int cols = 32;
  std::vector<float> w;
  for (int k = 0; k < cols; ++k) w.push_back(static_cast<float>(q0[k % 16]) * 0.25F);
  for (int r = 1; r < 9; ++r) {
    for (int k = 0; k < cols; ++k) w.push_back(static_cast<float>(-q0[k % 16] * r) * 0.5F);
  }
  const QuantizedWeight q = quantize({WeightFormat::int8_channel, 0, false, ScaleType::f16}, "w", 9, cols, w);
  REQUIRE(q.values().size() == 16U * 32U);
  // Lane 4g + t's 16 bytes: words 2j + h hold row g + 8h, columns 8t + 4j .. + 3.
  for (int k = 0; k < cols; ++k) {
    CAPTURE(k);
    const std::size_t lane_start = 16 * static_cast<std::size_t>(k / 8);  // row 0: g = 0, t = k / 8
    const std::size_t j = static_cast<std::size_t>(k % 8 / 4);
    CHECK(q.values()[lane_start + 4 * 2 * j + static_cast<std::size_t>(k % 4)] == q0[k % 16] + 128);
    CHECK(q.value(0, k) == q0[k % 16]);
    // Row 8 (g 0, h 1): -q * 8 * 0.5 = -q * 4 with scale 4, in words 2j + 1.
    CHECK(q.values()[lane_start + 4 * (2 * j + 1) + static_cast<std::size_t>(k % 4)] == 128 - q0[k % 16]);
    CHECK(q.dequantized(8, k) == static_cast<float>(-q0[k % 16] * 4));
  }
  const std::vector<std::uint8_t> lane0 = {255, 1, 129, 127, 1, 255, 127, 129, 128, 192, 64, 133, 128, 64, 192, 123};
  CHECK(std::equal(lane0.begin(), lane0.end(), q.values().begin()));
  CHECK(q.values()[q.layout().value_position(15, 31).byte] == 128);  // padding: q 0
  REQUIRE(q.scale_bits().size() == 16U);
  CHECK(q.scale_bits()[0] == 0x3400);  // row 0: 0.25 in fp16
  CHECK(q.scale_bits()[1] == 0x4400);  // row 8: 4.0
  CHECK(q.scale_bits()[2] == 0x3800);  // row 1: 0.5
  CHECK(q.scale_bits()[3] == 0);       // row 9: padding
  CHECK(q.layout().group() == cols);
  CHECK(q.layout().groups_per_row() == 1);
}

TEST_CASE("the clipping search is never worse than round to nearest, and better where a group has an outlier") {
  constexpr int rows = 8;
  constexpr int cols = 256;
  for (const QuantizedFormat& format : lgtest::every_quantized_format()) {
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
  for (const QuantizedFormat& format : lgtest::every_quantized_format()) {
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
  CHECK(q.bytes() == 2048U + 128U + 64U);  // 8 rows padded to a tile of 16
  CHECK(q.values().size() + 2 * q.scale_bits().size() + q.zeros().size() == q.bytes());
}

TEST_CASE("a large matrix, quantized by several threads, has the bytes of its halves quantized apart") {
  // 2048 x 1024 (2M weights: shared out among threads where the machine has them); its tiles are contiguous, so the
  // whole is the two halves' bytes one after the other.
  constexpr int rows = 2048;
  constexpr int cols = 1024;
  const std::vector<float> w = random_weights(std::size_t(rows) * cols, 0.1F);
  const std::span<const float> all(w);
  const std::size_t half_weights = std::size_t(rows / 2) * cols;
  for (const QuantizedFormat& format : {QuantizedFormat{WeightFormat::int4_group, 64, true, ScaleType::f16},
                                        QuantizedFormat{WeightFormat::int8_channel, 0, false, ScaleType::bf16}}) {
    CAPTURE(format_name(format));
    const QuantizedWeight whole = quantize(format, "w", rows, cols, all, {.clip_search = true});
    const QuantizedWeight top = quantize(format, "w", rows / 2, cols, all.first(half_weights), {.clip_search = true});
    const QuantizedWeight bottom =
        quantize(format, "w", rows / 2, cols, all.subspan(half_weights), {.clip_search = true});
    const auto joined = [](auto a, auto b) {
      std::vector<std::remove_cvref_t<decltype(a[0])>> out(a.begin(), a.end());
      out.insert(out.end(), b.begin(), b.end());
      return out;
    };
    CHECK(std::ranges::equal(whole.values(), joined(top.values(), bottom.values())));
    CHECK(std::ranges::equal(whole.scale_bits(), joined(top.scale_bits(), bottom.scale_bits())));
    CHECK(std::ranges::equal(whole.zeros(), joined(top.zeros(), bottom.zeros())));
  }
  // The first overflowing group in the matrix is the one named, whichever thread found one first.
  std::vector<float> large = w;
  large[std::size_t(1500) * cols + 3] = 1.0e6F;
  large[std::size_t(5) * cols + 700] = 1.0e6F;
  CHECK_THROWS_WITH_AS((void)quantize({WeightFormat::int4_group, 128, false, ScaleType::f16}, "w", rows, cols, large),
                       "tensor w: row 5, group 5 needs a scale beyond the range of fp16 (use bf16 scales)", UsageError);
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
  refused({WeightFormat::int4_group, 32, false, ScaleType::f16}, 4, 96, "a multiple of 64");
  refused(int8, 4, 48, "multiple of 32");
  refused({WeightFormat::int8_channel, 0, true, ScaleType::f16}, 4, 32, "int8 is symmetric only");
  refused({WeightFormat::dense, 0, false, ScaleType::f16}, 4, 32, "not a quantized format");
  // The sizes that pass.
  CHECK_NOTHROW(QuantizedLayout("w", int8, 1, 32));
  CHECK_NOTHROW(QuantizedLayout("w", {WeightFormat::int4_group, 32, false, ScaleType::f16}, 1, 64));
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
  // 2 rows in one tile of 16: 16 * 64 value bytes, 16 * 4 scales and zero points, the padding rows' scales 0.
  std::vector<std::uint16_t> scales(64, 0);
  for (const int row : {0, 1}) {
    for (int k = 0; k < 4; ++k) scales[asym.scale_index(row, 32 * k)] = 0x3C00;
  }
  CHECK_NOTHROW(QuantizedWeight(asym, std::vector<std::uint8_t>(1024), scales, std::vector<std::uint8_t>(64, 15)));
  CHECK_THROWS_WITH_AS(QuantizedWeight(asym, std::vector<std::uint8_t>(1023), scales, std::vector<std::uint8_t>(64)),
                       doctest::Contains("tensor k_proj: value bytes: 1023 given, the layout has 1024"), UsageError);
  CHECK_THROWS_WITH_AS(QuantizedWeight(asym, std::vector<std::uint8_t>(1024), scales, std::vector<std::uint8_t>(8)),
                       doctest::Contains("tensor k_proj: zero points: 8 given"), UsageError);
  CHECK_THROWS_WITH_AS(QuantizedWeight(asym, std::vector<std::uint8_t>(1024), std::vector<std::uint16_t>(8, 0x3C00),
                                       std::vector<std::uint8_t>(64)),
                       doctest::Contains("tensor k_proj: scales: 8 given, the layout has 64"), UsageError);
  CHECK_THROWS_WITH_AS(
      QuantizedWeight(asym, std::vector<std::uint8_t>(1024), scales, std::vector<std::uint8_t>(64, 16)),
      doctest::Contains("tensor k_proj: zero point 0 (16) is above 15"), UsageError);
  std::vector<std::uint16_t> infinite = scales;
  infinite[asym.scale_index(1, 64)] = 0x7C00;
  const std::string not_finite = "tensor k_proj: scale " + std::to_string(asym.scale_index(1, 64)) + " (inf)";
  CHECK_THROWS_WITH_AS(QuantizedWeight(asym, std::vector<std::uint8_t>(1024), infinite, std::vector<std::uint8_t>(64)),
                       doctest::Contains(not_finite.c_str()), UsageError);
  std::vector<std::uint16_t> padded = scales;
  padded[asym.scale_index(9, 0)] = 0x3C00;
  const std::string padding =
      "tensor k_proj: scale " + std::to_string(asym.scale_index(9, 0)) + " belongs to padding row 9";
  CHECK_THROWS_WITH_AS(QuantizedWeight(asym, std::vector<std::uint8_t>(1024), padded, std::vector<std::uint8_t>(64)),
                       doctest::Contains(padding.c_str()), UsageError);

  const QuantizedLayout int8("o_proj", {WeightFormat::int8_channel, 0, false, ScaleType::bf16}, 1, 32);
  std::vector<std::uint8_t> values(512, 128);
  std::vector<std::uint16_t> int8_scales(16, 0);
  int8_scales[0] = 0x3F80;
  const std::size_t at = int8.value_position(0, 9).byte;
  values[at] = 0;
  const std::string minus_128 = "tensor o_proj: int8 value at byte " + std::to_string(at) + " is 0";
  CHECK_THROWS_WITH_AS(QuantizedWeight(int8, values, int8_scales, {}), doctest::Contains(minus_128.c_str()),
                       UsageError);
  values[at] = 1;
  const QuantizedWeight q(int8, values, int8_scales, {});
  CHECK(q.value(0, 9) == -127);
  CHECK(q.dequantized(0, 9) == -127.0F);
  CHECK_THROWS_WITH_AS((void)q.value(1, 0), doctest::Contains("tensor o_proj: element (1, 0) is outside the 1 x 32"),
                       UsageError);
  CHECK_THROWS_AS((void)q.scale(0, 32), UsageError);
}

TEST_CASE(
    "a matrix stored with its columns in another order dequantizes in x's order, and only int4 with zeros takes one") {
  const QuantizedFormat format{WeightFormat::int4_group, 32, true, ScaleType::f16};
  std::vector<float> w(2 * 64);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((static_cast<int>(i) * 7) % 13 - 6) / 8.0F;
  const QuantizedWeight plain = quantize(format, "down_proj", 2, 64, w);
  std::vector<std::int32_t> order(64);
  for (int j = 0; j < 64; ++j) order[static_cast<std::size_t>(j)] = (j * 5 + 3) % 64;  // 5 is prime to 64
  const auto parts = [&](const QuantizedWeight& q, std::vector<std::int32_t> o) {
    return QuantizedWeight(q.layout(), {q.values().begin(), q.values().end()},
                           {q.scale_bits().begin(), q.scale_bits().end()}, {q.zeros().begin(), q.zeros().end()},
                           std::move(o));
  };
  const QuantizedWeight ordered = parts(plain, order);
  CHECK(std::equal(ordered.input_order().begin(), ordered.input_order().end(), order.begin(), order.end()));
  CHECK(ordered.bytes() == plain.bytes() + 4 * 64);
  const std::vector<float> stored = plain.dequantize();  // the stored columns, in their own order
  const std::vector<float> dense = ordered.dequantize();
  std::size_t differ = 0;
  for (int r = 0; r < 2; ++r) {
    for (int j = 0; j < 64; ++j) {
      differ += dense[static_cast<std::size_t>(r * 64 + order[static_cast<std::size_t>(j)])] ==
                        stored[static_cast<std::size_t>(r * 64 + j)]
                    ? 0
                    : 1;
      differ += ordered.dequantized(r, j) == plain.dequantized(r, j) ? 0 : 1;  // elements are the stored columns
    }
  }
  CHECK(differ == 0);
  CHECK(parts(plain, {}).input_order().empty());
  std::vector<std::int32_t> twice = order;
  twice[5] = twice[4];
  CHECK_THROWS_WITH_AS(parts(plain, twice),
                       doctest::Contains("tensor down_proj: input order's column 5 names input 23, which an earlier "
                                         "column names too: it must be a permutation of the inputs"),
                       UsageError);
  twice[5] = 64;
  CHECK_THROWS_WITH_AS(parts(plain, twice), doctest::Contains("names input 64, outside the matrix"), UsageError);
  CHECK_THROWS_WITH_AS(parts(plain, std::vector<std::int32_t>(order.begin(), order.begin() + 32)),
                       doctest::Contains("input order of 32 columns, the layout has 64"), UsageError);
  const QuantizedWeight int8 = quantize({WeightFormat::int8_channel, 0, false, ScaleType::f16}, "o_proj", 2, 64, w);
  CHECK_THROWS_WITH_AS(QuantizedWeight(int8.layout(), {int8.values().begin(), int8.values().end()},
                                       {int8.scale_bits().begin(), int8.scale_bits().end()}, {}, order),
                       doctest::Contains("tensor o_proj: an input order is read by the kernels of int4 with zero "
                                         "points only"),
                       UsageError);
}

TEST_CASE("format_name says what a format is, for messages") {
  CHECK(format_name({WeightFormat::int4_group, 128, true, ScaleType::bf16}) == "int4 g128 asymmetric, bf16 scales");
  CHECK(format_name({WeightFormat::int4_group, 32, false, ScaleType::f16}) == "int4 g32, fp16 scales");
  CHECK(format_name({WeightFormat::int8_channel, 0, false, ScaleType::f16}) == "int8 per channel, fp16 scales");
}

namespace {

/// The fp16 or bf16 value nearest to x, as a scale of `type` is stored.
double scale_rounded(double x, ScaleType type) {
  const auto f = static_cast<float>(x);
  return type == ScaleType::f16 ? half::from_float(f).to_float() : bfloat16::from_float(f).to_float();
}

}  // namespace

TEST_CASE("fp8 rounds w / scale to the nearest e4m3 value, ties to even, subnormals included") {
  // One 128 x 128 block whose largest magnitude is 448: its scale is 1 (stored times 2^8, 256), exactly, so each
  // weight becomes the e4m3 value nearest to itself.
  constexpr int n = 128;
  std::vector<float> w(std::size_t{n} * n, 0.0F);
  const std::vector<std::pair<float, double>> cases = {
      {448.0F, 448.0},           // the largest finite e4m3 value
      {1.0625F, 1.0},            // a tie between 1 (mantissa 0) and 1.125 (1): the even one
      {1.1875F, 1.25},           // a tie between 1.125 (1) and 1.25 (2)
      {-1.0625F, -1.0},          // the same below zero
      {0x1p-10F, 0.0},           // half the smallest subnormal 2^-9: a tie with 0
      {3 * 0x1p-10F, 0x1p-8},    // 1.5 * 2^-9, a tie between subnormals 1 and 2 (of 2^-9)
      {15 * 0x1p-10F, 0x1p-6},   // 7.5 * 2^-9, a tie between the last subnormal and the first normal
      {0.8F * 0x1p-9F, 0x1p-9},  // nearer the smallest subnormal than 0
      {440.0F, 448.0},           // steps of 32 from 256 to 448
      {432.0F, 448.0},           // a tie between 416 (mantissa 5) and 448 (6)
      {400.0F, 384.0},           // a tie between 384 (4) and 416 (5)
      {-0.0F, 0.0},              // stored as +0
  };
  for (std::size_t i = 0; i < cases.size(); ++i) w[i * 3] = cases[i].first;  // row 0, spread out
  const QuantizedWeight q = quantize(lgtest::fp8(), "w", n, n, w);
  CHECK(q.scale(0, 0) == 256.0F);
  CHECK(q.scale(127, 127) == 256.0F);  // every row of the block
  for (std::size_t i = 0; i < cases.size(); ++i) {
    CAPTURE(cases[i].first);
    const int col = static_cast<int>(i * 3);
    CHECK(static_cast<double>(q.dequantized(0, col)) == cases[i].second);
    CHECK(q.value(0, col) == static_cast<int>(cases[i].second * 512));  // q is 512 times the e4m3 value
  }
  CHECK(q.values()[q.layout().value_position(0, 33).byte] == 0);  // -0.0 (case 11, column 33) is byte 0
  CHECK(q.dequantized(5, 7) == 0.0F);
}

TEST_CASE(
    "fp8's largest magnitude stays at 448 where its scale rounded down, and a subnormal scale too small is raised") {
  // bf16: 448.875 / 448 = 1.002 rounds to a scale of 1 (256 stored): 448.875 and -448.875 saturate to +-448.
  std::vector<float> w(16 * 128, 0.25F);
  w[0] = 448.875F;
  w[1] = -448.875F;
  const QuantizedWeight b = quantize(lgtest::fp8(ScaleType::bf16), "w", 16, 128, w);
  CHECK(b.scale(0, 0) == 256.0F);
  CHECK(b.dequantized(0, 0) == 448.0F);
  CHECK(b.dequantized(0, 1) == -448.0F);
  CHECK(b.dequantized(3, 9) == 0.25F);
  // fp16: a block whose scale (stored times 2^8) is 1.4 * 2^-24 rounds to fp16's smallest subnormal, 2^-24, too
  // small: the largest weight would be 1.4 * 448. The next scale, 2^-23, is taken: 0.7 * 448 = 313.6 -> 320.
  const float largest = static_cast<float>(1.4 * 1.75 * 0x1p-24);
  std::vector<float> tiny(16 * 128, 0.0F);
  tiny[5] = largest;
  const QuantizedWeight t = quantize(lgtest::fp8(), "tiny", 16, 128, tiny);
  CHECK(t.scale(0, 0) == 0x1p-23F);
  CHECK(static_cast<double>(t.dequantized(0, 5)) == 320.0 * 0x1p-31);
}

TEST_CASE("fp8 takes one scale per block of 128 x 128, each weight the e4m3 value nearest to w / scale") {
  // 200 x 256: blocks of rows 0-127 and 128-199; block (1, 0) ten times larger, block (0, 1) all zero.
  constexpr int rows = 200;
  constexpr int cols = 256;
  std::vector<float> w = random_weights(std::size_t{rows} * cols, 0.05F);
  for (int r = 128; r < rows; ++r) {
    for (int c = 0; c < 128; ++c) w[static_cast<std::size_t>(r * cols + c)] *= 10.0F;
  }
  for (int r = 0; r < 128; ++r) {
    for (int c = 128; c < 256; ++c) w[static_cast<std::size_t>(r * cols + c)] = r % 3 == 0 ? -0.0F : 0.0F;
  }
  for (const ScaleType type : {ScaleType::f16, ScaleType::bf16}) {
    CAPTURE(type == ScaleType::f16 ? "fp16" : "bf16");
    const QuantizedWeight q = quantize(lgtest::fp8(type), "w", rows, cols, w);
    for (int br = 0; br < 2; ++br) {
      for (int bc = 0; bc < 2; ++bc) {
        CAPTURE(br);
        CAPTURE(bc);
        double amax = 0;
        for (int r = 128 * br; r < std::min(rows, 128 * (br + 1)); ++r) {
          for (int c = 128 * bc; c < 128 * (bc + 1); ++c) {
            amax = std::max(amax, std::abs(static_cast<double>(w[static_cast<std::size_t>(r * cols + c)])));
          }
        }
        const double stored = scale_rounded(amax / 448 * 256, type);  // the scale times 2^8, as packed_fp8 stores it
        CHECK((amax == 0) == (bc == 1 && br == 0));
        for (int r = 128 * br; r < std::min(rows, 128 * (br + 1)); ++r) {
          for (int c = 128 * bc; c < 128 * (bc + 1); ++c) {
            REQUIRE(static_cast<double>(q.scale(r, c)) == stored);
            const double x = w[static_cast<std::size_t>(r * cols + c)];
            const double want =
                stored == 0 ? 0.0 : lgtest::e4m3_value(lgtest::to_e4m3(x / (stored / 256))) * stored / 256;
            REQUIRE(static_cast<double>(q.dequantized(r, c)) == want);
            if (stored == 0) REQUIRE(q.values()[q.layout().value_position(r, c).byte] == 0);
          }
        }
      }
    }
    // the clipping search does not apply to fp8: the same bytes
    const QuantizedWeight clipped = quantize(lgtest::fp8(type), "w", rows, cols, w, {.clip_search = true});
    CHECK(std::ranges::equal(clipped.values(), q.values()));
    CHECK(std::ranges::equal(clipped.scale_bits(), q.scale_bits()));
  }
}

TEST_CASE("fp8 refuses weights that are not finite and blocks beyond its scale type, naming the element or block") {
  constexpr int n = 256;
  std::vector<float> w = random_weights(std::size_t{n} * n, 1.0F);
  w[130 * n + 200] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH_AS((void)quantize(lgtest::fp8(), "mlp.down", n, n, w),
                       doctest::Contains("tensor mlp.down: weight at row 130, column 200 is"), UsageError);
  // 2e5 needs a scale of 2e5 / 448 * 2^8, about 114000, beyond fp16's 65504: its block starts at row 128, group 1.
  w[130 * n + 200] = 0.5F;
  w[150 * n + 200] = 2.0e5F;
  CHECK_THROWS_WITH_AS((void)quantize(lgtest::fp8(), "mlp.down", n, n, w),
                       "tensor mlp.down: row 128, group 1 needs a scale beyond the range of fp16 (use bf16 scales)",
                       UsageError);
  const QuantizedWeight q = quantize(lgtest::fp8(ScaleType::bf16), "mlp.down", n, n, w);
  CHECK(std::abs(q.dequantized(150, 200) - 2.0e5F) <= 2.0e5F / 16);  // within e4m3's relative step
  CHECK(q.value(150, 200) == 229376);
}
