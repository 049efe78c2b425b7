#pragma once
/// \file
/// Layer 6, nn: parts of a quantized matrix on the device, cut out without quantizing again: a tensor-parallel
/// rank's share of a weight quantized whole (its rows of a row-split projection, its columns of Wo or W2). Every
/// element keeps its stored integer, scale and zero point, so a part dequantizes to exactly the same part of the
/// whole matrix's dequantized values; for int8, a column part keeps each row's scale, which was chosen over the whole
/// row. The parts are whole tiles and steps of the layout (quantized.hpp), so they are copied as they lie.

#include <span>

#include "lazygraph/nn/quantized_kernels.hpp"

namespace lazygraph::nn {

/// Rows [first, first + count) of a quantized matrix.
struct QuantizedRowBlock {
  int first = 0;  ///< the first row
  int count = 0;  ///< rows
};

/// The rows of `blocks` of `w`, in that order, stacked into one matrix of w's name, format and columns, copied on
/// `stream` (the copies are waited for). Each block must start on a tile (a multiple of 16 rows) and, but for the last
/// block, end on one; the last may end at w's last row.
/// \throws UsageError naming the tensor when `blocks` is empty, a block is empty or outside w's rows, or a block does
///         not start or end on a tile of 16 rows.
template <Element T>
[[nodiscard]] DeviceQuantizedWeight<T> quantized_rows(const Stream& stream, const DeviceQuantizedWeight<T>& w,
                                                      std::span<const QuantizedRowBlock> blocks);

/// Columns [first, first + count) of `w`, as a matrix of w's name, format and rows, copied on `stream` (the copies
/// are waited for).
/// \throws UsageError naming the tensor when the columns are empty or outside w's, or do not start and end on a step of
///         the layout (64 columns for int4, 32 for int8) and, for int4, on a group.
template <Element T>
[[nodiscard]] DeviceQuantizedWeight<T> quantized_columns(const Stream& stream, const DeviceQuantizedWeight<T>& w,
                                                         int first, int count);

}  // namespace lazygraph::nn
