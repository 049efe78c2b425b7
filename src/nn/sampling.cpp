#include "lazygraph/nn/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include <lazygraph/lazygraph.hpp>

#include "lazygraph/nn/random_weights.hpp"

namespace lazygraph::nn {

void Sampling::validate() const {
  if (!std::isfinite(temperature) || temperature < 0.0F) {
    throw UsageError("Sampling: temperature " + std::to_string(temperature) +
                     " must be 0 (greedy) or a positive finite number");
  }
  if (top_k < 0) throw UsageError("Sampling: top_k " + std::to_string(top_k) + " must be 0 (every logit) or more");
  if (!(top_p > 0.0F && top_p <= 1.0F)) {
    throw UsageError("Sampling: top_p " + std::to_string(top_p) + " must be in (0, 1] (1: every candidate)");
  }
}

double sampling_uniform(std::uint32_t seed, int position, int slot) {
  const std::uint32_t key = tensor_key(seed, static_cast<std::uint32_t>(position));
  return static_cast<double>(mix(key + static_cast<std::uint32_t>(slot)) >> 8U) / 16777216.0;
}

namespace {

/// Each logit's weight exp((l - max) / temperature) if it is a candidate, else 0.
std::vector<double> candidate_weights(std::span<const double> logits, int top_k, double temperature, double top_p) {
  std::vector<double> valid;
  for (const double l : logits) {
    if (!std::isnan(l)) valid.push_back(l);
  }
  std::vector<double> w(logits.size(), 0.0);
  if (valid.empty()) return w;
  std::sort(valid.begin(), valid.end(), std::greater<>());
  const double top = valid.front();
  const auto k = static_cast<std::size_t>(top_k);
  const double threshold = top_k > 0 && k < valid.size() ? valid[k - 1] : -INFINITY;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    if (std::isnan(logits[i]) || logits[i] < threshold) continue;
    // +inf logits share the probability (inf - inf would make every weight NaN).
    w[i] = std::isinf(top) && top > 0 ? (logits[i] == top ? 1.0 : 0.0) : std::exp((logits[i] - top) / temperature);
  }
  if (!(top_p < 1.0)) return w;
  // The nucleus: walk the candidates from the largest logit down, a whole group of equal logits at a time, until
  // their weights reach top_p of the total; what is below the last group walked is dropped.
  std::vector<std::size_t> order;
  double total = 0.0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (w[i] > 0.0) order.push_back(i);
    total += w[i] > 0.0 ? w[i] : 0.0;
  }
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return logits[a] > logits[b]; });
  double kept = 0.0;
  double smallest = -INFINITY;
  for (std::size_t j = 0; j < order.size();) {
    smallest = logits[order[j]];
    for (; j < order.size() && logits[order[j]] == smallest; ++j) kept += w[order[j]];
    if (kept >= top_p * total) break;
  }
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (std::isnan(logits[i]) || logits[i] < smallest) w[i] = 0.0;
  }
  return w;
}

}  // namespace

int sample_reference(std::span<const double> logits, int top_k, double temperature, double u, double top_p) {
  const std::vector<double> w = candidate_weights(logits, top_k, temperature, top_p);
  double total = 0.0;
  int last = -1;
  for (std::size_t i = 0; i < w.size(); ++i) {
    total += w[i];
    if (w[i] > 0.0) last = static_cast<int>(i);
  }
  const double target = u * total;
  double acc = 0.0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    acc += w[i];
    if (w[i] > 0.0 && acc > target) return static_cast<int>(i);
  }
  return last;
}

std::vector<double> sampling_probabilities(std::span<const double> logits, int top_k, double temperature,
                                           double top_p) {
  std::vector<double> w = candidate_weights(logits, top_k, temperature, top_p);
  double total = 0.0;
  for (const double v : w) total += v;
  if (total > 0.0) {
    for (double& v : w) v /= total;
  }
  return w;
}

}  // namespace lazygraph::nn
