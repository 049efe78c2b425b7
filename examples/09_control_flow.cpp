// 09 control flow: the GPU decides what a replay runs. A WHILE node (while_) repeats a Newton step for sqrt until a
// kernel finds every element converged, with no host round trip per iteration; a LoopBound caps the iterations and
// says when it stopped the loop (LoopBound::reached); an IF node (if_) runs an exact fallback only when the loop did
// not converge. The tolerance is a DeviceScalar, so the host changes it between replays without re-recording.
#include <lazygraph/lazygraph.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "cli.hpp"

namespace lg = lazygraph;

namespace {

// The program's own kernels, kept here as a string (08_own_kernels reads them from a folder instead). A kernel sets
// a condition with lg::set_condition, from one thread per launch; the host passes the lg::Condition like any
// other argument.
constexpr const char* newton_source = R"(#include "lazygraph/block_reduce.cuh"
#include "lazygraph/condition.cuh"

// One Newton step towards sqrt(a): x = (x + a / x) / 2.
extern "C" __global__ void newton_step(float* x, const float* a, int n) {
  for (long long i = lg::global_index(); i < n; i += lg::grid_stride()) x[i] = 0.5f * (x[i] + a[i] / x[i]);
}

// c = 1 while some |x^2 - a| / a is above *tolerance, else 0. One block of 256 threads reads all n elements.
extern "C" __global__ void above_tolerance(lg::Condition c, const float* x, const float* a, int n,
                                           const float* tolerance) {
  float worst = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const double xi = x[i];
    worst = fmaxf(worst, static_cast<float>(fabs(xi * xi - a[i]) / a[i]));
  }
  worst = lg::block_max(worst);
  if (threadIdx.x == 0) lg::set_condition(c, worst > *tolerance ? 1u : 0u);
}

// The fallback: x = sqrt(a), directly.
extern "C" __global__ void exact_sqrt(float* x, const float* a, int n) {
  for (long long i = lg::global_index(); i < n; i += lg::grid_stride()) x[i] = sqrtf(a[i]);
}
)";

int run() {
  if (example::skip_without_gpu("09_control_flow")) return example::exit_skipped;
  lg::Device gpu = lg::Device::first();
  lg::Stream stream = gpu.create_stream();
  lg::KernelLibraryOptions options;  // the core set holds while_guard, the kernel a LoopBound counts with
  options.kernel_sets = {lg::core_kernels(), lg::KernelSet{"newton", {{"newton_sqrt.cu", newton_source}}, {}}};
  lg::KernelLibrary kernels(gpu, std::move(options));
  auto newton_step = kernels.get<void(float*, const float*, int)>("newton_step");
  auto above_tolerance =
      kernels.get<void(lg::Condition, const float*, const float*, int, const float*)>("above_tolerance");
  auto exact_sqrt = kernels.get<void(float*, const float*, int)>("exact_sqrt");

  const int n = 1 << 14;
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> dist(0.5F, 1e4F);
  std::vector<float> host_a(n);
  for (float& v : host_a) v = dist(rng);
  lg::DeviceBuffer<float> a = lg::from_host(host_a).sync_on(stream);
  lg::DeviceBuffer<float> x = lg::zeros<float>(n).sync_on(stream);
  lg::DeviceScalar<unsigned> fell_back(stream, 0U);  // the IF's body sets it, so that the host can see it ran
  lg::DeviceScalar<float> tolerance(stream, 1e-6F);
  const lg::LoopBound bound(kernels, 100);  // at most 100 iterations per replay; must outlive the graph

  const auto cfg = lg::grid_for(n, 256);
  const lg::LaunchConfig one_block{{1, 1, 1}, {256, 1, 1}, 0};
  auto graph = lg::CudaGraph<>::scope(stream, [&](lg::Scope& s) {
    // A condition steers exactly one conditional node and starts every replay at its default value.
    const lg::Condition again = s.condition(1);          // 1: enter the loop
    const lg::Condition not_converged = s.condition(0);  // the kernel before the IF sets it
    // The loop's body: a step, then the check that clears `again` once every element has converged.
    auto iteration = newton_step(cfg, x.view(), a.cview(), n) >>
                     above_tolerance(one_block, again, x.cview(), a.cview(), n, tolerance.cview());
    auto fallback = exact_sqrt(cfg, x.view(), a.cview(), n) >> fell_back.assign(1U);
    s.record(fell_back.assign(0U) >> lg::copy(x.view(), a.cview()) >>  // the first guess: x = a
             lg::while_(again, iteration, bound) >>
             above_tolerance(one_block, not_converged, x.cview(), a.cview(), n, tolerance.cview()) >>
             lg::if_(not_converged, fallback));
  });

  // Replay 1 converges; replay 2 asks for a tolerance no residual can meet (below zero): the bound stops the loop
  // and the IF runs the fallback. Either way x must be sqrt(a).
  int failures = 0;
  for (const float tol : {1e-6F, -1.0F}) {
    graph.set(tolerance, tol);
    graph.launch();
    const unsigned iterations = bound.iterations(stream);
    const bool reached = bound.reached(stream);
    const bool fallback = fell_back.read(stream) != 0;
    std::vector<float> got(n);
    lg::copy(std::span<float>(got), x.cview()).sync_on(stream);
    double worst = 0;
    for (int i = 0; i < n; ++i) {
      const double want = std::sqrt(double(host_a[i]));
      worst = std::max(worst, std::abs(got[i] - want) / want);
    }
    const bool expect_bound = tol < 0;
    const bool ok = worst < 1e-6 && reached == expect_bound && fallback == expect_bound &&
                    (expect_bound ? iterations == bound.max_iterations() : iterations < bound.max_iterations());
    std::printf("tolerance %g: %u iterations, bound reached: %s, fallback ran: %s, max relative error %.3g %s\n",
                double(tol), iterations, reached ? "yes" : "no", fallback ? "yes" : "no", worst, ok ? "ok" : "FAILED");
    failures += ok ? 0 : 1;
  }
  std::printf("graph of %zu top-level nodes (a WHILE or IF node is one: its body is a graph inside it)\n%s\n",
              graph.node_count(), failures == 0 ? "OK" : "FAILED");
  return failures == 0 ? 0 : 1;
}

constexpr const char* usage =
    "usage: 09_control_flow\n"
    "Iterates a Newton step for sqrt in a WHILE node until a kernel finds it converged (a LoopBound caps it), and\n"
    "runs an exact fallback in an IF node when it did not; checks both cases against float64.\n"
    "Exit status: 0 checked, 1 failed, 2 usage error, 77 skipped (no GPU; the reason is printed).\n";

}  // namespace

int main(int argc, char** argv) { return example::main_of(argc, argv, "09_control_flow", usage, 0, run); }
