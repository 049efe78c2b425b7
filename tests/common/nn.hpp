#pragma once
// Shared by the nn tests (tests/nn/, the program lazygraph_nn_tests): what they need beyond common/gpu.hpp. The core
// tests (lazygraph_tests) link only liblazygraph and never include this.

#include <lazygraph/kernels.hpp>

#include <cmath>
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

/// SiLU in float64, a / (1 + e^-a): the references of the gated (SwiGLU) kernels.
inline double silu(double a) { return a / (1.0 + std::exp(-a)); }

/// A library of the core and the nn kernel sets (lazygraph::nn::kernel_library) for device(), built on first use
/// and let go when main ends, before the device (gpu suite only).
lazygraph::KernelLibrary& nn_kernels();

}  // namespace lgtest
