#pragma once
/// \file
/// A decoder's weights on the device: each layer's attention and MLP weights, the embedding, the final norm and the
/// LM head. The matrices are Weight<T> (weight.hpp), in any format the projections read; the gains and the embedding
/// are in the element type.

#include <algorithm>
#include <cstddef>
#include <vector>

#include "lazygraph/nn/decoder_config.hpp"
#include "lazygraph/nn/kernels.hpp"
#include "lazygraph/nn/swiglu.hpp"
#include "lazygraph/nn/weight.hpp"

namespace lazygraph::nn {

/// One layer's attention weights: norm gain [d]; Wq [q_dim x d], Wk and Wv [kv_dim x d] as ONE stacked matrix `qkv`
/// (rows q, then k, then v: one stream of weight rows for the kernel that projects all three, one GEMM for prompts), in
/// any format (weight.hpp); Wo [d x q_dim]; with DecoderConfig::qkv_bias the biases of q, k and v stacked the same way.
/// The rows of q and k (and their biases) are in the decoder's interleaved RoPE order (decoder_tensors.hpp).
template <Element T>
struct BasicAttentionWeights {
  DeviceBuffer<T> gain;       ///< input norm gain [d]
  Weight<T> qkv;              ///< [q_dim + 2 kv_dim x d]: Wq, Wk, Wv stacked; wq(), wk() and wv() view the parts
  Weight<T> wo;               ///< [d x q_dim]
  DeviceBuffer<T> bias;       ///< [q_dim + 2 kv_dim]: bq, bk, bv stacked with qkv_bias, else empty
  DeviceBuffer<T> q_norm;     ///< q's RMSNorm gain with DecoderConfig::qk_norm ([head_dim]; qk_norm_whole: [q_dim])
  DeviceBuffer<T> k_norm;     ///< k's RMSNorm gain with DecoderConfig::qk_norm ([head_dim]; qk_norm_whole: [kv_dim])
  DeviceBuffer<T> post_gain;  ///< the output's RMSNorm gain [d] with DecoderConfig::post_norms, else empty

  /// Wq [q_dim x d]: the first q_dim rows of qkv. \throws UsageError as Weight::rows_view.
  [[nodiscard]] Weight<T> wq(const DecoderConfig& c) const { return qkv.rows_view(0, c.q_dim()); }
  /// Wk [kv_dim x d]: qkv's rows from q_dim on. \throws UsageError as Weight::rows_view.
  [[nodiscard]] Weight<T> wk(const DecoderConfig& c) const { return qkv.rows_view(c.q_dim(), c.kv_dim()); }
  /// Wv [kv_dim x d]: qkv's last kv_dim rows. \throws UsageError as Weight::rows_view.
  [[nodiscard]] Weight<T> wv(const DecoderConfig& c) const { return qkv.rows_view(c.q_dim() + c.kv_dim(), c.kv_dim()); }
  /// Part `part` (0 q, 1 k, 2 v) of the stacked biases; empty without biases.
  [[nodiscard]] DeviceSpan<const T> bias_part(const DecoderConfig& c, int part) const {
    if (bias.empty()) return {};
    const auto q = static_cast<std::size_t>(c.q_dim());
    const auto kv = static_cast<std::size_t>(c.kv_dim());
    return part == 0 ? bias.cview().subspan(0, q) : bias.cview().subspan(q + (part - 1) * kv, kv);
  }

  /// Whether any projection is quantized.
  [[nodiscard]] bool quantized() const noexcept { return !qkv.is_dense() || !wo.is_dense(); }
};

/// One layer's fp16 attention weights.
using AttentionWeights = BasicAttentionWeights<half>;

/// One layer's mixture of experts (DecoderConfig::moe): the router, dense in T, and each kind of expert matrix stacked
/// in expert order as ONE Weight (any format the expert projections read, expert_projection.hpp), as kernels/nn/moe.cu
/// and qmoe.cu read them: expert e's rows are rows e * rows_per_expert .. of it. A quantized stack is the experts' own
/// quantized matrices' bytes one after another, each expert whole tiles of 16 rows. The norm before it is the layer's
/// BasicSwigluWeights::gain.
template <Element T>
struct BasicMoeWeights {
  DeviceBuffer<T> router;  ///< [experts x d]
  Weight<T> w1;            ///< the experts' gate projections [experts * expert_width x d]
  Weight<T> w3;            ///< the experts' up projections [experts * expert_width x d]
  Weight<T> w2;            ///< the experts' down projections [experts * d x expert_width]

  /// Whether the experts are quantized.
  [[nodiscard]] bool quantized() const noexcept { return !w1.is_dense() || !w3.is_dense() || !w2.is_dense(); }
};

/// Every weight of a decoder, on the device. The matrices of attention, mlp and the LM head are each in any format
/// the projections read (weight.hpp; decoder_quantization.hpp makes quantized ones); the embedding and the norm gains
/// are always in T. A tied LM head shares the embedding's memory.
template <Element T>
struct BasicDecoderWeights {
  DeviceBuffer<T> embedding;                        ///< [vocab x d]
  std::vector<BasicAttentionWeights<T>> attention;  ///< per layer
  std::vector<BasicSwigluWeights<T>> mlp;           ///< per layer
  DeviceBuffer<T> final_gain;                       ///< [d]
  Weight<T> lm_head;                                ///< [vocab x d]
  /// Per layer with a mixture of experts (DecoderConfig::moe), else empty; mlp then holds only the layers' norm gains
  /// (and post-norm gains), its matrices empty.
  std::vector<BasicMoeWeights<T>> moe;

  /// Generates every tensor on the GPU from config.seed (docs/nn.md's tensor ids), dense.
  static BasicDecoderWeights generate(const Stream& stream, const BasicKernels<T>& kernels,
                                      const DecoderConfig& config);

  /// Every weight matrix of the dense projections, in the order the decoder holds them: per layer qkv, wo, w1, w3, w2
  /// (empty Weights in a layer of experts); then the LM head. The experts' stacks are expert_matrices().
  [[nodiscard]] std::vector<const Weight<T>*> matrices() const {
    std::vector<const Weight<T>*> out;
    out.reserve(attention.size() * 5 + 1);
    for (std::size_t l = 0; l < attention.size() && l < mlp.size(); ++l) {
      out.insert(out.end(), {&attention[l].qkv, &attention[l].wo, &mlp[l].w1, &mlp[l].w3, &mlp[l].w2});
    }
    out.push_back(&lm_head);
    return out;
  }

  /// Every layer's stacked expert matrices (a mixture of experts'), per layer w1, w3, w2; empty without experts.
  [[nodiscard]] std::vector<const Weight<T>*> expert_matrices() const {
    std::vector<const Weight<T>*> out;
    out.reserve(moe.size() * 3);
    for (const BasicMoeWeights<T>& m : moe) out.insert(out.end(), {&m.w1, &m.w3, &m.w2});
    return out;
  }

  /// Whether any matrix, or any expert, is quantized (the decoder then needs the quantized kernels:
  /// BasicQuantizedKernels).
  [[nodiscard]] bool quantized() const {
    const auto is_quantized = [](const Weight<T>* w) { return !w->is_dense(); };
    const std::vector<const Weight<T>*> all = matrices();
    const std::vector<const Weight<T>*> experts = expert_matrices();
    return std::any_of(all.begin(), all.end(), is_quantized) ||
           std::any_of(experts.begin(), experts.end(), is_quantized);
  }
};

/// Every weight of an fp16 decoder.
using DecoderWeights = BasicDecoderWeights<half>;

}  // namespace lazygraph::nn
