#pragma once
/// \file
/// Layer 6, nn: weight-only quantized matrices, described and computed on the host. This is the
/// reference that the GPU quantizer and the quantized kernels are checked against: its byte layout is the one they
/// read, and its dequantize() is exactly what they compute before accumulating.
///
/// A quantized weight has `rows` = N output channels and `cols` = K inputs, row-major like the fp16 weights
/// `[N][K]`. Its bytes, for G = K / group groups per row (G = 1 for int8):
///
/// - **values**, N rows of R bytes each (R = K / 2 for int4, K for int8; K is a multiple of 128 for int4 and of 16
///   for int8, so R is a multiple of 16), row n starting at byte n * R. int8: one two's-complement byte per element,
///   in order along K. int4: two elements a byte, interleaved for the tensor-core kernels, which turn a 32-bit word
///   into fp16 pairs with one bit operation per pair and need each mma's 16 columns in one group. A row is blocks of
///   128 elements (64 bytes, 16 little-endian 32-bit words). In a block, word 4t + j (t, j in 0..3) holds elements
///   32j + 8t + e, e in 0..7, element e in bits 4 * (e / 2) + 16 * (e % 2) .. + 3: the even elements in the low
///   half-word, the odd ones in the high, so that bits 4s..4s+3 and 16+4s..16+4s+3 are elements 2s and 2s + 1. So
///   the 16-byte vector t of a block holds four 8-element runs, one from each 32-element quarter of the block.
/// - **scales**, `[N][G]` 2-byte elements of the scale type (fp16 or bf16), scale of row n, group g at index
///   n * G + g; group g covers elements g * group .. (g + 1) * group - 1 of the row.
/// - **zero points** (asymmetric int4 only), `[N][G]` bytes, one unsigned value 0..15 each, at the scales' indices.
///
/// The stored integers q: symmetric int4 in [-8, 7] as two's-complement nibbles (round to nearest yields [-7, 7]; -8
/// comes only from the clipping search, and kernels decode it), asymmetric int4 in [0, 15], int8 in [-127, 127]
/// (never -128: the range is symmetric, so w and -w quantize to q and -q with one scale of absmax / 127, and a
/// kernel may negate q without overflow). The weight an element stands for is `q * scale` (symmetric) or
/// `(q - zero) * scale` (asymmetric), computed in float: that product is exact (q - zero has at most 7 significant
/// bits, the scale at most 11), so a kernel that dequantizes in fp32 gets dequantize()'s values bit for bit. Each
/// part starts on its own 16-byte aligned address on the device (the upload's job, not described here).

#include <lazygraph/driver/error.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lazygraph::nn {

/// How the values of a weight matrix are stored.
enum class WeightFormat {
  dense,         ///< the decoder's element type (fp16 or bf16), not quantized: no QuantizedLayout describes it
  int8_channel,  ///< 8-bit integers, one scale per output channel (row), symmetric
  int4_group,    ///< 4-bit integers, one scale (and zero point, if asymmetric) per group of 32, 64 or 128 along K
};

/// The element type scales are stored in.
enum class ScaleType {
  f16,   ///< IEEE binary16 (`half`): 11 significant bits, finite up to 65504
  bf16,  ///< bfloat16: 8 significant bits, float's range
};

/// A quantized format: what LoadOptions will choose per tensor class.
struct QuantizedFormat {
  WeightFormat kind = WeightFormat::int4_group;  ///< int8_channel or int4_group (dense is refused by QuantizedLayout)
  int group = 128;          ///< int4_group: elements per group along K, 32, 64 or 128; ignored for int8_channel
  bool asymmetric = false;  ///< int4_group only: q in [0, 15] with a zero point per group
  ScaleType scale_type = ScaleType::f16;  ///< the element type of the scales

  /// Whether every field is equal.
  friend bool operator==(const QuantizedFormat&, const QuantizedFormat&) = default;
};

/// `format` in messages, e.g. "int4 g128 asymmetric, fp16 scales" or "int8 per channel, bf16 scales".
[[nodiscard]] std::string format_name(const QuantizedFormat& format);

/// The shape and format of one quantized weight matrix, checked: where each of its bytes lies (the file comment
/// gives the layout). Cheap to copy.
class QuantizedLayout {
 public:
  /// A `rows` x `cols` matrix named `name` (the checkpoint tensor, used in every message) in `format`.
  /// \throws UsageError naming the tensor when rows or cols is below 1; the kind is dense; an int8 format is
  ///         asymmetric; an int4 group is not 32, 64 or 128, or does not divide cols; or cols breaks the 16-byte
  ///         rule (a multiple of 128 for int4, of 16 for int8).
  QuantizedLayout(std::string name, QuantizedFormat format, int rows, int cols);

  /// The tensor's name.
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  /// The format.
  [[nodiscard]] const QuantizedFormat& format() const noexcept { return format_; }
  /// N, the output channels.
  [[nodiscard]] int rows() const noexcept { return rows_; }
  /// K, the inputs.
  [[nodiscard]] int cols() const noexcept { return cols_; }
  /// Elements per scale along K: the format's group for int4, cols for int8.
  [[nodiscard]] int group() const noexcept {
    return format_.kind == WeightFormat::int8_channel ? cols_ : format_.group;
  }
  /// G = cols / group(): scales (and zero points) per row.
  [[nodiscard]] int groups_per_row() const noexcept { return cols_ / group(); }
  /// The smallest and largest q stored: -8 and 7 (symmetric int4), 0 and 15 (asymmetric int4), -127 and 127 (int8).
  [[nodiscard]] std::array<int, 2> q_range() const noexcept;
  /// Bytes of one row's values, R (a multiple of 16).
  [[nodiscard]] std::size_t row_value_bytes() const noexcept;
  /// Bytes of all values, N * R.
  [[nodiscard]] std::size_t value_bytes() const noexcept { return static_cast<std::size_t>(rows_) * row_value_bytes(); }
  /// Scales, N * G.
  [[nodiscard]] std::size_t scale_count() const noexcept {
    return static_cast<std::size_t>(rows_) * static_cast<std::size_t>(groups_per_row());
  }
  /// Bytes of the scales, 2 * N * G.
  [[nodiscard]] std::size_t scale_bytes() const noexcept { return 2 * scale_count(); }
  /// Bytes of the zero points: N * G when asymmetric, else 0.
  [[nodiscard]] std::size_t zero_bytes() const noexcept { return format_.asymmetric ? scale_count() : 0; }
  /// Every byte a kernel reads: values, scales and zero points.
  [[nodiscard]] std::size_t bytes() const noexcept { return value_bytes() + scale_bytes() + zero_bytes(); }

 private:
  std::string name_;
  QuantizedFormat format_;
  int rows_;
  int cols_;
};

/// The clip ratios the clipping search tries, in order: each group's range times the ratio.
inline constexpr std::array<double, 6> clip_ratios = {1.00, 0.95, 0.90, 0.85, 0.80, 0.75};

/// How quantize() chooses each group's scale.
struct QuantizeOptions {
  /// Off: round to nearest over the group's whole range. On: also try the group's range times each of clip_ratios
  /// (values beyond it saturate) and keep the one with the least squared error of the dequantized group, the
  /// earliest on a tie, so never worse than round to nearest.
  bool clip_search = false;
};

/// A quantized weight matrix on the host: its layout and its bytes, ready to upload as they are.
class QuantizedWeight {
 public:
  /// A matrix from its parts (e.g. read from a quantized checkpoint). \throws UsageError naming the tensor when a
  /// part's size is not the layout's, a scale is negative or not finite, a zero point is above 15, or an int8 value
  /// is -128.
  QuantizedWeight(QuantizedLayout layout, std::vector<std::uint8_t> values, std::vector<std::uint16_t> scale_bits,
                  std::vector<std::uint8_t> zeros);

  /// The layout.
  [[nodiscard]] const QuantizedLayout& layout() const noexcept { return layout_; }
  /// The packed values, layout().value_bytes() of them.
  [[nodiscard]] std::span<const std::uint8_t> values() const noexcept { return values_; }
  /// The scales' bits in the scale type, `[N][G]`.
  [[nodiscard]] std::span<const std::uint16_t> scale_bits() const noexcept { return scale_bits_; }
  /// The zero points, `[N][G]` (empty unless asymmetric).
  [[nodiscard]] std::span<const std::uint8_t> zeros() const noexcept { return zeros_; }
  /// Every byte a kernel reads (layout().bytes()).
  [[nodiscard]] std::size_t bytes() const noexcept { return layout_.bytes(); }

  /// The q stored for element (row, col), in layout().q_range(). \throws UsageError outside the matrix.
  [[nodiscard]] int value(int row, int col) const;
  /// The scale of the group holding element (row, col). \throws UsageError outside the matrix.
  [[nodiscard]] float scale(int row, int col) const;
  /// The zero point of the group holding element (row, col); 0 when symmetric. \throws UsageError outside the matrix.
  [[nodiscard]] int zero(int row, int col) const;
  /// The weight element (row, col) stands for: (value - zero) * scale, exact in float.
  /// \throws UsageError outside the matrix.
  [[nodiscard]] float dequantized(int row, int col) const;
  /// Every element dequantized, `[N][K]` row-major.
  [[nodiscard]] std::vector<float> dequantize() const;

 private:
  /// Throws UsageError unless (row, col) is inside the matrix.
  void check_element(int row, int col) const;
  /// The index of (row, col)'s group among the scales.
  [[nodiscard]] std::size_t group_index(int row, int col) const noexcept;

  QuantizedLayout layout_;
  std::vector<std::uint8_t> values_;
  std::vector<std::uint16_t> scale_bits_;
  std::vector<std::uint8_t> zeros_;
};

/// Quantizes the `rows` x `cols` row-major `weights` of tensor `name` into `format`, one group at a time, by round
/// to nearest: scale = the group's largest magnitude / the largest q (symmetric), or (max(w, 0) - min(w, 0)) / 15
/// with zero = round(-min(w, 0) / scale) (asymmetric), rounded to the scale type first, then q = round(w / scale)
/// + zero with that stored scale, so every element is within half a step (scale / 2) of what dequantize() gives.
/// Where the rounded scale came out too small for the range to fit without saturating, the next larger scale
/// value is taken instead. An all-zero group gets scale 0 and q 0 (zero point 0), which dequantize to zeros.
/// \throws UsageError naming the tensor as QuantizedLayout does; when weights.size() is not rows * cols; at the
///         first weight that is not finite, with its row and column; or when a group needs a scale beyond the
///         scale type's range (fp16 scales cover groups up to about 458000 in magnitude), with its row and group.
[[nodiscard]] QuantizedWeight quantize(const QuantizedFormat& format, std::string_view name, int rows, int cols,
                                       std::span<const float> weights, const QuantizeOptions& options = {});

}  // namespace lazygraph::nn
