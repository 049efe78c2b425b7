// PinnedBuffer<T> (driver/pinned_buffer.hpp): page-locked host memory, counted while it lives, move-only.
#include <doctest/doctest.h>

#include <algorithm>
#include <span>
#include <utility>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

TEST_SUITE("gpu") {
  TEST_CASE("pinned memory round-trips through the device asynchronously") {
    Stream& s = lgtest::stream();
    PinnedBuffer<float> in(lgtest::device(), 1 << 16);
    PinnedBuffer<float> out(lgtest::device(), 1 << 16);
    const auto values = lgtest::random_floats(in.size());
    std::copy(values.begin(), values.end(), in.data());
    DeviceBuffer<float> d(lgtest::device(), in.size());
    copy_async(s, d.view(), std::span<const float>(in.span()));
    copy_async(s, out.span(), d.cview());
    s.synchronize();
    CHECK(std::equal(values.begin(), values.end(), out.data()));
  }

  TEST_CASE("a PinnedBuffer holds its bytes while it lives, and a move hands them over without a copy") {
    const Device& dev = lgtest::device();
    const LiveHandles before = live_handles();
    {
      PinnedBuffer<double> a(dev, 1000);
      CHECK(a.valid());
      CHECK(a.size() == 1000);
      CHECK(live_handles().pinned_allocations == before.pinned_allocations + 1);
      CHECK(live_handles().pinned_bytes == before.pinned_bytes + 8000);
      const auto values = lgtest::random_floats(1000);
      for (std::size_t i = 0; i < a.size(); ++i) a[i] = values[i] * 3.0;
      const double* memory = a.data();

      PinnedBuffer<double> b = std::move(a);
      CHECK_FALSE(a.valid());                       // NOLINT(bugprone-use-after-move): testing the moved-from state
      CHECK(a.size() == 0);                         // NOLINT(bugprone-use-after-move)
      CHECK(a.data() == nullptr);                   // NOLINT(bugprone-use-after-move)
      CHECK_THROWS_AS((void)a.span(), UsageError);  // NOLINT(bugprone-use-after-move)
      CHECK(b.data() == memory);
      CHECK(live_handles().pinned_bytes == before.pinned_bytes + 8000);

      PinnedBuffer<double> c(dev, 10);
      CHECK(live_handles().pinned_bytes == before.pinned_bytes + 8080);
      c = std::move(b);  // c's own 80 bytes are freed
      CHECK(live_handles().pinned_allocations == before.pinned_allocations + 1);
      CHECK(live_handles().pinned_bytes == before.pinned_bytes + 8000);
      REQUIRE(c.size() == 1000);
      const std::span<const double> read = std::as_const(c).span();
      bool same = true;
      for (std::size_t i = 0; i < read.size(); ++i) same = same && read[i] == values[i] * 3.0;
      CHECK(same);

      const PinnedBuffer<int> none(dev, 0);  // no elements: valid, but nothing is pinned
      CHECK(none.valid());
      CHECK(none.data() == nullptr);
      CHECK(none.span().empty());
      CHECK(live_handles().pinned_allocations == before.pinned_allocations + 1);
    }
    CHECK(live_handles() == before);
  }
}
