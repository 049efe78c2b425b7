// The combinators (ops/combinators.hpp): `>>` runs b after a, all(...) runs independent ops as parallel
// branches and joins them, chain runs a run-time number of ops in order, map applies a host function to an
// op's output when it executes.
#include <doctest/doctest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

namespace {
using lgtest::axpy;

using Fill = FillOp<float>;
}  // namespace

static_assert(std::is_void_v<ChainOp<Fill>::Output> && GraphNode<ChainOp<Fill>>);
static_assert(!GraphNode<ChainOp<decltype(zeros<float>(1))>>);
static_assert(
    std::is_same_v<AllOp<ValueOp<int>, Fill, ValueOp<std::string>>::Output, std::tuple<int, Unit, std::string>>);
static_assert(Unit{} == Unit{});

TEST_CASE("ops compose with >>, all and map without touching the GPU") {
  DeviceSpan<float> a(0x1000, 8);
  DeviceSpan<const float> b(0x2000, 8);
  auto op = fill(a, 1.0F) >> all(copy(a.subspan(4, 4), b.subspan(0, 4)), fill(a.subspan(0, 4), 2.0F)) >>
            map(value(3), [](int x) { return x * 2; });
  static_assert(GraphNode<decltype(op)>);
  static_assert(std::is_same_v<decltype(op)::Output, int>);
  auto allocating = zeros<float>(1 << 20) >> fill(a, 0.5F);
  static_assert(!GraphNode<decltype(allocating)>);
  CHECK(true);  // building them ran nothing: no driver is needed (the no-driver suite builds these too)
}

TEST_CASE("chain holds its ops in order and counts them") {
  const DeviceSpan<float> a(0x1000, 8);
  std::vector<Fill> fills;
  for (int i = 0; i < 5; ++i) fills.push_back(fill(a, static_cast<float>(i)));
  const auto c = chain(std::move(fills));
  CHECK(c.size() == 5);
  CHECK(chain(std::vector<Fill>{}).size() == 0);
}

TEST_SUITE("gpu") {
  TEST_CASE("all(...) records independent ops as parallel branches that all complete") {
    Stream& s = lgtest::stream();
    const int n = 50'000;
    const auto x = lgtest::random_floats(n);
    DeviceBuffer<float> dx = from_host(x).sync_on(s);
    std::vector<DeviceBuffer<float>> ys;
    std::vector<std::vector<float>> y0;
    for (int b = 0; b < 4; ++b) {
      y0.push_back(lgtest::random_floats(n));
      ys.push_back(from_host(y0.back()).sync_on(s));
    }
    const auto k = axpy();
    const auto cfg = grid_for(n, 256);
    auto branches = all(k(cfg, 1.0F, dx.cview(), ys[0].view(), n) >> k(cfg, 1.0F, dx.cview(), ys[0].view(), n),
                        k(cfg, 2.0F, dx.cview(), ys[1].view(), n), k(cfg, 3.0F, dx.cview(), ys[2].view(), n),
                        fill(ys[3].view(), 7.0F));
    auto graph = CudaGraph<>::capture(s, branches);
    graph.launch();
    CHECK(lgtest::relative_error(lgtest::to_host(s, ys[0].cview()), lgtest::axpy_reference(1.0F, x, y0[0], 2)) < 1e-6);
    CHECK(lgtest::relative_error(lgtest::to_host(s, ys[1].cview()), lgtest::axpy_reference(2.0F, x, y0[1], 1)) < 1e-6);
    CHECK(lgtest::relative_error(lgtest::to_host(s, ys[2].cview()), lgtest::axpy_reference(3.0F, x, y0[2], 1)) < 1e-6);
    const auto filled = lgtest::to_host(s, ys[3].cview());
    CHECK(std::all_of(filled.begin(), filled.end(), [](float v) { return v == 7.0F; }));
    const auto kinds = graph.node_kinds();
    CHECK(std::count(kinds.begin(), kinds.end(), NodeKind::kernel) == 4);
    CHECK(std::count(kinds.begin(), kinds.end(), NodeKind::memset) == 1);
  }

  TEST_CASE("a >> b runs b after a, and chain runs its ops in order, each as often as it appears") {
    Stream& s = lgtest::stream();
    const int n = 30'000;
    const auto x = lgtest::random_floats(n);
    const auto r = lgtest::random_floats(3);
    const float v = r[0] + 2.0F;  // never a value y holds already
    const DeviceBuffer<float> dx = lgtest::to_device(s, x);
    DeviceBuffer<float> y = lgtest::to_device(s, lgtest::random_floats(n));
    const auto k = axpy();
    const auto cfg = grid_for(n, 256);

    (fill(y.view(), v) >> k(cfg, r[1], dx.cview(), y.view(), n)).sync_on(s);  // y = r1 x + v
    const std::vector<float> filled(n, v);
    CHECK(lgtest::relative_error(lgtest::to_host(s, y.cview()), lgtest::axpy_reference(r[1], x, filled, 1)) < 1e-6);

    std::vector<decltype(k(cfg, r[2], dx.cview(), y.view(), n))> steps;
    for (int i = 0; i < 7; ++i) steps.push_back(k(cfg, r[2], dx.cview(), y.view(), n));
    const auto before = lgtest::to_host(s, y.cview());
    chain(std::move(steps)).sync_on(s);
    CHECK(lgtest::relative_error(lgtest::to_host(s, y.cview()), lgtest::axpy_reference(r[2], x, before, 7)) < 1e-6);

    std::vector<Fill> fills;
    const auto values = lgtest::random_floats(20);
    for (const float f : values) fills.push_back(fill(y.view(), f));
    chain(std::move(fills)).sync_on(s);
    const auto last = lgtest::to_host(s, y.cview());
    CHECK(std::all_of(last.begin(), last.end(), [&](float e) { return e == values.back(); }));
  }

  TEST_CASE("map runs its function once per execution: at record time, never on replay") {
    Stream& s = lgtest::stream();
    DeviceBuffer<float> b = zeros<float>(64).sync_on(s);
    int calls = 0;
    auto op = fill(b.view(), 3.0F) >> map(value(20), [&calls](int x) {
                ++calls;
                return x + 1;
              });
    CHECK(calls == 0);  // building runs nothing
    CHECK(op.sync_on(s) == 21);
    CHECK(calls == 1);
    auto graph = CudaGraph<>::capture(s, op);
    CHECK(calls == 2);
    CHECK(graph.take_output() == 21);
    for (int i = 0; i < 3; ++i) graph.launch();
    CHECK(calls == 2);
    int void_calls = 0;
    map(fill(b.view(), 4.0F), [&void_calls] { ++void_calls; }).sync_on(s);  // a void op's function takes nothing
    CHECK(void_calls == 1);
    CHECK(lgtest::to_host(s, b.cview())[63] == 4.0F);
  }

  TEST_CASE("all returns its ops' outputs in order, Unit for void ones") {
    Stream& s = lgtest::stream();
    DeviceBuffer<float> b = zeros<float>(8).sync_on(s);
    const auto out = all(value(7), fill(b.view(), 1.0F), value(std::string("third"))).sync_on(s);
    CHECK(std::get<0>(out) == 7);
    CHECK(std::get<1>(out) == Unit{});
    CHECK(std::get<2>(out) == "third");
    CHECK(lgtest::to_host(s, b.cview())[7] == 1.0F);
  }

  TEST_CASE("when a branch of all throws, the branches after it are skipped, the others joined, and it rethrows") {
    Stream& s = lgtest::stream();
    const int n = 1000;
    const auto before_a = lgtest::random_floats(n);
    const auto before_c = lgtest::random_floats(n);
    DeviceBuffer<float> a = lgtest::to_device(s, before_a);
    DeviceBuffer<float> c = lgtest::to_device(s, before_c);
    const float v = lgtest::random_floats(1)[0] + 2.0F;
    auto op = all(fill(a.view(), v), map(value(0), [](int) -> int { throw std::runtime_error("branch two failed"); }),
                  fill(c.view(), v));
    CHECK_THROWS_WITH_AS(op.sync_on(s), "branch two failed", std::runtime_error);
    s.synchronize();  // the stream is usable: the branch streams were joined
    const auto got_a = lgtest::to_host(s, a.cview());
    CHECK(std::all_of(got_a.begin(), got_a.end(), [&](float e) { return e == v; }));  // ran before the throw
    CHECK(lgtest::to_host(s, c.cview()) == before_c);                                 // skipped
  }
}

static_assert(GraphNode<ChooseOp<Fill, Fill>> && std::is_void_v<ChooseOp<Fill, Fill>::Output>);
static_assert(!GraphNode<ChooseOp<Fill, decltype(zeros<float>(1) >> fill(DeviceSpan<float>{}, 0.0F))>>);

TEST_SUITE("gpu") {
  TEST_CASE("choose runs the op it was built to run, eagerly and in a graph") {
    Stream& s = lgtest::stream();
    auto a = zeros<float>(4).sync_on(s);
    auto b = zeros<float>(4).sync_on(s);
    choose(true, fill(a.view(), 1.0F), fill(b.view(), 2.0F)).sync_on(s);
    CHECK(lgtest::to_host(s, a.cview()) == std::vector<float>(4, 1.0F));
    CHECK(lgtest::to_host(s, b.cview()) == std::vector<float>(4, 0.0F));
    auto graph = CudaGraph<>::capture(s, choose(false, fill(a.view(), 3.0F), fill(b.view(), 4.0F)));
    CHECK(graph.node_count() == 1);
    graph.launch();
    CHECK(lgtest::to_host(s, a.cview()) == std::vector<float>(4, 1.0F));
    CHECK(lgtest::to_host(s, b.cview()) == std::vector<float>(4, 4.0F));
  }
}
