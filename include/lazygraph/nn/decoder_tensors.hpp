#pragma once
/// \file
/// Every weight tensor of a Decoder, in one list: its Hugging Face checkpoint name and shape, how the seeded
/// weights generate it (docs/nn.md's tensor ids), and where it goes in DecoderWeights. Generating, loading and
/// saving weights all walk this list, so the three cannot disagree.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lazygraph/nn/decoder_weights.hpp"
#include "lazygraph/nn/random_weights.hpp"

namespace lazygraph::nn {

/// What a tensor is in the decoder.
enum class DecoderTensorRole {
  embedding,            ///< token embedding [vocab x d]
  attention_gain,       ///< a layer's input norm gain [d]
  wq,                   ///< [q_dim x d]
  wk,                   ///< [kv_dim x d]
  wv,                   ///< [kv_dim x d]
  wo,                   ///< [d x q_dim]
  bq,                   ///< q bias [q_dim] (DecoderConfig::qkv_bias)
  bk,                   ///< k bias [kv_dim]
  bv,                   ///< v bias [kv_dim]
  q_norm,               ///< q's per-head RMSNorm gain [head_dim] (DecoderConfig::qk_norm), [q_dim] with qk_norm_whole
  k_norm,               ///< k's per-head RMSNorm gain [head_dim], [kv_dim] with qk_norm_whole
  attention_post_gain,  ///< the attention output's RMSNorm gain [d] (DecoderConfig::post_norms)
  mlp_gain,             ///< a layer's post-attention norm gain [d]
  w1,                   ///< gate projection [ffn x d]
  w3,                   ///< up projection [ffn x d]
  w2,                   ///< down projection [d x ffn]
  mlp_post_gain,        ///< the MLP output's RMSNorm gain [d] (DecoderConfig::post_norms)
  moe_router,           ///< a mixture of experts' router [experts x d] (DecoderConfig::moe)
  moe_w1,               ///< an expert's gate projection [expert_width x d]
  moe_w3,               ///< an expert's up projection [expert_width x d]
  moe_w2,               ///< an expert's down projection [d x expert_width]
  final_gain,           ///< final norm gain [d]
  lm_head,              ///< [vocab x d]
};

/// One weight tensor of a decoder.
struct DecoderTensor {
  std::string name;        ///< its name in a Hugging Face Llama checkpoint, e.g. "model.layers.0.mlp.up_proj.weight"
  DecoderTensorRole role;  ///< what it is
  int layer = -1;          ///< its layer; -1 for the embedding, the final gain and the LM head
  int rows = 1;            ///< rows of the matrix (1 for a gain vector, the length for a bias)
  int cols = 1;            ///< columns (the vector's length for a gain, 1 for a bias)
  TensorSpec seeded;       ///< how seeded weights generate it
  /// Whether a checkpoint stores its rows in Hugging Face's rotate-half order (q_proj and k_proj): within each
  /// head, row j * head_dim/2 + i there is row 2i + j here, the interleaved pairs the rope kernel rotates.
  bool rope_rows = false;
  /// What a checkpoint's values are offset by: a norm gain is stored as w meaning offset + w (DecoderConfig::
  /// gain_offset, Gemma 3's 1); the loader adds it, the seeded saver subtracts it. 0 for every other tensor.
  float offset = 0;

  /// The checkpoint shape: {rows, cols} for a matrix, {cols} for a gain, {rows} for a bias.
  [[nodiscard]] std::vector<std::int64_t> shape() const;
  /// rows * cols.
  [[nodiscard]] std::size_t elements() const noexcept {
    return static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  }
};

/// Every weight of `config`'s decoder, in the order DecoderWeights holds them: embedding, then per layer the
/// attention gain, Wq, Wk, Wv, Wo, (with qkv_bias) bq, bk, bv, (with qk_norm) the q and k norms' gains, (with
/// post_norms) the attention output's norm gain, the MLP gain, W1, W3, W2, (with post_norms) the MLP output's norm
/// gain, then the final gain and the LM head. A mixture of experts (DecoderConfig::moe) has in place of W1, W3 and W2
/// its router, then every expert's W1, every expert's W3 and every expert's W2 (each kind in expert order, so that
/// assemble_decoder_weights stacks them as they come), named as MoeShape::names says (Qwen3-MoE's and OLMoE's
/// model.layers.L.mlp.gate.weight, model.layers.L.mlp.experts.E.gate_proj.weight, up_proj, down_proj; or Mixtral's
/// block_sparse_moe.gate and block_sparse_moe.experts.E.w1, w3, w2). With post_norms
/// (Gemma 3) the norms take Gemma's names: the MLP's input norm is pre_feedforward_layernorm, the attention output's
/// post_attention_layernorm. The q and k biases and the q and k norms' gains are rope_rows: their elements are
/// reordered as the rows of Wq and Wk (a per-head norm's gain as the rows of one head). \throws UsageError for an
/// invalid config.
std::vector<DecoderTensor> decoder_tensors(const DecoderConfig& config);

/// The row of a rope_rows matrix in checkpoint (rotate-half) order that holds row `row` of the interleaved order.
[[nodiscard]] constexpr int rotate_half_row(int row, int head_dim) noexcept {
  const int head = row / head_dim;
  const int r = row % head_dim;
  return head * head_dim + (r % 2) * (head_dim / 2) + r / 2;
}

/// The name a layer's stacked q, k and v matrix goes by (BasicAttentionWeights::qkv, and a quantized checkpoint's
/// tensor): its q_proj's name with q_proj replaced by qkv_proj, "model.layers.L.self_attn.qkv_proj.weight".
[[nodiscard]] std::string stacked_qkv_name(const std::string& q_name);

/// Whether tensors[i] is stacked with tensors[i + 1] into one matrix as the decoder holds them: a layer's Wq and Wk
/// (with Wv after them, BasicAttentionWeights::qkv), and a layer's experts of one kind but the last (BasicMoeWeights).
[[nodiscard]] bool stacked_with_next(const std::vector<DecoderTensor>& tensors, std::size_t i);

/// The name a layer's stacked experts of one kind go by (BasicMoeWeights' w1, w3, w2): the first expert's tensor name
/// with its index replaced by `*`, "model.layers.L.mlp.experts.*.gate_proj.weight".
[[nodiscard]] std::string stacked_experts_name(const std::string& first_expert_name);

/// Builds the weights of `config`'s decoder: allocates each tensor of decoder_tensors(config) that `dense(const
/// DecoderTensor&) -> bool` says is dense and calls `fill(const DecoderTensor&, DeviceSpan<T> into)` once per tensor,
/// in that order, to write it into `into`. A layer's Wq, Wk and Wv go into its one stacked matrix
/// (BasicAttentionWeights::qkv, allocated at Wq's turn, named stacked_qkv_name), `into` their rows of it, and its
/// biases into its one stacked bias buffer; a layer's dense W1 and W3 (both dense) share one buffer, W3's rows right
/// after W1's, each still a Weight of its own named as its tensor (so that stacked_rows gives the prompt and wide
/// steps one product over both); every other tensor has a buffer of its own, each matrix a dense Weight
/// named as the tensor; a layer's experts of one kind go into one stacked matrix (BasicMoeWeights, allocated at the
/// first expert's turn, named stacked_experts_name), `into` each expert's rows of it. A matrix that is not dense (held
/// elsewhere, e.g. quantized as it loads) is left an empty Weight, and `fill` still gets it, with an empty `into`.
/// Gains, the embedding and the biases are always dense. \throws UsageError, before anything is allocated, when `dense`
/// calls some of a layer's Wq, Wk and Wv dense and some not (they share one matrix), or some of a layer's experts of
/// one kind; what `fill` throws, after which the buffers made so far are freed (a `fill` that copies asynchronously
/// waits for its copies before it throws).
template <Element T, class Dense, class Fill>
BasicDecoderWeights<T> assemble_decoder_weights(const Device& device, const DecoderConfig& config, Dense&& dense,
                                                Fill&& fill) {
  const std::vector<DecoderTensor> tensors = decoder_tensors(config);
  std::vector<bool> is_dense;
  is_dense.reserve(tensors.size());
  for (const DecoderTensor& t : tensors) is_dense.push_back(static_cast<bool>(dense(t)));
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].role != DecoderTensorRole::wq) continue;  // Wk and Wv follow it
    if (is_dense[i] != is_dense[i + 1] || is_dense[i] != is_dense[i + 2]) {
      std::string dense_names;
      std::string other_names;
      for (std::size_t j = i; j < i + 3; ++j) {
        std::string& names = is_dense[j] ? dense_names : other_names;
        names += (names.empty() ? "" : ", ") + tensors[j].name;
      }
      throw UsageError("assemble_decoder_weights: layer " + std::to_string(tensors[i].layer) +
                       "'s q, k and v share one matrix (BasicAttentionWeights::qkv), so they must be all dense or "
                       "none; dense: " +
                       dense_names + "; not dense: " + other_names);
    }
  }
  for (std::size_t i = 1; i < tensors.size(); ++i) {  // a layer's experts of one kind share one stacked matrix
    const DecoderTensorRole role = tensors[i].role;
    const bool expert =
        role == DecoderTensorRole::moe_w1 || role == DecoderTensorRole::moe_w3 || role == DecoderTensorRole::moe_w2;
    if (expert && tensors[i - 1].role == role && is_dense[i] != is_dense[i - 1]) {
      throw UsageError("assemble_decoder_weights: " + tensors[i - 1].name + " and " + tensors[i].name +
                       " share one stacked matrix (BasicMoeWeights), so a layer's experts of one kind must be all "
                       "dense or none");
    }
  }
  std::size_t next = 0;
  // The next tensor (a gain or the embedding) in a buffer of its own, filled.
  const auto take = [&] {
    const DecoderTensor& t = tensors[next++];
    DeviceBuffer<T> out(device, t.elements());
    fill(t, out.view());
    return out;
  };
  // The next tensor, a matrix: a dense Weight, or an empty one where not dense.
  const auto take_matrix = [&] {
    const bool held = is_dense[next];
    const DecoderTensor& t = tensors[next++];
    DeviceBuffer<T> out(device, held ? t.elements() : 0);
    fill(t, out.view());
    return held ? Weight<T>(std::move(out), t.rows, t.cols, t.name) : Weight<T>();
  };
  // The next `count` tensors stacked in one buffer, filled; `held` false: an empty buffer.
  const auto take_stacked = [&](std::size_t count, bool held) {
    const std::size_t first = next;
    std::size_t size = 0;
    for (std::size_t i = first; i < first + count; ++i) size += held ? tensors[i].elements() : 0;
    DeviceBuffer<T> out(device, size);
    std::size_t at = 0;
    for (; next < first + count; ++next) {
      const std::size_t elements = held ? tensors[next].elements() : 0;
      fill(tensors[next], out.view().subspan(at, elements));
      at += elements;
    }
    return out;
  };
  DeviceBuffer<T> embedding = take();
  std::vector<BasicAttentionWeights<T>> attention;
  std::vector<BasicSwigluWeights<T>> mlp;
  std::vector<BasicMoeWeights<T>> moe;
  const int qkv_rows = config.q_dim() + 2 * config.kv_dim();
  for (int l = 0; l < config.layers; ++l) {
    DeviceBuffer<T> gain = take();
    const bool qkv_dense = is_dense[next];
    const std::string qkv_name = stacked_qkv_name(tensors[next].name);
    DeviceBuffer<T> stacked = take_stacked(3, qkv_dense);
    Weight<T> qkv = qkv_dense ? Weight<T>(std::move(stacked), qkv_rows, config.d, qkv_name) : Weight<T>();
    Weight<T> wo = take_matrix();
    DeviceBuffer<T> bias = config.qkv_bias ? take_stacked(3, true) : DeviceBuffer<T>(device, 0);
    DeviceBuffer<T> q_norm = config.qk_norm ? take() : DeviceBuffer<T>(device, 0);
    DeviceBuffer<T> k_norm = config.qk_norm ? take() : DeviceBuffer<T>(device, 0);
    DeviceBuffer<T> attention_post = config.post_norms ? take() : DeviceBuffer<T>(device, 0);
    attention.push_back({std::move(gain), std::move(qkv), std::move(wo), std::move(bias), std::move(q_norm),
                         std::move(k_norm), std::move(attention_post)});
    DeviceBuffer<T> mlp_gain = take();
    if (config.mixture_of_experts()) {  // the router, then each kind of expert matrix stacked in expert order
      const auto experts = static_cast<std::size_t>(config.moe.experts);
      const int stacked_rows = config.moe.experts * config.moe.expert_width;
      DeviceBuffer<T> router = take();
      // A kind is dense or not as its first expert is (decoder_quantization.cpp quantizes experts by kind).
      const auto take_experts = [&](int rows, int cols) {
        const bool held = is_dense[next];
        const std::string name = stacked_experts_name(tensors[next].name);
        DeviceBuffer<T> stacked = take_stacked(experts, held);
        return held ? Weight<T>(std::move(stacked), rows, cols, name) : Weight<T>();
      };
      Weight<T> e1 = take_experts(stacked_rows, config.d);
      Weight<T> e3 = take_experts(stacked_rows, config.d);
      Weight<T> e2 = take_experts(config.moe.experts * config.d, config.moe.expert_width);
      moe.push_back({std::move(router), std::move(e1), std::move(e3), std::move(e2)});
    }
    Weight<T> w1;
    Weight<T> w3;
    if (!config.mixture_of_experts() && is_dense[next] && is_dense[next + 1]) {
      // A dense W1 and W3 in one buffer, W3 right after W1, so that a product over many rows reads both at once
      // (stacked_rows, gemm_layer); each is still a Weight of its own.
      const DecoderTensor& t1 = tensors[next];
      const DecoderTensor& t3 = tensors[next + 1];
      const DeviceSpan<T> both = take_stacked(2, true).view();
      w1 = Weight<T>(both.subspan(0, t1.elements()), t1.rows, t1.cols, t1.name);
      w3 = Weight<T>(both.subspan(t1.elements(), t3.elements()), t3.rows, t3.cols, t3.name);
    } else if (!config.mixture_of_experts()) {
      w1 = take_matrix();
      w3 = take_matrix();
    }
    Weight<T> w2 = config.mixture_of_experts() ? Weight<T>() : take_matrix();
    DeviceBuffer<T> mlp_post = config.post_norms ? take() : DeviceBuffer<T>(device, 0);
    mlp.push_back({std::move(mlp_gain), std::move(w1), std::move(w3), std::move(w2), std::move(mlp_post)});
  }
  DeviceBuffer<T> final_gain = take();
  Weight<T> lm_head = take_matrix();
  return {std::move(embedding),  std::move(attention), std::move(mlp),
          std::move(final_gain), std::move(lm_head),   std::move(moe)};
}

/// assemble_decoder_weights with every tensor dense.
template <Element T, class Fill>
BasicDecoderWeights<T> assemble_decoder_weights(const Device& device, const DecoderConfig& config, Fill&& fill) {
  return assemble_decoder_weights<T>(
      device, config, [](const DecoderTensor&) { return true; }, std::forward<Fill>(fill));
}

}  // namespace lazygraph::nn
