#include <doctest/doctest.h>

#include "common/gpu.hpp"

using namespace lazygraph;

TEST_SUITE("gpu") {
  TEST_CASE("the first device reports its name, compute capability, SM count, memory and limits") {
    const Device& d = lgtest::device();
    CHECK_FALSE(d.name().empty());
    CHECK(d.compute_capability().major >= 7);
    CHECK(d.sm_count() > 0);
    CHECK(d.total_memory() > (1ULL << 30U));
    CHECK(d.free_memory() <= d.total_memory());
    CHECK(d.limits().max_threads_per_block >= 1024);
    CHECK(d.limits().max_shared_per_block_optin >= d.limits().max_shared_per_block);
    CHECK(Device::count() >= 1);
  }

  TEST_CASE("opening a device ordinal that does not exist throws NoDevice") {
    CHECK_THROWS_WITH_AS(Device::get(Device::count()), doctest::Contains("no CUDA device"), NoDevice);
    CHECK_THROWS_AS(Device::get(-1), NoDevice);
  }
}

TEST_SUITE("gpu") {
  TEST_CASE("a moved-from Device is still the same, usable device") {
    Device a = lgtest::device();
    const Device b = std::move(a);
    CHECK(a == b);                      // NOLINT(bugprone-use-after-move): moving a Device copies it
    CHECK(a.name() == b.name());        // NOLINT(bugprone-use-after-move)
    Stream s = a.create_stream();       // NOLINT(bugprone-use-after-move)
    DeviceBuffer<float> buffer(a, 16);  // NOLINT(bugprone-use-after-move)
    fill(buffer.view(), 2.0F).sync_on(s);
    CHECK(lgtest::to_host(s, buffer.cview())[15] == 2.0F);
  }
}
