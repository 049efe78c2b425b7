#pragma once
/// \file
/// Layer 6, nn: which weights of a Decoder are weight-only quantized, and in which format, as plain data: what
/// LoadOptions::quantization asks an upload for, and what a quantized checkpoint's config.json records under
/// "quantization_config" (LlamaConfig reads and writes it there). decoder_quantization.hpp applies it to a decoder.

#include <optional>
#include <string>
#include <vector>

#include "lazygraph/nn/quantized.hpp"

namespace lazygraph::nn {

enum class DecoderTensorRole;  // decoder_tensors.hpp

/// The version of the saved form of quantized weights that a quantized checkpoint's config.json records
/// (quantization_config's "layout_version"): the byte layout of quantized.hpp and the tensors of
/// quantized_checkpoint.hpp. Raised whenever either changes, so that a checkpoint of another version is refused
/// rather than misread.
inline constexpr int quantized_layout_version = 1;

/// The classes of decoder tensors that DecoderQuantization chooses a format for.
enum class QuantizationClass {
  none,       ///< never quantized: the embedding, the norm gains, the q, k and v biases
  attention,  ///< Wq, Wk, Wv and Wo
  mlp,        ///< W1 (gate), W3 (up) and W2 (down); in a mixture of experts every expert's (never the router)
  lm_head,    ///< the LM head
};

/// The class a decoder tensor belongs to.
[[nodiscard]] QuantizationClass quantization_class(DecoderTensorRole role) noexcept;

/// A format per class of decoder tensors (std::nullopt: that class stays dense, the decoder's element type), and
/// how quantize() picks the scales. The default quantizes nothing. A format's scale type must be the decoder's
/// element type's (ScaleType::f16 for an fp16 decoder, bf16 for bf16: scale_type_of), its group must divide the
/// tensor's input dimension (d; q_dim for Wo; ffn for W2; expert_width for an expert's W2), and that dimension must be
/// a multiple of 64 for int4, of 32 for int8, of 128 for fp8 (QuantizedLayout says why).
struct DecoderQuantization {
  std::optional<QuantizedFormat> attention;  ///< Wq, Wk, Wv (stacked into one matrix) and Wo
  std::optional<QuantizedFormat> mlp;        ///< W1, W3 and W2, or a mixture of experts' experts (not its router)
  std::optional<QuantizedFormat> lm_head;    ///< the LM head (never the embedding, even when tied to it)
  QuantizeOptions options;                   ///< clipping search or round to nearest, for every class

  /// Whether any class is quantized.
  [[nodiscard]] bool any() const noexcept { return attention || mlp || lm_head; }
  /// The format chosen for a tensor of `role`: its class's, or std::nullopt (dense).
  [[nodiscard]] std::optional<QuantizedFormat> format_of(DecoderTensorRole role) const noexcept;

  /// Whether both quantize the same classes into the same bytes: the same formats, compared as they store weights
  /// (an int8 format's group, which int8 does not use, is not compared), and the same options.
  friend bool operator==(const DecoderQuantization& a, const DecoderQuantization& b) noexcept;
};

/// The tools whose quantized checkpoints lazygraph reads as they are: their 4-bit int32-packed matrices repacked on
/// load into the int4 layout with zero points (quantized.hpp) that the kernels read, their FP8 e4m3 matrices placed
/// byte for byte into the fp8 layout.
enum class PackedMethod {
  awq,   ///< AutoAWQ's GEMM packing (quant_method "awq", version "gemm")
  gptq,  ///< AutoGPTQ's / GPTQModel's packing (quant_method "gptq", checkpoint_format "gptq": zero points stored - 1)
  /// transformers' FineGrainedFP8 (quant_method "fp8", fmt "e4m3", weight_block_size [128, 128]): `<module>.weight`
  /// F8_E4M3 [N, K] and `<module>.weight_scale_inv` F32 or BF16 [ceil(N / 128), ceil(K / 128)], w = fp8 * scale
  fp8,
  /// compressed-tensors' "float-quantized" 8-bit float weights (llm-compressor's FP8), strategy "channel"
  /// (`<module>.weight_scale` [N, 1]) or "block" [128, 128] (as fp8's, named weight_scale), w = fp8 * scale
  compressed_tensors,
};

/// A Hugging Face quantization_config of another tool's quantized checkpoint, as read (config_json.cpp checks it).
/// Which matrices the checkpoint holds packed is not here: DecoderCheckpoint::open looks their tensors up
/// (`.qweight`; FP8: a `.weight` of dtype F8_E4M3).
struct PackedQuantization {
  PackedMethod method = PackedMethod::awq;  ///< quant_method
  int group = 128;                          ///< group_size: 32, 64 or 128 inputs per scale and zero point
  bool symmetric = false;  ///< gptq's sym (its zero points are still stored, 8 each, and kept as they are)
  bool desc_act = false;   ///< gptq's desc_act (read only where g_idx is the plain grouping k / group_size)
  std::vector<std::string> modules_to_not_convert;  ///< awq's and fp8's, compressed-tensors' ignore: not packed
  bool per_channel = false;  ///< compressed_tensors' strategy "channel": one scale per output (else blocks of 128)
  /// fp8 and compressed_tensors: the scale type their matrices are stored with, the model's (config.json's
  /// torch_dtype float16: fp16; otherwise bf16), so that a decoder of the model's element type reads them
  ScaleType scale_type = ScaleType::f16;

  /// The format the packed matrices are repacked into: for AWQ and GPTQ the 4-bit format with zero points (int4 in
  /// groups), in groups of `group`, asymmetric, fp16 scales; for the FP8 methods the fp8 format in groups of 128, of
  /// scale_type.
  [[nodiscard]] QuantizedFormat format() const;

  /// Whether the method stores FP8 e4m3 matrices (fp8, compressed_tensors).
  [[nodiscard]] bool fp8() const noexcept {
    return method == PackedMethod::fp8 || method == PackedMethod::compressed_tensors;
  }

  /// Whether every field is equal.
  friend bool operator==(const PackedQuantization&, const PackedQuantization&) = default;
};

/// "AWQ", "GPTQ", "FP8" or "compressed-tensors FP8", for messages.
[[nodiscard]] std::string packed_method_name(PackedMethod method);

/// `quantization` in messages, e.g. "attention int8 per channel, fp16 scales; MLP int4 g128, fp16 scales; LM head
/// dense" (", with the clipping search" appended when it is on), or "nothing quantized".
[[nodiscard]] std::string quantization_name(const DecoderQuantization& quantization);

}  // namespace lazygraph::nn
