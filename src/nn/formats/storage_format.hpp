#pragma once
/// \file
/// Private to src/nn: the storage seam. Each quantized format is one file here, named after its WeightFormat
/// (int8_channel.cpp, int4_group.cpp), that defines its row of the storage table: everything that differs between
/// formats in how a weight matrix is stored (quantized.hpp describes the tiled layout they share), checked, named in
/// config.json and in messages, quantized on the device, cut into tensor-parallel shares and projected. Every other
/// file asks the table (find_storage_format, or a layout's QuantizedLayout::storage()) and never compares
/// WeightFormats; the `layers` check fails where one does. docs/adding.md has the checklist for a new format.

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include <lazygraph/nn/weight_format.hpp>

namespace lazygraph::nn::detail {

/// Where an element's value lies in the 16-byte vector of its lane in a step of the tiled layout.
struct LanePlace {
  int byte;          ///< the byte of the vector, 0..15
  bool high_nibble;  ///< whether the value is the byte's bits 4..7 (4-bit values only)
};

/// One quantized format's row of the storage table.
struct StorageFormat {
  WeightFormat kind;  ///< the format; its value is the kernels' (qgemv_core.cuh) and a saved layout's kind
  /// Its name in config.json's quantization_config ("kind") and first in messages: "int8", "int4".
  std::string_view name;
  /// Its family in messages: "int8 per channel", "int4 in groups" (weight_format.hpp's kWeightFormatNames names it so).
  std::string_view family;
  /// The group sizes allowed along K, in the order messages list them; empty for one scale per row over all of its
  /// columns (QuantizedLayout::group() is then cols, and a share of columns keeps its rows' scales).
  std::span<const int> groups;
  bool allows_asymmetric;  ///< whether zero points may be stored (q in asymmetric_q_range)
  /// What a config.json object of this kind lacks of the other kinds' keys, for the message refusing one.
  std::string_view lacks;
  std::array<int, 2> q_range;             ///< the smallest and largest q stored, symmetric
  std::array<int, 2> asymmetric_q_range;  ///< the same with zero points
  int value_bits;                         ///< bits of one stored value: 8 or 4
  int step_columns;                       ///< columns of one 512-byte step of a tile along K (qgemv_core.cuh)
  /// Where the element of column `column` of a step (0 .. step_columns - 1) lies in its lane's vector, for row g of
  /// the lane's pair (h 0) or g + 8 (h 1).
  LanePlace (*place)(int column, int h);
  /// The value_bits bits that store q (in the format's q range).
  unsigned (*encode)(int q);
  /// The q that `bits` (value_bits of them) store.
  int (*decode)(unsigned bits, bool asymmetric);
  /// A byte no stored value may hold (-1: none), and why, for the message refusing one. With forbidden_mask, the
  /// bytes b with (b & forbidden_mask) == forbidden_byte (fp8: 0x7F and 0xFF, e4m3's NaNs).
  int forbidden_byte;
  std::string_view forbidden_why;  ///< e.g. "offset binary for -128, outside [-127, 127]"
  /// The device quantizer's kernel that packs q into tiles (kernels/nn/quantize.cu); fp8's packs the e4m3 bytes.
  std::string_view pack_kernel;
  std::string_view kernel_suffix;  ///< of the quantized kernels that read it (kernels/nn/qgemv.cu), e.g. "_int8"
  std::string_view asymmetric_kernel_suffix;  ///< the same with zero points (empty without)
  /// The bits of a byte that forbidden_byte compares (0xFF: the whole byte).
  unsigned forbidden_mask = 0xFFU;
  /// What q stands for before scaling: the weight is (q - zero) * value_unit * scale. 1 for the integer formats;
  /// fp8 stores q = 512 * its e4m3 value (an integer: the smallest e4m3 step is 2^-9) and stands for 2^-8 times that
  /// value, its scale being stored times 2^8 (fp8_block.cpp says why).
  double value_unit = 1.0;
  /// The nearest q the format stores to x (x in q's units: the weight over value_unit * scale), ties to even, x's
  /// sign kept; beyond q_range it may lie past the ends (the quantizer saturates). Null: the nearest integer (llrint),
  /// for the integer formats. The device quantizer (kernels/nn/quantize.cu) rounds the same way.
  double (*nearest)(double x) = nullptr;
  /// Rows that share one scale when lazygraph quantizes (quantize(), DeviceQuantizer): 1, each row's groups their
  /// own; fp8 128, a checkpoint's 128 x 128 blocks, each block's scale stored in each of its rows' groups (the stored
  /// layout is the same either way). A format of several rows rounds to nearest: QuantizeOptions::clip_search does
  /// not apply to it, and a tensor-parallel share of rows is quantized whole and then cut.
  int quantize_rows = 1;
  /// For a format of several quantize_rows: the device quantizer's kernels that choose a scale per block of rows
  /// (kernels/nn/quantize.cu; the name before _f32, _f16 and _bf16, the weights' type). Empty for one row, which
  /// quantize_groups quantizes (clipping search included). Set exactly when quantize_rows > 1.
  std::string_view block_quantize_kernel = "";
  /// Whether the stored bytes are e4m3 floating-point values, as FP8 checkpoints store them (read byte for byte).
  bool e4m3_values = false;

  /// Whether one scale covers a whole row (no groups).
  [[nodiscard]] constexpr bool scale_per_row() const noexcept { return groups.empty(); }
};

/// Every quantized format, in the order of their kinds (and of messages listing them).
[[nodiscard]] std::span<const StorageFormat* const> storage_formats() noexcept;

/// The row of `kind`, or null for dense and for a kind no row has. A QuantizedLayout holds its format's row
/// (QuantizedLayout::storage()).
[[nodiscard]] const StorageFormat* find_storage_format(WeightFormat kind) noexcept;

/// `numbers` as a message lists them: "32, 64 or 128".
[[nodiscard]] std::string listed(std::span<const int> numbers);

/// Every format's name quoted, as a message lists them: "\"int8\" or \"int4\"".
[[nodiscard]] std::string listed_names();

/// Whether `byte` is one the format forbids (forbidden_byte under forbidden_mask).
[[nodiscard]] bool forbidden(const StorageFormat& format, std::uint8_t byte) noexcept;

/// The message refusing the forbidden `byte` found at byte `at` of a matrix's values: "int8 value at byte 40 is 0,
/// offset binary for -128, outside [-127, 127]".
[[nodiscard]] std::string forbidden_value_at(const StorageFormat& format, std::size_t at, std::uint8_t byte);

}  // namespace lazygraph::nn::detail
