// DeviceScalar: a value in device memory that recorded kernels read, changed between replays.
#include <doctest/doctest.h>

#include <cstring>

#include "common/gpu.hpp"

using namespace lazygraph;

namespace {

using AxpyScalar = Kernel<void(const float*, const float*, float*, int)>;
AxpyScalar axpy_scalar() { return lgtest::kernels().get<void(const float*, const float*, float*, int)>("axpy_scalar"); }

struct Twelve {
  int a;
  float b;
  unsigned c;
};

/// y0 + sum(scales) * x, each step rounded to float as the kernel rounds it.
std::vector<double> accumulate(const std::vector<float>& x, const std::vector<float>& y0,
                               const std::vector<float>& scales) {
  std::vector<double> y(y0.begin(), y0.end());
  for (const float a : scales)
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(double(a) * x[i] + y[i]);
  return y;
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("a DeviceScalar holds its initial value and what assign writes, for 1 to 12-byte types") {
    Stream& s = lgtest::stream();
    DeviceScalar<float> f(s, 1.25F);
    DeviceScalar<int> i(s, -7);
    DeviceScalar<double> d(s, 3.141592653589793);
    DeviceScalar<unsigned char> c(s, 200);
    DeviceScalar<Twelve> t(s, Twelve{1, 2.5F, 0xdeadbeefU});
    CHECK(f.read(s) == 1.25F);
    CHECK(i.read(s) == -7);
    CHECK(d.read(s) == 3.141592653589793);
    CHECK(c.read(s) == 200);
    const Twelve t0 = t.read(s);
    CHECK(t0.a == 1);
    CHECK(t0.b == 2.5F);
    CHECK(t0.c == 0xdeadbeefU);
    f.assign(-0.5F).sync_on(s);
    d.assign(-2.0e300).sync_on(s);
    t.assign(Twelve{-4, 0.125F, 7}).sync_on(s);
    CHECK(f.read(s) == -0.5F);
    CHECK(d.read(s) == -2.0e300);
    const Twelve t1 = t.read(s);
    CHECK(t1.a == -4);
    CHECK(t1.b == 0.125F);
    CHECK(t1.c == 7);
  }

  TEST_CASE("graph.set changes the value a captured or built graph's kernel reads, without re-recording") {
    Stream& s = lgtest::stream();
    const int n = 40'000;
    const auto x = lgtest::random_floats(n);
    const auto y0 = lgtest::random_floats(n);
    for (const bool built : {true, false}) {
      CAPTURE(built);
      DeviceScalar<float> a(s, 1.0F);
      DeviceBuffer<float> dx = from_host(x).sync_on(s);
      DeviceBuffer<float> dy = from_host(y0).sync_on(s);
      DeviceBuffer<float> start = from_host(y0).sync_on(s);
      auto op = copy(dy.view(), start.cview()) >> axpy_scalar()(grid_for(n, 256), a.cview(), dx.cview(), dy.view(), n);
      auto graph = built ? CudaGraph<>::build(s.device(), op) : CudaGraph<>::capture(s, op);
      for (const float value : {0.75F, -3.0F, 12.5F}) {
        graph.set(a, value);
        graph.launch();
        CHECK(lgtest::relative_error(lgtest::to_host(s, dy.cview()), accumulate(x, y0, {value})) < 1e-6);
      }
    }
  }

  TEST_CASE("sets between replays on another stream are ordered after the replay before and before the one after") {
    Stream& s = lgtest::stream();
    Stream other = s.device().create_stream();
    const int n = 200'000;  // long enough that an unordered set would overtake a queued replay
    const auto x = lgtest::random_floats(n);
    const auto y0 = lgtest::random_floats(n);
    DeviceScalar<float> a(s, 0.0F);
    DeviceBuffer<float> dx = from_host(x).sync_on(s);
    DeviceBuffer<float> acc = from_host(y0).sync_on(s);
    auto graph = CudaGraph<>::build(s.device(), axpy_scalar()(grid_for(n, 256), a.cview(), dx.cview(), acc.view(), n));
    std::vector<float> scales;
    for (int round = 0; round < 50; ++round) {
      const float value = 0.01F * static_cast<float>(round + 1) * (round % 2 == 0 ? 1.0F : -0.5F);
      scales.push_back(value);
      graph.set(a, value);
      graph.launch_on(other);
    }
    graph.synchronize();
    CHECK(lgtest::relative_error(lgtest::to_host(s, acc.cview()), accumulate(x, y0, scales)) < 1e-5);
  }

  TEST_CASE("assign recorded as a node sets the value on every replay") {
    Stream& s = lgtest::stream();
    const int n = 10'000;
    const auto x = lgtest::random_floats(n);
    const auto y0 = lgtest::random_floats(n);
    DeviceScalar<float> a(s, 5.0F);
    DeviceBuffer<float> dx = from_host(x).sync_on(s);
    DeviceBuffer<float> dy = from_host(y0).sync_on(s);
    auto graph = CudaGraph<>::build(
        s.device(), a.assign(0.25F) >> axpy_scalar()(grid_for(n, 256), a.cview(), dx.cview(), dy.view(), n));
    const auto kinds = graph.node_kinds();
    CHECK(std::count(kinds.begin(), kinds.end(), NodeKind::memset) == 1);
    graph.set(a, 100.0F);  // overwritten by the recorded assign before the kernel reads it
    graph.launch();
    graph.launch();
    CHECK(a.read(s) == 0.25F);
    CHECK(lgtest::relative_error(lgtest::to_host(s, dy.cview()), accumulate(x, y0, {0.25F, 0.25F})) < 1e-6);
  }
}
