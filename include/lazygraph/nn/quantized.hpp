#pragma once
/// \file
/// Layer 6, nn: weight-only quantized matrices, described and computed on the host. This is the
/// reference that the GPU quantizer and the quantized kernels are checked against: its byte layout is the one they
/// read, and its dequantize() gives the weights they multiply by.
///
/// A quantized weight has `rows` = N output channels and `cols` = K inputs, like the fp16 weights `[N][K]`. The
/// kernels (kernels/nn/include/lazygraph/nn/qgemv_core.cuh) multiply it on tensor cores with the weights as the
/// mma's A operand, 16 rows at a time, so its bytes are stored in the order a warp's lanes read them: in **tiles**
/// of 16 rows (tile i holds rows 16i .. 16i + 15; the last tile is padded with rows of zero weights up to 16), each
/// tile one contiguous run of 512-byte **steps** along K, one 16-byte vector per lane of a warp, lane 4g + t (g in
/// 0..7, t in 0..3) holding rows g and g + 8 of the tile. With P = ceil(N / 16) tiles and G = K / group groups per
/// row (G = 1 for int8):
///
/// - **values**, P * 16 * R bytes, R = K / 2 (int4) or K (int8, fp8), tile i at byte 16 R i, step s of a tile at 512 s,
///   lane 4g + t's vector at 16 (4g + t), in it four 32-bit little-endian words, word j feeding mma j of the step.
///   - int4 (64 columns a step, K a multiple of 64): mma j covers columns 64s + 32 (j / 2) + 8t + 4 (j % 2) + c,
///     c in 0..3, of rows g and g + 8, and the element of row g + 8h (h in 0..1) at c lies in bits 4n..4n + 3 of
///     word j, n = 4 (c % 2) + 2 (c / 2) + h: bits 0..3 and 16..19 are row g's first two columns, 4..7 and 20..23
///     row g + 8's, the next byte of each half-word the last two. One bit operation then makes an mma register
///     (two elements of one row) of each of the 4 nibble pairs, and each mma's 16 columns lie in one group.
///   - int8 (32 columns a step, K a multiple of 32): word 2j + h holds row g + 8h, columns 32s + 8t + 4j + c, c in
///     0..3 in byte c, each as **offset binary**, the byte q + 128 (in 1..255), so that one byte permute puts it
///     under a floating-point exponent.
///   - fp8 (32 columns a step, K a multiple of 128): placed as int8, each byte the e4m3 value an FP8 checkpoint
///     stores (1 sign, 4 exponent bits of bias 7, 3 mantissa bits; 0x7F and 0xFF, its NaNs, are never stored).
/// - **scales**, P * 16 * G 2-byte elements of the scale type (fp16 or bf16): the scale of row 16i + g + 8h, group
///   k at index ((i * G + k) * 8 + g) * 2 + h, so that lane 4g + t reads both of its rows' scales in one 4-byte
///   load. Group k covers columns k * group .. (k + 1) * group - 1. Padding rows have scale 0.
/// - **zero points** (asymmetric int4 only), one byte 0..15 each at the scales' indices.
///
/// The stored integers q: symmetric int4 in [-8, 7] as two's-complement nibbles (round to nearest yields [-7, 7]; -8
/// comes only from the clipping search, and kernels decode it), asymmetric int4 in [0, 15], int8 in [-127, 127]
/// (never -128: the range is symmetric, so w and -w quantize to q and -q with one scale of absmax / 127). The weight
/// an element stands for is `q * scale` (symmetric) or `(q - zero) * scale` (asymmetric), computed in float: that
/// product is exact (q - zero has at most 8 significant bits, the scale at most 11), so a kernel that scales fp32
/// sums of exact integer products gets dequantize()'s values up to the order of the additions. fp8's q is 512 times
/// the byte's e4m3 value (an integer, in [-229376, 229376]) and stands for 2^-8 times that value, its scale being
/// stored times 2^8 (what the kernels' exact bit-operation conversion of e4m3 into fp16 gives, and what keeps
/// ordinary block scales, about 1e-4, normal fp16 numbers): the weight is `e4m3 value * checkpoint scale`, the
/// scale as rounded once to the scale type, again an exact product (4 significant bits times 11). Each part starts on
/// its own 16-byte aligned address on the device (the upload's job, not described here).

#include <lazygraph/driver/error.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lazygraph/nn/detail/storage_row.hpp"
#include "lazygraph/nn/weight_format.hpp"

namespace lazygraph::nn {

/// `format` in messages, e.g. "int4 g128 asymmetric, fp16 scales" or "int8 per channel, bf16 scales".
[[nodiscard]] std::string format_name(const QuantizedFormat& format);

/// The shape and format of one quantized weight matrix, checked: where each of its bytes lies (the file comment
/// gives the layout). Cheap to copy.
class QuantizedLayout {
 public:
  /// Rows of a tile, the unit the values, scales and zero points are stored in.
  static constexpr int tile_rows = 16;

  /// A `rows` x `cols` matrix named `name` (the checkpoint tensor, used in every message) in `format`.
  /// \throws UsageError naming the tensor when rows or cols is below 1; the kind is dense; an int8 or fp8 format is
  ///         asymmetric; an int4 group is not 32, 64 or 128, an fp8 group not 128, or the group does not divide
  ///         cols; or cols is not whole steps (a multiple of 64 for int4, of 32 for int8).
  QuantizedLayout(std::string name, QuantizedFormat format, int rows, int cols);

  /// The tensor's name.
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  /// The format.
  [[nodiscard]] const QuantizedFormat& format() const noexcept { return format_; }
  /// N, the output channels.
  [[nodiscard]] int rows() const noexcept { return rows_; }
  /// K, the inputs.
  [[nodiscard]] int cols() const noexcept { return cols_; }
  /// P = ceil(N / 16), the tiles of 16 rows; the last one is padded with zero weights.
  [[nodiscard]] int tiles() const noexcept { return (rows_ + tile_rows - 1) / tile_rows; }
  /// Elements per scale along K: the format's group for int4, cols for int8.
  [[nodiscard]] int group() const noexcept { return group_; }
  /// G = cols / group(): scales (and zero points) per row.
  [[nodiscard]] int groups_per_row() const noexcept { return cols_ / group(); }
  /// The smallest and largest q stored: -8 and 7 (symmetric int4), 0 and 15 (asymmetric int4), -127 and 127 (int8),
  /// -229376 and 229376 (fp8, 512 times +-448).
  [[nodiscard]] std::array<int, 2> q_range() const noexcept;
  /// Bytes of one row's values, R: K / 2 for int4, K for int8 and fp8.
  [[nodiscard]] std::size_t row_value_bytes() const noexcept;
  /// Bytes of all values, padding rows included: 16 * P * R.
  [[nodiscard]] std::size_t value_bytes() const noexcept { return padded_rows() * row_value_bytes(); }
  /// Scales, padding rows included: 16 * P * G.
  [[nodiscard]] std::size_t scale_count() const noexcept {
    return padded_rows() * static_cast<std::size_t>(groups_per_row());
  }
  /// Bytes of the scales, 2 * 16 * P * G.
  [[nodiscard]] std::size_t scale_bytes() const noexcept { return 2 * scale_count(); }
  /// Bytes of the zero points: 16 * P * G when asymmetric, else 0.
  [[nodiscard]] std::size_t zero_bytes() const noexcept { return format_.asymmetric ? scale_count() : 0; }
  /// Every byte a kernel reads: values, scales and zero points.
  [[nodiscard]] std::size_t bytes() const noexcept { return value_bytes() + scale_bytes() + zero_bytes(); }

  /// Where element (row, col)'s value lies among the value bytes (the file comment's rule), for row < 16 * P.
  struct ValuePosition {
    std::size_t byte;  ///< index of its byte
    bool high_nibble;  ///< int4: whether it is the byte's bits 4..7 (always false for int8)
  };
  /// See ValuePosition. Unchecked: row in [0, 16 * P), col in [0, K).
  [[nodiscard]] ValuePosition value_position(int row, int col) const noexcept;
  /// The index among the scales (and zero points) of the group holding (row, col). Unchecked, as value_position.
  [[nodiscard]] std::size_t scale_index(int row, int col) const noexcept;

  /// The format's row of the storage table, for the library's own files (its definition is theirs).
  [[nodiscard]] const detail::StorageFormat& storage() const noexcept { return *storage_; }

 private:
  [[nodiscard]] std::size_t padded_rows() const noexcept {
    return static_cast<std::size_t>(tiles()) * static_cast<std::size_t>(tile_rows);
  }

  std::string name_;
  QuantizedFormat format_;
  int rows_;
  int cols_;
  const detail::StorageFormat* storage_ = nullptr;  // the format's row, looked up once
  int group_ = 0;
};

/// The clip ratios the clipping search tries, in order: each group's range times the ratio.
inline constexpr std::array<double, 6> clip_ratios = {1.00, 0.95, 0.90, 0.85, 0.80, 0.75};

/// How quantize() chooses each group's scale.
struct QuantizeOptions {
  /// Off: round to nearest over the group's whole range. On: also try the group's range times each of clip_ratios
  /// (values beyond it saturate) and keep the one with the least squared error of the dequantized group, the
  /// earliest on a tie, so never worse than round to nearest. fp8, whose e4m3 steps grow with the value and whose
  /// scales cover blocks of 128 rows, always rounds to nearest: the search does not apply to it.
  bool clip_search = false;

  /// Whether every field is equal.
  friend bool operator==(const QuantizeOptions&, const QuantizeOptions&) = default;
};

/// A quantized weight matrix on the host: its layout and its bytes, ready to upload as they are.
class QuantizedWeight {
 public:
  /// A matrix from its parts (e.g. read from a quantized checkpoint), in the layout's order. \throws UsageError
  /// naming the tensor when a part's size is not the layout's, a scale is negative or not finite, a padding row's
  /// scale is not 0, a zero point is above 15, an int8 value is -128 (byte 0) or an fp8 value an e4m3 NaN.
  QuantizedWeight(QuantizedLayout layout, std::vector<std::uint8_t> values, std::vector<std::uint16_t> scale_bits,
                  std::vector<std::uint8_t> zeros);
  /// A matrix whose columns are stored in another order than x's: stored column j multiplies x[input_order[j]] (a
  /// GPTQ checkpoint with desc_act, whose groups gather inputs from anywhere in x, stored group by group). Int4 with
  /// zero points only; an empty order is x's own. \throws UsageError as the constructor above, and naming the tensor
  /// when the format is another or input_order is not a permutation of 0 .. cols - 1.
  QuantizedWeight(QuantizedLayout layout, std::vector<std::uint8_t> values, std::vector<std::uint16_t> scale_bits,
                  std::vector<std::uint8_t> zeros, std::vector<std::int32_t> input_order);

  /// The layout.
  [[nodiscard]] const QuantizedLayout& layout() const noexcept { return layout_; }
  /// The packed values in tiles, layout().value_bytes() of them.
  [[nodiscard]] std::span<const std::uint8_t> values() const noexcept { return values_; }
  /// The scales' bits in the scale type, in tiles (QuantizedLayout::scale_index).
  [[nodiscard]] std::span<const std::uint16_t> scale_bits() const noexcept { return scale_bits_; }
  /// The zero points at the scales' indices (empty unless asymmetric).
  [[nodiscard]] std::span<const std::uint8_t> zeros() const noexcept { return zeros_; }
  /// The input each stored column multiplies (see the constructor), or empty when that is the column itself.
  [[nodiscard]] std::span<const std::int32_t> input_order() const noexcept { return input_order_; }
  /// Every byte a kernel reads: layout().bytes(), and the input order's 4 bytes a column where there is one.
  [[nodiscard]] std::size_t bytes() const noexcept { return layout_.bytes() + 4 * input_order_.size(); }

  /// The elements below are the stored matrix's: (row, col) is stored column col, which multiplies input
  /// input_order()[col] where there is an order. dequantize() gives the matrix in x's order.
  /// The q stored for element (row, col), in layout().q_range(). \throws UsageError outside the matrix.
  [[nodiscard]] int value(int row, int col) const;
  /// The scale of the group holding element (row, col). \throws UsageError outside the matrix.
  [[nodiscard]] float scale(int row, int col) const;
  /// The zero point of the group holding element (row, col); 0 when symmetric. \throws UsageError outside the matrix.
  [[nodiscard]] int zero(int row, int col) const;
  /// The weight element (row, col) stands for: (value - zero) * scale (fp8: value * 2^-17 * scale), exact in float.
  /// \throws UsageError outside the matrix.
  [[nodiscard]] float dequantized(int row, int col) const;
  /// Every element dequantized, `[N][K]` row-major, in x's order: column input_order()[j] is stored column j.
  [[nodiscard]] std::vector<float> dequantize() const;

 private:
  /// Throws UsageError unless (row, col) is inside the matrix.
  void check_element(int row, int col) const;

  QuantizedLayout layout_;
  std::vector<std::uint8_t> values_;
  std::vector<std::uint16_t> scale_bits_;
  std::vector<std::uint8_t> zeros_;
  std::vector<std::int32_t> input_order_;
};

/// Quantizes the `rows` x `cols` row-major `weights` of tensor `name` into `format`, one group at a time, by round
/// to nearest: scale = the group's largest magnitude / the largest q (symmetric), or (max(w, 0) - min(w, 0)) / 15
/// with zero = round(-min(w, 0) / scale) (asymmetric), rounded to the scale type first, then q = round(w / scale)
/// + zero with that stored scale, so every element is within half a step (scale / 2) of what dequantize() gives.
/// fp8 takes its scales per block of 128 rows x 128 columns (an FP8 checkpoint's `weight_scale_inv` blocks; the last
/// block of rows may be shorter): scale = the block's largest magnitude / 448, stored times 2^8 (the file comment),
/// and each weight becomes the e4m3 value nearest to w / scale, ties to even mantissa, saturating at +-448; the
/// clipping search does not apply to it. Where the rounded scale came out too small for the range to fit without
/// saturating, the next larger scale value is taken instead. An all-zero group (fp8: block) gets scale 0 and q 0
/// (zero point 0), which dequantize to zeros. A matrix of more than 2^20 weights is shared out by tiles among up to
/// std::thread::hardware_concurrency() threads, with the same bytes as one thread makes.
/// \throws UsageError naming the tensor as QuantizedLayout does; when weights.size() is not rows * cols; at the first
///         weight that is not finite, with its row and column; or when a group needs a scale beyond the scale type's
///         range (fp16 scales cover int8 groups up to about 8.3e6 in magnitude, int4 up to 458000, fp8 up to 114000),
///         with its row and group (fp8: the first row of the block).
[[nodiscard]] QuantizedWeight quantize(const QuantizedFormat& format, std::string_view name, int rows, int cols,
                                       std::span<const float> weights, const QuantizeOptions& options = {});

}  // namespace lazygraph::nn
