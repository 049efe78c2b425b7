// A program of another project using an installed (or subproject) lazygraph, built by each consumer test:
// it includes the umbrella header, builds an op (which never touches the GPU), calls into the library, and
// asks whether there is a GPU. It needs none: it exits 0 and prints what it found.
#include <lazygraph/lazygraph.hpp>

#include <cstdio>
#include <string>

namespace lg = lazygraph;

int main() {
  auto op = lg::zeros<float>(1024);  // lazy: describes an allocation, allocates nothing
  static_assert(lg::DeviceOp<decltype(op)>);
  static_assert(!lg::GraphNode<decltype(op)>, "an allocation is never recordable into a graph");
  const std::size_t kernels = lg::core_kernels().sources.size();
  std::string why;
  const bool gpu = lg::gpu_available(&why);
  std::printf("consumer: lazygraph linked, %zu embedded kernel modules; GPU: %s\n", kernels,
              gpu ? "available" : why.c_str());
  return kernels > 0 ? 0 : 1;
}
