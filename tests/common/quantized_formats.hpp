#pragma once
// The weight-only quantized formats the tests go through (nn/quantized.hpp).

#include <lazygraph/driver/bfloat16.hpp>
#include <lazygraph/driver/half.hpp>
#include <lazygraph/nn/quantized.hpp>

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

/// A rows x cols matrix in `format` (fp8, which lazygraph reads from checkpoints and does not quantize into) of random
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
