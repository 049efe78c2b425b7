#pragma once
/// \file
/// Float64 CPU implementations of the MLP stack and the decoder, from the same seeded fp16 weights as the GPU
/// (docs/nn.md). Everything after the weights is computed in double without intermediate rounding, so the
/// difference to the GPU is the GPU's fp16 rounding and fp32 arithmetic. They are slow (seconds for the
/// default decoder) and meant for checking the first steps, not for running models.

#include <span>
#include <vector>

#include "lazygraph/nn/decoder.hpp"
#include "lazygraph/nn/mlp.hpp"

namespace lazygraph::nn {

/// The MLP stack applied to `input` (d values). Weights are generated a layer at a time, so memory stays small.
std::vector<double> mlp_reference(const MlpConfig& config, std::span<const double> input);

/// The decoder with its KV caches, in double.
class DecoderReference {
 public:
  /// Generates the weights of `config` (its seed) in double. \throws UsageError for an invalid config.
  explicit DecoderReference(const DecoderConfig& config);

  /// One step at `position` (steps must come at 0, 1, 2, ...): returns the logits (vocab values).
  std::vector<double> step(int token, int position);

 private:
  struct Layer {
    std::vector<double> attn_gain, wq, wk, wv, wo, mlp_gain, w1, w3, w2;
  };
  DecoderConfig config_;
  std::vector<double> embedding_;
  std::vector<Layer> layers_;
  std::vector<double> final_gain_;
  std::vector<double> lm_head_;
  std::vector<std::vector<double>> k_cache_;  ///< per layer, [heads][context][head_dim]
  std::vector<std::vector<double>> v_cache_;
};

/// ||got - want||_2 / ||want||_2.
double relative_error(std::span<const double> got, std::span<const double> want);
/// fp16 values widened to double.
std::vector<double> widen(std::span<const half> values);
/// The lowest index of the largest value (argmax with ties to the lowest index).
int argmax(std::span<const double> values);

}  // namespace lazygraph::nn
