#pragma once
/// \file
/// Layer 6, nn: the routes a decoder step of a mixture of experts chose, every layer's, as BasicDecoder::last_routes
/// returns them (DecoderConfig::record_routes), and where each layer's routes lie in the step's device buffers.

#include <cstddef>
#include <span>
#include <vector>

#include "lazygraph/nn/decoder_config.hpp"

namespace lazygraph::nn {

/// Every layer's routes of one step: for each layer, row and rank k (0 the router's best), the expert chosen and its
/// weight in the row's sum of expert outputs, as the GPU's router computed them (kernels/nn/moe.cu's moe_route: the
/// experts in descending order of probability, renormalized where MoeShape::normalize).
struct MoeRoutes {
  int layers = 0;              ///< the decoder's layers
  int rows = 0;                ///< the rows of the step (1 for forward and generate)
  int top_k = 0;               ///< MoeShape::experts_per_token
  std::vector<int> experts;    ///< [layers][rows][top_k]
  std::vector<float> weights;  ///< [layers][rows][top_k], alongside `experts`

  /// The expert row `row` of layer `layer` chose at rank `k`. \throws UsageError for an index out of range, naming it.
  [[nodiscard]] int expert(int layer, int row, int k) const;
  /// Its weight. \throws UsageError as expert().
  [[nodiscard]] float weight(int layer, int row, int k) const;
  /// The distinct experts layer `layer` chose over all rows, ascending: the experts whose weights the step read.
  /// \throws UsageError for a layer out of range.
  [[nodiscard]] std::vector<int> distinct_experts(int layer) const;
};

/// Elements of BasicDecoderState::expert_ids (and expert_weights) for `c`: kMaxRows * top k, times the layers with
/// record_routes; 0 without a mixture of experts.
[[nodiscard]] std::size_t route_buffer_size(const DecoderConfig& c) noexcept;
/// Where layer `layer`'s routes start in those buffers: layer * kMaxRows * top k with record_routes, else 0 (every
/// layer writes the same slice).
[[nodiscard]] std::size_t route_offset(const DecoderConfig& c, int layer) noexcept;

/// What BasicDecoder::last_routes checks before it reads: a mixture of experts, record_routes on and a step run
/// (`rows` above 0). \throws UsageError naming what is missing.
void check_last_routes(const DecoderConfig& c, int rows);

/// The first `rows` rows of every layer's routes out of the buffers' host copies (`ids` and `weights`, each
/// route_buffer_size(c) elements laid out as route_offset says). \throws UsageError as check_last_routes, for rows
/// above kMaxRows, or for buffers of another size (naming both sizes).
[[nodiscard]] MoeRoutes gather_routes(const DecoderConfig& c, int rows, std::span<const int> ids,
                                      std::span<const float> weights);

}  // namespace lazygraph::nn
