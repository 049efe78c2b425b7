#include "lazygraph/nn/step_model.hpp"

#include <algorithm>
#include <iterator>
#include <vector>

#include "lazygraph/driver/error.hpp"

namespace lazygraph::nn {

int pick_token(std::span<const float> logits, const Sampling& sampling, int position) {
  if (logits.empty()) throw UsageError("pick_token: no logits to pick from");
  if (!(sampling.temperature > 0.0F)) {
    return static_cast<int>(std::distance(logits.begin(), std::max_element(logits.begin(), logits.end())));
  }
  const std::vector<double> wide(logits.begin(), logits.end());
  return sample_reference(wide, sampling.top_k, sampling.temperature, sampling_uniform(sampling.seed, position, 0),
                          sampling.top_p);
}

}  // namespace lazygraph::nn
