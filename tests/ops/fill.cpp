// fill(span, value), join() and value(x) (ops/fill.hpp): graph nodes that need no kernel.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

static_assert(BuildableNode<FillOp<float>> && BuildableNode<FillOp<half>> && BuildableNode<FillOp<std::uint8_t>>);
static_assert(BuildableNode<JoinOp> && BuildableNode<ValueOp<std::string>>);
static_assert(std::is_void_v<FillOp<int>::Output> && std::is_same_v<ValueOp<std::string>::Output, std::string>);
static_assert(std::is_same_v<decltype(value("text")), ValueOp<const char*>>);

namespace {

std::mt19937& rng() {
  static std::mt19937 r{std::random_device{}()};
  return r;
}

/// A random buffer of `n` elements, `fill(subspan(offset, count), v)` executed on it, and the result compared
/// with the same fill done on the host.
template <class T>
bool fill_matches_host(std::size_t n, std::size_t offset, std::size_t count, T v, const std::vector<T>& initial) {
  Stream& s = lgtest::stream();
  DeviceBuffer<T> b = lgtest::to_device(s, initial);
  fill(b.view().subspan(offset, count), v).sync_on(s);
  std::vector<T> want = initial;
  std::fill(want.begin() + static_cast<std::ptrdiff_t>(offset),
            want.begin() + static_cast<std::ptrdiff_t>(offset + count), v);
  const auto got = lgtest::to_host(s, b.cview());
  return got.size() == n && std::equal(got.begin(), got.end(), want.begin(), [](const T& x, const T& y) {
           return detail::bit_pattern(x) == detail::bit_pattern(y);
         });
}

}  // namespace

TEST_CASE("bit_pattern holds a value's bytes in its low bytes") {
  CHECK(detail::bit_pattern(1.0F) == 0x3f800000U);
  CHECK(detail::bit_pattern(-2.0F) == 0xc0000000U);
  CHECK(detail::bit_pattern(half::from_float(1.0F)) == 0x3c00U);
  CHECK(detail::bit_pattern(std::uint8_t{0xab}) == 0xabU);
  CHECK(detail::bit_pattern(std::int16_t{-1}) == 0xffffU);
  for (int i = 0; i < 100; ++i) {
    const auto x = static_cast<std::uint32_t>(rng()());
    CHECK(detail::bit_pattern(x) == x);
    const auto h = half{static_cast<std::uint16_t>(x)};
    CHECK(detail::bit_pattern(h) == (x & 0xffffU));
  }
}

TEST_SUITE("gpu") {
  TEST_CASE("fill sets every element of its span, and nothing else, for 1, 2 and 4-byte types") {
    const std::size_t n = 100'003;
    for (int round = 0; round < 3; ++round) {
      const std::size_t offset = rng()() % 1000;
      const std::size_t count = n - offset - rng()() % 1000;
      CAPTURE(offset);
      CAPTURE(count);
      const auto floats = lgtest::random_floats(n);
      std::vector<std::uint8_t> bytes(n);
      std::vector<half> halves(n);
      std::vector<std::int32_t> ints(n);
      for (std::size_t i = 0; i < n; ++i) {
        bytes[i] = static_cast<std::uint8_t>(rng()());
        halves[i] = half::from_float(floats[i]);
        ints[i] = static_cast<std::int32_t>(rng()());
      }
      const float v = lgtest::random_floats(1)[0];
      CHECK(fill_matches_host<float>(n, offset, count, v, floats));
      CHECK(fill_matches_host<half>(n, offset, count, half::from_float(v), halves));
      CHECK(fill_matches_host<std::uint8_t>(n, offset, count, static_cast<std::uint8_t>(rng()() | 1U), bytes));
      CHECK(fill_matches_host<std::int32_t>(n, offset, count, static_cast<std::int32_t>(rng()() | 1U), ints));
    }
  }

  TEST_CASE("a fill of an empty span does nothing and records no node; a recorded fill sets on every replay") {
    Stream& s = lgtest::stream();
    const auto initial = lgtest::random_floats(256);
    DeviceBuffer<float> b = lgtest::to_device(s, initial);
    fill(b.view().subspan(0, 0), 1.0F).sync_on(s);
    CHECK(lgtest::to_host(s, b.cview()) == initial);
    const float v = lgtest::random_floats(1)[0];
    auto graph = CudaGraph<>::capture(s, fill(b.view().subspan(0, 0), 2.0F) >> fill(b.view(), v));
    CHECK(graph.node_count() == 1);
    CHECK(graph.node_kinds() == std::vector<NodeKind>{NodeKind::memset});
    for (int i = 0; i < 2; ++i) {
      copy(b.view(), initial).sync_on(s);
      graph.launch();
      const auto got = lgtest::to_host(s, b.cview());
      CHECK(std::all_of(got.begin(), got.end(), [&](float x) { return x == v; }));
    }
  }

  TEST_CASE("join is an empty node in a graph and nothing eagerly; value gives back a copy of its value") {
    Stream& s = lgtest::stream();
    DeviceBuffer<float> b = zeros<float>(64).sync_on(s);
    (fill(b.view(), 1.0F) >> join() >> fill(b.view().subspan(0, 32), 2.0F)).sync_on(s);
    const auto got = lgtest::to_host(s, b.cview());
    CHECK(got[0] == 2.0F);
    CHECK(got[63] == 1.0F);
    auto graph =
        CudaGraph<>::capture(s, all(fill(b.view().subspan(0, 32), 3.0F), fill(b.view().subspan(32, 32), 4.0F)) >>
                                    join() >> fill(b.view().subspan(16, 32), 5.0F));
    const auto kinds = graph.node_kinds();
    CHECK(std::count(kinds.begin(), kinds.end(), NodeKind::empty) == 1);
    CHECK(std::count(kinds.begin(), kinds.end(), NodeKind::memset) == 3);
    graph.launch();
    const auto replayed = lgtest::to_host(s, b.cview());
    CHECK(replayed[0] == 3.0F);
    CHECK(replayed[20] == 5.0F);
    CHECK(replayed[63] == 4.0F);

    std::string text = "a value";
    const auto op = value(text);
    text = "changed after";
    CHECK(op.sync_on(s) == "a value");
    CHECK(value(std::vector<int>{1, 2, 3}).sync_on(s) == std::vector<int>{1, 2, 3});
  }
}
