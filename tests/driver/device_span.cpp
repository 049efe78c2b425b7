#include <doctest/doctest.h>

#include <lazygraph/driver.hpp>

#include <memory>
#include <type_traits>

using namespace lazygraph;

// A read-only view never turns into a writable one; the safe direction is implicit.
static_assert(std::is_convertible_v<DeviceSpan<float>, DeviceSpan<const float>>);
static_assert(!std::is_convertible_v<DeviceSpan<const float>, DeviceSpan<float>>);
static_assert(!std::is_constructible_v<DeviceSpan<float>, DeviceSpan<const float>>);
static_assert(!std::is_convertible_v<DeviceSpan<float>, DeviceSpan<const int>>);
// Buffers are move-only.
static_assert(!std::is_copy_constructible_v<DeviceBuffer<float>>);
static_assert(std::is_nothrow_move_constructible_v<DeviceBuffer<float>>);
static_assert(!std::is_copy_constructible_v<PinnedBuffer<float>>);
static_assert(!std::is_copy_constructible_v<Stream>);

TEST_CASE("a writable span converts to a read-only span of the same memory") {
  const DeviceSpan<float> w(0x1000, 16);
  const DeviceSpan<const float> r = w;
  CHECK(r.address() == 0x1000);
  CHECK(r.size() == 16);
  CHECK(w.as_const().size_bytes() == 64);
}

TEST_CASE("subspan offsets the address by whole elements") {
  const DeviceSpan<double> s(0x2000, 10);
  const auto sub = s.subspan(3, 4);
  CHECK(sub.address() == 0x2000 + 3 * sizeof(double));
  CHECK(sub.size() == 4);
  CHECK(s.subspan(10, 0).empty());
}

TEST_CASE("subspan outside the span throws UsageError naming the sizes") {
  const DeviceSpan<float> s(0x2000, 10);
  CHECK_THROWS_WITH_AS(static_cast<void>(s.subspan(8, 3)), doctest::Contains("out of range for a span of 10 elements"),
                       UsageError);
  CHECK_THROWS_AS(static_cast<void>(s.subspan(11, 0)), UsageError);
}

TEST_CASE("a span shares ownership of the memory it views") {
  auto owner = std::make_shared<int>(7);
  const std::weak_ptr<int> watch = owner;
  DeviceSpan<float> s(0x3000, 4, owner);
  owner.reset();
  CHECK_FALSE(watch.expired());  // the span keeps it
  const DeviceSpan<const float> r = s.subspan(1, 2);
  s = {};
  CHECK_FALSE(watch.expired());  // and so does a read-only subspan of it
  CHECK(r.owner() != nullptr);
}
