// LaunchOp (kernels/launch_op.hpp): a kernel launch as a lazy op, and what a graph that records it keeps alive.
#include <doctest/doctest.h>

#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

namespace {
using Scale = void(float*, float, int);
static_assert(GraphNode<LaunchOp<float*, float, int>>);
static_assert(std::is_same_v<decltype(std::declval<const Kernel<Scale>&>()(LaunchConfig{},
                                                                           std::declval<DeviceSpan<float>>(), 1.0F, 1)),
                             LaunchOp<float*, float, int>>);
}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("a graph keeps its kernels' module loaded after the library, the handle and the op are gone") {
    Stream& s = lgtest::stream();
    const int n = 4096;
    const auto x = lgtest::random_floats(n);
    DeviceBuffer<float> buffer = lgtest::to_device(s, x);

    std::weak_ptr<const LoadedModule> module;
    std::optional<CudaGraph<>> graph;
    {
      const KernelLibraryOptions opts =
          lgtest::own_kernels({{"scale.cu",
                                "extern \"C\" __global__ void scale_in_place(float* p, float factor, int n) {\n"
                                "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                "  if (i < n) p[i] *= factor;\n}\n"}},
                              lgtest::scratch_directory("launch-op"));
      auto library = std::make_unique<KernelLibrary>(lgtest::device(), opts);
      auto kernel = std::make_optional(library->get<Scale>("scale_in_place"));
      module = kernel->info()->module;
      auto op = std::make_optional((*kernel)(grid_for(n, 256), buffer.view(), 2.0F, n));
      graph.emplace(CudaGraph<>::capture(s, *op));
      op.reset();
      kernel.reset();
      library.reset();
    }
    CHECK_FALSE(module.expired());  // the graph holds the kernel, which holds its module

    graph->launch();
    graph->launch();
    const auto got = lgtest::to_host(s, buffer.cview());
    std::vector<double> ref(n);
    for (int i = 0; i < n; ++i) ref[i] = 4.0 * x[i];  // two replays of *2, exact in float
    CHECK(lgtest::relative_error(got, ref) == 0.0);

    graph.reset();
    CHECK(module.expired());  // and nothing else held it
  }
}
