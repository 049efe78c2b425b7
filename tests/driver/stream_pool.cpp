// Pooled streams (Stream::pooled): leased from the device's pool, handed back when the handle goes, reused by
// the next lease, with work submitted before the hand-back still completing in order.
#include <doctest/doctest.h>

#include <utility>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

TEST_SUITE("gpu") {
  TEST_CASE("a pooled stream goes back to the pool and the next lease reuses it") {
    const Device& gpu = lgtest::device();
    CUstream first = nullptr;
    {
      const Stream s = Stream::pooled(gpu);
      first = s.get();
    }
    Stream again = Stream::pooled(gpu);
    CHECK(again.get() == first);
    // While leased, it is not handed out twice.
    const Stream other = Stream::pooled(gpu);
    CHECK(other.get() != again.get());
    // A moved pooled stream is handed back once, by its new owner.
    Stream moved = std::move(again);
    CHECK_FALSE(static_cast<bool>(again));  // NOLINT(bugprone-use-after-move): testing the moved-from state
    CHECK(moved.get() == first);
  }

  TEST_CASE("work queued on a pooled stream completes after the handle is gone, before the next lease's work") {
    const Device& gpu = lgtest::device();
    const auto add = lgtest::kernels().get<void(half*, const half*, int)>("add_inplace");
    const int n = 1 << 16;
    auto x = lgtest::to_device(lgtest::stream(), std::vector<half>(static_cast<std::size_t>(n), half{}));
    const auto one =
        lgtest::to_device(lgtest::stream(), std::vector<half>(static_cast<std::size_t>(n), half::from_float(1.0F)));
    CUstream leased = nullptr;
    {
      const Stream s = Stream::pooled(gpu);
      leased = s.get();
      for (int i = 0; i < 500; ++i) add.launch(s, grid_for(static_cast<std::size_t>(n), 256), x.view(), one.cview(), n);
    }  // handed back with the kernels still queued or running
    const Stream s = Stream::pooled(gpu);
    REQUIRE(s.get() == leased);  // the most recently handed back stream is leased first
    std::vector<half> got(static_cast<std::size_t>(n));
    copy_async(s, std::span<half>(got), x.cview());
    s.synchronize();
    std::size_t wrong = 0;
    for (const half h : got) wrong += h.to_float() == 500.0F ? 0 : 1;
    CHECK(wrong == 0);
  }
}
