#pragma once
/// \file
/// nn's private part of the format table (projection.hpp): the op type every projection is, whatever its weight's
/// format, and the shape check the projections share.

#include <string>
#include <utility>
#include <variant>

#include "lazygraph/kernels/launch_op.hpp"
#include "lazygraph/kernels/optional_launch.hpp"
#include "lazygraph/nn/detail/one_of_op.hpp"

namespace lazygraph::nn::detail {

/// A projection: the dense family's launch, or the quantized family's (with its weight as owner).
template <class Dense, class Quantized>
class WeightOp : public OneOfOp<WeightOp<Dense, Quantized>, Dense, Quantized> {
 public:
  /// Holds the chosen launch.
  explicit WeightOp(std::variant<Dense, Quantized> op) : WeightOp::OneOfOp(std::move(op)) {}
};

/// The launch op of a kernel of signature void(Params...), and its quantized kin's with an owner.
template <class Signature>
struct LaunchOf;
/// See the primary template.
template <class... Params>
struct LaunchOf<void(Params...)> {
  using Launch = LaunchOp<Params...>;       ///< the launch
  using Owned = OptionalLaunch<Params...>;  ///< the launch with an owner kept alive
};

/// \throws UsageError naming `what` and the weight when `w` is not [rows x cols], or batch is outside 1..8.
void check_projection(const char* what, const std::string& weight, int weight_rows, int weight_cols, int rows, int cols,
                      int batch);

/// check_projection for `experts` stacked matrices of rows x cols (expert_projection.hpp), and, for a `quantized`
/// weight, that an expert's rows are whole tiles of 16 (each expert must start on one). \throws UsageError naming
/// `what` and the weight.
void check_experts(const char* what, const std::string& weight, int weight_rows, int weight_cols, bool quantized,
                   int experts, int rows, int cols, int batch);

}  // namespace lazygraph::nn::detail
