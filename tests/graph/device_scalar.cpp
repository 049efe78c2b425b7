// DeviceScalar: a value in device memory that recorded kernels read, changed between replays.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

namespace {

/// 12 bytes: three memsets of 4 bytes write it.
struct Twelve {
  int a;
  float b;
  unsigned c;
};
static_assert(sizeof(Twelve) == 12);

/// The test's own kernels: one per scalar type, each computing y from the scalar and x (nothing accumulates, so
/// each replay's result shows the value that replay read), a kernel updating a scalar, a slow axpy that reads its
/// scalar only after spinning, and a spin that keeps a stream busy.
const KernelLibrary& own_library() {
  static const KernelLibrary library = [] {
    const KernelLibraryOptions opts = lgtest::own_kernels(
        {{"device_scalar_test.cu",
          "struct Twelve { int a; float b; unsigned c; };\n"
          "extern \"C\" __global__ void scale_short(const short* k, const float* x, float* y, int n) {\n"
          "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)\n"
          "    y[i] = float(*k) * x[i];\n"
          "}\n"
          "extern \"C\" __global__ void scale_int(const int* k, const float* x, float* y, int n) {\n"
          "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)\n"
          "    y[i] = float(*k) * x[i];\n"
          "}\n"
          "extern \"C\" __global__ void scale_double(const double* d, const float* x, float* y, int n) {\n"
          "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)\n"
          "    y[i] = float(*d * double(x[i]));\n"
          "}\n"
          "extern \"C\" __global__ void twelve_affine(const Twelve* t, const float* x, float* y, int n) {\n"
          "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)\n"
          "    y[i] = float(double(t->a) * double(x[i]) + double(t->b) + double(t->c));\n"
          "}\n"
          "extern \"C\" __global__ void increment(int* k) {\n"
          "  if (blockIdx.x == 0 && threadIdx.x == 0) *k += 1;\n"
          "}\n"
          "extern \"C\" __global__ void slow_axpy_scalar(const float* a, const float* x, float* y, int n, long long "
          "cycles) {\n"
          "  const long long start = clock64();\n"
          "  while (clock64() - start < cycles) {}\n"
          "  const float scale = *a;\n"
          "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)\n"
          "    y[i] = float(double(scale) * double(x[i]) + double(y[i]));\n"
          "}\n"
          "extern \"C\" __global__ void spin(long long cycles) {\n"
          "  const long long start = clock64();\n"
          "  while (clock64() - start < cycles) {}\n"
          "}\n"}},
        lgtest::scratch_directory("device-scalar"));
    return KernelLibrary(lgtest::device(), opts);
  }();
  return library;
}

template <class T>
using ScalarKernel = Kernel<void(const T*, const float*, float*, int)>;

using AxpyScalar = Kernel<void(const float*, const float*, float*, int)>;
AxpyScalar axpy_scalar() { return lgtest::kernels().get<void(const float*, const float*, float*, int)>("axpy_scalar"); }

using SlowAxpyScalar = Kernel<void(const float*, const float*, float*, int, long long)>;
SlowAxpyScalar slow_axpy_scalar() {
  return own_library().get<void(const float*, const float*, float*, int, long long)>("slow_axpy_scalar");
}

constexpr long long spin_cycles = 2'000'000;  // about 1 ms at the clock rates of current GPUs

/// y0 + sum(scales) * x, each step rounded to float as the kernel rounds it.
std::vector<double> accumulate(const std::vector<float>& x, const std::vector<float>& y0,
                               const std::vector<float>& scales) {
  std::vector<double> y(y0.begin(), y0.end());
  for (const float a : scales)
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(double(a) * x[i] + y[i]);
  return y;
}

template <class T>
bool same_bytes(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

/// For a captured and a built graph of `kernel(scalar, x, y)`: after each `graph.set(scalar, v)` and a launch,
/// y is `reference(v, x)` and the scalar reads back as v.
template <class T>
void check_set_reaches_kernel(const ScalarKernel<T>& kernel, const std::vector<T>& values,
                              const std::function<double(const T&, float)>& reference) {
  Stream& s = lgtest::stream();
  const int n = 20'000;
  const auto x = lgtest::random_floats(n);
  DeviceBuffer<float> dx = from_host(x).sync_on(s);
  for (const bool built : {true, false}) {
    CAPTURE(built);
    DeviceScalar<T> scalar(s, values.front());
    DeviceBuffer<float> dy = from_host(lgtest::random_floats(n)).sync_on(s);
    auto op = kernel(grid_for(n, 256), scalar.cview(), dx.cview(), dy.view(), n);
    auto graph = built ? CudaGraph<>::build(s.device(), op) : CudaGraph<>::capture(s, op);
    for (std::size_t round = 0; round < values.size(); ++round) {
      CAPTURE(round);
      // Round 0 replays the initial value; every later one sets a new value first.
      if (round > 0) graph.set(scalar, values[round]);
      graph.launch();
      CHECK(same_bytes(scalar.read(s), values[round]));
      std::vector<double> ref(n);
      for (int i = 0; i < n; ++i) ref[i] = static_cast<float>(reference(values[round], x[i]));
      CHECK(lgtest::relative_error(lgtest::to_host(s, dy.cview()), ref) < 1e-6);
    }
  }
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("a DeviceScalar holds its initial value and what assign writes, for 1 to 64-byte types") {
    Stream& s = lgtest::stream();
    DeviceScalar<float> f(s, 1.25F);
    DeviceScalar<int> i(s, -7);
    DeviceScalar<short> h(s, -12345);
    DeviceScalar<double> d(s, 3.141592653589793);
    DeviceScalar<unsigned char> c(s, 200);
    DeviceScalar<Twelve> t(s, Twelve{1, 2.5F, 0xdeadbeefU});
    std::array<float, 16> wide{};
    for (std::size_t k = 0; k < wide.size(); ++k) wide[k] = 0.5F * static_cast<float>(k) - 3.0F;
    DeviceScalar<std::array<float, 16>> w(s, wide);
    CHECK(f.read(s) == 1.25F);
    CHECK(i.read(s) == -7);
    CHECK(h.read(s) == -12345);
    CHECK(d.read(s) == 3.141592653589793);
    CHECK(c.read(s) == 200);
    const Twelve t0 = t.read(s);
    CHECK(t0.a == 1);
    CHECK(t0.b == 2.5F);
    CHECK(t0.c == 0xdeadbeefU);
    CHECK(w.read(s) == wide);
    f.assign(-0.5F).sync_on(s);
    i.assign(0x7fffffff).sync_on(s);
    h.assign(321).sync_on(s);
    d.assign(-2.0e300).sync_on(s);
    c.assign(7).sync_on(s);
    t.assign(Twelve{-4, 0.125F, 7}).sync_on(s);
    std::reverse(wide.begin(), wide.end());
    w.assign(wide).sync_on(s);
    CHECK(f.read(s) == -0.5F);
    CHECK(i.read(s) == 0x7fffffff);
    CHECK(h.read(s) == 321);
    CHECK(d.read(s) == -2.0e300);
    CHECK(c.read(s) == 7);
    const Twelve t1 = t.read(s);
    CHECK(t1.a == -4);
    CHECK(t1.b == 0.125F);
    CHECK(t1.c == 7);
    CHECK(w.read(s) == wide);
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
      const std::size_t nodes = graph.node_count();
      for (const float value : {0.75F, -3.0F, 12.5F}) {
        graph.set(a, value);
        graph.launch();
        CHECK(lgtest::relative_error(lgtest::to_host(s, dy.cview()), accumulate(x, y0, {value})) < 1e-6);
      }
      CHECK(graph.node_count() == nodes);  // set touched the value, not the graph
    }
  }

  TEST_CASE("graph.set reaches kernels reading a short, an int, a double or a 12-byte struct") {
    SUBCASE("short") {
      check_set_reaches_kernel<short>(own_library().get<void(const short*, const float*, float*, int)>("scale_short"),
                                      {3, -7, 1234, -32768},
                                      [](const short& k, float x) { return static_cast<float>(k) * x; });
    }
    SUBCASE("int") {
      check_set_reaches_kernel<int>(own_library().get<void(const int*, const float*, float*, int)>("scale_int"),
                                    {5, -11, 65537, -1000000},
                                    [](const int& k, float x) { return static_cast<float>(k) * x; });
    }
    SUBCASE("double") {
      check_set_reaches_kernel<double>(
          own_library().get<void(const double*, const float*, float*, int)>("scale_double"),
          {0.1, -2.75e10, 1.0 / 3.0, 7.0e-5}, [](const double& d, float x) { return d * double(x); });
    }
    SUBCASE("12-byte struct") {
      check_set_reaches_kernel<Twelve>(
          own_library().get<void(const Twelve*, const float*, float*, int)>("twelve_affine"),
          {Twelve{2, 0.5F, 3}, Twelve{-9, -1.25F, 40}, Twelve{100, 3.0F, 0}, Twelve{-1, 1000.0F, 77}},
          [](const Twelve& t, float x) { return double(t.a) * double(x) + double(t.b) + double(t.c); });
    }
  }

  TEST_CASE("set then launch_on another stream, round after round, gives each replay the value set before it") {
    Stream& s = lgtest::stream();
    Stream other = s.device().create_stream();
    const int n = 50'000;
    const auto x = lgtest::random_floats(n);
    const auto y0 = lgtest::random_floats(n);
    const auto spin = own_library().get<void(long long)>("spin");
    for (const bool built : {true, false}) {
      CAPTURE(built);
      DeviceScalar<float> a(s, 0.0F);
      DeviceBuffer<float> dx = from_host(x).sync_on(s);
      DeviceBuffer<float> dy = from_host(y0).sync_on(s);
      DeviceBuffer<float> start = from_host(y0).sync_on(s);
      auto op = copy(dy.view(), start.cview()) >> axpy_scalar()(grid_for(n, 256), a.cview(), dx.cview(), dy.view(), n);
      auto graph = built ? CudaGraph<>::build(s.device(), op) : CudaGraph<>::capture(s, op);
      for (int round = 0; round < 30; ++round) {
        CAPTURE(round);
        const float value = 0.125F * static_cast<float>(round + 1) * (round % 3 == 0 ? -1.0F : 1.0F);
        // Every other round, keep the graph's stream busy first: the set then lands late there, and the replay
        // on `other` must still wait for it.
        if (round % 2 == 1) graph.update(spin(grid_for(1, 32), spin_cycles));
        graph.set(a, value);
        graph.launch_on(other);
        // Read back on `other`, after the replay.
        CHECK(lgtest::relative_error(lgtest::to_host(other, dy.cview()), accumulate(x, y0, {value})) < 1e-6);
      }
      graph.synchronize();
      CHECK(graph.replay_count() == 30);
    }
  }

  TEST_CASE("sets between replays on another stream are ordered after the replay before and before the one after") {
    Stream& s = lgtest::stream();
    Stream other = s.device().create_stream();
    const int n = 100'000;
    const auto x = lgtest::random_floats(n);
    const auto y0 = lgtest::random_floats(n);
    const auto k = slow_axpy_scalar();
    for (const bool built : {true, false}) {
      CAPTURE(built);
      DeviceScalar<float> a(s, 0.0F);
      DeviceBuffer<float> dx = from_host(x).sync_on(s);
      DeviceBuffer<float> acc = from_host(y0).sync_on(s);
      // Each replay spins before it reads the scalar: a set that did not wait for it would change what it reads.
      auto op = k(grid_for(n, 256), a.cview(), dx.cview(), acc.view(), n, spin_cycles);
      auto graph = built ? CudaGraph<>::build(s.device(), op) : CudaGraph<>::capture(s, op);
      std::vector<float> scales;
      for (int round = 0; round < 20; ++round) {
        const float value = 0.01F * static_cast<float>(round + 1) * (round % 2 == 0 ? 1.0F : -0.5F);
        scales.push_back(value);
        graph.set(a, value);
        graph.launch_on(other);
      }
      graph.synchronize();
      CHECK(lgtest::relative_error(lgtest::to_host(s, acc.cview()), accumulate(x, y0, scales)) < 1e-5);
      CHECK(a.read(s) == scales.back());
    }
  }

  TEST_CASE("assign recorded as a node sets the value on every replay, one memset per 4 bytes") {
    Stream& s = lgtest::stream();
    const int n = 10'000;
    const auto x = lgtest::random_floats(n);
    const auto y0 = lgtest::random_floats(n);
    for (const bool built : {true, false}) {
      CAPTURE(built);
      DeviceScalar<float> a(s, 5.0F);
      DeviceBuffer<float> dx = from_host(x).sync_on(s);
      DeviceBuffer<float> dy = from_host(y0).sync_on(s);
      auto op = a.assign(0.25F) >> axpy_scalar()(grid_for(n, 256), a.cview(), dx.cview(), dy.view(), n);
      auto graph = built ? CudaGraph<>::build(s.device(), op) : CudaGraph<>::capture(s, op);
      const auto kinds = graph.node_kinds();
      CHECK(std::count(kinds.begin(), kinds.end(), NodeKind::memset) == 1);
      CHECK(a.read(s) == 5.0F);  // recording wrote nothing
      graph.set(a, 100.0F);      // overwritten by the recorded assign before the kernel reads it
      graph.launch();
      graph.launch();
      CHECK(a.read(s) == 0.25F);
      CHECK(lgtest::relative_error(lgtest::to_host(s, dy.cview()), accumulate(x, y0, {0.25F, 0.25F})) < 1e-6);
    }

    DeviceScalar<short> h(s, 1);
    DeviceScalar<double> d(s, 1.0);
    DeviceScalar<Twelve> t(s, Twelve{1, 1.0F, 1});
    auto all_three = CudaGraph<>::build(s.device(), h.assign(-2) >> d.assign(-0.1) >> t.assign(Twelve{-3, 0.2F, 9}));
    const auto kinds = all_three.node_kinds();
    CHECK(kinds.size() == 1 + 2 + 3);
    CHECK(std::count(kinds.begin(), kinds.end(), NodeKind::memset) == 1 + 2 + 3);
    CHECK(h.read(s) == 1);
    all_three.launch();
    CHECK(h.read(s) == -2);
    CHECK(d.read(s) == -0.1);
    CHECK(same_bytes(t.read(s), Twelve{-3, 0.2F, 9}));
  }

  TEST_CASE("a kernel updating a DeviceScalar through view() counts replays, and set resets it") {
    Stream& s = lgtest::stream();
    const auto increment = own_library().get<void(int*)>("increment");
    for (const bool built : {true, false}) {
      CAPTURE(built);
      DeviceScalar<int> count(s, 10);
      auto op = increment(grid_for(1, 32), count.view());
      auto graph = built ? CudaGraph<>::build(s.device(), op) : CudaGraph<>::capture(s, op);
      for (int i = 0; i < 3; ++i) graph.launch();
      CHECK(count.read(s) == 13);
      graph.set(count, -100);
      Stream other = s.device().create_stream();
      graph.launch_on(other);
      graph.launch_on(other);
      graph.synchronize();
      CHECK(count.read(s) == -98);
    }
  }

  TEST_CASE("a graph keeps a DeviceScalar's memory alive after the scalar is destroyed") {
    Stream& s = lgtest::stream();
    const int n = 8192;
    const auto x = lgtest::random_floats(n);
    const auto y0 = lgtest::random_floats(n);
    DeviceBuffer<float> dx = from_host(x).sync_on(s);
    DeviceBuffer<float> dy = from_host(y0).sync_on(s);
    std::optional<CudaGraph<>> graph;
    std::weak_ptr<const void> memory;
    {
      auto a = std::make_unique<DeviceScalar<float>>(s, 0.5F);
      memory = a->cview().owner();
      graph.emplace(
          CudaGraph<>::build(s.device(), axpy_scalar()(grid_for(n, 256), a->cview(), dx.cview(), dy.view(), n)));
      graph->set(*a, -1.5F);
    }
    CHECK_FALSE(memory.expired());
    graph->launch();
    graph->launch();
    CHECK(lgtest::relative_error(lgtest::to_host(s, dy.cview()), accumulate(x, y0, {-1.5F, -1.5F})) < 1e-6);
    graph.reset();
    CHECK(memory.expired());
  }
}
