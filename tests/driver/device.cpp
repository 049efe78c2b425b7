#include <doctest/doctest.h>

#include <string>

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

  TEST_CASE("Device::synchronize waits for work queued on any of the device's streams") {
    const Device& d = lgtest::device();
    const Stream s = d.create_stream();
    DeviceBuffer<float> buffer(d, 1 << 20);
    const auto op = fill(buffer.view(), 3.0F);
    ExecContext ctx(s, false);
    op.execute(ctx);  // queued, not waited for
    d.synchronize();  // a driver for CUDA 13 once answered CUDA_ERROR_CONTEXT_IS_DESTROYED here (a wrong ABI)
    CHECK(s.query());
    CHECK(lgtest::to_host(s, buffer.cview())[(1 << 20) - 1] == 3.0F);
  }

  TEST_CASE("driver_info reports the loaded driver and the CUDA version it supports") {
    const DriverInfo info = driver_info();
    CHECK(info.loaded);
    CHECK(info.version >= 12000);  // CUDA 12.0 or newer, as cuDriverGetVersion writes it
    CHECK(info.why.empty());
  }

  TEST_CASE("Device::can_access_peer: never itself; between two GPUs, what the driver says, both ways alike") {
    const Device& d = lgtest::device();
    CHECK_FALSE(d.can_access_peer(d));
    CHECK_FALSE(d.can_access_peer(Device::get(d.ordinal())));  // another handle to the same GPU
    if (Device::count() < 2) return;
    const Device a = Device::get(0);
    const Device b = Device::get(1);
    MESSAGE("devices 0 and 1: " << std::string(a.can_access_peer(b) ? "peer access" : "no peer access"));
    CHECK(a.can_access_peer(b) == b.can_access_peer(a));  // NVLink and PCIe peer access go both ways
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
