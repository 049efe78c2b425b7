// HostIo (module/host_io.hpp): pinned staging that a module's graph copies from and to, with the core
// staging kernel where sizes and addresses allow, memcpy nodes elsewhere; either way the same bytes arrive.
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>

#include <type_traits>
#include <utility>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

// HostIo's copies are the staging copies copy() makes (one op for both), with a copier when there is a kernel.
static_assert(std::is_same_v<decltype(std::declval<const HostIo<half, float>&>().copy_in(DeviceSpan<half>())),
                             StagedUploadOp<half>>);
static_assert(std::is_same_v<decltype(std::declval<const HostIo<half, float>&>().copy_out(DeviceSpan<const float>())),
                             StagedDownloadOp<float>>);

TEST_SUITE("gpu") {
  TEST_CASE("a module whose staging copies are kernels computes what one with memcpy nodes does, any size") {
    Stream& s = lgtest::stream();
    const KernelLibrary core(lgtest::device());  // the core kernels: staging_copy among them
    for (const int n : {4096, 1001}) {           // 1001 halves: 2002 bytes, not whole words: memcpy nodes
      CAPTURE(n);
      const auto build = [&](const DeviceSpan<const half>& in, const DeviceSpan<half>& out) { return copy(out, in); };
      HostIo<half, half> kernel_io(core, static_cast<std::size_t>(n), static_cast<std::size_t>(n));
      CHECK(kernel_io.copies_with_kernel());
      GraphModule<half, half> with_kernels(s, std::move(kernel_io), build);
      GraphModule<half, half> with_memcpy(s, static_cast<std::size_t>(n), static_cast<std::size_t>(n), build);
      for (int round = 0; round < 3; ++round) {
        const std::vector<half> x = to_half(lgtest::random_floats(n));
        const std::vector<half> a = with_kernels.forward(x);
        const std::vector<half> b = with_memcpy.forward(x);
        REQUIRE(a.size() == x.size());
        std::size_t differ = 0;
        for (std::size_t i = 0; i < x.size(); ++i) differ += (a[i].bits != x[i].bits) + (b[i].bits != x[i].bits);
        CHECK(differ == 0);
      }
      const TransferStats t = with_kernels.graph().transfers();
      CHECK(t.bytes_to_device_per_replay == static_cast<std::size_t>(n) * sizeof(half));
      CHECK(t.bytes_to_host_per_replay == static_cast<std::size_t>(n) * sizeof(half));
      CHECK(t.replays == 3);
    }
  }
}
