// copy_async (driver/memcpy.hpp): size-checked copies between host and device memory and within the
// device; copy_2d_async: rows between two pitches on the device.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

TEST_SUITE("gpu") {
  TEST_CASE("a device-to-device copy reproduces the source") {
    Stream& s = lgtest::stream();
    const auto values = lgtest::random_floats(4097);
    const DeviceBuffer<float> src = lgtest::to_device(s, values);
    DeviceBuffer<float> dst(lgtest::device(), values.size());
    copy_async(s, dst.view(), src.cview());
    CHECK(lgtest::to_host(s, dst.cview()) == values);
    DeviceBuffer<float> part(lgtest::device(), 100);
    copy_async(s, part.view(), src.cview().subspan(50, 100));
    const auto got = lgtest::to_host(s, part.cview());
    CHECK(std::equal(got.begin(), got.end(), values.begin() + 50));
  }

  TEST_CASE("copies between spans of different sizes throw UsageError and change nothing") {
    Stream& s = lgtest::stream();
    const auto values = lgtest::random_floats(10);
    DeviceBuffer<float> d = lgtest::to_device(s, values);
    const std::vector<float> longer(12, 1.0F);
    CHECK_THROWS_WITH_AS(copy_async(s, d.view(), std::span<const float>(longer)),
                         doctest::Contains("destination holds 10 elements but the source holds 12"), UsageError);
    std::vector<float> shorter(5);
    CHECK_THROWS_AS(copy_async(s, std::span<float>(shorter), d.cview()), UsageError);
    DeviceBuffer<float> other(lgtest::device(), 11);
    CHECK_THROWS_AS(copy_async(s, other.view(), d.cview()), UsageError);
    CHECK(lgtest::to_host(s, d.cview()) == values);
  }

  TEST_CASE("copy_2d_async copies rows between two pitches and touches nothing between them") {
    Stream& s = lgtest::stream();
    // Rows 0..99 of columns [7, 7 + 50) of a 100 x 64 matrix into a 100 x 50 one, then back into a 100 x 80 one at
    // column 11.
    const std::size_t rows = 100;
    const std::vector<float> values = lgtest::random_floats(rows * 64);
    const DeviceBuffer<float> full = lgtest::to_device(s, values);
    DeviceBuffer<float> block(lgtest::device(), rows * 50);
    copy_2d_async(s, block.view(), 50, full.cview().subspan(7, rows * 64 - 7), 64, 50, rows);
    const std::vector<float> background = lgtest::random_floats(rows * 80);
    DeviceBuffer<float> wide = lgtest::to_device(s, background);
    copy_2d_async(s, wide.view().subspan(11, rows * 80 - 11), 80, block.cview(), 50, 50, rows);
    std::vector<float> want_block(rows * 50);
    std::vector<float> want_wide = background;
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t c = 0; c < 50; ++c) {
        want_block[r * 50 + c] = values[r * 64 + 7 + c];
        want_wide[r * 80 + 11 + c] = values[r * 64 + 7 + c];
      }
    }
    CHECK(lgtest::to_host(s, block.cview()) == want_block);
    CHECK(lgtest::to_host(s, wide.cview()) == want_wide);
  }

  TEST_CASE("a 2-D copy that does not fit its spans throws UsageError before it submits anything") {
    Stream& s = lgtest::stream();
    const std::vector<float> values = lgtest::random_floats(40);
    DeviceBuffer<float> d = lgtest::to_device(s, values);
    const DeviceBuffer<float> src = lgtest::to_device(s, lgtest::random_floats(40));
    CHECK_THROWS_WITH_AS(copy_2d_async(s, d.view(), 10, src.cview(), 10, 10, 5),
                         doctest::Contains("copy_2d_async: 5 rows of 10 elements, 10 elements apart in the "
                                           "destination, end past the destination's 40 elements"),
                         UsageError);
    CHECK_THROWS_AS(copy_2d_async(s, d.view(), 10, src.cview(), 8, 9, 4), UsageError);  // a row over the pitch
    copy_2d_async(s, d.view(), 10, src.cview(), 10, 0, 4);                              // no columns: nothing
    CHECK(lgtest::to_host(s, d.cview()) == values);
  }

  TEST_CASE("a pageable host source may be reused as soon as copy_async returns") {
    Stream& s = lgtest::stream();
    const int n = 1 << 20;
    const auto first = lgtest::random_floats(n);
    const auto second = lgtest::random_floats(n);
    DeviceBuffer<float> a(lgtest::device(), n);
    DeviceBuffer<float> b(lgtest::device(), n);
    std::vector<float> staging = first;
    copy_async(s, a.view(), std::span<const float>(staging));
    staging = second;  // overwritten before the stream is waited for
    copy_async(s, b.view(), std::span<const float>(staging));
    std::fill(staging.begin(), staging.end(), 0.0F);
    CHECK(lgtest::to_host(s, a.cview()) == first);
    CHECK(lgtest::to_host(s, b.cview()) == second);
  }
}
