#pragma once
// Shared by the sampling tests: where fp32 sampling on the GPU may legitimately choose a neighbour of what the
// float64 rule chooses.

#include <lazygraph/nn/sampling.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

namespace lgtest {

/// Whether fp32 sampling on the GPU may have chosen `got` where the float64 rule chose `want`: `got` is `want`'s
/// neighbour among the tokens of non-zero probability (the next or the one before, in index order, which is the
/// order the prefix sums run in), and the uniform draw `u` lies within 1e-4 of the one prefix sum between them
/// (fp32 sums over 32000 tokens drift by about 1e-6; a token chosen by a wrong rule lies anywhere).
inline bool neighbour_at_boundary(const std::vector<double>& logits, int top_k, double t, double u, int got, int want) {
  const std::vector<double> p = lazygraph::nn::sampling_probabilities(logits, top_k, t);
  const int lower = std::min(got, want);
  const int upper = std::max(got, want);
  if (lower < 0 || static_cast<std::size_t>(upper) >= p.size() || lower == upper) return false;
  if (p[static_cast<std::size_t>(lower)] <= 0.0 || p[static_cast<std::size_t>(upper)] <= 0.0) return false;
  for (int i = lower + 1; i < upper; ++i) {
    if (p[static_cast<std::size_t>(i)] > 0.0) return false;  // a token between them: not neighbours
  }
  double boundary = 0.0;  // the prefix sum through `lower`: where the draw passes from lower to upper
  for (int i = 0; i <= lower; ++i) boundary += p[static_cast<std::size_t>(i)];
  return std::abs(boundary - u) < 1e-4;
}

}  // namespace lgtest
