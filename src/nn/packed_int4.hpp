#pragma once
// Private to src/nn: the 4-bit checkpoints whose matrices pack eight 4-bit values into each int32 (AutoAWQ's and
// AutoGPTQ's / GPTQModel's), read as they are (packed_fp8.hpp reads the FP8 ones into the same PackedTensors). A matrix
// (`<module>.qweight`, `.qzeros`, `.scales`, and `.g_idx` where the method stores it) is repacked on load into the int4
// layout with zero points of quantized.hpp, which the kernels read; the weight an element stands for,
// (q - zero) * scale, is unchanged. What differs between the methods' packings is an Int4Packing, given by each
// method's row of the methods' table (methods/awq.cpp, methods/gptq.cpp say how they pack), which also reads their
// quantization_config; packed_int4.cpp reads their tensors.
//
// For a matrix of N outputs and K inputs, groups of g inputs (G = K / g), nibble i of a word being its bits 4i..4i+3:
// qweight I32 [K, N / 8] (word (k, c) holding outputs 8c + j, words_hold_outputs) or [K / 8, N] (word (r, n) holding
// inputs 8r + j), the j-th in nibble nibble[j]; qzeros I32 [G, N / 8], word (gi, c) holding outputs 8c + j in nibble
// nibble[j] as zero - zero_offset; scales F16 [G, N]; g_idx I32 [K], the group of each input: k / g, or with GPTQ's
// desc_act any grouping of g inputs a group, whose matrix is stored group by group (QuantizedWeight::input_order).

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lazygraph/nn/llama_config.hpp"
#include "lazygraph/nn/quantized.hpp"
#include "lazygraph/nn/safetensors.hpp"

namespace lazygraph::nn::detail {

/// How a method packs 4-bit values into int32 words (the file comment's layout).
struct Int4Packing {
  bool words_hold_outputs;    ///< qweight [K, N / 8], a word holding 8 outputs of one input (else [K / 8, N])
  std::array<int, 8> nibble;  ///< the nibble of a word (qweight's and qzeros') that holds its j-th value
  int zero_offset;            ///< what is added to a stored zero point (a stored 15 + zero_offset above 15 is refused)
  bool g_idx;                 ///< whether `.g_idx` may be stored (required when desc_act is true)
};

/// The format AWQ and GPTQ matrices are repacked into: the storage table's 4-bit format with zero points (int4 in
/// groups), in groups of packed.group, asymmetric, fp16 scales.
[[nodiscard]] QuantizedFormat int4_with_zeros(const PackedQuantization& packed);

/// One packed matrix's tensors, checked by require_packed.
struct PackedTensors {
  const TensorInfo* qweight = nullptr;
  const TensorInfo* qzeros = nullptr;
  const TensorInfo* scales = nullptr;
  const TensorInfo* g_idx = nullptr;  ///< GPTQ's, when stored
  int outputs = 0;                    ///< N
  int inputs = 0;                     ///< K
};

/// The tensors of `module`, an `outputs` x `inputs` matrix packed as `packed` says, checked on the host where the file
/// is mapped: their dtypes and shapes (the file comment's, as `packing` packs them), every scale finite and >= 0, zero
/// points at most 15 (with zero_offset), g_idx present when desc_act is true, and then g inputs in each group (the
/// grouping k / g when desc_act is false). \throws CheckpointError naming the tensor and what is wrong.
[[nodiscard]] PackedTensors require_packed(const Checkpoint& checkpoint, const PackedQuantization& packed,
                                           const std::string& module, int outputs, int inputs,
                                           const Int4Packing& packing);

/// The order in which a matrix of tensors `t` stores its columns (QuantizedWeight::input_order): the inputs sorted by
/// g_idx's group, stably, so that each group's are together; empty where that is the inputs' own order.
/// Precondition: require_packed checked `t`.
[[nodiscard]] std::vector<std::int32_t> input_order(const Checkpoint& checkpoint, const PackedTensors& t);

/// Checks that `other` takes its inputs in `first`'s order (named `first_name`): the parts of one stacked matrix, and
/// matrices one kernel multiplies with one x (gate and up). \throws CheckpointError naming other's g_idx.
void require_same_order(const Checkpoint& checkpoint, const PackedTensors& first, const std::string& first_name,
                        const PackedTensors& other);

/// One packed tensor of a matrix, its outputs stacked after the previous parts' in the matrix's rows.
struct PackedPart {
  PackedTensors tensors;
  bool rope_rows = false;  ///< q and k: matrix row r holds output rotate_half_row(r, head_dim) of the tensor
  /// Matrix row r holds output output_order[r] of the tensor (empty: output r): gate and up in their down
  /// projection's input order, so that their product reaches it in the order it stores its columns.
  std::vector<std::int32_t> output_order;
  /// The matrix's x comes in its input order already (a down projection whose gate and up rows take output_order):
  /// its columns are stored grouped as ever, but no order is kept for the kernels to gather by.
  bool ordered_input = false;
};

/// The matrix `layout` describes (int4 asymmetric, fp16 scales, the packing's group) from its `parts`, repacked
/// without a copy in floats: values, scales and zero points taken as they are, the columns in the parts' input_order.
/// Preconditions: require_packed checked every part, whose outputs add up to layout.rows(), whose inputs are
/// layout.cols() and whose orders are one (require_same_order).
[[nodiscard]] QuantizedWeight repack(const Checkpoint& checkpoint, const PackedQuantization& packed,
                                     const QuantizedLayout& layout, std::span<const PackedPart> parts, int head_dim,
                                     const Int4Packing& packing);

}  // namespace lazygraph::nn::detail
