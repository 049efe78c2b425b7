// The allocating ops (ops/allocate.hpp): zeros, ones, empty, dup and from_host make a new DeviceBuffer when
// executed, never when built, and are never GraphNodes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

static_assert(is_allocation_v<decltype(zeros<float>(1))> && !GraphNode<decltype(zeros<float>(1))>);
static_assert(std::is_same_v<decltype(ones<half>(1))::Output, DeviceBuffer<half>>);
static_assert(std::is_same_v<decltype(dup(DeviceSpan<const int>{}))::Output, DeviceBuffer<int>>);
static_assert(std::is_same_v<decltype(from_host(std::vector<double>{}))::Output, DeviceBuffer<double>>);

TEST_CASE("ones<half> means 1.0, not the bit pattern 1") {
  static_assert(lazygraph::detail::one<lazygraph::half>().bits == 0x3c00);
  static_assert(lazygraph::detail::one<float>() == 1.0F);
  static_assert(lazygraph::detail::one<int>() == 1);
}

TEST_CASE("building an allocating op allocates nothing") {
  const LiveHandles before = live_handles();
  [[maybe_unused]] const auto z = zeros<float>(1 << 20);
  [[maybe_unused]] const auto e = empty<double>(1 << 20);
  [[maybe_unused]] const auto h = from_host(std::vector<float>(1000, 1.5F));
  CHECK(live_handles() == before);  // also without a driver: nothing was asked of it
}

TEST_SUITE("gpu") {
  TEST_CASE("the eager ops allocate, fill and copy as they say") {
    Stream& s = lgtest::stream();
    const auto z = zeros<float>(1000).sync_on(s);
    const auto o = ones<float>(1000).sync_on(s);
    const auto od = ones<double>(10).sync_on(s);
    const auto host = lgtest::random_floats(777);
    const auto h = from_host(host).sync_on(s);
    const auto d = dup(h.cview()).sync_on(s);
    const auto e = empty<int>(0).sync_on(s);
    auto zv = lgtest::to_host(s, z.cview());
    auto ov = lgtest::to_host(s, o.cview());
    auto odv = lgtest::to_host(s, od.cview());
    CHECK(std::all_of(zv.begin(), zv.end(), [](float v) { return v == 0.0F; }));
    CHECK(std::all_of(ov.begin(), ov.end(), [](float v) { return v == 1.0F; }));
    CHECK(std::all_of(odv.begin(), odv.end(), [](double v) { return v == 1.0; }));
    CHECK(lgtest::to_host(s, d.cview()) == host);
    CHECK(e.empty());
    CHECK(map(value(21), [](int v) { return v * 2; }).sync_on(s) == 42);
    const auto pair = all(value(1), fill(DeviceBuffer<float>(lgtest::device(), 4).view(), 1.0F)).sync_on(s);
    CHECK(std::get<0>(pair) == 1);
  }

  TEST_CASE("from_host copies the host data when the op is built; dup copies a device span when executed") {
    Stream& s = lgtest::stream();
    const auto values = lgtest::random_floats(5000);
    std::vector<float> host = values;
    auto upload = from_host(host);
    std::fill(host.begin(), host.end(), 0.0F);  // changed after building: the op has its own copy
    const LiveHandles before = live_handles();
    DeviceBuffer<float> a = upload.sync_on(s);
    CHECK(live_handles().device_allocations == before.device_allocations + 1);
    CHECK(a.size() == values.size());
    CHECK(lgtest::to_host(s, a.cview()) == values);
    DeviceBuffer<float> b = upload.sync_on(s);  // each execution makes a new buffer
    CHECK(b.view().address() != a.view().address());
    CHECK(lgtest::to_host(s, b.cview()) == values);

    auto copy_of_middle = dup(a.cview().subspan(1000, 2000));
    fill(a.view(), 5.0F).sync_on(s);  // dup reads the span when it executes
    const DeviceBuffer<float> d = copy_of_middle.sync_on(s);
    CHECK(d.size() == 2000);
    CHECK(lgtest::to_host(s, d.cview()) == std::vector<float>(2000, 5.0F));
    CHECK(lgtest::to_host(s, b.cview()) == values);
  }

  TEST_CASE("zeros and ones set every element of 1, 2, 4 and 8-byte types, over old random contents") {
    Stream& s = lgtest::stream();
    const int n = 100'003;
    for (int round = 0; round < 2; ++round) {  // the second round reuses the memory the first one freed
      {
        // Scribble over memory the next allocations are likely to reuse.
        const DeviceBuffer<float> noise = from_host(lgtest::random_floats(4 * n)).sync_on(s);
        s.synchronize();
      }
      const auto z8 = lgtest::to_host(s, zeros<std::uint8_t>(n).sync_on(s).cview());
      const auto o16 = lgtest::to_host(s, ones<half>(n).sync_on(s).cview());
      const auto z32 = lgtest::to_host(s, zeros<float>(n).sync_on(s).cview());
      const auto o32 = lgtest::to_host(s, ones<std::int32_t>(n).sync_on(s).cview());
      const auto z64 = lgtest::to_host(s, zeros<double>(n).sync_on(s).cview());
      const auto o64 = lgtest::to_host(s, ones<std::int64_t>(n).sync_on(s).cview());
      CHECK(std::all_of(z8.begin(), z8.end(), [](std::uint8_t v) { return v == 0; }));
      CHECK(std::all_of(o16.begin(), o16.end(), [](half v) { return v.to_float() == 1.0F; }));
      CHECK(std::all_of(z32.begin(), z32.end(), [](float v) { return v == 0.0F; }));
      CHECK(std::all_of(o32.begin(), o32.end(), [](std::int32_t v) { return v == 1; }));
      CHECK(std::all_of(z64.begin(), z64.end(), [](double v) { return v == 0.0; }));
      CHECK(std::all_of(o64.begin(), o64.end(), [](std::int64_t v) { return v == 1; }));
    }
  }
}
