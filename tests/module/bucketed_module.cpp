// BucketedModule (module/bucketed_module.hpp): one graph per bucket of a run-time row count, made on first
// use in a pool; padded input, unpadded output; one call at a time from any number of threads (gpu).
#include <doctest/doctest.h>

#include <cstddef>
#include <span>
#include <thread>
#include <type_traits>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

namespace {

using lgtest::axpy;

constexpr std::size_t per_row = 3;

// y = 2 x + 1 per element, through scratch memory: t = 1; t += 2 x; y = t.
void two_x_plus_one(std::size_t rows, Scope& s, const DeviceSpan<const float>& x, const DeviceSpan<float>& y) {
  const int n = static_cast<int>(rows * per_row);
  DeviceSpan<float> t = s.scratch<float>(rows * per_row);
  s.record(fill(t, 1.0F) >> axpy()(grid_for(n, 256), 2.0F, x, t, n) >> copy(y, t.as_const()));
}

std::vector<double> reference(const std::vector<float>& x) {
  std::vector<double> r(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) r[i] = 2.0 * x[i] + 1.0;
  return r;
}

BucketShape shape(std::size_t capacity = 0) { return BucketShape{{1, 2, 4, 8}, per_row, per_row, capacity}; }

// Rotates the rows up by one (row i of y is row i + 1 of x, the last row of y is the first of x): the last row of
// every padded call's output is a padding row, so the test sees the pad value. Copies only: exact.
auto rotate_rows(std::size_t rows, const DeviceSpan<const float>& x, const DeviceSpan<float>& y) {
  const std::size_t n = rows * per_row;
  return copy(y.subspan(0, n - per_row), x.subspan(per_row, n - per_row)) >>
         copy(y.subspan(n - per_row, per_row), x.subspan(0, per_row));
}

// rotate_rows on `x` padded with `pad` to `bucket` rows, cut back to x's rows.
std::vector<float> rotate_reference(const std::vector<float>& x, std::size_t bucket, float pad) {
  std::vector<float> padded = x;
  padded.resize(bucket * per_row, pad);
  std::vector<float> y(x.size());
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = padded[(i + per_row) % padded.size()];
  return y;
}

}  // namespace

static_assert(Module<BucketedModule<float, float>>);
static_assert(std::is_same_v<BucketedModule<half, float>::Input, std::span<const half>>);
static_assert(std::is_same_v<BucketedModule<half, float>::Output, std::vector<float>>);
static_assert(!std::is_copy_constructible_v<BucketedModule<float, float>> &&
              !std::is_move_constructible_v<BucketedModule<float, float>>);

TEST_SUITE("gpu") {
  TEST_CASE("a BucketedModule runs every row count through its bucket's graph and returns only those rows") {
    BucketedModule<float, float> m(lgtest::stream(), lgtest::kernels(), shape(), two_x_plus_one, -7.0F);
    for (std::size_t rows = 1; rows <= 8; ++rows) {
      CAPTURE(rows);
      const auto x = lgtest::random_floats(rows * per_row);
      const std::vector<float> y = m.forward(x);
      REQUIRE(y.size() == rows * per_row);
      CHECK(lgtest::relative_error(y, reference(x)) < 1e-6);
    }
    CHECK(m.bucket_of(3) == 4);
    CHECK(m.stats().misses == 4);  // one graph per bucket used
    CHECK(m.stats().hits == 4);
    CHECK(m.graph_count() == 4);
    CHECK(m.pool().graph_count() == 4);
    CHECK(m.pool().largest_scratch_bytes() == 8 * per_row * sizeof(float));
    // An op-returning forward pass works too.
    BucketedModule<float, float> ops(
        lgtest::stream(), lgtest::kernels(), shape(),
        [](std::size_t rows, const DeviceSpan<const float>& x, const DeviceSpan<float>& y) {
          const int n = static_cast<int>(rows * per_row);
          return fill(y, 1.0F) >> axpy()(grid_for(n, 256), 2.0F, x, y, n);
        });
    const auto x = lgtest::random_floats(5 * per_row);
    CHECK(lgtest::relative_error(ops.forward(x), reference(x)) < 1e-6);
  }

  TEST_CASE("a BucketedModule pads with its pad value and copies with memcpy nodes when made without a library") {
    const float pad = 42.5F;
    BucketedModule<float, float> m(lgtest::stream(), BucketShape{{2, 4, 8}, per_row, per_row, 0}, rotate_rows, pad);
    CHECK(std::vector<std::size_t>(m.buckets().begin(), m.buckets().end()) == std::vector<std::size_t>{2, 4, 8});
    std::vector<float> out;
    for (std::size_t rows = 1; rows <= 8; ++rows) {
      CAPTURE(rows);
      const auto x = lgtest::random_floats(rows * per_row);
      const auto want = rotate_reference(x, m.bucket_of(rows), pad);
      CHECK(m.forward(x) == want);
      out.assign(rows * per_row, 0.0F);
      m.forward_into(x, out);
      CHECK(out == want);
    }
    CHECK(m.bucket_of(1) == 2);
    CHECK(m.bucket_of(5) == 8);
    CHECK(m.stats().misses == 3);
    CHECK(m.stats().hits == 13);
  }

  TEST_CASE("a BucketedModule with fewer graphs than buckets evicts and stays correct") {
    BucketedModule<float, float> m(lgtest::stream(), lgtest::kernels(), shape(2), two_x_plus_one);
    for (const std::size_t rows : {1, 3, 5, 8, 1, 2, 7}) {
      CAPTURE(rows);
      const auto x = lgtest::random_floats(rows * per_row);
      CHECK(lgtest::relative_error(m.forward(x), reference(x)) < 1e-6);
      CHECK(m.graph_count() <= 2);
    }
    CHECK(m.stats().evictions >= 4);
  }

  TEST_CASE("a BucketedModule refuses bad shapes and inputs, naming the sizes") {
    Stream& s = lgtest::stream();
    using Module = BucketedModule<float, float>;
    CHECK_THROWS_AS(Module(s, lgtest::kernels(), BucketShape{{}, 1, 1, 0}, two_x_plus_one), UsageError);
    CHECK_THROWS_AS(Module(s, lgtest::kernels(), BucketShape{{4, 2}, 1, 1, 0}, two_x_plus_one), UsageError);
    CHECK_THROWS_AS(Module(s, lgtest::kernels(), BucketShape{{0, 2}, 1, 1, 0}, two_x_plus_one), UsageError);
    CHECK_THROWS_AS(Module(s, lgtest::kernels(), BucketShape{{1, 2}, 0, 1, 0}, two_x_plus_one), UsageError);
    BucketedModule<float, float> m(s, lgtest::kernels(), shape(), two_x_plus_one);
    CHECK_THROWS_WITH_AS(m.forward(std::vector<float>(7)), doctest::Contains("7 elements"), UsageError);
    CHECK_THROWS_WITH_AS(m.forward(std::vector<float>(7)), doctest::Contains("rows of 3"), UsageError);
    CHECK_THROWS_WITH_AS(m.forward(std::vector<float>{}), doctest::Contains("0 elements"), UsageError);
    CHECK_THROWS_WITH_AS(m.forward(std::vector<float>(9 * per_row)),
                         doctest::Contains("9 rows; the buckets hold 1 to 8"), UsageError);
    CHECK_THROWS_AS((void)m.bucket_of(0), UsageError);
    CHECK_THROWS_AS((void)m.bucket_of(9), UsageError);
    std::vector<float> out(5);
    CHECK_THROWS_WITH_AS(m.forward_into(std::vector<float>(2 * per_row), out),
                         doctest::Contains("the output has 5 elements; 2 rows need 6"), UsageError);
    CHECK(m.stats().misses == 0);  // refused before any graph was made
  }

  TEST_CASE("eight threads calling one BucketedModule at once each get their own rows back") {
    BucketedModule<float, float> m(lgtest::stream(), lgtest::kernels(), shape(), two_x_plus_one);
    std::vector<int> wrong(8, 0);
    std::vector<std::thread> threads;
    threads.reserve(8);
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t] {
        for (int k = 0; k < 20; ++k) {
          const std::size_t rows = static_cast<std::size_t>((t + k) % 8) + 1;
          const auto x = lgtest::random_floats(rows * per_row);
          if (lgtest::relative_error(m.forward(x), reference(x)) >= 1e-6) ++wrong[static_cast<std::size_t>(t)];
        }
      });
    }
    for (auto& th : threads) th.join();
    CHECK(wrong == std::vector<int>(8, 0));
    CHECK(m.stats().hits + m.stats().misses == 160);
  }
}
