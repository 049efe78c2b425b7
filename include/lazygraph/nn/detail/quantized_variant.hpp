#pragma once
/// \file
/// nn's private part of the quantized kernels (quantized_kernels.hpp): which kernel of a quantized operation reads a
/// weight, and its step along K, as the storage table (src/nn/formats/) says for the weight's format.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace lazygraph::nn::detail {

/// The suffixes of one quantized operation's kernels (kernels/nn/qgemv.cu), one per format of the storage table and
/// one more for a format with zero points: "_int8", "_int4", "_int4z".
[[nodiscard]] std::vector<std::string> quantized_kernel_suffixes();

/// The index among quantized_kernel_suffixes() of the kernel that reads a weight of WeightFormat `kind`, with zero
/// points or not. \throws UsageError naming `kernel` (the operation's first kernel) and the formats for a kind that
/// is no quantized format.
[[nodiscard]] std::size_t quantized_kernel_variant(std::string_view kernel, int kind, bool zeros);

/// The columns of one 512-byte step of a tile along K for WeightFormat `kind`: 32 for int8, 64 for int4.
/// \throws UsageError as quantized_kernel_variant for a kind that is no quantized format.
[[nodiscard]] int quantized_step_columns(int kind);

}  // namespace lazygraph::nn::detail
