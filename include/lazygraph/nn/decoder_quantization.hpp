#pragma once
/// \file
/// Layer 6, nn: which weights of a Decoder are weight-only quantized, and in which format (quantized.hpp): one
/// choice per class of tensors (attention projections, MLP projections, LM head), checked against the decoder's
/// shapes before anything is allocated. A checkpoint applies it as it uploads (LoadOptions::quantization); seeded
/// or other device weights are quantized by quantize_decoder_weights. The embedding, the norm gains and the biases
/// always stay in the decoder's element type.
///
/// As the decoder holds them, a layer's q, k and v projections are ONE quantized matrix, their rows stacked q, k, v
/// (q_dim + 2 kv_dim rows: rms_norm_qgemv_qkv reads them so), named "model.layers.L.self_attn.{q,k,v}_proj.weight"
/// in messages; each other quantized matrix is its checkpoint tensor, under its checkpoint name.

#include <cstddef>
#include <optional>
#include <vector>

#include "lazygraph/nn/decoder.hpp"
#include "lazygraph/nn/decoder_tensors.hpp"
#include "lazygraph/nn/device_quantizer.hpp"
#include "lazygraph/nn/quantized.hpp"

namespace lazygraph::nn {

/// The classes of decoder tensors that DecoderQuantization chooses a format for.
enum class QuantizationClass {
  none,       ///< never quantized: the embedding, the norm gains, the q, k and v biases
  attention,  ///< Wq, Wk, Wv and Wo
  mlp,        ///< W1 (gate), W3 (up) and W2 (down)
  lm_head,    ///< the LM head
};

/// The class a decoder tensor belongs to.
[[nodiscard]] QuantizationClass quantization_class(DecoderTensorRole role) noexcept;

/// A format per class of decoder tensors (std::nullopt: that class stays dense, the decoder's element type), and
/// how quantize() picks the scales. The default quantizes nothing. A format's scale type must be the decoder's
/// element type's (ScaleType::f16 for an fp16 decoder, bf16 for bf16: scale_type_of), its group must divide the
/// tensor's input dimension (d; q_dim for Wo; ffn for W2), and that dimension must be a multiple of 64 for int4, of
/// 32 for int8 (QuantizedLayout says why).
struct DecoderQuantization {
  std::optional<QuantizedFormat> attention;  ///< Wq, Wk, Wv (stacked into one matrix) and Wo
  std::optional<QuantizedFormat> mlp;        ///< W1, W3 and W2
  std::optional<QuantizedFormat> lm_head;    ///< the LM head (never the embedding, even when tied to it)
  QuantizeOptions options;                   ///< clipping search or round to nearest, for every class

  /// Whether any class is quantized.
  [[nodiscard]] bool any() const noexcept { return attention || mlp || lm_head; }
  /// The format chosen for a tensor of `role`: its class's, or std::nullopt (dense).
  [[nodiscard]] std::optional<QuantizedFormat> format_of(DecoderTensorRole role) const noexcept;
};

/// The layout of every quantized matrix of `config`'s decoder under `quantization`, in the order the decoder holds
/// them: per layer the stacked q, k and v (q_dim + 2 kv_dim x d), Wo, W1, W3, W2 (those of quantized classes), then
/// the LM head. \throws UsageError naming the first tensor (in decoder_tensors() order, checked one by one under its
/// checkpoint name) whose format cannot apply, and why (QuantizedLayout's checks); for an invalid config.
[[nodiscard]] std::vector<QuantizedLayout> quantized_layouts(const DecoderConfig& config,
                                                             const DecoderQuantization& quantization);

/// quantized_layouts' checks, and that every chosen format stores its scales as `scales` (the decoder's element
/// type's, scale_type_of). \throws UsageError naming the first tensor that fails, and why.
void check_quantization(const DecoderConfig& config, const DecoderQuantization& quantization, ScaleType scales);

/// Device bytes of `config`'s decoder weights under `quantization`: 2 per element of every dense tensor (the biases
/// once, stacked or not) plus every quantized matrix's QuantizedLayout::bytes(). \throws UsageError as
/// quantized_layouts.
[[nodiscard]] std::size_t decoder_device_bytes(const DecoderConfig& config, const DecoderQuantization& quantization);

/// `weights`, dense, with the classes `quantization` chooses quantized: each chosen matrix is copied to the host,
/// quantized there (quantize(), with the options), uploaded as a DeviceQuantizedWeight and its dense buffer freed;
/// q, k and v together (adopt_quantized says where everything goes). For weights made on the device
/// (BasicDecoderWeights::generate) that a test or a benchmark wants quantized without a checkpoint. Waits for its
/// copies; needs host memory for the largest chosen matrix in floats. \throws UsageError, before any GPU work, as
/// check_quantization (with T's scale type), when the weights do not have `config`'s shapes or a chosen matrix is
/// already quantized; UsageError from quantize() naming the matrix for a weight that is not finite.
template <Element T>
[[nodiscard]] BasicDecoderWeights<T> quantize_decoder_weights(const Stream& stream, BasicDecoderWeights<T> weights,
                                                              const DecoderConfig& config,
                                                              const DecoderQuantization& quantization);

/// quantize_decoder_weights on the device: each chosen matrix (q, k and v stacked first) quantized by `quantizer`
/// where it lies, the same bytes as on the host (DeviceQuantizer's promise) without the host round trip. Temporary
/// device memory: one byte per weight of the largest matrix, plus the stacked q, k and v. \throws as the host
/// route; UsageError naming the matrix for a weight that is not finite.
template <Element T>
[[nodiscard]] BasicDecoderWeights<T> quantize_decoder_weights(const Stream& stream, const DeviceQuantizer& quantizer,
                                                              BasicDecoderWeights<T> weights,
                                                              const DecoderConfig& config,
                                                              const DecoderQuantization& quantization);

/// Moves `matrices` into `weights`' quantized members: the matrices of quantized_layouts(config, quantization), in its
/// order, uploaded (what DecoderCheckpoint::upload and quantize_decoder_weights make). The dense buffers of the
/// quantized tensors are left empty (freed, if they held anything), and with quantized attention and qkv_bias the
/// dense biases bq, bk and bv are copied on the device, stacked, into BasicQuantizedQkv::bias and freed. Waits for its
/// copies. \throws UsageError naming the first matrix whose shape or format is not its layout's, or when the counts of
/// matrices or layers differ.
template <Element T>
void adopt_quantized(const Stream& stream, BasicDecoderWeights<T>& weights, const DecoderConfig& config,
                     const DecoderQuantization& quantization, std::vector<DeviceQuantizedWeight<T>> matrices);

}  // namespace lazygraph::nn
