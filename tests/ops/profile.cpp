// profile_kernels (ops/profile.hpp): every kernel launch of an op, in order, with its name, label, the bytes
// its spans view and a measured time; refused for no repetition.
#include <doctest/doctest.h>

#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

TEST_SUITE("gpu") {
  TEST_CASE("profile_kernels lists an op's launches in order with their labels, bytes and times") {
    Stream& s = lgtest::stream();
    const auto axpy = lgtest::axpy();
    const int n = 1 << 20;
    auto x = zeros<float>(n).sync_on(s);
    auto y = zeros<float>(n).sync_on(s);
    auto z = zeros<float>(n).sync_on(s);
    auto w = zeros<float>(n).sync_on(s);
    const auto op = named("first", axpy(grid_for(n, 256), 2.0F, x.cview(), y.view(), n)) >>
                    all(axpy(grid_for(n, 256), 1.0F, x.cview(), z.view(), n),
                        named("second", axpy(grid_for(n, 256), 3.0F, y.cview(), w.view(), n / 2)));
    const std::vector<KernelTiming> t = profile_kernels(s, op, 5);
    REQUIRE(t.size() == 3);
    CHECK(t[0].label == "first");
    CHECK(t[1].label.empty());
    CHECK(t[2].label == "second");
    for (const KernelTiming& k : t) {
      CHECK(k.name == "axpy");
      CHECK(k.span_bytes == 2 * static_cast<std::size_t>(n) * sizeof(float));  // the spans' sizes, not the n passed
      CHECK(k.microseconds > 0.0);
      CHECK(k.microseconds < 1e7);  // a time, not garbage: under racecheck this kernel takes up to 0.2 s
    }
    CHECK_THROWS_AS(profile_kernels(s, op, 0), UsageError);
  }
}
