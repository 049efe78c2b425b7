// 11 dataflow: list ops in program order with `dataflow(op, op, ...)` and lazygraph orders them only where what they
// touch conflicts (one reads what another writes, or both write), from the spans each op holds; the rest become
// parallel branches of the graph. No hand-written all(...), and none of the races a wrong one would have.
#include <lazygraph/lazygraph.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <random>
#include <span>
#include <tuple>
#include <vector>

#include "cli.hpp"

namespace lg = lazygraph;

namespace {

/// How parallel a graph is: the nodes that wait for nothing, and the most nodes on one path (what a replay must run
/// one after another however many branches the GPU runs at once).
struct Shape {
  std::size_t roots = 0;
  std::size_t longest = 0;
};

/// The shape of a graph from CudaGraph::dependencies (each node's predecessors; they come before it in the list).
Shape shape_of(const std::vector<std::vector<std::size_t>>& dependencies) {
  Shape shape;
  std::vector<std::size_t> depth(dependencies.size(), 1);
  for (std::size_t i = 0; i < dependencies.size(); ++i) {
    shape.roots += dependencies[i].empty() ? 1 : 0;
    for (const std::size_t p : dependencies[i]) depth[i] = std::max(depth[i], depth[p] + 1);
    shape.longest = std::max(shape.longest, depth[i]);
  }
  return shape;
}

int run() {
  if (example::skip_without_gpu("11_dataflow")) return example::exit_skipped;
  lg::Device gpu = lg::Device::first();
  lg::Stream stream = gpu.create_stream();
  lg::KernelLibrary kernels(gpu);
  auto axpy = kernels.get<void(float, const float*, float*, int)>("axpy");  // y = a x + y

  const int n = 1 << 16;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  std::vector<float> host_x(n);
  for (float& v : host_x) v = dist(rng);
  lg::DeviceBuffer<float> x = lg::from_host(host_x).sync_on(stream);
  lg::DeviceBuffer<float> a = lg::empty<float>(n).sync_on(stream);
  lg::DeviceBuffer<float> b = lg::empty<float>(n).sync_on(stream);
  lg::DeviceBuffer<float> c = lg::empty<float>(n).sync_on(stream);

  // The ops in program order, and what orders them (kernels read `const float*` and write `float*` arguments):
  const auto cfg = lg::grid_for(n, 256);
  auto ops = [&] {
    return std::tuple(lg::fill(a.view(), 1.0F),                 // 0: a = 1
                      lg::fill(b.view(), 2.0F),                 // 1: b = 2
                      axpy(cfg, 3.0F, x.cview(), a.view(), n),  // 2: a += 3x  after 0 (both write a)
                      axpy(cfg, 4.0F, x.cview(), b.view(), n),  // 3: b += 4x  after 1
                      lg::copy(c.view(), a.cview()),            // 4: c = a    after 2 (reads what 2 wrote)
                      axpy(cfg, 1.0F, b.cview(), c.view(), n),  // 5: c += b   after 3 and 4
                      lg::fill(x.view(), 0.0F));                // 6: x = 0    after 2 and 3 (which read x)
  };
  auto flow = std::apply([](auto... op) { return lg::dataflow(op...); }, ops());
  auto serial = std::apply([](auto... op) { return (... >> op); }, ops());

  // The order is worked out when the op is built, before any GPU work: each op's direct predecessors.
  const std::vector<std::vector<std::uint32_t>> expected{{}, {}, {0}, {1}, {2}, {3, 4}, {2, 3}};
  bool ok = flow.dependencies() == expected;
  std::printf("dataflow ordered the 7 ops as:");
  for (std::size_t i = 0; i < flow.dependencies().size(); ++i) {
    std::printf(" %zu after {", i);
    for (const std::uint32_t p : flow.dependencies()[i]) std::printf(" %u", p);
    std::printf(" }");
  }
  std::printf("\n");

  // Recorded, the inferred order is the graph's: two chains that join, and the reset of x after both read it.
  auto graph = lg::CudaGraph<>::capture(stream, flow);
  auto chain = lg::CudaGraph<>::capture(stream, serial);
  const Shape parallel = shape_of(graph.dependencies());
  const Shape sequential = shape_of(chain.dependencies());
  std::printf("nodes:");
  for (const lg::NodeKind k : graph.node_kinds()) std::printf(" %s", lg::to_string(k));
  std::printf("\ndataflow: %zu nodes, %zu edges, %zu roots, longest path %zu nodes\n", graph.node_count(),
              graph.edge_counts().full, parallel.roots, parallel.longest);
  std::printf(">> chain: %zu nodes, %zu edges, %zu root,  longest path %zu nodes\n", chain.node_count(),
              chain.edge_counts().full, sequential.roots, sequential.longest);
  ok = ok && graph.node_count() == 7 && graph.edge_counts().full == 7 && parallel.roots == 2 && parallel.longest == 4 &&
       sequential.longest == 7;

  // The results are those of the ops one after another: c = (1 + 3x) + (2 + 4x), and x = 0.
  graph.launch();
  std::vector<float> got_c(n);
  std::vector<float> got_x(n);
  lg::copy(std::span<float>(got_c), c.cview()).sync_on(stream);
  lg::copy(std::span<float>(got_x), x.cview()).sync_on(stream);
  double worst = 0;
  for (int i = 0; i < n; ++i) {
    const double want = (1.0 + 3.0 * host_x[i]) + (2.0 + 4.0 * host_x[i]);
    worst = std::max(worst, std::abs(got_c[i] - want) / std::max(1.0, std::abs(want)));
    ok = ok && got_x[i] == 0.0F;
  }
  std::printf("c = 3 + 7x: max relative error vs float64 %.3g\n", worst);
  ok = ok && worst < 1e-6;
  std::printf("%s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}

constexpr const char* usage =
    "usage: 11_dataflow\n"
    "Records seven ops listed in program order with dataflow(...), which orders them only where they touch the\n"
    "same memory; prints the graph's parallel branches next to a >> chain of the same ops and checks the result.\n"
    "Exit status: 0 checked, 1 failed, 2 usage error, 77 skipped (no GPU; the reason is printed).\n";

}  // namespace

int main(int argc, char** argv) { return example::main_of(argc, argv, "11_dataflow", usage, 0, run); }
