#include <doctest/doctest.h>

#include <algorithm>

#include "common/gpu.hpp"

using namespace lazygraph;

TEST_SUITE("gpu") {
  TEST_CASE("random data round-trips host to device to host") {
    const auto values = lgtest::random_floats(100'003);
    const DeviceBuffer<float> b = lgtest::to_device(lgtest::stream(), values);
    CHECK(b.size() == values.size());
    CHECK(b.size_bytes() == values.size() * sizeof(float));
    CHECK(lgtest::to_host(lgtest::stream(), b.cview()) == values);
  }

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

  TEST_CASE("a zero-size buffer allocates nothing and copies of it do nothing") {
    DeviceBuffer<float> b(lgtest::device(), 0);
    CHECK(b.empty());
    CHECK(b.valid());
    CHECK(b.view().address() == 0);
    std::vector<float> none;
    copy_async(lgtest::stream(), b.view(), std::span<const float>(none));
    CHECK(lgtest::to_host(lgtest::stream(), b.cview()).empty());
  }

  TEST_CASE("an allocation larger than the device's memory throws CudaError naming the buffer") {
    const std::size_t too_many = lgtest::device().total_memory() / sizeof(float) * 2;
    const LiveHandles before = live_handles();
    try {
      DeviceBuffer<float> b(lgtest::device(), too_many);
      FAIL("allocation of twice the device memory succeeded");
    } catch (const CudaError& e) {
      CHECK(e.api() == "cuMemAlloc");
      CHECK(e.code_name() == "CUDA_ERROR_OUT_OF_MEMORY");
      CHECK(e.object() == DeviceBuffer<float>::describe(too_many));
      CHECK(std::string(e.what()).find("DeviceBuffer<float>") != std::string::npos);
    }
    CHECK(live_handles() == before);
    DeviceBuffer<float> after(lgtest::device(), 1024);  // the device is still usable
    CHECK(after.size() == 1024);
  }

  TEST_CASE("using a moved-from buffer throws UsageError") {
    DeviceBuffer<float> a(lgtest::device(), 16);
    DeviceBuffer<float> b = std::move(a);
    CHECK_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): the point of the test
    CHECK(a.empty());        // NOLINT(bugprone-use-after-move)
    CHECK_THROWS_WITH_AS((void)a.view(), doctest::Contains("moved-from DeviceBuffer<float>"), UsageError);
    CHECK_THROWS_AS((void)a.cview(), UsageError);
    CHECK(b.view().size() == 16);
    PinnedBuffer<int> p(lgtest::device(), 4);
    PinnedBuffer<int> q = std::move(p);
    CHECK_THROWS_WITH_AS((void)p.span(), doctest::Contains("moved-from PinnedBuffer<int>"), UsageError);  // NOLINT
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

  TEST_CASE("buffers give their memory back when the last owner goes") {
    // Counted by lazygraph, not read from cuMemGetInfo: free-memory figures move with the driver's own use
    // (and compute-sanitizer's), so they cannot be compared exactly.
    const Device& dev = lgtest::device();
    constexpr std::size_t n = 256ULL << 20U;  // 1 GiB of floats
    const LiveHandles before = live_handles();
    DeviceSpan<float> kept;
    {
      DeviceBuffer<float> b(dev, n);
      CHECK(live_handles().device_bytes == before.device_bytes + static_cast<long long>(n * sizeof(float)));
      CHECK(live_handles().device_allocations == before.device_allocations + 1);
      kept = b.view();
    }
    CHECK(live_handles().device_bytes == before.device_bytes + static_cast<long long>(n * sizeof(float)));
    kept = {};  // the span was the last owner
    CHECK(live_handles() == before);
  }

  TEST_CASE("a buffer whose byte count overflows 64 bits is refused before anything is allocated") {
    const LiveHandles before = live_handles();
    CHECK_THROWS_WITH_AS(DeviceBuffer<float>(lgtest::device(), std::size_t{1} << 62U),
                         doctest::Contains("does not fit in 64 bits"), UsageError);
    CHECK_THROWS_WITH_AS(PinnedBuffer<double>(lgtest::device(), (std::size_t{1} << 61U) + 2),
                         doctest::Contains("PinnedBuffer<double>"), UsageError);
    CHECK(live_handles() == before);
  }

  TEST_CASE("a moved-from stream or event throws UsageError on use") {
    Stream a(lgtest::device());
    Stream b = std::move(a);
    CHECK_FALSE(static_cast<bool>(a));  // NOLINT(bugprone-use-after-move)
    CHECK_THROWS_WITH_AS(a.synchronize(), doctest::Contains("moved-from"), UsageError);  // NOLINT
    b.synchronize();
    CHECK(b.query());
    Event e(lgtest::device());
    Event f = std::move(e);
    CHECK_THROWS_AS(e.record(b), UsageError);  // NOLINT(bugprone-use-after-move)
    f.record(b);
    f.synchronize();
  }
}
