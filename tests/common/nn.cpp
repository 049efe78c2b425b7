#include "common/nn.hpp"

#include <lazygraph/nn/kernels.hpp>

#include <memory>

#include "common/gpu.hpp"

namespace lgtest {

namespace {
std::unique_ptr<lazygraph::KernelLibrary> g_nn_kernels;
}  // namespace

lazygraph::KernelLibrary& nn_kernels() {
  if (!g_nn_kernels) {
    g_nn_kernels = std::make_unique<lazygraph::KernelLibrary>(lazygraph::nn::kernel_library(device()));
    at_teardown([] { g_nn_kernels.reset(); });
  }
  return *g_nn_kernels;
}

}  // namespace lgtest
