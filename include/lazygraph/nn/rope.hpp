#pragma once
/// \file
/// Rotary position embedding's frequencies for the Llama family: the plain rule (pair i of a head turns by
/// position * theta^(-2i / head_dim)) and the two scalings lazygraph implements, `linear` (every frequency divided by
/// a factor) and `llama3` (Llama 3.1 / 3.2: low frequencies divided by the factor, high ones kept, a smooth blend
/// between). The decoder's kernels read one float per pair from a table this header computes, so a new rule is a
/// host change only; YaRN, dynamic NTK and LongRoPE also change the attention scale or depend on the sequence length,
/// and are refused by the config reader rather than approximated.

#include <vector>

namespace lazygraph::nn {

/// Which frequency rule RoPE follows.
enum class RopeType {
  standard,  ///< theta^(-2i / head_dim) ("default" in Hugging Face configs)
  linear,    ///< standard / factor (position interpolation)
  llama3,    ///< Llama 3.1's rule: wavelengths beyond original_max_position_embeddings / low_freq_factor divided by
             ///< factor, those below original_max_position_embeddings / high_freq_factor kept, a linear blend between
};

/// The RoPE rule and its parameters (Hugging Face's rope_parameters / rope_scaling).
struct RopeScaling {
  RopeType type = RopeType::standard;           ///< the rule
  double factor = 1.0;                          ///< linear and llama3: how much longer the context is than in training
  double low_freq_factor = 1.0;                 ///< llama3
  double high_freq_factor = 4.0;                ///< llama3
  int original_max_position_embeddings = 8192;  ///< llama3: the context the model was trained with

  /// \throws UsageError for a factor that is not finite and positive, or (llama3) high_freq_factor not above a
  /// positive low_freq_factor, or original_max_position_embeddings not positive, naming the value.
  void validate() const;

  /// Whether every field is equal.
  friend bool operator==(const RopeScaling&, const RopeScaling&) = default;
};

/// The name Hugging Face configs give `type`: "default", "linear" or "llama3".
[[nodiscard]] const char* rope_type_name(RopeType type) noexcept;

/// The inverse frequency of each pair i < head_dim / 2 of a head, in float64: position p turns pair i by
/// p * result[i] radians. \throws UsageError for theta not finite and positive, an odd or non-positive head_dim,
/// or an invalid `scaling`.
[[nodiscard]] std::vector<double> rope_frequencies(double theta, const RopeScaling& scaling, int head_dim);

}  // namespace lazygraph::nn
