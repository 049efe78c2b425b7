#pragma once
// Shared by the nn tests (tests/nn/, the program lazygraph_nn_tests): what they need beyond common/gpu.hpp. The core
// tests (lazygraph_tests) link only liblazygraph and never include this.

#include <lazygraph/kernels.hpp>

namespace lgtest {

/// A library of the core and the nn kernel sets (lazygraph::nn::kernel_library) for device(), built on first use
/// and let go when main ends, before the device (gpu suite only).
lazygraph::KernelLibrary& nn_kernels();

}  // namespace lgtest
