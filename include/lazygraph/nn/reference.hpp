#pragma once
/// \file
/// Float64 CPU implementations of the MLP stack and the decoder, from the same seeded weights as the GPU (docs/nn.md),
/// rounded to fp16 or bf16 as the GPU model's are. Everything after the weights is computed in double without
/// intermediate rounding, so the difference to the GPU is the GPU's rounding of activations and its fp32
/// arithmetic. They are slow (seconds for the
/// default decoder) and meant for checking the first steps, not for running models.

#include <limits>
#include <span>
#include <vector>

#include "lazygraph/nn/decoder_config.hpp"
#include "lazygraph/nn/mlp.hpp"
#include "lazygraph/nn/moe_routing.hpp"
#include "lazygraph/nn/safetensors.hpp"

namespace lazygraph::nn {

/// The MLP stack applied to each row of `input` (one or more rows of d values; the result has the same layout).
/// Weights are generated a layer at a time, once for all rows, so memory stays small.
/// `weights`: the seeded weights rounded to F16 (BasicMlp<half>'s) or BF16 (BasicMlp<bfloat16>'s).
/// \throws UsageError for another dtype or an invalid config.
std::vector<double> mlp_reference(const MlpConfig& config, std::span<const double> input, DType weights = DType::f16);

/// The decoder with its KV caches, in double.
class DecoderReference {
 public:
  /// Generates the weights of `config` (its seed) rounded to `weights` (F16: Decoder's, BF16: DecoderBf16's),
  /// in double. \throws UsageError for an invalid config or another dtype.
  explicit DecoderReference(const DecoderConfig& config, DType weights = DType::f16);

  /// One step at `position` (steps must come at 0, 1, 2, ...): returns the logits (vocab values). A mixture of experts
  /// (DecoderConfig::moe) routes by route_token on the router's float64 logits.
  std::vector<double> step(int token, int position);

  /// With a mixture of experts: the least gap, over every layer of every step so far, between the router logits of a
  /// token's last chosen expert and of its best unchosen one (infinity before the first step, or with every expert
  /// chosen, or without experts). A GPU, which rounds the logits, may choose otherwise where this is within rounding.
  [[nodiscard]] double route_margin() const noexcept { return route_margin_; }
  /// With a mixture of experts: each layer's route of the last step (route_token's choices on the float64 router
  /// logits), to compare with BasicDecoder::last_routes; empty before the first step or without experts.
  [[nodiscard]] const std::vector<std::vector<ExpertChoice>>& last_routes() const noexcept { return last_routes_; }
  /// Each layer's margin of the last step's route, as route_margin measures it (infinity with every expert chosen).
  [[nodiscard]] const std::vector<double>& last_route_margins() const noexcept { return last_route_margins_; }

 private:
  struct Layer {
    // biases empty without qkv_bias, q_norm and k_norm without qk_norm ([head_dim]; qk_norm_whole: [q_dim], [kv_dim])
    // attn_post_gain and mlp_post_gain empty without post_norms
    std::vector<double> attn_gain, wq, wk, wv, wo, bq, bk, bv, q_norm, k_norm, attn_post_gain, mlp_gain, w1, w3, w2,
        mlp_post_gain;
    // a mixture of experts' (DecoderConfig::moe; w1, w3, w2 then empty): its router and each expert's matrices
    std::vector<double> router;
    std::vector<std::vector<double>> expert_w1, expert_w3, expert_w2;
  };
  DecoderConfig config_;
  std::vector<double> embedding_;
  std::vector<Layer> layers_;
  std::vector<double> final_gain_;
  std::vector<double> lm_head_;
  std::vector<double> frequencies_;           ///< RoPE's inverse frequency per pair, in double (rope_frequencies)
  std::vector<double> local_frequencies_;     ///< the sliding layers' (DecoderConfig::local_theta), else empty
  double embedding_scale_ = 1;                ///< DecoderConfig::embedding_scale rounded to the weights' type
  std::vector<std::vector<double>> k_cache_;  ///< per layer, [heads][context][head_dim]
  std::vector<std::vector<double>> v_cache_;
  double route_margin_ = std::numeric_limits<double>::infinity();  ///< route_margin()
  std::vector<std::vector<ExpertChoice>> last_routes_;             ///< last_routes()
  std::vector<double> last_route_margins_;                         ///< last_route_margins()
};

/// ||got - want||_2 / ||want||_2.
double relative_error(std::span<const double> got, std::span<const double> want);
/// fp16 values widened to double.
std::vector<double> widen(std::span<const half> values);
/// bf16 values widened to double.
std::vector<double> widen(std::span<const bfloat16> values);
/// The lowest index of the largest value (argmax with ties to the lowest index).
int argmax(std::span<const double> values);

}  // namespace lazygraph::nn
