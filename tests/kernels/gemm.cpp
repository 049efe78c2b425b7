// GEMM through cuBLASLt (kernels/gemm.hpp): on the host, the op's concepts, the checks of shapes, sizes, alignment
// and overlap (made before any GPU work) and cublaslt_available (the loader's messages: tests/driver/cublaslt_api.cpp);
// on a GPU, products in half and bfloat16 at odd shapes against a float64 reference, with and without a residual, in
// place, eagerly and captured (replayed with new inputs, updated to other buffers, kept alive after the plan), ordered
// by dataflow and refused side by side by all(), the heuristic asked once per shape, and plans sharing one workspace
// (which a graph that recorded one of their products keeps alive).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

namespace {

using HalfGemmOp = GemmOp<half>;
static_assert(GraphNode<HalfGemmOp> && GraphNode<GemmOp<bfloat16>>);
static_assert(!BuildableNode<HalfGemmOp>, "cuBLASLt submits to the stream itself: a gemm can be captured, not built");
static_assert(DeclaresAccesses<HalfGemmOp>);
static_assert(std::is_void_v<HalfGemmOp::Output>);
static_assert(GemmElement<half> && GemmElement<bfloat16> && !GemmElement<float>);

/// A `rows` x `cols` operand at `address`.
detail::GemmOperand operand(CUdeviceptr address, std::size_t rows, std::size_t cols = 1) {
  return {address, rows * cols};
}

// Fake device addresses, far apart: the checks never touch memory.
constexpr CUdeviceptr d_at = 0x10000000;
constexpr CUdeviceptr x_at = 0x20000000;
constexpr CUdeviceptr w_at = 0x30000000;
constexpr CUdeviceptr c_at = 0x40000000;

}  // namespace

TEST_CASE("a gemm plan refuses a zero dimension and an alignment outside [element size, 256] before any GPU work") {
  CHECK_THROWS_WITH_AS(detail::check_gemm_shape({0, 64, 64}, {}, 2),
                       doctest::Contains("gemm (M=0, N=64, K=64): M is 0; every dimension"), UsageError);
  CHECK_THROWS_WITH_AS(detail::check_gemm_shape({3, 64, 0}, {}, 2), doctest::Contains("K is 0"), UsageError);
  CHECK_THROWS_WITH_AS(detail::check_gemm_shape({3, 64, 64}, {.alignment = 24}, 2),
                       doctest::Contains("GemmOptions::alignment is 24 bytes; it must be a power of two"), UsageError);
  CHECK_THROWS_AS(detail::check_gemm_shape({3, 64, 64}, {.alignment = 1}, 2), UsageError);
  CHECK_THROWS_AS(detail::check_gemm_shape({3, 64, 64}, {.alignment = 512}, 2), UsageError);
  CHECK_THROWS_AS(detail::check_gemm_shape({std::size_t{1} << 40U, std::size_t{1} << 40U, 64}, {}, 2), UsageError);
  CHECK_THROWS_WITH_AS(detail::check_gemm_shape({3, 64, 64}, {.candidates = 0}, 2),
                       doctest::Contains("GemmOptions::candidates is 0; it must be 1"), UsageError);
  CHECK_THROWS_AS(detail::check_gemm_shape({3, 64, 64}, {.candidates = 65}, 2), UsageError);
  CHECK_NOTHROW(detail::check_gemm_shape({3, 64, 64}, {.candidates = 64}, 2));
  CHECK_NOTHROW(detail::check_gemm_shape({1, 1000, 2048}, {}, 2));
  CHECK_NOTHROW(detail::check_gemm_shape({17, 64, 63}, {.alignment = 2}, 2));
}

TEST_CASE("a gemm op refuses spans whose sizes do not fit the shape, naming the operand, its size and the shape") {
  const GemmShape s{17, 1000, 2048};
  const auto d = operand(d_at, 17, 1000);
  const auto x = operand(x_at, 17, 2048);
  const auto w = operand(w_at, 1000, 2048);
  const auto c = operand(c_at, 17, 1000);
  CHECK_NOTHROW(detail::check_gemm_operands(s, 16, 2, d, x, w, nullptr));
  CHECK_NOTHROW(detail::check_gemm_operands(s, 16, 2, d, x, w, &c));
  CHECK_THROWS_WITH_AS(detail::check_gemm_operands(s, 16, 2, operand(d_at, 16, 1000), x, w, nullptr),
                       doctest::Contains("gemm (M=17, N=1000, K=2048): d has 16000 elements, but D is M x N = 17000"),
                       UsageError);
  CHECK_THROWS_WITH_AS(detail::check_gemm_operands(s, 16, 2, d, operand(x_at, 17, 2047), w, nullptr),
                       doctest::Contains("x has 34799 elements, but X is M x K = 34816"), UsageError);
  // W given as [K, N] by mistake has the right count only when N == K; here the count itself is wrong.
  CHECK_THROWS_WITH_AS(detail::check_gemm_operands(s, 16, 2, d, x, operand(w_at, 1000, 2047), nullptr),
                       doctest::Contains("w has 2047000 elements, but W is N x K = 2048000"), UsageError);
  const auto short_c = operand(c_at, 17);
  CHECK_THROWS_WITH_AS(detail::check_gemm_operands(s, 16, 2, d, x, w, &short_c),
                       doctest::Contains("c has 17 elements, but C is M x N = 17000"), UsageError);
}

TEST_CASE("a gemm op refuses an operand that is not aligned as its plan asks, naming the address and the option") {
  const GemmShape s{3, 64, 64};
  const auto d = operand(d_at, 3, 64);
  const auto x = operand(x_at, 3, 64);
  const auto w = operand(w_at, 64, 64);
  CHECK_THROWS_WITH_AS(detail::check_gemm_operands(s, 16, 2, d, operand(x_at + 2, 3, 64), w, nullptr),
                       doctest::Contains("x starts at 0x20000002, which is not a multiple of the plan's alignment of "
                                         "16 bytes (GemmOptions::alignment"),
                       UsageError);
  CHECK_NOTHROW(detail::check_gemm_operands(s, 2, 2, d, operand(x_at + 2, 3, 64), w, nullptr));
  const auto c = operand(c_at + 8, 3, 64);
  CHECK_THROWS_WITH_AS(detail::check_gemm_operands(s, 16, 2, d, x, w, &c), doctest::Contains("c starts at 0x40000008"),
                       UsageError);
}

TEST_CASE("a gemm op refuses d overlapping x or w, and a c that overlaps d without being d; c == d is in place") {
  const GemmShape s{4, 64, 64};
  const auto d = operand(d_at, 4, 64);
  const auto x = operand(x_at, 4, 64);
  const auto w = operand(w_at, 64, 64);
  constexpr std::size_t row = 64 * sizeof(half);  // bytes of one row of d and x
  // d's last row is x's first row.
  CHECK_THROWS_WITH_AS(detail::check_gemm_operands(s, 16, 2, operand(x_at - 3 * row, 4, 64), x, w, nullptr),
                       doctest::Contains("d overlaps x"), UsageError);
  CHECK_THROWS_WITH_AS(detail::check_gemm_operands(s, 16, 2, operand(w_at + 128, 4, 64), x, w, nullptr),
                       doctest::Contains("d overlaps w"), UsageError);
  const auto same = d;
  CHECK_NOTHROW(detail::check_gemm_operands(s, 16, 2, d, x, w, &same));
  const auto shifted = operand(d_at + row, 4, 64);  // one row further: would read rows already written
  CHECK_THROWS_WITH_AS(detail::check_gemm_operands(s, 16, 2, d, x, w, &shifted),
                       doctest::Contains("c overlaps d without being the same elements; pass d itself as c"),
                       UsageError);
  const auto apart = operand(d_at + 4 * row, 4, 64);  // right after d: touching, not overlapping
  CHECK_NOTHROW(detail::check_gemm_operands(s, 16, 2, d, x, w, &apart));
  // x and w may overlap each other (both are only read): x W^T with x a block of W's rows.
  CHECK_NOTHROW(detail::check_gemm_operands(s, 16, 2, d, operand(w_at, 4, 64), w, nullptr));
}

TEST_CASE("cublaslt_available either loads cuBLASLt, which needs no GPU, or says where it looked") {
  std::string why;
  if (cublaslt_available(&why)) {
    const std::string version = cublaslt_version();
    CHECK(std::count(version.begin(), version.end(), '.') == 2);
    CHECK(cublaslt_library().find("cublasLt") != std::string::npos);
  } else {
    MESSAGE("no cuBLASLt here: " << why);
    CHECK(why.find("cannot") != std::string::npos);
    CHECK_THROWS_AS((void)cublaslt_version(), CublasUnavailable);
  }
}

namespace {

template <class T>
std::vector<T> rounded(const std::vector<float>& values) {
  std::vector<T> out;
  out.reserve(values.size());
  for (const float v : values) out.push_back(T::from_float(v));
  return out;
}

template <class T>
std::vector<float> widened(const std::vector<T>& values) {
  std::vector<float> out;
  out.reserve(values.size());
  for (const T v : values) out.push_back(v.to_float());
  return out;
}

/// Random values of T (never zero before rounding), and the floats they hold exactly.
template <class T>
struct HostMatrix {
  std::vector<T> values;
  std::vector<float> exact;
  explicit HostMatrix(std::size_t n) : values(rounded<T>(lgtest::random_floats(n))), exact(widened(values)) {}
};

/// X W^T in float64 from the values the GPU reads.
std::vector<double> product(const GemmShape& s, const std::vector<float>& x, const std::vector<float>& w) {
  std::vector<double> p(s.m * s.n);
  for (std::size_t i = 0; i < s.m; ++i) {
    const float* xr = x.data() + i * s.k;
    for (std::size_t j = 0; j < s.n; ++j) {
      const float* wr = w.data() + j * s.k;
      double acc = 0;
      for (std::size_t k = 0; k < s.k; ++k) acc += static_cast<double>(xr[k]) * static_cast<double>(wr[k]);
      p[i * s.n + j] = acc;
    }
  }
  return p;
}

/// alpha p (+ beta c).
std::vector<double> combine(const std::vector<double>& p, float alpha, const std::vector<float>* c, float beta) {
  std::vector<double> out(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) {
    out[i] = static_cast<double>(alpha) * p[i] + (c != nullptr ? static_cast<double>(beta) * (*c)[i] : 0.0);
  }
  return out;
}

/// Max abs error over max abs reference: fits half (1e-2) and bfloat16 (3e-2) inputs and outputs with float sums.
template <class T>
constexpr double tolerance = std::is_same_v<T, half> ? 1e-2 : 3e-2;

template <class T>
const char* type_label() {
  return std::is_same_v<T, half> ? "half" : "bfloat16";
}

template <class T>
double error_of(const DeviceBuffer<T>& d, const std::vector<double>& reference) {
  return lgtest::relative_error(widened(lgtest::to_host(lgtest::stream(), d.cview())), reference);
}

template <class T>
void upload(DeviceBuffer<T>& dst, const std::vector<T>& values) {
  copy_async(lgtest::stream(), dst.view(), std::span<const T>(values));
  lgtest::stream().synchronize();
}

/// A NaN of T: a product with beta 0 must not read what d held, and an element a product fails to write stays NaN and
/// fails the float64 check. Every output starts so: compute-sanitizer's initcheck does not see cuBLASLt's Hopper
/// kernels write d (H200, 2025.3.1), and reported outputs that nothing else had written as read uninitialized.
template <class T>
std::vector<T> nans(std::size_t n) {
  return std::vector<T>(n, T::from_float(std::nanf("")));
}

template <class T>
void check_shapes_eagerly() {
  for (const std::size_t m : {1, 3, 17, 256}) {
    for (const std::size_t n : {64, 1000}) {
      for (const std::size_t k : {64, 2048}) {
        const GemmShape s{m, n, k};
        CAPTURE(type_label<T>());
        CAPTURE(m);
        CAPTURE(n);
        CAPTURE(k);
        const Gemm<T> gemm(lgtest::device(), s);
        const HostMatrix<T> x(m * k);
        const HostMatrix<T> w(n * k);
        const HostMatrix<T> c(m * n);
        auto dx = lgtest::to_device(lgtest::stream(), x.values);
        auto dw = lgtest::to_device(lgtest::stream(), w.values);
        auto dc = lgtest::to_device(lgtest::stream(), c.values);
        auto dd = lgtest::to_device(lgtest::stream(), nans<T>(m * n));
        const std::vector<double> p = product(s, x.exact, w.exact);

        gemm(dd.view(), dx.cview(), dw.cview()).sync_on(lgtest::stream());
        CHECK(error_of(dd, combine(p, 1.0F, nullptr, 0.0F)) <= tolerance<T>);

        gemm(dd.view(), dx.cview(), dw.cview(), -0.75F).sync_on(lgtest::stream());
        CHECK(error_of(dd, combine(p, -0.75F, nullptr, 0.0F)) <= tolerance<T>);

        gemm.add(dd.view(), dx.cview(), dw.cview(), dc.cview()).sync_on(lgtest::stream());
        CHECK(error_of(dd, combine(p, 1.0F, &c.exact, 1.0F)) <= tolerance<T>);

        gemm.add(dd.view(), dx.cview(), dw.cview(), dc.cview(), 0.5F, -2.0F).sync_on(lgtest::stream());
        CHECK(error_of(dd, combine(p, 0.5F, &c.exact, -2.0F)) <= tolerance<T>);
      }
    }
  }
}

template <class T>
void replay_twice_with_new_inputs() {
  CAPTURE(type_label<T>());
  // A shape no other test plans: the plan's first product is the captured one, with no eager use before it.
  const GemmShape s{5, 96, 160};
  const Gemm<T> gemm(lgtest::device(), s);
  DeviceBuffer<T> dx(lgtest::device(), s.m * s.k);
  DeviceBuffer<T> dw(lgtest::device(), s.n * s.k);
  DeviceBuffer<T> dc(lgtest::device(), s.m * s.n);
  auto dy = lgtest::to_device(lgtest::stream(), nans<T>(s.m * s.n));  // every element the product must write
  auto graph =
      CudaGraph<>::capture(lgtest::stream(), gemm.add(dy.view(), dx.cview(), dw.cview(), dc.cview(), 1.5F, 0.5F));
  for (int replay = 0; replay < 2; ++replay) {
    CAPTURE(replay);
    const HostMatrix<T> x(s.m * s.k);
    const HostMatrix<T> w(s.n * s.k);
    const HostMatrix<T> c(s.m * s.n);
    upload(dx, x.values);
    upload(dw, w.values);
    upload(dc, c.values);
    graph.launch();
    CHECK(error_of(dy, combine(product(s, x.exact, w.exact), 1.5F, &c.exact, 0.5F)) <= tolerance<T>);
  }
}

/// `values` rounded to float, as a product stored in T is before it is rounded to T.
std::vector<float> as_floats(const std::vector<double>& values) {
  return std::vector<float>(values.begin(), values.end());
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("gemm matches a float64 reference in half at odd shapes, with and without a residual, alpha and beta") {
    check_shapes_eagerly<half>();
  }

  TEST_CASE("gemm matches a float64 reference in bfloat16 at odd shapes, with and without a residual, alpha and beta") {
    check_shapes_eagerly<bfloat16>();
  }

  TEST_CASE("gemm.add(y, x, w, y) adds x w^T to y in place") {
    const GemmShape s{17, 1000, 2048};
    const Gemm<half> gemm(lgtest::device(), s);
    const HostMatrix<half> x(s.m * s.k);
    const HostMatrix<half> w(s.n * s.k);
    const HostMatrix<half> y0(s.m * s.n);
    auto dx = lgtest::to_device(lgtest::stream(), x.values);
    auto dw = lgtest::to_device(lgtest::stream(), w.values);
    auto dy = lgtest::to_device(lgtest::stream(), y0.values);
    gemm.add(dy.view(), dx.cview(), dw.cview(), dy.cview(), 0.25F).sync_on(lgtest::stream());
    CHECK(error_of(dy, combine(product(s, x.exact, w.exact), 0.25F, &y0.exact, 1.0F)) <= tolerance<half>);
  }

  TEST_CASE("a captured gemm replays twice with new inputs, giving new right results each time") {
    replay_twice_with_new_inputs<half>();
    replay_twice_with_new_inputs<bfloat16>();
  }

  TEST_CASE("a captured gemm updates to other buffers with update_from") {
    const GemmShape s{3, 64, 2048};
    const Gemm<half> gemm(lgtest::device(), s);
    const HostMatrix<half> x(s.m * s.k);
    const HostMatrix<half> w(s.n * s.k);
    const HostMatrix<half> x2(s.m * s.k);
    auto dx = lgtest::to_device(lgtest::stream(), x.values);
    auto dx2 = lgtest::to_device(lgtest::stream(), x2.values);
    auto dw = lgtest::to_device(lgtest::stream(), w.values);
    auto dy = lgtest::to_device(lgtest::stream(), nans<half>(s.m * s.n));
    auto dy2 = lgtest::to_device(lgtest::stream(), nans<half>(s.m * s.n));
    auto graph = CudaGraph<>::capture(lgtest::stream(), gemm(dy.view(), dx.cview(), dw.cview()));
    graph.launch();
    CHECK(error_of(dy, product(s, x.exact, w.exact)) <= tolerance<half>);
    const UpdateResult r = graph.update_from(gemm(dy2.view(), dx2.cview(), dw.cview(), 2.0F));
    INFO(r.message);
    CHECK(r.ok());
    graph.launch();
    CHECK(error_of(dy2, combine(product(s, x2.exact, w.exact), 2.0F, nullptr, 0.0F)) <= tolerance<half>);
  }

  TEST_CASE("a graph keeps the plan's workspace and descriptors after the plan, the op and the inputs' buffers go") {
    const GemmShape s{17, 64, 2048};
    const HostMatrix<half> x(s.m * s.k);
    const HostMatrix<half> w(s.n * s.k);
    DeviceBuffer<half> dy(lgtest::device(), s.m * s.n);
    std::optional<CudaGraph<>> graph;
    {
      const Gemm<half> gemm(lgtest::device(), s);
      auto dx = lgtest::to_device(lgtest::stream(), x.values);
      auto dw = lgtest::to_device(lgtest::stream(), w.values);
      graph.emplace(CudaGraph<>::capture(lgtest::stream(), gemm(dy.view(), dx.cview(), dw.cview())));
    }
    upload(dy, nans<half>(s.m * s.n));
    graph->launch();
    graph->launch();
    CHECK(error_of(dy, product(s, x.exact, w.exact)) <= tolerance<half>);
  }

  TEST_CASE("dataflow orders a product that reads another's output, and the captured graph computes both") {
    // up: h = x w1^T (M x F), down: y = h w2^T + x (M x D), a residual MLP without its activation.
    const std::size_t m = 3;
    const std::size_t dim = 256;
    const std::size_t ffn = 1000;
    const Gemm<bfloat16> up(lgtest::device(), {m, ffn, dim});
    const Gemm<bfloat16> down(lgtest::device(), {m, dim, ffn});
    const HostMatrix<bfloat16> x(m * dim);
    const HostMatrix<bfloat16> w1(ffn * dim);
    const HostMatrix<bfloat16> w2(dim * ffn);
    auto dx = lgtest::to_device(lgtest::stream(), x.values);
    auto dw1 = lgtest::to_device(lgtest::stream(), w1.values);
    auto dw2 = lgtest::to_device(lgtest::stream(), w2.values);
    auto dh = lgtest::to_device(lgtest::stream(), nans<bfloat16>(m * ffn));
    auto dy = lgtest::to_device(lgtest::stream(), nans<bfloat16>(m * dim));
    auto step =
        dataflow(up(dh.view(), dx.cview(), dw1.cview()), down.add(dy.view(), dh.cview(), dw2.cview(), dx.cview()));
    REQUIRE(step.dependencies().size() == 2);
    CHECK(step.dependencies()[1] == std::vector<std::uint32_t>{0});
    auto graph = CudaGraph<>::capture(lgtest::stream(), step);
    graph.launch();
    // The reference rounds h to bfloat16, as the GPU stores it.
    const std::vector<float> h = widened(rounded<bfloat16>(as_floats(product({m, ffn, dim}, x.exact, w1.exact))));
    CHECK(error_of(dh, product({m, ffn, dim}, x.exact, w1.exact)) <= tolerance<bfloat16>);
    CHECK(error_of(dy, combine(product({m, dim, ffn}, h, w2.exact), 1.0F, &x.exact, 1.0F)) <= tolerance<bfloat16>);
  }

  TEST_CASE("a gemm reports what it touches: all() refuses two products of one plan, two plans run side by side") {
    const GemmShape s{17, 1000, 2048};
    const Gemm<half> one(lgtest::device(), s);
    const Gemm<half> other(lgtest::device(), s);
    const HostMatrix<half> x(s.m * s.k);
    const HostMatrix<half> w1(s.n * s.k);
    const HostMatrix<half> w2(s.n * s.k);
    auto dx = lgtest::to_device(lgtest::stream(), x.values);
    auto dw1 = lgtest::to_device(lgtest::stream(), w1.values);
    auto dw2 = lgtest::to_device(lgtest::stream(), w2.values);
    auto dy1 = lgtest::to_device(lgtest::stream(), nans<half>(s.m * s.n));
    auto dy2 = lgtest::to_device(lgtest::stream(), nans<half>(s.m * s.n));

    const AccessSet set = accesses_of(one(dy1.view(), dx.cview(), dw1.cview()));
    CHECK_FALSE(set.is_opaque());
    const std::size_t expected = one.workspace_bytes() > 0 ? 4 : 3;  // x, w, d (and the workspace)
    CHECK(set.entries().size() == expected);
    MESSAGE("workspace of gemm (17, 1000, 2048) half: " << one.workspace_bytes() << " bytes");
    if (one.workspace_bytes() > 0) {
      CHECK_THROWS_WITH_AS(
          (void)all(one(dy1.view(), dx.cview(), dw1.cview()), one(dy2.view(), dx.cview(), dw2.cview())),
          doctest::Contains("gemm workspace"), UsageError);
    }
    auto both = all(one(dy1.view(), dx.cview(), dw1.cview()), other(dy2.view(), dx.cview(), dw2.cview()));
    both.sync_on(lgtest::stream());
    CHECK(error_of(dy1, product(s, x.exact, w1.exact)) <= tolerance<half>);
    CHECK(error_of(dy2, product(s, x.exact, w2.exact)) <= tolerance<half>);
    upload(dy1, nans<half>(s.m * s.n));
    upload(dy2, nans<half>(s.m * s.n));
    auto graph = CudaGraph<>::capture(lgtest::stream(), both);
    graph.launch();
    CHECK(error_of(dy1, product(s, x.exact, w1.exact)) <= tolerance<half>);
    CHECK(error_of(dy2, product(s, x.exact, w2.exact)) <= tolerance<half>);
  }

  TEST_CASE("a second plan of the same shape asks cuBLASLt's heuristic nothing, and owns a workspace of its own") {
    const GemmShape s{7, 72, 136};  // a shape no other test plans
    const std::size_t before = Gemm<half>::heuristic_queries();
    const Gemm<half> first(lgtest::device(), s);
    CHECK(Gemm<half>::heuristic_queries() == before + 1);
    const Gemm<half> second(lgtest::device(), s);
    CHECK(Gemm<half>::heuristic_queries() == before + 1);
    CHECK(second.workspace_bytes() == first.workspace_bytes());
    if (first.workspace_bytes() > 0) {  // each plan owns its workspace: ops of the two write different memory
      const auto workspace_of = [&](const Gemm<half>& plan) {
        // Spans at made-up addresses: the op is only asked what it touches, never executed.
        const AccessSet touched =
            accesses_of(plan(DeviceSpan<half>(0x10000000, s.m * s.n), DeviceSpan<const half>(0x20000000, s.m * s.k),
                             DeviceSpan<const half>(0x30000000, s.n * s.k)));
        for (const MemoryAccess& a : touched.entries()) {
          if (a.op == "gemm workspace") return a.begin;
        }
        return CUdeviceptr{0};
      };
      CHECK(workspace_of(first) != 0);
      CHECK(workspace_of(first) != workspace_of(second));
    }
    // Another type, another alignment: other keys.
    const Gemm<bfloat16> third(lgtest::device(), s);
    CHECK(Gemm<half>::heuristic_queries() == before + 2);
    const Gemm<half> fourth(lgtest::device(), s, {.alignment = 8});
    CHECK(Gemm<bfloat16>::heuristic_queries() == before + 3);
    const Gemm<half> fifth(lgtest::device(), s, {.alignment = 8});
    CHECK(Gemm<half>::heuristic_queries() == before + 3);
  }

  TEST_CASE("a plan that times the heuristic's candidates asks it once, and its products match float64") {
    // Shapes no other test plans, at a decode step's few rows.
    for (const GemmShape s : {GemmShape{64, 1016, 520}, GemmShape{9, 200, 1048}}) {
      CAPTURE(s.m);
      const std::size_t before = Gemm<half>::heuristic_queries();
      const Gemm<half> timed(lgtest::device(), s, {.candidates = 8});
      CHECK(Gemm<half>::heuristic_queries() == before + 1);
      const Gemm<half> again(lgtest::device(), s, {.candidates = 8});  // the choice is remembered
      CHECK(Gemm<half>::heuristic_queries() == before + 1);
      CHECK(again.workspace_bytes() == timed.workspace_bytes());
      const HostMatrix<half> x(s.m * s.k);
      const HostMatrix<half> w(s.n * s.k);
      const HostMatrix<half> c(s.m * s.n);
      auto dx = lgtest::to_device(lgtest::stream(), x.values);
      auto dw = lgtest::to_device(lgtest::stream(), w.values);
      auto dc = lgtest::to_device(lgtest::stream(), c.values);
      auto dy = lgtest::to_device(lgtest::stream(), nans<half>(s.m * s.n));
      auto graph =
          CudaGraph<>::capture(lgtest::stream(), timed.add(dy.view(), dx.cview(), dw.cview(), dc.cview(), 0.5F, 2.0F));
      graph.launch();
      CHECK(error_of(dy, combine(product(s, x.exact, w.exact), 0.5F, &c.exact, 2.0F)) <= tolerance<half>);
    }
  }

  TEST_CASE("plans sharing a workspace write all of it: dataflow orders their products, all() refuses them together") {
    const GemmShape a{17, 1000, 2048};
    const GemmShape b{17, 2048, 1000};
    const std::size_t needed =
        std::max(Gemm<half>::workspace_needed(lgtest::device(), a), Gemm<half>::workspace_needed(lgtest::device(), b));
    MESSAGE("workspace needed by gemm (17, 1000, 2048) and (17, 2048, 1000) in half: " << needed << " bytes");
    if (needed == 0) {
      MESSAGE("skipped: cuBLASLt's algorithms for these shapes need no workspace on this GPU");
      return;
    }
    const auto shared = std::make_shared<const SharedGemmWorkspace>(lgtest::device(), needed);
    const Gemm<half> one(lgtest::device(), a, {}, shared);
    const Gemm<half> two(lgtest::device(), b, {}, shared);
    CHECK(one.workspace_bytes() == 0);  // neither owns one
    CHECK(two.workspace_bytes() == 0);
    const HostMatrix<half> x1(a.m * a.k);
    const HostMatrix<half> w1(a.n * a.k);
    const HostMatrix<half> x2(b.m * b.k);
    const HostMatrix<half> w2(b.n * b.k);
    auto dx1 = lgtest::to_device(lgtest::stream(), x1.values);
    auto dw1 = lgtest::to_device(lgtest::stream(), w1.values);
    auto dx2 = lgtest::to_device(lgtest::stream(), x2.values);
    auto dw2 = lgtest::to_device(lgtest::stream(), w2.values);
    auto dy1 = lgtest::to_device(lgtest::stream(), nans<half>(a.m * a.n));
    auto dy2 = lgtest::to_device(lgtest::stream(), nans<half>(b.m * b.n));
    // Each product writes the whole shared workspace.
    for (const AccessSet& set : {accesses_of(one(dy1.view(), dx1.cview(), dw1.cview())),
                                 accesses_of(two(dy2.view(), dx2.cview(), dw2.cview()))}) {
      const auto written = std::find_if(set.entries().begin(), set.entries().end(),
                                        [](const MemoryAccess& e) { return e.op == "gemm workspace"; });
      REQUIRE(written != set.entries().end());
      CHECK(written->writes);
      CHECK(written->begin == shared->span().address());
      CHECK(written->end() == shared->span().address() + needed);
    }
    // Products with nothing else in common: the workspace alone orders them, or refuses them side by side.
    CHECK_THROWS_WITH_AS(
        (void)all(one(dy1.view(), dx1.cview(), dw1.cview()), two(dy2.view(), dx2.cview(), dw2.cview())),
        doctest::Contains("gemm workspace"), UsageError);
    auto both = dataflow(one(dy1.view(), dx1.cview(), dw1.cview()), two(dy2.view(), dx2.cview(), dw2.cview()));
    REQUIRE(both.dependencies().size() == 2);
    CHECK(both.dependencies()[1] == std::vector<std::uint32_t>{0});
    auto graph = CudaGraph<>::capture(lgtest::stream(), both);
    graph.launch();
    CHECK(error_of(dy1, product(a, x1.exact, w1.exact)) <= tolerance<half>);
    CHECK(error_of(dy2, product(b, x2.exact, w2.exact)) <= tolerance<half>);
  }

  TEST_CASE("a shared workspace of 0 bytes, or smaller than a plan's algorithm needs, is refused naming the sizes") {
    CHECK_THROWS_WITH_AS(SharedGemmWorkspace(lgtest::device(), 0), doctest::Contains("of 0 bytes"), UsageError);
    CHECK_THROWS_WITH_AS(Gemm<half>(lgtest::device(), {17, 1000, 2048}, {}, nullptr),
                         doctest::Contains("the shared workspace is null"), UsageError);
    const GemmShape s{17, 1000, 2048};
    const std::size_t needed = Gemm<half>::workspace_needed(lgtest::device(), s);
    if (needed < 2) {
      MESSAGE("skipped the small workspace: cuBLASLt's algorithm for gemm (17, 1000, 2048) needs " << needed
                                                                                                   << " bytes");
      return;
    }
    const auto small = std::make_shared<const SharedGemmWorkspace>(lgtest::device(), needed / 2);
    CHECK_THROWS_WITH_AS(
        Gemm<half>(lgtest::device(), s, {}, small),
        doctest::Contains(("its algorithm needs " + std::to_string(needed) +
                           " bytes of workspace, and the shared workspace has " + std::to_string(needed / 2))
                              .c_str()),
        UsageError);
  }

  TEST_CASE("a graph keeps a shared workspace alive after its plan and every other owner go, and frees it with it") {
    const GemmShape s{17, 1000, 2048};
    const HostMatrix<half> x(s.m * s.k);
    const HostMatrix<half> w(s.n * s.k);
    DeviceBuffer<half> dy(lgtest::device(), s.m * s.n);
    std::weak_ptr<const SharedGemmWorkspace> watched;
    std::optional<CudaGraph<>> graph;
    {
      // At least 256 bytes: a workspace larger than the algorithm needs (or one it does not need) serves it too.
      const std::size_t bytes = std::max<std::size_t>(Gemm<half>::workspace_needed(lgtest::device(), s), 256);
      auto shared = std::make_shared<const SharedGemmWorkspace>(lgtest::device(), bytes);
      watched = shared;
      const Gemm<half> gemm(lgtest::device(), s, {}, std::move(shared));
      auto dx = lgtest::to_device(lgtest::stream(), x.values);
      auto dw = lgtest::to_device(lgtest::stream(), w.values);
      graph.emplace(CudaGraph<>::capture(lgtest::stream(), gemm(dy.view(), dx.cview(), dw.cview())));
    }
    CHECK_FALSE(watched.expired());  // the plan, its op and the caller's pointer are gone: the graph holds it
    upload(dy, nans<half>(s.m * s.n));
    graph->launch();
    graph->launch();
    CHECK(error_of(dy, product(s, x.exact, w.exact)) <= tolerance<half>);
    graph.reset();
    CHECK(watched.expired());
  }

  TEST_CASE(
      "planning a gemm inside a capture is a CaptureError saying to plan before it, and the stream stays usable") {
    Stream& s = lgtest::stream();
    CHECK_THROWS_WITH_AS(CudaGraph<>::scope(s,
                                            [&](Scope&) {
                                              const Gemm<half> late(lgtest::device(), {3, 64, 64});
                                            }),
                         doctest::Contains("make the Gemm plan before CudaGraph::scope / CudaGraph::capture"),
                         CaptureError);
    s.synchronize();
    const Gemm<half> now(lgtest::device(), {3, 64, 64});
    CHECK(now.shape() == GemmShape{3, 64, 64});
  }

  TEST_CASE("CudaGraph::build refuses a gemm recorded through a Scope, saying to capture it") {
    const GemmShape s{3, 64, 64};
    const Gemm<half> gemm(lgtest::device(), s);
    DeviceBuffer<half> dx(lgtest::device(), s.m * s.k);
    DeviceBuffer<half> dw(lgtest::device(), s.n * s.k);
    DeviceBuffer<half> dy(lgtest::device(), s.m * s.n);
    CHECK_THROWS_WITH_AS(
        CudaGraph<>::build(lgtest::device(),
                           [&](Scope& scope) { scope.record(gemm(dy.view(), dx.cview(), dw.cview())); }),
        doctest::Contains("submits work to the stream itself"), UsageError);
  }

  TEST_CASE("a plan's ops check their spans against its shape before any GPU work") {
    const GemmShape s{3, 64, 64};
    const Gemm<bfloat16> gemm(lgtest::device(), s);
    DeviceBuffer<bfloat16> dx(lgtest::device(), s.m * s.k);
    DeviceBuffer<bfloat16> dw(lgtest::device(), s.n * s.k);
    DeviceBuffer<bfloat16> dy(lgtest::device(), s.m * s.n + 1);
    CHECK_THROWS_WITH_AS((void)gemm(dy.view(), dx.cview(), dw.cview()),
                         doctest::Contains("d has 193 elements, but D is M x N = 192"), UsageError);
    CHECK_THROWS_WITH_AS((void)gemm(dy.view().subspan(1, s.m * s.n), dx.cview(), dw.cview()),
                         doctest::Contains("not a multiple of the plan's alignment"), UsageError);
    CHECK_NOTHROW((void)gemm(dy.view().subspan(0, s.m * s.n), dx.cview(), dw.cview()));
  }
}
