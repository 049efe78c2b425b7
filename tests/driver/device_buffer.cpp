#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

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

  TEST_CASE("a buffer adopting another owner's memory keeps it alive and leaves the freeing to that owner") {
    const auto values = lgtest::random_floats(4099);
    DeviceBuffer<float> owner = lgtest::to_device(lgtest::stream(), values);
    const DeviceSpan<float> memory = owner.view();
    DeviceBuffer<float> adopted = DeviceBuffer<float>::adopt(lgtest::device(), memory.subspan(3, 4096));
    CHECK(adopted.size() == 4096);
    CHECK(adopted.view().address() == memory.address() + 3 * sizeof(float));
    owner.reset();  // the adopted buffer still holds the allocation through the span's owner
    const std::vector<float> back = lgtest::to_host(lgtest::stream(), adopted.cview());
    CHECK(std::equal(back.begin(), back.end(), values.begin() + 3));
    adopted.reset();  // the allocation goes with its last owner, once (no double free: compute-sanitizer would say)
    CHECK_THROWS_WITH_AS(DeviceBuffer<float>::adopt(lgtest::device(), DeviceSpan<float>(memory.address(), 8)),
                         doctest::Contains("no owner"), UsageError);
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
}
