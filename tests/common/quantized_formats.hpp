#pragma once
// The weight-only quantized formats the tests go through (nn/quantized.hpp).

#include <lazygraph/driver/bfloat16.hpp>
#include <lazygraph/driver/half.hpp>
#include <lazygraph/nn/quantized.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace lgtest {

/// int8 with one scale per row (the group is not used: 0).
constexpr lazygraph::nn::QuantizedFormat int8(lazygraph::nn::ScaleType s = lazygraph::nn::ScaleType::f16) {
  return {lazygraph::nn::WeightFormat::int8_channel, 0, false, s};
}

/// int4 in groups of `group` along K, symmetric or with zero points.
constexpr lazygraph::nn::QuantizedFormat int4(int group, bool asymmetric = false,
                                              lazygraph::nn::ScaleType s = lazygraph::nn::ScaleType::f16) {
  return {lazygraph::nn::WeightFormat::int4_group, group, asymmetric, s};
}

/// Every format the quantizer offers: int8, and int4 in groups of 32, 64 and 128, symmetric and with zero points,
/// each with fp16 and with bf16 scales.
inline std::vector<lazygraph::nn::QuantizedFormat> every_quantized_format() {
  using lazygraph::nn::ScaleType;
  using lazygraph::nn::WeightFormat;
  std::vector<lazygraph::nn::QuantizedFormat> out;
  for (const ScaleType type : {ScaleType::f16, ScaleType::bf16}) {
    out.push_back({WeightFormat::int8_channel, 0, false, type});
    for (const int group : {32, 64, 128}) {
      for (const bool asymmetric : {false, true}) out.push_back({WeightFormat::int4_group, group, asymmetric, type});
    }
  }
  return out;
}

/// fp8 in groups of 128, the format FP8 checkpoints are read into and lazygraph quantizes into in blocks of 128 x 128.
constexpr lazygraph::nn::QuantizedFormat fp8(lazygraph::nn::ScaleType s = lazygraph::nn::ScaleType::f16) {
  return {lazygraph::nn::WeightFormat::fp8_block, 128, false, s};
}

/// The value of e4m3 byte `b` by the format's definition, in float64 (NaN for 0x7F and 0xFF).
inline double e4m3_value(unsigned b) {
  const unsigned e = b >> 3U & 0xFU;
  const unsigned m = b & 7U;
  if (e == 15 && m == 7) return std::nan("");
  const double magnitude =
      e == 0 ? m / 8.0 * std::ldexp(1.0, -6) : (1 + m / 8.0) * std::ldexp(1.0, static_cast<int>(e) - 7);
  return (b & 0x80U) != 0 ? -magnitude : magnitude;
}

/// Every e4m3 byte's value (e4m3_value), computed once.
inline const std::vector<double>& e4m3_values() {
  static const std::vector<double> values = [] {
    std::vector<double> v(256);
    for (unsigned b = 0; b < 256; ++b) v[b] = e4m3_value(b);
    return v;
  }();
  return values;
}

/// `x` rounded to the nearest e4m3 value (ties to the even byte), saturating at 448, by a search of the values (not
/// the library's bit arithmetic). The positive bytes 0..0x7E are in the order of their values.
inline std::uint8_t to_e4m3(double x) {
  const std::vector<double>& values = e4m3_values();
  const unsigned sign = std::signbit(x) ? 0x80U : 0U;
  const double a = std::min(std::abs(x), 448.0);
  const auto above = std::lower_bound(values.begin(), values.begin() + 0x7F, a);  // the first value >= a
  auto b = static_cast<unsigned>(above - values.begin());
  if (b > 0) {
    const double up = values[b] - a;
    const double down = a - values[b - 1];
    if (down < up || (down == up && (b - 1) % 2 == 0)) --b;
  }
  return static_cast<std::uint8_t>(sign | b);
}

/// A rows x cols matrix in `format` (fp8, as FP8 checkpoints store it) of random
/// e4m3 bytes, NaNs excepted (0x7F and 0xFF become 0x7E and 0xFE, +-448), over the whole range (subnormals and zeros
/// of both signs among them), and random scales of every group, stored times 2^8 as the format keeps them (0.0625 to
/// 0.25: a checkpoint scale of about 2^-12 to 2^-10).
inline lazygraph::nn::QuantizedWeight random_fp8(const lazygraph::nn::QuantizedFormat& format, const char* name,
                                                 int rows, int cols, unsigned seed) {
  const lazygraph::nn::QuantizedLayout layout(name, format, rows, cols);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.0625F, 0.25F);
  std::vector<std::uint8_t> values(layout.value_bytes());
  std::vector<std::uint16_t> scales(layout.scale_count());
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      int b = byte(rng);
      if ((b & 0x7F) == 0x7F) b &= 0xFE;
      values[layout.value_position(r, c).byte] = static_cast<std::uint8_t>(b);
    }
    for (int k = 0; k < layout.groups_per_row(); ++k) {
      const float s = scale(rng);
      scales[layout.scale_index(r, k * layout.group())] = format.scale_type == lazygraph::nn::ScaleType::f16
                                                              ? lazygraph::half::from_float(s).bits
                                                              : lazygraph::bfloat16::from_float(s).bits;
    }
  }
  return {layout, std::move(values), std::move(scales), {}};
}

}  // namespace lgtest
