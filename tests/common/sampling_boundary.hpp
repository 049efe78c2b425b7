#pragma once
// Shared by the sampling tests: where fp32 sampling on the GPU may legitimately choose a neighbour of what the
// float64 rule chooses.

#include <lazygraph/nn/sampling.hpp>

#include <cmath>
#include <vector>

namespace lgtest {

/// Whether the uniform draw `u` lies within 1e-4 of a boundary of the prefix sums of the float64 sampling
/// probabilities, where fp32 and fp64 may choose neighbouring tokens.
inline bool near_boundary(const std::vector<double>& logits, int top_k, double t, double u) {
  const std::vector<double> p = lazygraph::nn::sampling_probabilities(logits, top_k, t);
  double acc = 0.0;
  for (const double v : p) {
    acc += v;
    if (v > 0.0 && std::abs(acc - u) < 1e-4) return true;
  }
  return false;
}

}  // namespace lgtest
