// 03 module: a graph-backed Module. Its forward pass is captured once at construction; each `forward`
// copies the input into the graph's input buffer, replays, and returns the output.
#include <lazygraph/lazygraph.hpp>

#include <cmath>
#include <cstdio>
#include <exception>
#include <random>
#include <vector>

#include "cli.hpp"

namespace lg = lazygraph;

namespace {

int run() {
  if (example::skip_without_gpu("03_module")) return example::exit_skipped;
  lg::Device gpu = lg::Device::first();
  lg::Stream stream = gpu.create_stream();
  lg::KernelLibrary kernels(gpu);
  auto axpy = kernels.get<void(float, const float*, float*, int)>("axpy");

  const int n = 4096;
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  std::vector<float> host_bias(n);
  for (float& v : host_bias) v = dist(rng);
  auto bias = lg::from_host(host_bias).sync_on(stream);

  // y = 0.5 x + bias, as a Module.
  lg::GraphModule<float, float> affine(
      stream, n, n, [&](const lg::DeviceSpan<const float>& in, const lg::DeviceSpan<float>& out) {
        return lg::copy(out, bias.cview()) >> axpy(lg::grid_for(n, 256), 0.5F, in, out, n);
      });
  static_assert(lg::Module<decltype(affine)>);

  double worst = 0;
  for (int call = 0; call < 100; ++call) {
    std::vector<float> x(n);
    for (float& v : x) v = dist(rng);
    const std::vector<float> y = affine.forward(x);
    for (int i = 0; i < n; ++i) worst = std::max(worst, std::abs(y[i] - (0.5 * x[i] + host_bias[i])));
  }
  std::printf("100 forwards through a %zu-node graph: max abs error %.3g\n%s\n", affine.graph().node_count(), worst,
              worst < 1e-6 ? "OK" : "FAILED");
  return worst < 1e-6 ? 0 : 1;
}

constexpr const char* usage =
    "usage: 03_module\n"
    "A graph-backed Module: its forward pass is captured once, each forward() replays it; checked.\n"
    "Exit status: 0 checked, 1 failed, 2 usage error, 77 skipped (no GPU; the reason is printed).\n";

}  // namespace

int main(int argc, char** argv) { return example::main_of(argc, argv, "03_module", usage, 0, run); }
