#include <doctest/doctest.h>

#include <lazygraph/driver.hpp>

using namespace lazygraph;

TEST_CASE("byte counts that fit in 64 bits are exact, and larger ones are refused naming both factors") {
  CHECK(detail::byte_count(1000, 4, "x") == 4000);
  CHECK(detail::byte_count(0, 8, "x") == 0);
  CHECK(detail::byte_count(std::size_t{1} << 61U, 4, "x") == std::size_t{1} << 63U);
  CHECK_THROWS_WITH_AS((void)detail::byte_count(std::size_t{1} << 62U, 4, "DeviceBuffer<float>"),
                       doctest::Contains("DeviceBuffer<float> of 4611686018427387904 elements of 4 bytes"), UsageError);
  CHECK_THROWS_AS((void)detail::byte_count((std::size_t{1} << 61U) + 2, 8, "PinnedBuffer<double>"), UsageError);
}
