// copy(dst, src) as an op (detail/ops/copy.hpp): sizes checked when built; device-to-device copies are
// GraphNodes that keep both buffers alive; host copies read and write host memory when they execute.
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>

#include <algorithm>
#include <memory>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

static_assert(GraphNode<DeviceCopyOp<float>> && BuildableNode<DeviceCopyOp<float>>);
static_assert(!GraphNode<UploadOp<float>> && is_host_transfer_v<UploadOp<float>>);
static_assert(!GraphNode<DownloadOp<float>> && is_host_transfer_v<DownloadOp<float>>);
static_assert(std::is_same_v<decltype(copy(DeviceSpan<float>{}, DeviceSpan<float>{})), DeviceCopyOp<float>>);
static_assert(std::is_same_v<decltype(copy(DeviceSpan<float>{}, std::vector<float>{})), UploadOp<float>>);
static_assert(std::is_same_v<decltype(copy(std::span<float>{}, DeviceSpan<float>{})), DownloadOp<float>>);

// Copies with a StagingBuffer's pinned span are GraphNodes (and build without capture); other host memory is not.
static_assert(GraphNode<StagedUploadOp<float>> && BuildableNode<StagedUploadOp<float>>);
static_assert(GraphNode<StagedDownloadOp<float>> && BuildableNode<StagedDownloadOp<float>>);
static_assert(std::is_same_v<decltype(copy(DeviceSpan<float>{}, PinnedSpan<const float>{})), StagedUploadOp<float>>);
static_assert(std::is_same_v<decltype(copy(DeviceSpan<float>{}, PinnedSpan<float>{})), StagedUploadOp<float>>);
static_assert(std::is_same_v<decltype(copy(PinnedSpan<float>{}, DeviceSpan<float>{})), StagedDownloadOp<float>>);
static_assert(!std::is_convertible_v<PinnedSpan<const float>, PinnedSpan<float>>);

TEST_CASE("a staging copy of the wrong size is rejected when the op is built, naming both sizes") {
  const DeviceSpan<float> dst(0x1000, 4);
  const PinnedSpan<const float> src(nullptr, 5, nullptr);
  CHECK_THROWS_WITH_AS(copy(dst, src), doctest::Contains("the destination holds 4 elements but the source holds 5"),
                       UsageError);
  CHECK_THROWS_AS((void)src.subspan(3, 3), UsageError);
}

TEST_CASE("a copy between spans of different sizes is rejected when the op is built") {
  const DeviceSpan<float> dst(0x1000, 4);
  const DeviceSpan<const float> src(0x2000, 5);
  CHECK_THROWS_WITH_AS(copy(dst, src), doctest::Contains("the destination holds 4 elements but the source holds 5"),
                       UsageError);
  const std::vector<float> host(3);
  CHECK_THROWS_AS(copy(dst, host), UsageError);
  std::vector<float> out(7);
  CHECK_THROWS_AS(copy(std::span<float>(out), src), UsageError);
}

TEST_SUITE("gpu") {
  TEST_CASE("copy ops move data in all three directions; host memory is read and written when they execute") {
    Stream& s = lgtest::stream();
    const int n = 12'345;
    const auto values = lgtest::random_floats(n);
    DeviceBuffer<float> a = zeros<float>(n).sync_on(s);
    DeviceBuffer<float> b = zeros<float>(n).sync_on(s);
    std::vector<float> host(n, 0.0F);
    auto upload = copy(a.view(), host);
    std::copy(values.begin(), values.end(), host.begin());  // after building: the op reads it when it executes
    upload.sync_on(s);
    copy(b.view(), a.cview()).sync_on(s);
    std::vector<float> back(n, 0.0F);
    auto download = copy(std::span<float>(back), b.cview());
    CHECK(back == std::vector<float>(n, 0.0F));  // built: nothing written yet
    download.sync_on(s);
    CHECK(back == values);
    copy(b.view().subspan(10, 100), a.cview().subspan(5000, 100)).sync_on(s);
    const auto got = lgtest::to_host(s, b.cview());
    CHECK(std::equal(got.begin() + 10, got.begin() + 110, values.begin() + 5000));
    CHECK(std::equal(got.begin() + 110, got.end(), values.begin() + 110));
  }

  TEST_CASE("a device-to-device copy op keeps both buffers alive, and a graph that recorded it too") {
    Stream& s = lgtest::stream();
    const int n = 1 << 20;
    const auto values = lgtest::random_floats(n);
    DeviceBuffer<float> out = zeros<float>(n).sync_on(s);
    const LiveHandles before = live_handles();
    std::weak_ptr<const void> src_owner;
    std::optional<CudaGraph<>> graph;
    {
      std::optional<DeviceCopyOp<float>> op;
      {
        DeviceBuffer<float> src = lgtest::to_device(s, values);
        DeviceBuffer<float> mid(lgtest::device(), n);
        src_owner = src.cview().owner();
        op.emplace(copy(mid.view(), src.cview()));
        graph.emplace(CudaGraph<>::capture(s, *op >> copy(out.view(), mid.cview())));
      }
      CHECK(live_handles().device_allocations == before.device_allocations + 2);  // src and mid live on
      op->sync_on(s);
      op.reset();
      CHECK_FALSE(src_owner.expired());  // the graph holds them still
      graph->launch();
      CHECK(lgtest::to_host(s, out.cview()) == values);
    }
    graph.reset();
    CHECK(src_owner.expired());
    CHECK(live_handles().device_allocations == before.device_allocations);
    CHECK(live_handles().device_bytes == before.device_bytes);
  }
  TEST_CASE("a graph copies from and to staging memory on every replay, captured or built") {
    Stream& s = lgtest::stream();
    const int n = 4096;
    StagingBuffer<float> in(s.device(), n);
    StagingBuffer<float> out(s.device(), n);
    DeviceBuffer<float> dev(s.device(), n);
    const auto op = copy(dev.view(), in.cview()) >> copy(out.view(), dev.cview());
    for (const bool built : {false, true}) {
      CAPTURE(built);
      auto g = built ? CudaGraph<>::build(s.device(), op) : CudaGraph<>::capture(s, op);
      CHECK(g.transfers().bytes_to_device_per_replay == n * sizeof(float));
      CHECK(g.transfers().bytes_to_host_per_replay == n * sizeof(float));
      for (int round = 0; round < 3; ++round) {
        const auto x = lgtest::random_floats(n);
        std::copy(x.begin(), x.end(), in.span().begin());
        g.launch();  // replays and waits: the staging output holds this round's input
        CHECK(std::equal(x.begin(), x.end(), out.span().begin()));
      }
      CHECK(g.transfers().replays == 3);
    }
  }

  TEST_CASE("copy between two GPUs' buffers is a peer copy: eagerly, and as a node of a captured graph") {
    if (Device::count() < 2) {
      MESSAGE("skipped: two GPUs needed for a peer copy; this machine has " << Device::count());
      return;
    }
    const Device d0 = Device::get(0);
    const Device d1 = Device::get(1);
    const Stream s0(d0);
    const Stream s1(d1);
    const std::vector<float> x0 = lgtest::random_floats(4099);
    DeviceBuffer<float> a = lgtest::to_device(s0, x0);
    DeviceBuffer<float> b(d1, x0.size());
    copy(b.view(), a.cview()).sync_on(s0);
    CHECK(lgtest::to_host(s1, b.cview()) == x0);
    DeviceBuffer<float> c(d0, x0.size());
    auto graph = CudaGraph<>::capture(s1, copy(c.view(), b.cview()));  // recorded on device 1, writes device 0
    graph.launch();
    CHECK(lgtest::to_host(s0, c.cview()) == x0);
  }
}
