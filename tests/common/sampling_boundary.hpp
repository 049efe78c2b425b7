#pragma once
// Shared by the sampling tests: where fp32 sampling on the GPU may legitimately choose a neighbour of what the
// float64 rule chooses.

#include <lazygraph/nn/sampling.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

namespace lgtest {

/// Whether fp32 sampling on the GPU may have chosen `got` where the float64 rule chose `want`: both are tokens of
/// non-zero probability and the uniform draw `u` lies within 1e-4 of every prefix sum (index order, the order the
/// sums run in) from the one through the lower of the two to the one before the upper: fp32 sums over 32000 tokens
/// drift by about 1e-6, so the draw can land on the other side of a boundary near it -- or of several, when the
/// tokens between hold almost no probability (a full-vocabulary draw at a temperature below 1 has tokens of 1e-9).
/// A token chosen by a wrong rule lies anywhere.
inline bool neighbour_at_boundary(const std::vector<double>& logits, int top_k, double t, double u, int got, int want) {
  const std::vector<double> p = lazygraph::nn::sampling_probabilities(logits, top_k, t);
  const int lower = std::min(got, want);
  const int upper = std::max(got, want);
  if (lower < 0 || static_cast<std::size_t>(upper) >= p.size() || lower == upper) return false;
  if (p[static_cast<std::size_t>(lower)] <= 0.0 || p[static_cast<std::size_t>(upper)] <= 0.0) return false;
  double boundary = 0.0;  // the prefix sum through `lower`: where the draw passes from lower to the next token
  for (int i = 0; i <= lower; ++i) boundary += p[static_cast<std::size_t>(i)];
  for (int i = lower + 1; i <= upper; ++i) {  // every boundary up to the one before `upper`
    if (std::abs(boundary - u) >= 1e-4) return false;
    boundary += p[static_cast<std::size_t>(i)];
  }
  return true;
}

}  // namespace lgtest
