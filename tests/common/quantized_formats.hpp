#pragma once
// The weight-only quantized formats the tests go through (nn/quantized.hpp).

#include <lazygraph/nn/quantized.hpp>

#include <vector>

namespace lgtest {

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
