#pragma once
// Private to src/nn: the FP8 checkpoints of transformers' FineGrainedFP8 (quant_method "fp8") and of
// compressed-tensors ("float-quantized"), read as they are. A matrix of N outputs and K inputs is `<module>.weight`
// F8_E4M3 [N, K] (e4m3: 1 sign, 4 exponent bits of bias 7, 3 mantissa bits; 0x7F and 0xFF are NaN) and its scale,
// `<module>.weight_scale_inv` (fp8) or `<module>.weight_scale` (compressed-tensors), F32, BF16 or F16, of shape
// [ceil(N / 128), ceil(K / 128)] for blocks of 128 x 128 or [N, 1] per output channel: w = fp8 * scale either way
// (the "_inv" is the inverse of the quantizer's multiplier, what dequantizing multiplies by). The bytes go into the
// fp8 layout of quantized.hpp unchanged, each block's or channel's scale into every 128-column group it covers, times
// 2^8 (formats/fp8_block.cpp says why) and rounded once to the scale type: exact where the checkpoint's scale is of
// that type, else within half a unit in its last place, the rounding a dense checkpoint of those weights would have.

#include <string>
#include <string_view>

#include "lazygraph/nn/quantized.hpp"
#include "lazygraph/nn/safetensors.hpp"
#include "packed_int4.hpp"

namespace lazygraph::nn::detail {

/// The scale type FP8 matrices are stored with: the model's element type (bf16 unless torch_dtype is float16).
[[nodiscard]] ScaleType fp8_scale_type(const LlamaConfig& config);

/// The format FP8 matrices are placed into: the storage table's format of e4m3 values, in groups of 128, symmetric,
/// of packed.scale_type.
[[nodiscard]] QuantizedFormat fp8_format(const PackedQuantization& packed);

/// The tensors of `module`, an `outputs` x `inputs` FP8 matrix (PackedTensors::qweight its weight, ::scales its
/// scale `<module>` + `scale_suffix`: the method's, ".weight_scale_inv" or ".weight_scale"), checked on the host where
/// the file is mapped: dtypes and shapes (the file comment's), inputs whole groups of 128, every scale finite and
/// positive and within the scale type's normal range times 2^8, no NaN byte in the weight. \throws CheckpointError
/// naming the tensor and what is wrong.
[[nodiscard]] PackedTensors require_fp8_tensors(const Checkpoint& checkpoint, const PackedQuantization& packed,
                                                const std::string& module, int outputs, int inputs,
                                                std::string_view scale_suffix);

/// The matrix `layout` describes (fp8 in groups of 128) from its `parts`, their bytes placed as they are and their
/// scales expanded to its groups. Preconditions: require_fp8_tensors checked every part, whose outputs add up to
/// layout.rows() and whose inputs are layout.cols().
[[nodiscard]] QuantizedWeight repack_fp8(const Checkpoint& checkpoint, const PackedQuantization& packed,
                                         const QuantizedLayout& layout, std::span<const PackedPart> parts,
                                         int head_dim);

}  // namespace lazygraph::nn::detail
