// 10 fused expressions: `assign(out, expression)` turns an elementwise expression over device spans, host numbers and
// DeviceScalars into ONE generated kernel, compiled by NVRTC on first use and cached. Here z = 2x + b, relu(z) and
// leaky_relu(z) are computed twice in one graph: step by step (three kernels, z stored in a buffer) and fused (two
// kernels, z recomputed in registers); a DeviceScalar slope changes between replays without re-recording.
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

namespace {

std::vector<float> read(const lg::Stream& stream, const lg::DeviceBuffer<float>& buffer) {
  std::vector<float> out(buffer.size());
  lg::copy(std::span<float>(out), buffer.cview()).sync_on(stream);
  return out;
}

/// max |got - want| / max(1, |want|).
double error(const std::vector<float>& got, const std::vector<double>& want) {
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::abs(got[i] - want[i]) / std::max(1.0, std::abs(want[i])));
  }
  return worst;
}

int run() {
  if (example::skip_without_gpu("10_fused_expressions")) return example::exit_skipped;
  lg::Device gpu = lg::Device::first();
  lg::Stream stream = gpu.create_stream();

  const int n = 1 << 20;
  std::mt19937 rng(10);
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  std::vector<float> host_x(n);
  std::vector<float> host_b(n);
  for (int i = 0; i < n; ++i) {
    host_x[i] = dist(rng);
    host_b[i] = dist(rng);
  }
  const lg::DeviceBuffer<float> x = lg::from_host(host_x).sync_on(stream);
  const lg::DeviceBuffer<float> b = lg::from_host(host_b).sync_on(stream);
  lg::DeviceScalar<float> slope(stream, 0.1F);  // read from device memory by every replay
  lg::DeviceBuffer<float> z = lg::empty<float>(n).sync_on(stream);
  lg::DeviceBuffer<float> relu_steps = lg::empty<float>(n).sync_on(stream);
  lg::DeviceBuffer<float> leaky_steps = lg::empty<float>(n).sync_on(stream);
  lg::DeviceBuffer<float> relu_fused = lg::empty<float>(n).sync_on(stream);
  lg::DeviceBuffer<float> leaky_fused = lg::empty<float>(n).sync_on(stream);

  // 1. Step by step: each assign is one kernel. Host numbers (2.0F, 0.0F) are kernel arguments: another value reuses
  //    the compiled kernel. A comparison gives a bool expression, which select(cond, then, else) takes.
  auto steps = lg::assign(z.view(), 2.0F * x.cview() + b.cview()) >>
               lg::assign(relu_steps.view(), lg::max(z.cview(), 0.0F)) >>
               lg::assign(leaky_steps.view(), lg::select(z.cview() > 0.0F, z.cview(), slope * z.cview()));

  // 2. Fused: an expression is a value (it holds its spans), so z's is written once and used in two kernels, each
  //    reading x and b and computing z in registers: no z in memory, one kernel per output.
  const auto affine = 2.0F * x.cview() + b.cview();
  const auto relu = lg::assign(relu_fused.view(), lg::max(affine, 0.0F));
  const auto leaky = lg::assign(leaky_fused.view(), lg::select(affine > 0.0F, affine, slope * affine));
  std::printf("fused kernels:\n  %s\n  %s\n", relu.description().c_str(), leaky.description().c_str());

  // 3. One graph, three branches: all() lets them run concurrently (it refuses branches that race; these share only
  //    what they read). CudaGraph::build compiles each expression as it adds its node; a capture (CudaGraph::scope
  //    or capture) cannot load a module, so call op.prepare(gpu) on each assign before one.
  auto graph = lg::CudaGraph<>::build(gpu, lg::all(steps, relu, leaky));

  // 4. Check against float64, for two slopes: graph.set changes the DeviceScalar before the next replay.
  int failures = 0;
  for (const float s : {0.1F, 0.5F}) {
    graph.set(slope, s);
    graph.launch();
    std::vector<double> want_relu(n);
    std::vector<double> want_leaky(n);
    for (int i = 0; i < n; ++i) {
      const double zi = 2.0 * host_x[i] + host_b[i];
      want_relu[i] = std::max(zi, 0.0);
      want_leaky[i] = zi > 0 ? zi : s * zi;
    }
    const double worst =
        std::max({error(read(stream, relu_steps), want_relu), error(read(stream, leaky_steps), want_leaky),
                  error(read(stream, relu_fused), want_relu), error(read(stream, leaky_fused), want_leaky)});
    std::printf("slope %.1f: %zu kernels replayed, max relative error %.3g\n", double(s), graph.node_count(), worst);
    failures += worst < 1e-6 ? 0 : 1;
  }
  std::printf("%s\n", failures == 0 ? "OK" : "FAILED");
  return failures == 0 ? 0 : 1;
}

constexpr const char* usage =
    "usage: 10_fused_expressions\n"
    "Computes relu(2x + b) and leaky_relu(2x + b) with assign(): step by step and as fused expressions, in one\n"
    "graph, for two slopes set between replays; checks every result against float64.\n"
    "Exit status: 0 checked, 1 failed, 2 usage error, 77 skipped (no GPU; the reason is printed).\n";

}  // namespace

int main(int argc, char** argv) { return example::main_of(argc, argv, "10_fused_expressions", usage, 0, run); }
