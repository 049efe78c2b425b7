#pragma once
/// \file
/// A small Llama-style decoder (README.md gives the exact math): token embedding, layers of multi-head attention
/// with RoPE and a KV cache plus a SwiGLU MLP, final norm, LM head and greedy argmax. One decode step is an op
/// expression, captured once into a CUDA graph; the token and the position reach it through device memory, so
/// every step replays the same graph.

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "mlp.hpp"
#include "model_kernels.hpp"

namespace models {

struct DecoderConfig {
  int d = 512;
  int heads = 8;
  int layers = 8;
  int ffn = 1536;
  int vocab = 4096;
  int context = 1024;
  float theta = 10000.0F;
  float eps = 1e-5F;
  std::uint32_t seed = 1234;
  bool early_launch = true;  ///< launch the kernels early (ModelKernels::step_config); false to compare

  [[nodiscard]] int head_dim() const noexcept { return heads > 0 ? d / heads : 0; }
  /// \throws lazygraph::UsageError for shapes the kernels cannot run: d and ffn multiples of 8, d divisible by
  /// heads with head_dim a multiple of 8 and at most 128, every count positive.
  void validate() const;
  /// Bytes of weights one step reads (all matrices and gains, plus one embedding row).
  [[nodiscard]] std::size_t weight_bytes() const;
};

/// One layer's attention weights: norm gain [d], Wq, Wk, Wv, Wo [d x d].
struct AttentionWeights {
  lg::DeviceBuffer<half> gain;
  lg::DeviceBuffer<half> wq;
  lg::DeviceBuffer<half> wk;
  lg::DeviceBuffer<half> wv;
  lg::DeviceBuffer<half> wo;
};

struct DecoderWeights {
  lg::DeviceBuffer<half> embedding;  ///< [vocab x d]
  std::vector<AttentionWeights> attention;
  std::vector<SwigluWeights> mlp;
  lg::DeviceBuffer<half> final_gain;  ///< [d]
  lg::DeviceBuffer<half> lm_head;     ///< [vocab x d]

  /// Generates every tensor on the GPU from config.seed (README.md's tensor ids).
  static DecoderWeights generate(const lg::Stream& stream, const ModelKernels& kernels, const DecoderConfig& config);
};

/// The device memory one step reads and writes besides the weights.
struct DecoderState {
  DecoderState(const lg::Device& device, const DecoderConfig& config);

  lg::DeviceBuffer<int> io;    ///< [token, position]: written before each replay
  lg::DeviceBuffer<int> next;  ///< the chosen next token
  lg::DeviceBuffer<half> x;    ///< residual stream [d]
  lg::DeviceBuffer<half> q;
  lg::DeviceBuffer<half> k;
  lg::DeviceBuffer<half> v;
  lg::DeviceBuffer<half> attn;  ///< attention output [d]
  lg::DeviceBuffer<half> act;   ///< MLP activation [ffn]
  lg::DeviceBuffer<half> logits;
  lg::DeviceBuffer<half> k_cache;  ///< [layers][heads][context][head_dim]
  lg::DeviceBuffer<half> v_cache;

  [[nodiscard]] lg::DeviceSpan<const int> token() const { return io.cview().subspan(0, 1); }
  [[nodiscard]] lg::DeviceSpan<const int> position() const { return io.cview().subspan(1, 1); }
};

/// x += Wo attention(rope(Wq h), rope(Wk h), Wv h), h = rmsnorm(x) * gain, appending this position's k and v to
/// the layer's caches. The three projections are independent branches of the graph.
inline auto attention_block(const ModelKernels& k, const AttentionWeights& w, DecoderState& s,
                            lg::DeviceSpan<half> k_cache, lg::DeviceSpan<half> v_cache, const DecoderConfig& c) {
  const int d = c.d;
  const auto project = [&](const lg::DeviceBuffer<half>& weight, lg::DeviceBuffer<half>& out) {
    return k.rms_norm_gemv(k.gemv_config(d, d), weight.cview(), s.x.cview(), w.gain.cview(), out.view(), d, d, c.eps);
  };
  const lg::LaunchConfig per_element = k.step_config(lg::grid_for(static_cast<std::size_t>(d), 256));
  const lg::LaunchConfig per_head = k.step_config(
      {{static_cast<unsigned>(c.heads), 1, 1}, {256, 1, 1}, static_cast<unsigned>(c.context * sizeof(float))});
  return lg::all(project(w.wq, s.q), project(w.wk, s.k), project(w.wv, s.v)) >>
         k.rope(per_element, s.q.view(), s.k.view(), s.position(), c.heads, c.head_dim(), c.theta) >>
         k.kv_append(per_element, s.k.cview(), s.v.cview(), k_cache, v_cache, s.position(), c.heads, c.head_dim(),
                     c.context) >>
         k.attention(per_head, s.q.cview(), k_cache.as_const(), v_cache.as_const(), s.attn.view(), s.position(),
                     c.heads, c.head_dim(), c.context, 1.0F / std::sqrt(static_cast<float>(c.head_dim()))) >>
         k.gemv_add(k.gemv_config(d, d), w.wo.cview(), s.attn.cview(), s.x.view(), d, d);
}

/// One decoder layer: attention block, then the SwiGLU MLP block.
inline auto decoder_layer(const ModelKernels& k, const DecoderWeights& w, DecoderState& s, int layer,
                          const DecoderConfig& c) {
  const std::size_t cache_size =
      static_cast<std::size_t>(c.heads) * static_cast<std::size_t>(c.context) * static_cast<std::size_t>(c.head_dim());
  const std::size_t offset = static_cast<std::size_t>(layer) * cache_size;
  const auto l = static_cast<std::size_t>(layer);
  return attention_block(k, w.attention[l], s, s.k_cache.view().subspan(offset, cache_size),
                         s.v_cache.view().subspan(offset, cache_size), c) >>
         swiglu_block(k, w.mlp[l], s.x.view(), s.act.view(), c.d, c.ffn, c.eps);
}

using DecoderLayerOp =
    decltype(decoder_layer(std::declval<const ModelKernels&>(), std::declval<const DecoderWeights&>(),
                           std::declval<DecoderState&>(), 0, std::declval<const DecoderConfig&>()));

/// One decode step: reads the token and position from s.io, writes the logits and the next token.
inline auto decoder_step(const ModelKernels& k, const DecoderWeights& w, DecoderState& s, const DecoderConfig& c) {
  std::vector<DecoderLayerOp> layers;
  layers.reserve(static_cast<std::size_t>(c.layers));
  for (int l = 0; l < c.layers; ++l) layers.push_back(decoder_layer(k, w, s, l, c));
  return k.embedding(k.step_config(lg::grid_for(static_cast<std::size_t>(c.d), 256)), w.embedding.cview(), s.token(),
                     s.x.view(), c.d) >>
         lg::chain(std::move(layers)) >> k.rms_norm_gemv(k.gemv_config(c.vocab, c.d), w.lm_head.cview(), s.x.cview(),
                                                         w.final_gain.cview(), s.logits.view(), c.vocab, c.d, c.eps) >>
         k.argmax(k.step_config({{1, 1, 1}, {1024, 1, 1}, 0}), s.logits.cview(), s.next.view(), c.vocab);
}

/// Where a step starts: the current token and its position in the sequence.
struct TokenAt {
  int token = 0;
  int position = 0;
};

/// The decoder as a Module: `forward({token, position})` returns the greedy next token. Steps must come at
/// positions 0, 1, 2, ... (each attends over the k and v of the earlier ones); `reset` starts a new sequence.
/// Not thread-safe: step it from one thread at a time.
class Decoder {
 public:
  using Input = TokenAt;
  using Output = int;

  /// \throws lazygraph::UsageError for an invalid config.
  Decoder(const lg::Stream& stream, const lg::KernelLibrary& library, const DecoderConfig& config = {});

  /// Runs one step. \throws lazygraph::UsageError for a token outside [0, vocab) or a position outside
  /// [0, context).
  Output forward(Input in);

  /// Clears the KV caches (not needed to start over at position 0; it makes stale entries impossible to read).
  void reset();

  /// The last step's logits (vocab values).
  [[nodiscard]] std::vector<half> logits() const;

  /// The step as an op, for running it without the graph (the benchmark's eager variant); reads s.io.
  [[nodiscard]] auto step_op() { return decoder_step(kernels_, weights_, state_, config_); }

  [[nodiscard]] const DecoderConfig& config() const noexcept { return config_; }
  [[nodiscard]] lg::CudaGraph<>& graph() noexcept { return graph_; }

 private:
  DecoderConfig config_;
  ModelKernels kernels_;
  DecoderWeights weights_;
  DecoderState state_;
  lg::PinnedBuffer<int> io_host_;
  lg::PinnedBuffer<int> next_host_;
  lg::CudaGraph<> graph_;
};

static_assert(lg::Module<Decoder>);

}  // namespace models
