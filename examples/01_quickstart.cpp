// 01 quickstart: describe axpy and a copy as lazy ops, record them into a CUDA graph, replay it, and check the
// result against a float64 reference. Without a GPU it says why and exits 77 (skipped).
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
  if (example::skip_without_gpu("01_quickstart")) return example::exit_skipped;
  lg::Device gpu = lg::Device::first();
  lg::Stream stream = gpu.create_stream();
  std::printf("device: %s, sm_%d, %d SMs\n", gpu.name().c_str(), gpu.compute_capability().as_int(), gpu.sm_count());

  // 1. Every kernel in kernels/ is compiled (or loaded from the disk cache) now, before any capture.
  lg::KernelLibrary kernels(gpu);
  std::printf("kernel library: %zu modules in %.1f ms (%zu compiled, %zu from cache)\n", kernels.stats().modules,
              kernels.stats().milliseconds, kernels.stats().compiled, kernels.stats().cache_hits);
  auto axpy = kernels.get<void(float, const float*, float*, int)>("axpy");

  // 2. Allocation is eager and happens outside graphs.
  const int n = 1 << 20;
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  std::vector<float> host_x(n);
  std::vector<float> host_y(n);
  for (int i = 0; i < n; ++i) {
    host_x[i] = dist(rng);
    host_y[i] = dist(rng);
  }
  lg::DeviceBuffer<float> x = lg::from_host(host_x).sync_on(stream);
  lg::DeviceBuffer<float> y = lg::from_host(host_y).sync_on(stream);
  lg::DeviceBuffer<float> snapshot = lg::zeros<float>(n).sync_on(stream);

  // 3. Lazy: nothing runs here. `>>` sequences two ops.
  auto step = axpy(lg::grid_for(n, 256), 2.0F, x.cview(), y.view(), n) >> lg::copy(snapshot.view(), y.cview());
  static_assert(lg::GraphNode<decltype(step)>);

  // 4. Record into a graph. `s.record(lg::zeros<float>(n))` would not compile: zeros allocates.
  auto graph = lg::CudaGraph<>::scope(stream, [&](lg::Scope& s) { s.record(step); });
  const int replays = 10;
  for (int i = 0; i < replays; ++i) graph.launch();

  // 5. Check against float64: y ← 2x + y, ten times, rounding to float after each step as the GPU does.
  std::vector<float> got(n);
  lg::copy(std::span<float>(got), snapshot.cview()).sync_on(stream);
  double worst = 0;
  for (int i = 0; i < n; ++i) {
    double r = host_y[i];
    for (int k = 0; k < replays; ++k) r = static_cast<float>(2.0 * host_x[i] + r);
    worst = std::max(worst, std::abs(got[i] - r) / std::max(1.0, std::abs(r)));
  }
  std::printf("graph of %zu node(s) replayed %d times; max relative error vs float64 %.3g\n", graph.node_count(),
              replays, worst);
  if (!(worst < 1e-6)) {
    std::printf("FAILED\n");
    return 1;
  }
  std::printf("OK\n");
  return 0;
}

constexpr const char* usage =
    "usage: 01_quickstart\n"
    "Records axpy and a copy into a CUDA graph, replays it 10 times and checks the result against float64.\n"
    "Exit status: 0 checked, 1 failed, 2 usage error, 77 skipped (no GPU; the reason is printed).\n";

}  // namespace

int main(int argc, char** argv) { return example::main_of(argc, argv, "lazygraph quickstart", usage, 0, run); }
