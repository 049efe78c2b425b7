// copy_async (detail/driver/memcpy.hpp): size-checked copies between host and device memory and within the
// device.
#include <doctest/doctest.h>

#include <algorithm>
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
