#pragma once
/// \file
/// Layer 6, nn: the shape of a mixture of experts, the block Qwen3-MoE, OLMoE and Mixtral have in place of the MLP.
/// Each token's router (a matrix of `experts` rows over the residual width) gives a logit per expert; their softmax
/// (float32), its `experts_per_token` largest probabilities (renormalized to sum 1 where `normalize`) weigh the
/// chosen experts' SwiGLU outputs, which are summed into the residual. moe_routing.hpp has the routing's float64
/// reference.

namespace lazygraph::nn {

/// How a checkpoint names a layer's router and experts (decoder_tensors.hpp).
enum class MoeTensorNames {
  /// Qwen3-MoE's and OLMoE's: model.layers.L.mlp.gate.weight, model.layers.L.mlp.experts.E.gate_proj.weight,
  /// up_proj, down_proj.
  mlp_experts,
  /// Mixtral's: model.layers.L.block_sparse_moe.gate.weight, model.layers.L.block_sparse_moe.experts.E.w1.weight
  /// (gate), w3 (up), w2 (down).
  block_sparse_moe,
};

/// A mixture of experts' shape, as its architecture's config.json gives it.
struct MoeShape {
  int experts = 0;            ///< experts per layer: num_experts (Mixtral: num_local_experts)
  int experts_per_token = 0;  ///< experts each token runs, the router's top k: num_experts_per_tok; at most `experts`
  /// Each expert's SwiGLU width: moe_intermediate_size (Qwen3-MoE), intermediate_size (OLMoE, Mixtral).
  int expert_width = 0;
  /// The chosen experts' probabilities divided by their sum (norm_topk_prob; Mixtral always), else used as the
  /// softmax over all experts gives them.
  bool normalize = false;
  /// The experts' tensor names (set by the architecture: Mixtral's are its own).
  MoeTensorNames names = MoeTensorNames::mlp_experts;

  /// Whether every field is equal.
  friend bool operator==(const MoeShape&, const MoeShape&) = default;
};

}  // namespace lazygraph::nn
