#pragma once
/// \file
/// Layer 6, nn: the names of the formats a weight matrix is stored in. What each quantized format stores and how
/// (its bytes, its checks, its kernels, its config.json object) is its row of the storage table, one file per format
/// in src/nn/formats/ (docs/adding.md: "A weight format"); quantized.hpp describes the layout they share.

#include <array>
#include <cstddef>
#include <string_view>

namespace lazygraph::nn {

/// How the values of a weight matrix are stored.
enum class WeightFormat {
  dense,         ///< the decoder's element type (fp16 or bf16), not quantized: no QuantizedLayout describes it
  int8_channel,  ///< 8-bit integers, one scale per output channel (row), symmetric
  int4_group,    ///< 4-bit integers, one scale (and zero point, if asymmetric) per group of 32, 64 or 128 along K
  /// FP8 e4m3 values as a checkpoint stores them, one scale per group of 128 along K, symmetric: read from FP8
  /// checkpoints, or quantized by lazygraph with one scale per block of 128 x 128, as those checkpoints are made
  fp8_block,
};

/// A WeightFormat and its name in messages.
struct WeightFormatName {
  WeightFormat format;    ///< the format
  std::string_view name;  ///< its name in messages: "dense", "int8 per channel"
};

/// Every WeightFormat, in the enum's order, with its name: the projections' table (projection.hpp) is built from it.
inline constexpr std::array<WeightFormatName, 4> kWeightFormatNames{{
    {WeightFormat::dense, "dense"},
    {WeightFormat::int8_channel, "int8 per channel"},
    {WeightFormat::int4_group, "int4 in groups"},
    {WeightFormat::fp8_block, "fp8 e4m3 in groups"},
}};
static_assert(
    [] {
      for (std::size_t i = 0; i < kWeightFormatNames.size(); ++i) {
        if (static_cast<std::size_t>(kWeightFormatNames[i].format) != i) return false;
      }
      return true;
    }(),
    "kWeightFormatNames lists every format in the enum's order");

/// The element type scales are stored in.
enum class ScaleType {
  f16,   ///< IEEE binary16 (`half`): 11 significant bits, finite up to 65504
  bf16,  ///< bfloat16: 8 significant bits, float's range
};

/// A quantized format: what LoadOptions will choose per tensor class.
struct QuantizedFormat {
  WeightFormat kind = WeightFormat::int4_group;  ///< a quantized format (dense is refused by QuantizedLayout)
  int group = 128;  ///< elements per group along K: int4_group 32, 64 or 128, fp8_block 128; ignored for int8_channel
  bool asymmetric = false;                ///< int4_group only: q in [0, 15] with a zero point per group
  ScaleType scale_type = ScaleType::f16;  ///< the element type of the scales

  /// Whether every field is equal.
  friend bool operator==(const QuantizedFormat&, const QuantizedFormat&) = default;
};

}  // namespace lazygraph::nn
