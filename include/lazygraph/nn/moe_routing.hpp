#pragma once
/// \file
/// Layer 6, nn: the float64 reference of a mixture of experts' routing (moe_shape.hpp), what kernels/nn/moe.cu's
/// moe_route computes in fp32, for tests and the decoder's float64 reference.

#include <span>
#include <vector>

namespace lazygraph::nn {

/// One expert a token's router chose, and its weight in the token's sum of expert outputs.
struct ExpertChoice {
  int expert = 0;     ///< its index among the layer's experts
  double weight = 0;  ///< its softmax probability, renormalized over the chosen ones where asked

  /// Whether both fields are equal.
  friend bool operator==(const ExpertChoice&, const ExpertChoice&) = default;
};

/// A token's routing from its router logits (one per expert): the softmax over every logit, its `top_k` largest
/// probabilities in descending order (a tie goes to the lower expert index; torch.topk documents no order for
/// ties, so a crosscheck compares choices only where the margin is clear), each divided by their sum where
/// `normalize` (Qwen3-MoE's and OLMoE's norm_topk_prob; Mixtral always). \throws UsageError when `logits` is empty,
/// holds a value that is not finite, or `top_k` is not 1 to logits.size().
[[nodiscard]] std::vector<ExpertChoice> route_token(std::span<const double> logits, int top_k, bool normalize);

}  // namespace lazygraph::nn
