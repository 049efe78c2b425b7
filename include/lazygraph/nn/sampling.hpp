#pragma once
/// \file
/// How the decoder picks its next token: greedy (temperature 0, the default) or drawn at a temperature from the
/// top-k logits, then the top-p nucleus of those, with a seeded random number (kernels/nn/sample.cu gives the exact
/// rule). The draw depends only on (seed, position, sequence slot), so a run repeats exactly and a sequence draws the
/// same tokens alone or in a batch. The host functions here are the kernel's rule in float64, for tests.

#include <cstdint>
#include <span>
#include <vector>

namespace lazygraph::nn {

/// The sampling rule of a decoder step.
struct Sampling {
  float temperature = 0.0F;  ///< 0: greedy (argmax); > 0: softmax(logits / temperature) over the candidates
  int top_k = 0;             ///< candidates: the top_k largest logits (ties kept); 0: every logit
  std::uint32_t seed = 0;    ///< seed of the draws
  /// Nucleus sampling, after temperature and top_k: the candidates become the fewest highest-probability ones whose
  /// probabilities sum to at least top_p (ties at the last value kept), renormalised. 1: off.
  float top_p = 1.0F;

  /// \throws UsageError for a negative or non-finite temperature, a negative top_k, or a top_p outside (0, 1],
  /// naming the value.
  void validate() const;
};

/// The uniform number in [0, 1) the sample kernel draws for `position` of sequence `slot`.
double sampling_uniform(std::uint32_t seed, int position, int slot);

/// The float64 reference of the kernel's rule for one row: the smallest candidate index whose prefix sum of
/// weights exceeds u * sum (the last of nonzero weight if none does); -1 when every logit is NaN. When the largest
/// logit is +inf, the +inf logits share the probability equally. `top_p` < 1 keeps the candidates whose logits are
/// at least the largest value v such that the weights of the candidates >= v sum to at least top_p of the whole
/// (the kernel sums its fp32 weights exactly in fixed point, so the two agree but at a boundary within rounding).
int sample_reference(std::span<const double> logits, int top_k, double temperature, double u, double top_p = 1.0);

/// The exact distribution the rule draws from: each candidate's weight over the sum, 0 elsewhere.
std::vector<double> sampling_probabilities(std::span<const double> logits, int top_k, double temperature,
                                           double top_p = 1.0);

}  // namespace lazygraph::nn
