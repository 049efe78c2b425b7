#pragma once
// The weight-only quantized formats the tests go through (nn/quantized.hpp).

#include <lazygraph/nn/quantized.hpp>

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

}  // namespace lgtest
