// 06 lifecycle: a graph's whole life without re-recording it. Build it without stream capture, replay it,
// point it at other buffers with update_from, and change a DeviceScalar it reads between replays; every
// result is checked against a float64 reference. Without a GPU it says why and exits 77 (skipped).
#include <lazygraph/lazygraph.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <random>
#include <vector>

#include "cli.hpp"

namespace lg = lazygraph;

namespace {

std::vector<float> random_floats(std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

/// max |got - (a * x + y)| / max(1, |ref|), the reference in float64 rounded to float as the GPU rounds.
double error_of_axpy(const std::vector<float>& got, float a, const std::vector<float>& x, const std::vector<float>& y) {
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double r = static_cast<float>(double(a) * x[i] + y[i]);
    worst = std::max(worst, std::abs(got[i] - r) / std::max(1.0, std::abs(r)));
  }
  return worst;
}

int run() {
  if (example::skip_without_gpu("06_lifecycle")) return example::exit_skipped;
  lg::Device gpu = lg::Device::first();
  lg::Stream stream = gpu.create_stream();
  lg::KernelLibrary kernels(gpu);
  auto axpy = kernels.get<void(float, const float*, float*, int)>("axpy");
  auto axpy_scalar = kernels.get<void(const float*, const float*, float*, int)>("axpy_scalar");

  const int n = 1 << 18;
  std::mt19937 rng(std::random_device{}());
  const std::vector<float> hx = random_floats(n, rng);
  const std::vector<float> hy1 = random_floats(n, rng);
  const std::vector<float> hy2 = random_floats(n, rng);
  lg::DeviceBuffer<float> x = lg::from_host(hx).sync_on(stream);
  lg::DeviceBuffer<float> y1 = lg::from_host(hy1).sync_on(stream);
  lg::DeviceBuffer<float> y2 = lg::from_host(hy2).sync_on(stream);
  const auto read = [&](const lg::DeviceBuffer<float>& b) {
    std::vector<float> out(n);
    lg::copy(std::span<float>(out), b.cview()).sync_on(stream);
    return out;
  };
  double worst = 0;

  // 1. Build: the op's nodes are added directly, no stream is captured.
  auto graph = lg::CudaGraph<>::build(gpu, axpy(lg::grid_for(n, 256), 2.0F, x.cview(), y1.view(), n));
  graph.launch();
  worst = std::max(worst, error_of_axpy(read(y1), 2.0F, hx, hy1));
  std::printf("built a graph of %zu node(s) without capture; replayed it\n", graph.node_count());

  // 2. Re-parameterise in place: the same op with another buffer and scalar. Only changed nodes are set.
  lg::copy(y1.view(), hy1).sync_on(stream);
  const lg::UpdateResult r = graph.update_from(axpy(lg::grid_for(n, 256), -1.5F, x.cview(), y2.view(), n));
  if (!r) {
    std::printf("update_from refused: %s (%s)\nFAILED\n", lg::to_string(r.status), r.message.c_str());
    return 1;
  }
  graph.launch();
  worst = std::max(worst, error_of_axpy(read(y2), -1.5F, hx, hy2));
  worst = std::max(worst, error_of_axpy(read(y1), 0.0F, hx, hy1));  // the old buffer is left alone
  std::printf("update_from: %s\n", lg::to_string(r.status));

  // 3. A device scalar: the graph reads `a` from device memory, so changing it needs no update at all.
  lg::DeviceScalar<float> a(stream, 0.5F);
  lg::copy(y1.view(), hy1).sync_on(stream);
  auto scaled = lg::CudaGraph<>::build(
      gpu, axpy_scalar(lg::grid_for(n, 256), a.cview(), x.cview(), y1.view(), n) >> lg::copy(y2.view(), y1.cview()));
  for (const float value : {0.5F, 3.0F, -2.0F}) {
    lg::copy(y1.view(), hy1).sync_on(stream);
    scaled.set(a, value);
    scaled.launch();
    worst = std::max(worst, error_of_axpy(read(y2), value, hx, hy1));
  }
  std::printf("DeviceScalar set to 0.5, 3, -2 between replays; %llu replays\n",
              static_cast<unsigned long long>(scaled.replay_count()));

  std::printf("max relative error vs float64 %.3g\n", worst);
  if (!(worst < 1e-6)) {
    std::printf("FAILED\n");
    return 1;
  }
  std::printf("OK\n");
  return 0;
}

constexpr const char* usage =
    "usage: 06_lifecycle\n"
    "Builds a graph without capture, re-parameterises it with update_from, changes a DeviceScalar between\n"
    "replays, and checks each result against float64.\n"
    "Exit status: 0 checked, 1 failed, 2 usage error, 77 skipped (no GPU; the reason is printed).\n";

}  // namespace

int main(int argc, char** argv) { return example::main_of(argc, argv, "lazygraph 06_lifecycle", usage, 0, run); }
