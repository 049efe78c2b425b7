#pragma once
// Shared by the nn tests (tests/nn/, the program lazygraph_nn_tests): what they need beyond common/gpu.hpp. The core
// tests (lazygraph_tests) link only liblazygraph and never include this.

#include <lazygraph/kernels.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

namespace lgtest {

/// fp16 or bf16 values widened to float64.
template <class T>
std::vector<double> widened(const std::vector<T>& v) {
  std::vector<double> out;
  out.reserve(v.size());
  for (const T e : v) out.push_back(e.to_float());
  return out;
}

/// Whether `logits`' top two are apart by more than 5 times `bound` times their rms: a choice rounding cannot flip.
inline bool clear_margin(const std::vector<double>& logits, double bound) {
  std::vector<double> sorted = logits;
  std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
  double ss = 0;
  for (const double l : logits) ss += l * l;
  const double rms = std::sqrt(ss / static_cast<double>(logits.size()));
  return sorted[0] - sorted[1] > 5 * bound * rms;
}

/// SiLU in float64, a / (1 + e^-a): the references of the gated (SwiGLU) kernels.
inline double silu(double a) { return a / (1.0 + std::exp(-a)); }

/// A library of the core and the nn kernel sets (lazygraph::nn::kernel_library) for device(), built on first use
/// and let go when main ends, before the device (gpu suite only).
lazygraph::KernelLibrary& nn_kernels();

}  // namespace lgtest
