// 02 compose: a forward pass is an ordinary function returning ops. `all(...)` makes independent ops
// parallel branches of the graph; `>>` orders them; `map` turns an output into another value on the host.
#include <lazygraph/lazygraph.hpp>

#include <cstdio>
#include <exception>
#include <vector>

#include "cli.hpp"

namespace lg = lazygraph;
using Axpy = lg::Kernel<void(float, const float*, float*, int)>;

/// a ← a + 2x, b ← b + 3x (independent), then c ← a, then c ← c + b.
auto step(const Axpy& axpy, const lg::DeviceSpan<const float>& x, const lg::DeviceSpan<float>& a,
          const lg::DeviceSpan<float>& b, const lg::DeviceSpan<float>& c) {
  const int n = static_cast<int>(x.size());
  const auto cfg = lg::grid_for(x.size(), 256);
  return lg::all(axpy(cfg, 2.0F, x, a, n), axpy(cfg, 3.0F, x, b, n)) >> lg::copy(c, a.as_const()) >>
         axpy(cfg, 1.0F, b.as_const(), c, n);
}

namespace {

int run() {
  if (example::skip_without_gpu("02_compose")) return example::exit_skipped;
  lg::Device gpu = lg::Device::first();
  lg::Stream stream = gpu.create_stream();
  lg::KernelLibrary kernels(gpu);
  const Axpy axpy = kernels.get<void(float, const float*, float*, int)>("axpy");

  const int n = 10'000;
  std::vector<float> host_x(n);
  for (int i = 0; i < n; ++i) host_x[i] = 0.001F * static_cast<float>(i % 997) + 0.5F;
  auto x = lg::from_host(host_x).sync_on(stream);
  auto a = lg::ones<float>(n).sync_on(stream);
  auto b = lg::ones<float>(n).sync_on(stream);
  auto c = lg::empty<float>(n).sync_on(stream);

  auto graph = lg::CudaGraph<>::capture(stream, step(axpy, x.cview(), a.view(), b.view(), c.view()));
  graph.launch();
  std::printf("graph nodes:");
  for (lg::NodeKind k : graph.node_kinds()) std::printf(" %s", lg::to_string(k));
  std::printf("\n");

  std::vector<float> got(n);
  lg::copy(std::span<float>(got), c.cview()).sync_on(stream);
  int wrong = 0;
  for (int i = 0; i < n; ++i) {
    const double ref = (1.0 + 2.0 * host_x[i]) + (1.0 + 3.0 * host_x[i]);
    wrong += std::abs(got[i] - ref) > 1e-5 * std::abs(ref);
  }
  const auto sum =
      lg::map(lg::value(c.cview()), [](const lg::DeviceSpan<const float>& s) { return s.size(); }).sync_on(stream);
  std::printf("c = (1 + 2x) + (1 + 3x) over %zu elements: %d wrong\n%s\n", sum, wrong, wrong == 0 ? "OK" : "FAILED");
  return wrong == 0 ? 0 : 1;
}

constexpr const char* usage =
    "usage: 02_compose\n"
    "Composes two axpy launches with all(...), >> and map into one graph and checks the result.\n"
    "Exit status: 0 checked, 1 failed, 2 usage error, 77 skipped (no GPU; the reason is printed).\n";

}  // namespace

int main(int argc, char** argv) { return example::main_of(argc, argv, "02_compose", usage, 0, run); }
