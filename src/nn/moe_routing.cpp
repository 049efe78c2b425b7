#include <lazygraph/nn/moe_routing.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include <lazygraph/driver/error.hpp>

namespace lazygraph::nn {

std::vector<ExpertChoice> route_token(std::span<const double> logits, int top_k, bool normalize) {
  if (logits.empty()) throw UsageError("route_token: no router logits (a layer has at least one expert)");
  if (top_k < 1 || static_cast<std::size_t>(top_k) > logits.size()) {
    throw UsageError("route_token: top_k " + std::to_string(top_k) + " is not 1 to the " +
                     std::to_string(logits.size()) + " experts");
  }
  const auto bad = std::find_if(logits.begin(), logits.end(), [](double l) { return !std::isfinite(l); });
  if (bad != logits.end()) {
    throw UsageError("route_token: router logit " + std::to_string(bad - logits.begin()) + " is not finite");
  }
  const double top = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  std::transform(logits.begin(), logits.end(), p.begin(), [&](double l) { return std::exp(l - top); });
  const double sum = std::accumulate(p.begin(), p.end(), 0.0);
  std::vector<int> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  // Descending probability, the lower index first on a tie: a stable sort of ascending indices.
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
  std::vector<ExpertChoice> chosen;
  double chosen_sum = 0;
  for (int s = 0; s < top_k; ++s) {
    const double q = p[order[s]] / sum;
    chosen.push_back({order[s], q});
    chosen_sum += q;
  }
  if (normalize) {
    for (ExpertChoice& c : chosen) c.weight /= chosen_sum;
  }
  return chosen;
}

}  // namespace lazygraph::nn
