// 12 scratch: memory that belongs to a graph. `Scope::scratch<T>(n)` gives an intermediate buffer that exists only
// while the graph runs (an allocation node before the ops recorded after it, a free node after all of them), so a
// step needs no buffer of its own that sits idle between replays. Graphs made with one GraphPool never run at once,
// so CUDA backs their scratch with the same physical memory: the pool needs the largest graph's, not the sum.
#include <lazygraph/lazygraph.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <random>
#include <span>
#include <vector>

#include "cli.hpp"

namespace lg = lazygraph;
using Axpy = lg::Kernel<void(float, const float*, float*, int)>;

namespace {

/// Records out = x + 0.5 (alpha x + y) through t = alpha x + y in scratch memory. Scratch holds nothing from one
/// replay to the next (another graph of the pool may have used it since), so t is written before it is read.
void record_blend(lg::Scope& s, const Axpy& axpy, float alpha, const lg::DeviceSpan<const float>& x,
                  const lg::DeviceSpan<const float>& y, const lg::DeviceSpan<float>& out) {
  const int n = static_cast<int>(x.size());
  const auto cfg = lg::grid_for(x.size(), 256);
  const lg::DeviceSpan<float> t = s.scratch<float>(x.size());  // not an allocation op: record stays allocation-free
  s.record(lg::copy(t, y) >> axpy(cfg, alpha, x, t, n) >> lg::copy(out, x) >> axpy(cfg, 0.5F, t.as_const(), out, n));
}

/// max |got - (x + 0.5 (alpha x + y))| / max(1, |want|) over got's elements, the reference rounded as the GPU rounds.
double blend_error(const std::vector<float>& got, float alpha, const std::vector<float>& x,
                   const std::vector<float>& y) {
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const float t = static_cast<float>(double(alpha) * x[i] + y[i]);
    const double want = static_cast<float>(0.5 * t + x[i]);
    worst = std::max(worst, std::abs(got[i] - want) / std::max(1.0, std::abs(want)));
  }
  return worst;
}

int run() {
  if (example::skip_without_gpu("12_scratch")) return example::exit_skipped;
  lg::Device gpu = lg::Device::first();
  lg::Stream stream = gpu.create_stream();
  lg::KernelLibrary kernels(gpu);
  const Axpy axpy = kernels.get<void(float, const float*, float*, int)>("axpy");

  const std::size_t n = std::size_t{1} << 20;  // the large graph's elements
  const std::size_t m = n / 4;                 // the small graph's
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  std::vector<float> host_x(n);
  std::vector<float> host_y(n);
  for (std::size_t i = 0; i < n; ++i) {
    host_x[i] = dist(rng);
    host_y[i] = dist(rng);
  }
  const lg::DeviceBuffer<float> x = lg::from_host(host_x).sync_on(stream);
  const lg::DeviceBuffer<float> y = lg::from_host(host_y).sync_on(stream);
  lg::DeviceBuffer<float> out_large = lg::empty<float>(n).sync_on(stream);
  lg::DeviceBuffer<float> out_small = lg::empty<float>(m).sync_on(stream);

  // Two graphs of one pool: each replays on the pool's stream, so they never run at the same time.
  lg::GraphPool pool(gpu);
  lg::GraphOptions options;
  options.pool = pool;
  auto large = lg::CudaGraph<>::scope(
      stream, [&](lg::Scope& s) { record_blend(s, axpy, 2.0F, x.cview(), y.cview(), out_large.view()); }, options);
  auto small = lg::CudaGraph<>::scope(
      stream,
      [&](lg::Scope& s) {
        record_blend(s, axpy, -1.0F, x.cview().subspan(0, m), y.cview().subspan(0, m), out_small.view());
      },
      options);
  std::printf("large graph:");
  for (const lg::NodeKind k : large.node_kinds()) std::printf(" %s", lg::to_string(k));
  std::printf(" (the two 'other' nodes allocate and free its scratch)\n");
  std::printf("scratch: large %zu KiB, small %zu KiB; the pool needs %zu KiB for both, not %zu KiB\n",
              large.scratch_bytes() / 1024, small.scratch_bytes() / 1024, pool.largest_scratch_bytes() / 1024,
              pool.total_scratch_bytes() / 1024);
  bool ok = large.scratch_bytes() == n * sizeof(float) && small.scratch_bytes() == m * sizeof(float) &&
            pool.graph_count() == 2 && pool.largest_scratch_bytes() == n * sizeof(float) &&
            pool.total_scratch_bytes() == (n + m) * sizeof(float);

  // Replays, alternating: each graph's result is right whatever the other left in the shared memory.
  for (int r = 0; r < 3; ++r) {
    large.launch();
    small.launch();
  }
  std::vector<float> got_large(n);
  std::vector<float> got_small(m);
  lg::copy(std::span<float>(got_large), out_large.cview()).sync_on(stream);
  lg::copy(std::span<float>(got_small), out_small.cview()).sync_on(stream);
  const double worst =
      std::max(blend_error(got_large, 2.0F, host_x, host_y), blend_error(got_small, -1.0F, host_x, host_y));
  std::printf("6 replays, alternating: max relative error vs float64 %.3g; device graph memory reserved %.1f MiB\n",
              worst, static_cast<double>(pool.usage().reserved) / (1024.0 * 1024.0));
  ok = ok && worst < 1e-6;
  std::printf("%s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}

constexpr const char* usage =
    "usage: 12_scratch\n"
    "Two graphs keep an intermediate result in scratch memory (Scope::scratch) and share it through a GraphPool;\n"
    "prints their scratch sizes, replays them alternately and checks both results against float64.\n"
    "Exit status: 0 checked, 1 failed, 2 usage error, 77 skipped (no GPU; the reason is printed).\n";

}  // namespace

int main(int argc, char** argv) { return example::main_of(argc, argv, "12_scratch", usage, 0, run); }
