// copy(dst, src) as an op (ops/copy.hpp): sizes checked when built; device-to-device copies are
// GraphNodes that keep both buffers alive; host copies read and write host memory when they execute. copy_2d:
// rows between two pitches, shapes checked when built, captured (not built) into a graph.
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
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

// A 2-D copy is a GraphNode that CudaGraph::build adds as one memcpy node.
static_assert(GraphNode<DeviceCopy2dOp<float>> && BuildableNode<DeviceCopy2dOp<float>>);
static_assert(
    std::is_same_v<decltype(copy_2d(DeviceSpan<float>{}, 0, DeviceSpan<float>{}, 0, 0, 0)), DeviceCopy2dOp<float>>);

TEST_CASE("a 2-D copy whose rows are longer than a pitch or end past a span is rejected when the op is built") {
  const DeviceSpan<float> dst(0x1000, 3 * 8);      // 3 rows of a matrix 8 wide
  const DeviceSpan<const float> src(0x9000, 100);  // 100 elements
  CHECK_NOTHROW((void)copy_2d(dst, 8, src, 10, 8, 3));
  CHECK_NOTHROW((void)copy_2d(dst, 8, src, 10, 4, 3));  // the last row may end before the span does
  CHECK_NOTHROW((void)copy_2d(dst.subspan(4, 20), 8, src.subspan(76, 24), 10, 4, 3));  // rows 0..2 from element 4
  CHECK_THROWS_WITH_AS((void)copy_2d(dst, 8, src, 10, 9, 3),
                       doctest::Contains("copy_2d: 3 rows of 9 elements, 8 elements apart in the destination: a row "
                                         "is longer than the pitch"),
                       UsageError);
  CHECK_THROWS_WITH_AS((void)copy_2d(dst, 8, src, 4, 5, 2),
                       doctest::Contains("2 rows of 5 elements, 4 elements apart in the source: a row is longer"),
                       UsageError);
  CHECK_THROWS_WITH_AS((void)copy_2d(dst, 8, src, 10, 8, 4),
                       doctest::Contains("4 rows of 8 elements, 8 elements apart in the destination, end past the "
                                         "destination's 24 elements"),
                       UsageError);
  CHECK_THROWS_WITH_AS((void)copy_2d(dst.subspan(1, 23), 8, src, 10, 8, 3),
                       doctest::Contains("end past the destination's 23 elements"), UsageError);
  CHECK_THROWS_WITH_AS((void)copy_2d(dst, 8, src, 47, 8, 3),
                       doctest::Contains("3 rows of 8 elements, 47 elements apart in the source, end past the "
                                         "source's 100 elements"),
                       UsageError);
  // A row count times a pitch that overflows 64 bits is out of range, not a small number that fits.
  CHECK_THROWS_WITH_AS((void)copy_2d(dst, 8, src, std::size_t{1} << 63, 1, 3),
                       doctest::Contains("end past the source's 100 elements"), UsageError);
}

TEST_CASE("a 2-D copy of one row ignores the pitches, and one of no rows or no columns checks nothing") {
  const DeviceSpan<float> dst(0x1000, 4);
  const DeviceSpan<const float> src(0x9000, 4);
  CHECK_NOTHROW((void)copy_2d(dst, 0, src, 1, 4, 1));  // one row: the pitch is never stepped over
  CHECK_THROWS_AS((void)copy_2d(dst, 0, src, 1, 5, 1), UsageError);
  CHECK_NOTHROW((void)copy_2d(dst, 0, src, 0, 1000, 0));
  CHECK_NOTHROW((void)copy_2d(dst, 0, src, 0, 0, 1000));
  CHECK(accesses_of(copy_2d(dst, 0, src, 0, 0, 1000)).empty());
}

TEST_CASE("a 2-D copy reads and writes, in each span, from its first row's start to its last row's end") {
  const DeviceSpan<float> dst(0x1000, 64);
  const DeviceSpan<const float> src(0x9000, 64);
  const AccessSet set = accesses_of(copy_2d(dst.subspan(2, 62), 16, src.subspan(1, 63), 10, 3, 4));
  REQUIRE(set.entries().size() == 2);
  CHECK_FALSE(set.is_opaque());
  const MemoryAccess& read = set.entries()[0];
  const MemoryAccess& write = set.entries()[1];
  CHECK_FALSE(read.writes);
  CHECK(read.begin == 0x9000 + 1 * sizeof(float));
  CHECK(read.bytes == (3 * 10 + 3) * sizeof(float));
  CHECK(write.writes);
  CHECK(write.begin == 0x1000 + 2 * sizeof(float));
  CHECK(write.bytes == (3 * 16 + 3) * sizeof(float));
  CHECK(read.op == "copy_2d");
  // Disjoint columns of one matrix: taken to overlap (an upper bound), so dataflow orders the two copies.
  const auto left = copy_2d(dst, 16, src, 16, 8, 4);
  const auto right = copy_2d(dst.subspan(8, 56), 16, src.subspan(8, 56), 16, 8, 4);
  CHECK(find_conflict(accesses_of(left), accesses_of(right)).has_value());
}

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

  TEST_CASE("copy_2d copies a block of columns between two pitches, eagerly, captured and built, and leaves the rest") {
    Stream& s = lgtest::stream();
    // A 300 x 37 matrix; columns [5, 5 + 19) of its rows 0..299 go to columns [3, 3 + 19) of a 300 x 29 matrix.
    const std::size_t rows = 300;
    const std::size_t src_cols = 37;
    const std::size_t dst_cols = 29;
    const std::size_t width = 19;
    const std::vector<float> a = lgtest::random_floats(rows * src_cols);
    const std::vector<float> b = lgtest::random_floats(rows * dst_cols);
    std::vector<float> want = b;
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t c = 0; c < width; ++c) want[r * dst_cols + 3 + c] = a[r * src_cols + 5 + c];
    }
    const DeviceBuffer<float> src = lgtest::to_device(s, a);
    for (const int how : {0, 1, 2}) {
      CAPTURE(how);  // eagerly, captured, built
      DeviceBuffer<float> dst = lgtest::to_device(s, b);
      const auto op = copy_2d(dst.view().subspan(3, rows * dst_cols - 3), dst_cols,
                              src.cview().subspan(5, rows * src_cols - 5), src_cols, width, rows);
      if (how == 0) {
        op.sync_on(s);
      } else {
        auto graph = how == 1 ? CudaGraph<>::capture(s, op) : CudaGraph<>::build(s.device(), op);
        const auto kinds = graph.node_kinds();
        CHECK(kinds == std::vector<NodeKind>{NodeKind::memcpy});  // one node for all the rows
        graph.launch();
      }
      CHECK(lgtest::to_host(s, dst.cview()) == want);  // the block copied bit for bit, the other columns as they were
    }
  }

  TEST_CASE("copy_2d moves 2-byte elements by their size: a block of fp16 rows, out of a matrix and back into one") {
    Stream& s = lgtest::stream();
    const std::size_t rows = 64;
    const std::size_t cols = 96;
    const std::size_t first = 40;
    const std::size_t width = 33;
    const std::vector<half> a = lgtest::random_halves(rows * cols);
    const DeviceBuffer<half> full = lgtest::to_device(s, a);
    DeviceBuffer<half> block = zeros<half>(rows * width).sync_on(s);
    copy_2d(block.view(), width, full.cview().subspan(first, rows * cols - first), cols, width, rows).sync_on(s);
    const std::vector<half> got = lgtest::to_host(s, block.cview());
    bool same = true;
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t c = 0; c < width; ++c) same = same && got[r * width + c].bits == a[r * cols + first + c].bits;
    }
    CHECK(same);
    DeviceBuffer<half> back = zeros<half>(rows * cols).sync_on(s);
    copy_2d(back.view().subspan(first, rows * cols - first), cols, block.cview(), width, width, rows).sync_on(s);
    const std::vector<half> round_trip = lgtest::to_host(s, back.cview());
    std::size_t wrong = 0;
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t c = 0; c < cols; ++c) {
        const bool inside = c >= first && c < first + width;
        const std::uint16_t expect = inside ? a[r * cols + c].bits : std::uint16_t{0};
        wrong += round_trip[r * cols + c].bits != expect ? 1U : 0U;
      }
    }
    CHECK(wrong == 0);
  }

  TEST_CASE("a 2-D copy op keeps both buffers alive in a graph that captured it") {
    Stream& s = lgtest::stream();
    const std::vector<float> values = lgtest::random_floats(8 * 8);
    DeviceBuffer<float> out = zeros<float>(8 * 4).sync_on(s);
    std::weak_ptr<const void> src_owner;
    std::optional<CudaGraph<>> graph;
    {
      DeviceBuffer<float> src = lgtest::to_device(s, values);
      src_owner = src.cview().owner();
      graph.emplace(CudaGraph<>::capture(s, copy_2d(out.view(), 4, src.cview(), 8, 4, 8)));
    }
    CHECK_FALSE(src_owner.expired());
    graph->launch();
    std::vector<float> want;
    for (std::size_t r = 0; r < 8; ++r) want.insert(want.end(), values.begin() + r * 8, values.begin() + r * 8 + 4);
    CHECK(lgtest::to_host(s, out.cview()) == want);
    graph.reset();
    CHECK(src_owner.expired());
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
