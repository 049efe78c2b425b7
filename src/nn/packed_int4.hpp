#pragma once
// Private to src/nn: the 4-bit checkpoints of AutoAWQ and AutoGPTQ / GPTQModel, read as they are (packed_fp8.hpp reads
// the FP8 ones into the same PackedTensors). Their matrices
// (`<module>.qweight`, `.qzeros`, `.scales`, GPTQ's `.g_idx`) pack eight 4-bit values into each int32 and are
// repacked on load into the int4 layout with zero points of quantized.hpp, which the kernels read; the weight an
// element stands for, (q - zero) * scale, is unchanged. methods/awq.cpp and methods/gptq.cpp read their
// quantization_config (their rows of the methods' table, methods/packed_method.hpp), packed_int4.cpp their tensors.
//
// For a matrix of N outputs and K inputs, groups of g inputs (G = K / g), nibble i of a word being its bits 4i..4i+3:
// - AWQ (GEMM): qweight I32 [K, N / 8], word (k, c) holding outputs 8c + j in nibble awq_nibble(j) (AutoAWQ's order
//   0, 2, 4, 6, 1, 3, 5, 7 of outputs along the nibbles); qzeros I32 [G, N / 8] the zero points packed alike; scales
//   F16 [G, N].
// - GPTQ: qweight I32 [K / 8, N], word (r, n) holding inputs 8r + i in nibble i; qzeros I32 [G, N / 8], word (gi, c)
//   holding outputs 8c + i in nibble i as zero - 1 (checkpoint_format "gptq"); scales F16 [G, N]; g_idx I32 [K], the
//   group of each input, which must be k / g.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "lazygraph/nn/llama_config.hpp"
#include "lazygraph/nn/quantized.hpp"
#include "lazygraph/nn/safetensors.hpp"

namespace lazygraph::nn::detail {

/// The nibble of an AWQ word that holds output 8c + j.
[[nodiscard]] constexpr int awq_nibble(int j) noexcept {
  constexpr int nibble[] = {0, 4, 1, 5, 2, 6, 3, 7};
  return nibble[j];
}

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
/// is mapped: their dtypes and shapes (the file comment's), every scale finite and >= 0, GPTQ's zero points at most 15
/// (a stored 15 means 16), g_idx the grouping k / g (present when desc_act is true). AWQ and GPTQ only. \throws
/// CheckpointError naming the tensor and what is wrong.
[[nodiscard]] PackedTensors require_packed(const Checkpoint& checkpoint, const PackedQuantization& packed,
                                           const std::string& module, int outputs, int inputs);

/// One packed tensor of a matrix, its outputs stacked after the previous parts' in the matrix's rows.
struct PackedPart {
  PackedTensors tensors;
  bool rope_rows = false;  ///< q and k: matrix row r holds output rotate_half_row(r, head_dim) of the tensor
};

/// The matrix `layout` describes (int4 asymmetric, fp16 scales, the packing's group) from its `parts`, repacked
/// without a copy in floats: values, scales and zero points taken as they are. Preconditions: require_packed
/// checked every part, whose outputs add up to layout.rows() and whose inputs are layout.cols().
[[nodiscard]] QuantizedWeight repack(const Checkpoint& checkpoint, const PackedQuantization& packed,
                                     const QuantizedLayout& layout, std::span<const PackedPart> parts, int head_dim);

}  // namespace lazygraph::nn::detail
