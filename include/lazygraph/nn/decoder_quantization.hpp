#pragma once
/// \file
/// Layer 6, nn: a DecoderQuantization (quantization_config.hpp) applied to a Decoder: its choice of a format per
/// class of tensors (attention projections, MLP projections, LM head) checked against the decoder's shapes before
/// anything is allocated, the layouts of the quantized matrices, and quantized device weights. A checkpoint applies it
/// as it uploads (LoadOptions::quantization); seeded or other device weights are quantized by
/// quantize_decoder_weights. The embedding, the norm gains and the biases always stay in the decoder's element type.
///
/// A mixture of experts' experts are the mlp class (its router always stays dense): a layer's experts of one kind are
/// ONE quantized matrix, the experts' rows stacked in expert order (BasicMoeWeights), quantized as one matrix: int8
/// and int4 scales are per row, so each expert's bytes are what quantizing it alone gives; fp8's blocks of 128 rows run
/// over the stack, the same as each expert's own blocks where its rows are a multiple of 128 (Qwen3-30B-A3B's 768 and
/// 2048).
///
/// As the decoder holds them, a layer's q, k and v projections are ONE matrix, their rows stacked q, k, v
/// (q_dim + 2 kv_dim rows: quantized_qkv_rope_append reads them so) and those of q and k in the decoder's interleaved
/// order (decoder_tensors.hpp), named "model.layers.L.self_attn.qkv_proj.weight" (a quantized checkpoint saves it under
/// that name); each other quantized matrix is its checkpoint tensor, under its checkpoint name.

#include <cstddef>
#include <optional>
#include <vector>

#include "lazygraph/nn/decoder_tensors.hpp"
#include "lazygraph/nn/decoder_weights.hpp"
#include "lazygraph/nn/device_quantizer.hpp"
#include "lazygraph/nn/quantization_config.hpp"
#include "lazygraph/nn/quantized.hpp"

namespace lazygraph::nn {

/// The layout of every quantized matrix of `config`'s decoder under `quantization`, in the order the decoder holds
/// them: per layer the stacked q, k and v (q_dim + 2 kv_dim x d), Wo, W1, W3, W2 (those of quantized classes; in a
/// mixture of experts the experts' stacks instead, each kind one matrix of experts * rows, named stacked_experts_name),
/// then the LM head. \throws UsageError naming the first tensor (in decoder_tensors() order, checked one by one under
/// its checkpoint name) whose format cannot apply, and why (QuantizedLayout's checks); for an invalid config.
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
/// quantized there (quantize(), with the options), uploaded as a DeviceQuantizedWeight and its dense memory freed;
/// q, k and v together (one stacked matrix). For weights made on the device
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

/// Moves `matrices` into `weights`: the matrices of quantized_layouts(config, quantization), in its order, uploaded
/// (what DecoderCheckpoint::upload makes), each replacing the Weight it stands for (a dense one's memory is freed
/// unless another copy shares it). `stream` is unused (kept for the callers). \throws UsageError naming the first
/// matrix whose shape or format is not its layout's, or when the counts of matrices or layers differ.
template <Element T>
void adopt_quantized(const Stream& stream, BasicDecoderWeights<T>& weights, const DecoderConfig& config,
                     const DecoderQuantization& quantization, std::vector<DeviceQuantizedWeight<T>> matrices);

/// The quantization `weights` are held in: per class (attention, MLP, LM head) the format of its quantized matrices,
/// or none where the class is dense (the options are the defaults: how the weights were quantized is not recorded).
/// \throws UsageError naming the layer when a class is quantized in some layers and not in others, or in two formats
///         (weights adopt_quantized did not make).
template <Element T>
[[nodiscard]] DecoderQuantization quantization_of(const BasicDecoderWeights<T>& weights);

}  // namespace lazygraph::nn
