// StagingBuffer and PinnedSpan (driver/staging_buffer.hpp): pinned host memory shared by the graphs that copy
// from and to it; views carry the owner that keeps it alive. Graph copies with it are tested in tests/ops/copy.cpp.
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>

#include <type_traits>

#include "common/gpu.hpp"

using namespace lazygraph;

static_assert(std::is_convertible_v<PinnedSpan<float>, PinnedSpan<const float>>);
static_assert(!std::is_convertible_v<PinnedSpan<const float>, PinnedSpan<float>>);
static_assert(std::is_copy_constructible_v<StagingBuffer<float>>);

TEST_SUITE("gpu") {
  TEST_CASE("a staging buffer's views share its memory and keep it alive after the buffer is gone") {
    PinnedSpan<const int> kept;
    {
      const StagingBuffer<int> staging(lgtest::device(), 64);
      CHECK(staging.size() == 64);
      for (int i = 0; i < 64; ++i) staging.span()[static_cast<std::size_t>(i)] = 3 * i;
      const StagingBuffer<int> alias = staging;  // a handle: the same memory
      CHECK(alias.span().data() == staging.span().data());
      kept = staging.cview().subspan(10, 5);
      CHECK(kept.size_bytes() == 5 * sizeof(int));
      CHECK_THROWS_WITH_AS((void)staging.view().subspan(60, 5), doctest::Contains("out of range"), UsageError);
    }
    REQUIRE(kept.owner() != nullptr);  // the buffers are gone; the view's owner still holds the memory
    CHECK(kept.span()[0] == 30);
    CHECK(kept.span()[4] == 42);
  }
}
