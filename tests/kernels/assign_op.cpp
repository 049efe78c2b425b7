// assign(out, expression) (kernels/assign_op.hpp): the op's checks, accesses and launch shape on the host; on a GPU,
// results against a float64 reference in float, half and bfloat16, in place, with DeviceScalars, misaligned spans and
// odd lengths, recorded into graphs, and the in-memory and disk caches of the generated kernels.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

namespace {

template <class T>
DeviceSpan<T> span_at(CUdeviceptr address, std::size_t n) {
  return {address, n};
}

using FloatAssign = decltype(assign(std::declval<DeviceSpan<float>>(), std::declval<DeviceSpan<const float>>() * 2.0F));
static_assert(GraphNode<FloatAssign> && BuildableNode<FloatAssign>);
static_assert(DeclaresAccesses<FloatAssign>);
static_assert(std::is_void_v<FloatAssign::Output>);

}  // namespace

TEST_CASE("assign refuses an output whose length differs from the expression's, naming both") {
  const auto a = span_at<const float>(0x10000, 100);
  CHECK_THROWS_WITH_AS((void)assign(span_at<float>(0x20000, 99), a * 2.0F),
                       doctest::Contains("the output has 99 elements but the spans of `out = x0 * s1` have 100"),
                       UsageError);
  CHECK_NOTHROW((void)assign(span_at<float>(0x20000, 7), 3.0F));  // a number alone fits any output
}

TEST_CASE("assign in place is allowed for exactly the same span, and refused for a shifted or reinterpreted view") {
  const std::size_t n = 256;
  const auto x = span_at<float>(0x100000, n + 8);
  const auto view = x.subspan(0, n);
  CHECK_NOTHROW((void)assign(view, view * 2.0F + 1.0F));
  CHECK_THROWS_WITH_AS((void)assign(view, x.subspan(1, n) * 2.0F), doctest::Contains("overlaps the operand x0"),
                       UsageError);
  CHECK_THROWS_WITH_AS((void)assign(x.subspan(4, n), view + span_at<const float>(0x900000, n)),
                       doctest::Contains("without being the same elements"), UsageError);
  // The same first byte, but halves there: element i of each lies at different bytes.
  const auto halves = span_at<const half>(0x100000, n);
  CHECK_THROWS_AS((void)assign(view, cast<float>(halves)), UsageError);
  // A broadcast of an element the kernel writes is refused too (threads would read it while others write it).
  CHECK_THROWS_WITH_AS((void)assign(view, view * broadcast(x.subspan(3, 1))), doctest::Contains("broadcast operand b1"),
                       UsageError);
  // Disjoint views of one buffer are fine.
  CHECK_NOTHROW((void)assign(x.subspan(0, 4), x.subspan(4, 4) * 2.0F));
}

TEST_CASE("assign says what it reads and writes, named by its kernel") {
  const auto a = span_at<const half>(0x10000, 64);
  const auto b = span_at<const half>(0x20000, 64);
  const auto s = span_at<const half>(0x30000, 1);
  const auto out = span_at<half>(0x40000, 64);
  const auto op = assign(out, a * broadcast(s) + 2.0F * b);
  const AccessSet set = accesses_of(op);
  REQUIRE(set.entries().size() == 4);
  CHECK_FALSE(set.is_opaque());
  const std::vector<CUdeviceptr> begins{0x10000, 0x30000, 0x20000, 0x40000};
  const std::vector<std::size_t> bytes{128, 2, 128, 128};
  for (std::size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(set.entries()[i].begin == begins[i]);
    CHECK(set.entries()[i].bytes == bytes[i]);
    CHECK(set.entries()[i].writes == (i == 3));
    CHECK(set.entries()[i].op == op.kernel_name());
  }
  CHECK(op.span_bytes() == 128 * 3 + 2);
}

TEST_CASE("assign takes the 16-byte path only when every span and the output are 16-byte aligned") {
  const auto a = span_at<const float>(0x10000, 100);
  const auto out = span_at<float>(0x20000, 100);
  CHECK(assign(out, a + 1.0F).vectorized());
  CHECK_FALSE(assign(out.subspan(1, 99), a.subspan(0, 99) + 1.0F).vectorized());
  CHECK_FALSE(assign(out.subspan(0, 99), a.subspan(1, 99) + 1.0F).vectorized());
  CHECK(assign(out.subspan(4, 92), a.subspan(8, 92) + 1.0F).vectorized());  // 16 and 32 bytes in: aligned
  // A broadcast's address does not matter: it is read one element at a time.
  CHECK(assign(out, a * broadcast(span_at<const float>(0x30002, 1))).vectorized());
}

TEST_CASE("the launch shape covers the elements with one block of 256 per 256 accesses, up to with_max_blocks") {
  const auto shape = [](std::size_t n, int width, bool vectorized, unsigned max_blocks) {
    const LaunchConfig c = detail::expression_launch_config(n, width, vectorized, max_blocks);
    CHECK(c.block.x == 256);
    CHECK(c.block.volume() == 256);
    CHECK(c.shared_bytes == 0);
    CHECK_FALSE(c.early_launch);
    return c.grid.x;
  };
  const unsigned any = detail::expression_max_blocks;
  CHECK(shape(0, 4, true, any) == 1);
  CHECK(shape(1000, 4, true, any) == 1);   // 250 vectors
  CHECK(shape(1027, 4, false, any) == 5);  // 1027 elements
  CHECK(shape(1U << 20U, 4, true, any) == 1024);
  CHECK(shape(1U << 20U, 8, true, any) == 512);
  CHECK(shape(16U << 20U, 4, true, any) == 16384);       // no cap: as many blocks as the work needs
  CHECK(shape(16U << 20U, 4, false, 132) == 132);        // capped: the loop strides over the rest
  CHECK(shape(16U << 20U, 4, false, 0) == 1);            // at least one block
  CHECK(shape(7, 8, true, any) == 1);                    // all tail
  CHECK(shape((4ULL << 40U) + 1, 4, true, any) == any);  // more vectors than a grid holds: the loop covers them

  const auto a = span_at<const float>(0x10000, 16U << 20U);
  const auto out = span_at<float>(0x10000000, 16U << 20U);
  const auto op = assign(out, a * 2.0F);
  CHECK(op.launch_config().grid.x == 16384);
  CHECK(op.with_max_blocks(100).launch_config().grid.x == 100);
  CHECK(op.with_max_blocks(0).launch_config().grid.x == 1);
  CHECK(op.with_early_launch().with_max_blocks(7).launch_config().early_launch);
}

TEST_SUITE("gpu") {
  namespace {

  /// Values of T on the device and as float64, from fresh random floats in [-1, 1) (never zero).
  template <class T>
  struct Input {
    explicit Input(std::size_t n) {
      for (const float f : lgtest::random_floats(n)) {
        if constexpr (std::is_same_v<T, float>) {
          stored.push_back(f);
        } else {
          stored.push_back(T::from_float(f));
        }
        exact.push_back(as_double(stored.back()));
      }
      buffer = lgtest::to_device(lgtest::stream(), stored);
    }
    static double as_double(const T& v) {
      if constexpr (std::is_same_v<T, float>) {
        return v;
      } else {
        return v.to_float();
      }
    }
    std::vector<T> stored;
    std::vector<double> exact;
    std::optional<DeviceBuffer<T>> buffer;
    [[nodiscard]] DeviceSpan<const T> cview() const { return buffer->cview(); }
  };

  template <class T>
  std::vector<float> as_floats(const std::vector<T>& v) {
    std::vector<float> out;
    out.reserve(v.size());
    for (const T& x : v) out.push_back(static_cast<float>(Input<T>::as_double(x)));
    return out;
  }

  /// The largest relative error each element type's result may have against the float64 reference: the rounding of
  /// the one final store (half: 2^-11, bfloat16: 2^-8) plus float's own, with margin.
  template <class T>
  double tolerance() {
    if constexpr (std::is_same_v<T, float>) {
      return 2e-6;
    } else if constexpr (std::is_same_v<T, half>) {
      return 1.5e-3;
    } else {
      return 1e-2;
    }
  }

  /// `f(i)` for every element, as the float64 reference of a float result (the device may fuse a multiply and an
  /// add into one rounding, so results are compared within float's precision, not bit for bit).
  template <class F>
  std::vector<double> reference(std::size_t n, F&& f) {
    std::vector<double> out(n);
    for (std::size_t i = 0; i < n; ++i) out[i] = f(i);
    return out;
  }

  /// Runs assign(out, make(a, b, c)) on fresh random inputs of T and checks it against reference(a, b, c) in
  /// float64.
  template <class T, class Make>
  void check_against_reference(std::size_t n, Make&& make, const std::function<double(double, double, double)>& ref) {
    Stream& s = lgtest::stream();
    const Input<T> a(n);
    const Input<T> b(n);
    const Input<T> c(n);
    DeviceBuffer<T> out(s.device(), n);
    const auto op = assign(out.view(), make(a.cview(), b.cview(), c.cview()));
    CAPTURE(op.description());
    CHECK(op.vectorized());
    op.sync_on(s);
    std::vector<double> expected(n);
    for (std::size_t i = 0; i < n; ++i) expected[i] = ref(a.exact[i], b.exact[i], c.exact[i]);
    CHECK(lgtest::relative_error(as_floats(lgtest::to_host(s, out.cview())), expected) < tolerance<T>());
  }

  double silu(double x) { return x / (1.0 + std::exp(-x)); }

  template <class T>
  void check_expressions(std::size_t n) {
    check_against_reference<T>(
        n, [](auto a, auto b, auto c) { return silu(a) * b + 2.0F * c; },
        [](double a, double b, double c) { return silu(a) * b + 2.0 * c; });
    check_against_reference<T>(
        n, [](auto a, auto b, auto c) { return select(a < b, exp(a), tanh(c) / 3); },
        [](double a, double b, double c) { return a < b ? std::exp(a) : std::tanh(c) / 3; });
    check_against_reference<T>(
        n, [](auto a, auto b, auto c) { return rsqrt(abs(a) + 0.5F) * max(b, c) - min(a, 0.25F); },
        [](double a, double b, double c) {
          return 1.0 / std::sqrt(std::abs(a) + 0.5) * std::max(b, c) - std::min(a, 0.25);
        });
    check_against_reference<T>(
        n, [](auto a, auto b, auto c) { return -(sqrt(abs(a)) - b) / (abs(c) + 1) + cast<T>(a >= c && b != c); },
        [](double a, double b, double c) {
          return -(std::sqrt(std::abs(a)) - b) / (std::abs(c) + 1) + (a >= c && b != c ? 1.0 : 0.0);
        });
  }

  }  // namespace

  TEST_CASE("fused expressions match a float64 reference in float, half and bfloat16, at odd lengths") {
    for (const std::size_t n : {std::size_t{100'003}, std::size_t{8}, std::size_t{5}}) {
      CAPTURE(n);
      check_expressions<float>(n);
      check_expressions<half>(n);
      check_expressions<bfloat16>(n);
    }
  }

  TEST_CASE("casts between float, half and bfloat16 round as the host's conversions do") {
    Stream& s = lgtest::stream();
    const std::size_t n = 4099;
    const Input<float> a(n);
    DeviceBuffer<half> h(s.device(), n);
    DeviceBuffer<bfloat16> bf(s.device(), n);
    DeviceBuffer<float> back(s.device(), n);
    assign(h.view(), cast<half>(a.cview() * 3.0F)).sync_on(s);
    assign(bf.view(), cast<bfloat16>(h.cview())).sync_on(s);
    assign(back.view(), cast<float>(cast<half>(a.cview()))).sync_on(s);
    const auto got_h = lgtest::to_host(s, h.cview());
    const auto got_bf = lgtest::to_host(s, bf.cview());
    const auto got_back = lgtest::to_host(s, back.cview());
    for (std::size_t i = 0; i < n; ++i) {
      const half expected = half::from_float(a.stored[i] * 3.0F);
      REQUIRE(got_h[i].bits == expected.bits);
      REQUIRE(got_bf[i].bits == bfloat16::from_float(expected.to_float()).bits);
      REQUIRE(got_back[i] == half::from_float(a.stored[i]).to_float());
    }
  }

  TEST_CASE("16M elements: the 16-byte path reaches every element, with a grid of its size or capped and looping") {
    Stream& s = lgtest::stream();
    const std::size_t n = (16U << 20U) + 3;
    const Input<float> a(n);
    const Input<float> b(n);
    DeviceBuffer<float> out(s.device(), n);
    const auto op = assign(out.view(), a.cview() * 0.5F + b.cview());
    for (const unsigned cap : {detail::expression_max_blocks, 132U * 4U, 1U}) {
      CAPTURE(cap);
      const auto capped = op.with_max_blocks(cap);
      CHECK(capped.launch_config().grid.x == std::min(cap, 16384U));
      fill(out.view(), -1.0F).sync_on(s);
      capped.sync_on(s);
      const auto got = lgtest::to_host(s, out.cview());
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < n; ++i) {
        wrong += got[i] != a.stored[i] * 0.5F + b.stored[i] ? 1 : 0;
      }
      CHECK(wrong == 0);
    }
  }

  TEST_CASE("misaligned subspans take the one-element path and give the same results") {
    Stream& s = lgtest::stream();
    const std::size_t n = 10'001;
    const Input<half> a(n);
    const Input<half> b(n);
    const half sentinel = half::from_float(-3.0F);
    auto out = lgtest::to_device(s, std::vector<half>(n, sentinel));
    const auto op = assign(out.view().subspan(1, n - 1), a.cview().subspan(0, n - 1) * b.cview().subspan(1, n - 1));
    CHECK_FALSE(op.vectorized());
    op.sync_on(s);
    const auto got = lgtest::to_host(s, out.cview());
    CHECK(got[0].bits == sentinel.bits);  // outside the subspan: not written
    for (std::size_t i = 1; i < n; ++i) {
      REQUIRE(got[i].bits == half::from_float(a.stored[i - 1].to_float() * b.stored[i].to_float()).bits);
    }
  }

  TEST_CASE("in place: assign(x, x * 2 + 1) reads each element before writing it") {
    Stream& s = lgtest::stream();
    const std::size_t n = 65'539;
    Input<float> x(n);
    DeviceSpan<float> view = x.buffer->view();
    assign(view, view * 2.0F + 1.0F).sync_on(s);
    assign(view, view * 2.0F + 1.0F).sync_on(s);
    const auto got = lgtest::to_host(s, x.buffer->cview());
    for (std::size_t i = 0; i < n; ++i) REQUIRE(got[i] == (x.stored[i] * 2.0F + 1.0F) * 2.0F + 1.0F);
  }

  TEST_CASE("a DeviceScalar operand is read at each replay: graph.set changes the result without re-recording") {
    Stream& s = lgtest::stream();
    const std::size_t n = 40'000;
    const Input<float> a(n);
    const Input<float> b(n);
    DeviceScalar<float> scale(s, 1.0F);
    DeviceBuffer<float> out(s.device(), n);
    const auto op = assign(out.view(), a.cview() * scale + b.cview());
    op.prepare(s.device());  // before the capture: loading a module during one is forbidden
    for (const bool built : {false, true}) {
      CAPTURE(built);
      auto graph = built ? CudaGraph<>::build(s.device(), op) : CudaGraph<>::capture(s, op);
      for (const float value : {0.75F, -3.0F, 12.5F}) {
        graph.set(scale, value);
        graph.launch();
        CHECK(lgtest::relative_error(lgtest::to_host(s, out.cview()), reference(n, [&](std::size_t i) {
                                       return double(a.stored[i]) * value + b.stored[i];
                                     })) < 1e-6);
      }
    }
  }

  TEST_CASE("a host number is a kernel argument: another value reuses the loaded kernel") {
    Stream& s = lgtest::stream();
    const std::size_t n = 1000;
    const Input<float> a(n);
    DeviceBuffer<float> out(s.device(), n);
    assign(out.view(), a.cview() * 2.0F - 0.125F).sync_on(s);
    const ExpressionCacheStats before = expression_cache_stats();
    assign(out.view(), a.cview() * 5.0F - 0.5F).sync_on(s);
    const ExpressionCacheStats after = expression_cache_stats();
    CHECK(after.compiled == before.compiled);
    CHECK(after.disk_hits == before.disk_hits);
    CHECK(after.memory_hits == before.memory_hits + 1);
    CHECK(lgtest::relative_error(lgtest::to_host(s, out.cview()),
                                 reference(n, [&](std::size_t i) { return double(a.stored[i]) * 5.0 - 0.5; })) < 1e-6);
  }

  TEST_CASE("an expression compiles once per process: later ops of it hit memory, a cleared cache hits the disk") {
    Stream& s = lgtest::stream();
    const std::size_t n = 3000;
    const Input<bfloat16> a(n);
    const Input<bfloat16> b(n);
    DeviceBuffer<bfloat16> out(s.device(), n);
    const auto make = [&](float k) { return assign(out.view(), tanh(a.cview()) * k + silu(b.cview()) * k); };
    clear_expression_cache();
    const ExpressionCacheStats s0 = expression_cache_stats();
    CHECK(s0.loaded == 0);
    make(1.0F).sync_on(s);  // compiled, or loaded from the disk cache of an earlier run
    const ExpressionCacheStats s1 = expression_cache_stats();
    CHECK(s1.compiled + s1.disk_hits == s0.compiled + s0.disk_hits + 1);
    CHECK(s1.loaded == 1);
    make(2.0F).sync_on(s);
    make(3.0F).prepare(s.device());
    const ExpressionCacheStats s2 = expression_cache_stats();
    CHECK(s2.compiled == s1.compiled);
    CHECK(s2.disk_hits == s1.disk_hits);
    CHECK(s2.memory_hits == s1.memory_hits + 2);
    clear_expression_cache();
    make(4.0F).sync_on(s);
    const ExpressionCacheStats s3 = expression_cache_stats();
    CHECK(s3.compiled == s2.compiled);  // the test suite's cache directory holds it now
    CHECK(s3.disk_hits == s2.disk_hits + 1);
  }

  TEST_CASE(
      "the first execution of an expression inside a capture is refused with CaptureError naming prepare; "
      "CudaGraph::build compiles it") {
    Stream& s = lgtest::stream();
    const std::size_t n = 2048;
    const Input<float> a(n);
    DeviceBuffer<float> out(s.device(), n);
    const auto op = assign(out.view(), sqrt(abs(a.cview())) * 7.0F - a.cview());
    clear_expression_cache();
    CHECK_THROWS_WITH_AS((void)CudaGraph<>::capture(s, op), doctest::Contains("call prepare(device)"), CaptureError);
    auto graph = CudaGraph<>::build(s.device(), op);  // no capture: the kernel is compiled or loaded here
    graph.launch();
    auto captured = CudaGraph<>::capture(s, op);  // loaded now
    captured.launch();
    CHECK(lgtest::relative_error(lgtest::to_host(s, out.cview()), reference(n, [&](std::size_t i) {
                                   return std::sqrt(std::abs(double(a.stored[i]))) * 7.0 - a.stored[i];
                                 })) < 1e-6);
  }

  TEST_CASE("a graph keeps the kernel and the buffers after the op, the buffers' handles and the cache are gone") {
    Stream& s = lgtest::stream();
    const std::size_t n = 5000;
    std::optional<Input<float>> a(std::in_place, n);
    DeviceBuffer<float> out(s.device(), n);
    const std::vector<float> x = a->stored;
    std::optional<CudaGraph<>> graph;
    {
      const auto op = assign(out.view(), a->cview() * a->cview() - 1.0F);
      op.prepare(s.device());
      graph.emplace(CudaGraph<>::capture(s, op));
    }
    a.reset();
    clear_expression_cache();
    graph->launch();
    CHECK(lgtest::relative_error(lgtest::to_host(s, out.cview()),
                                 reference(n, [&](std::size_t i) { return double(x[i]) * x[i] - 1.0; })) < 1e-6);
  }

  TEST_CASE("assign composes with other ops, launches early on request, and does nothing for no elements") {
    Stream& s = lgtest::stream();
    const std::size_t n = 777;
    const Input<half> a(n);
    DeviceBuffer<half> t(s.device(), n);
    DeviceBuffer<half> out(s.device(), n);
    const auto square = assign(out.view(), t.cview() * t.cview());
    CHECK_FALSE(square.launch_config().early_launch);
    CHECK(square.with_early_launch().launch_config().early_launch);
    auto step = assign(t.view(), a.cview() + 1.0F) >> square.with_early_launch();
    CudaGraph<>::build(s.device(), step).launch();
    const auto got = lgtest::to_host(s, out.cview());
    for (std::size_t i = 0; i < n; ++i) {
      const float u = half::from_float(a.stored[i].to_float() + 1.0F).to_float();
      REQUIRE(got[i].bits == half::from_float(u * u).bits);
    }
    assign(out.view().subspan(0, 0), a.cview().subspan(0, 0) * 2.0F).sync_on(s);
  }
}
