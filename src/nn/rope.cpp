#include "lazygraph/nn/rope.hpp"

#include <cmath>
#include <numbers>
#include <string>

#include "lazygraph/driver/error.hpp"

namespace lazygraph::nn {

namespace {

[[noreturn]] void refuse_scaling(const std::string& why) { throw UsageError("RopeScaling: " + why); }

bool positive_finite(double x) { return std::isfinite(x) && x > 0; }

}  // namespace

void RopeScaling::validate() const {
  if (type == RopeType::standard) return;
  if (!positive_finite(factor)) refuse_scaling("factor (" + std::to_string(factor) + ") must be finite and positive");
  if (type != RopeType::llama3) return;
  if (!positive_finite(low_freq_factor) || !std::isfinite(high_freq_factor) || high_freq_factor <= low_freq_factor) {
    refuse_scaling("llama3 needs 0 < low_freq_factor (" + std::to_string(low_freq_factor) + ") < high_freq_factor (" +
                   std::to_string(high_freq_factor) + ")");
  }
  if (original_max_position_embeddings <= 0) {
    refuse_scaling("original_max_position_embeddings (" + std::to_string(original_max_position_embeddings) +
                   ") must be positive");
  }
}

const char* rope_type_name(RopeType type) noexcept {
  switch (type) {
    case RopeType::linear:
      return "linear";
    case RopeType::llama3:
      return "llama3";
    default:
      return "default";
  }
}

std::vector<double> rope_frequencies(double theta, const RopeScaling& scaling, int head_dim) {
  if (!positive_finite(theta)) refuse_scaling("theta (" + std::to_string(theta) + ") must be finite and positive");
  if (head_dim <= 0 || head_dim % 2 != 0) refuse_scaling("head_dim (" + std::to_string(head_dim) + ") must be even");
  scaling.validate();
  std::vector<double> out(static_cast<std::size_t>(head_dim / 2));
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double base = std::pow(theta, -2.0 * static_cast<double>(i) / head_dim);
    double f = base;
    if (scaling.type == RopeType::linear) f = base / scaling.factor;
    if (scaling.type == RopeType::llama3) {
      // Wavelengths (in positions) longer than the trained context / low_freq_factor are stretched by the factor,
      // those shorter than the context / high_freq_factor kept, and the band between blended linearly in
      // context / wavelength.
      const double context = scaling.original_max_position_embeddings;
      const double wavelength = 2 * std::numbers::pi / base;
      const double low_wavelength = context / scaling.low_freq_factor;
      const double high_wavelength = context / scaling.high_freq_factor;
      if (wavelength > low_wavelength) {
        f = base / scaling.factor;
      } else if (wavelength >= high_wavelength) {
        const double smooth =
            (context / wavelength - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor);
        f = (1 - smooth) * base / scaling.factor + smooth * base;
      }
    }
    out[i] = f;
  }
  return out;
}

}  // namespace lazygraph::nn
