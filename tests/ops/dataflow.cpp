// dataflow(...) on the GPU: the recorded graph has exactly the inferred DAG (captured and built), and its results
// equal those of the same ops run one after another.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

namespace {

using Dependencies = std::vector<std::vector<std::size_t>>;

/// Five buffers of random floats and the ops of a small DAG over them:
///   0: y0 += 1.5 x        1: y1 += 2 x          2: y2 += 0.5 y0 (after 0)
///   3: y2 += -1 y1 (after 1, and 2: both write y2)    4: y3 = y0 (after 0)
///   5: x += y3 (after 4; and after 0 and 1, which read x — but 0 already comes before 4, so no edge from 0)
struct Dag {
  static constexpr int n = 40'000;
  std::vector<float> x0 = lgtest::random_floats(n);
  std::vector<std::vector<float>> y0;
  DeviceBuffer<float> x;
  std::vector<DeviceBuffer<float>> y;

  Dag() : x(lgtest::to_device(lgtest::stream(), x0)) {
    for (int i = 0; i < 4; ++i) {
      y0.push_back(lgtest::random_floats(n));
      y.push_back(lgtest::to_device(lgtest::stream(), y0.back()));
    }
  }
  /// The six ops in program order.
  auto ops() {
    const auto k = lgtest::axpy();
    const auto cfg = grid_for(n, 256);
    return std::tuple(k(cfg, 1.5F, x.cview(), y[0].view(), n), k(cfg, 2.0F, x.cview(), y[1].view(), n),
                      k(cfg, 0.5F, y[0].cview(), y[2].view(), n), k(cfg, -1.0F, y[1].cview(), y[2].view(), n),
                      copy(y[3].view(), y[0].cview()), k(cfg, 1.0F, y[3].cview(), x.view(), n));
  }
  auto flow() {
    return std::apply([](auto... op) { return dataflow(std::move(op)...); }, ops());
  }
  auto serial() {
    return std::apply([](auto a, auto b, auto c, auto d, auto e, auto f) { return a >> b >> c >> d >> e >> f; }, ops());
  }
  std::vector<std::vector<float>> results() {
    std::vector<std::vector<float>> out{lgtest::to_host(lgtest::stream(), x.cview())};
    for (auto& b : y) out.push_back(lgtest::to_host(lgtest::stream(), b.cview()));
    return out;
  }
};

const Dependencies expected{{}, {}, {0}, {1, 2}, {0}, {1, 4}};

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("dataflow infers the DAG of six ops; the captured and the built graph have exactly its edges") {
    Dag d;
    auto flow = d.flow();
    // 5 follows 1 (which reads x, which 5 writes) and 4 (whose y3 it reads); 0 reads x too but precedes 4.
    const std::vector<std::vector<std::uint32_t>> inferred{{}, {}, {0}, {1, 2}, {0}, {1, 4}};
    CHECK(flow.dependencies() == inferred);
    Stream& s = lgtest::stream();
    auto captured = CudaGraph<>::capture(s, flow);
    auto built = CudaGraph<>::build(s.device(), flow);
    CHECK(captured.node_count() == 6);
    CHECK(built.node_count() == 6);
    CHECK(captured.dependencies() == expected);
    CHECK(built.dependencies() == expected);
    CHECK(captured.edge_counts().full == 6);
    CHECK(built.edge_counts().full == 6);
    // The serial version is a chain: five edges, each node after the one before.
    auto serial = CudaGraph<>::capture(s, d.serial());
    CHECK(serial.dependencies() == Dependencies{{}, {0}, {1}, {2}, {3}, {4}});
  }

  TEST_CASE("dataflow's graph computes what the ops one after another compute, replay after replay") {
    Dag a;
    Dag b;
    b.x = lgtest::to_device(lgtest::stream(), a.x0);
    for (int i = 0; i < 4; ++i) b.y[i] = lgtest::to_device(lgtest::stream(), a.y0[i]);
    Stream& s = lgtest::stream();
    auto flow = CudaGraph<>::capture(s, a.flow());
    auto serial = CudaGraph<>::capture(s, b.serial());
    for (int r = 0; r < 5; ++r) {
      flow.launch();
      serial.launch();
    }
    s.synchronize();
    const auto fa = a.results();
    const auto fb = b.results();
    for (std::size_t i = 0; i < fa.size(); ++i) {
      INFO("buffer " << i);
      CHECK(fa[i] == fb[i]);  // the same operations on the same values in the same order per element: bit-equal
    }
    // And against float64: one pass from the initial values.
    Dag c;
    c.x = lgtest::to_device(s, a.x0);
    for (int i = 0; i < 4; ++i) c.y[i] = lgtest::to_device(s, a.y0[i]);
    c.flow().sync_on(s);
    std::vector<double> x(a.x0.begin(), a.x0.end());
    std::vector<std::vector<double>> y;
    for (const auto& v : a.y0) y.emplace_back(v.begin(), v.end());
    for (int i = 0; i < Dag::n; ++i) {
      y[0][i] += 1.5 * x[i];
      y[1][i] += 2.0 * x[i];
      y[2][i] += 0.5 * y[0][i] - y[1][i];
      y[3][i] = y[0][i];
      x[i] += y[3][i];
    }
    const auto got = c.results();
    CHECK(lgtest::relative_error(got[0], x) < 1e-5);
    CHECK(lgtest::relative_error(got[3], y[2]) < 1e-5);
  }

  TEST_CASE("dataflow inside all() branches and after other work is captured and built alike") {
    Dag a;
    Dag b;
    Stream& s = lgtest::stream();
    const auto k = lgtest::axpy();
    auto op = k(grid_for(Dag::n, 256), 1.0F, a.y[3].cview(), b.y[3].view(), Dag::n) >> all(a.flow(), b.flow());
    auto captured = CudaGraph<>::capture(s, op);
    auto built = CudaGraph<>::build(s.device(), op);
    CHECK(captured.dependencies() == built.dependencies());
    CHECK(captured.node_count() == 13);
    // Everything inside follows the first kernel (>>); inside, each dataflow's roots (its ops 0 and 1) depend on it
    // alone, the rest on their predecessors.
    const auto deps = captured.dependencies();
    std::size_t after_first = 0;
    for (const auto& list : deps) after_first += static_cast<std::size_t>(list == std::vector<std::size_t>{0});
    CHECK(after_first == 4);
  }

  TEST_CASE("dataflow of a flat list of kernels finds the chains in it and computes what the list in order does") {
    Stream& s = lgtest::stream();
    const int n = 10'000;
    const auto x0 = lgtest::random_floats(n);
    std::vector<std::vector<float>> y0;
    std::vector<DeviceBuffer<float>> ys;
    for (int i = 0; i < 3; ++i) {
      y0.push_back(lgtest::random_floats(n));
      ys.push_back(lgtest::to_device(s, y0.back()));
    }
    const DeviceBuffer<float> x = lgtest::to_device(s, x0);
    const auto k = lgtest::axpy();
    std::vector<decltype(k(LaunchConfig{}, 0.0F, x.cview(), ys[0].view(), 0))> ops;
    ops.reserve(9);
    for (int i = 0; i < 9; ++i) {
      ops.push_back(
          k(grid_for(n, 256), 0.5F + static_cast<float>(i), x.cview(), ys[static_cast<std::size_t>(i % 3)].view(), n));
    }
    auto graph = CudaGraph<>::capture(s, dataflow(std::move(ops)));
    CHECK(graph.dependencies() == Dependencies{{}, {}, {}, {0}, {1}, {2}, {3}, {4}, {5}});
    graph.launch();
    s.synchronize();
    for (std::size_t c = 0; c < 3; ++c) {
      std::vector<double> want(y0[c].begin(), y0[c].end());
      for (int i = static_cast<int>(c); i < 9; i += 3) {
        for (int e = 0; e < n; ++e) want[static_cast<std::size_t>(e)] += (0.5 + i) * x0[static_cast<std::size_t>(e)];
      }
      CHECK(lgtest::relative_error(lgtest::to_host(s, ys[c].cview()), want) < 1e-5);
    }
  }

  TEST_CASE("dataflow runs eagerly in program order") {
    Dag a;
    Dag b;
    b.x = lgtest::to_device(lgtest::stream(), a.x0);
    for (int i = 0; i < 4; ++i) b.y[i] = lgtest::to_device(lgtest::stream(), a.y0[i]);
    a.flow().sync_on(lgtest::stream());
    b.serial().sync_on(lgtest::stream());
    CHECK(a.results() == b.results());
  }
}
