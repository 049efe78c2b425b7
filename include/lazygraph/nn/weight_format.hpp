#pragma once
/// \file
/// Layer 6, nn: the names of the formats a weight matrix is stored in. What each quantized format stores and how
/// (its bytes, its checks, its kernels, its config.json object) is its row of the storage table, one file per format
/// in src/nn/formats/ (docs/adding.md: "A weight format"); quantized.hpp describes the layout they share.

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
