// record_event / wait_event: ordering a graph against work outside it.
#include <doctest/doctest.h>

#include <algorithm>
#include <iterator>
#include <memory>
#include <optional>
#include <vector>

#include "common/gpu.hpp"

using namespace lazygraph;

static_assert(BuildableNode<EventOp<true>> && BuildableNode<EventOp<false>>);
static_assert(std::is_same_v<decltype(record_event(nullptr)), EventOp<false>>);
static_assert(std::is_same_v<decltype(wait_event(nullptr)), EventOp<true>>);

namespace {

/// Spins for `cycles` clock cycles, then copies `in` to `out`: work that is still running when the host has
/// queued what comes after it.
using SlowCopy = Kernel<void(const float*, float*, int, long long)>;
SlowCopy slow_copy() {
  static const KernelLibrary library = [] {
    const KernelLibraryOptions opts = lgtest::own_kernels(
        {{"event_ops_test.cu",
          "extern \"C\" __global__ void slow_copy(const float* in, float* out, int n, long long cycles) {\n"
          "  const long long start = clock64();\n"
          "  while (clock64() - start < cycles) {}\n"
          "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = in[i];\n"
          "}\n"}},
        lgtest::scratch_directory("event-ops"));
    return KernelLibrary(lgtest::device(), opts);
  }();
  return library.get<void(const float*, float*, int, long long)>("slow_copy");
}

constexpr long long slow_cycles = 100'000'000;  // about 50 ms at the clock rates of current GPUs
/// One wave of blocks on any current GPU (the kernel strides over the rest), so each launch spins once.
constexpr LaunchConfig slow_grid = grid_for(256 * 256, 256);

std::vector<double> as_reference(const std::vector<float>& v) { return {v.begin(), v.end()}; }

std::size_t index_of(const std::vector<NodeKind>& kinds, NodeKind kind) {
  const auto it = std::find(kinds.begin(), kinds.end(), kind);
  REQUIRE(it != kinds.end());
  return static_cast<std::size_t>(it - kinds.begin());
}

}  // namespace

TEST_CASE("event ops refuse a null event when they are made") {
  CHECK_THROWS_AS((void)record_event(nullptr), UsageError);
  CHECK_THROWS_AS((void)wait_event(nullptr), UsageError);
  CHECK_THROWS_AS((void)record_event(std::shared_ptr<const Event>()), UsageError);
}

TEST_SUITE("gpu") {
  TEST_CASE("event ops refuse a moved-from or reset event") {
    Stream& s = lgtest::stream();
    auto moved_from = std::make_shared<Event>(s.device(), false);
    const Event taken = std::move(*moved_from);
    CHECK_THROWS_AS((void)record_event(moved_from), UsageError);
    CHECK_THROWS_AS((void)wait_event(moved_from), UsageError);
    auto reset = std::make_shared<Event>(s.device(), false);
    reset->reset();
    CHECK_THROWS_AS((void)record_event(reset), UsageError);
    CHECK_THROWS_AS((void)wait_event(reset), UsageError);
    CHECK(static_cast<bool>(taken));
  }

  TEST_CASE("a graph that waits on an event runs after the work recorded on another stream") {
    Stream& s = lgtest::stream();
    Stream producer = s.device().create_stream();
    Stream consumer = s.device().create_stream();
    const int n = 1 << 20;
    const auto k = slow_copy();
    for (const bool built : {true, false}) {
      CAPTURE(built);
      const auto x = lgtest::random_floats(n);
      DeviceBuffer<float> src = from_host(x).sync_on(s);
      DeviceBuffer<float> mid = from_host(lgtest::random_floats(n)).sync_on(s);  // stale until the producer ran
      DeviceBuffer<float> out = from_host(lgtest::random_floats(n)).sync_on(s);
      auto ready = std::make_shared<const Event>(s.device(), false);
      auto done = std::make_shared<const Event>(s.device(), false);
      auto op = wait_event(ready) >> copy(out.view(), mid.cview()) >> record_event(done);
      auto graph = built ? CudaGraph<>::build(s.device(), op) : CudaGraph<>::capture(s, op);
      const auto kinds = graph.node_kinds();
      REQUIRE(kinds.size() == 3);
      CHECK(std::count(kinds.begin(), kinds.end(), NodeKind::wait_event) == 1);
      CHECK(std::count(kinds.begin(), kinds.end(), NodeKind::event_record) == 1);
      // The wait comes first, the record last: wait -> copy -> record.
      const auto deps = graph.dependencies();
      const std::size_t wait = index_of(kinds, NodeKind::wait_event);
      const std::size_t work = index_of(kinds, NodeKind::memcpy);
      const std::size_t record = index_of(kinds, NodeKind::event_record);
      CHECK(deps[wait].empty());
      CHECK(deps[work] == std::vector<std::size_t>{wait});
      CHECK(deps[record] == std::vector<std::size_t>{work});

      // The producer makes mid = src slowly, then records `ready`; the graph, launched on another stream at once,
      // must copy mid only after that.
      k.launch(producer, slow_grid, src.cview(), mid.view(), n, slow_cycles);
      ready->record(producer);
      graph.launch_on(consumer);
      done->synchronize();  // the graph's own record: its copy has completed
      // Read on a third stream, ordered after neither: only `done` says the copy is there.
      CHECK(lgtest::relative_error(lgtest::to_host(s, out.cview()), as_reference(x)) == 0.0);
      graph.synchronize();
    }
  }

  TEST_CASE("record_event at the end of a graph completes only after the graph's work") {
    Stream& s = lgtest::stream();
    Stream other = s.device().create_stream();
    const int n = 1 << 18;
    const auto k = slow_copy();
    for (const bool built : {true, false}) {
      CAPTURE(built);
      const auto x = lgtest::random_floats(n);
      DeviceBuffer<float> src = from_host(x).sync_on(s);
      DeviceBuffer<float> out = from_host(lgtest::random_floats(n)).sync_on(s);
      auto done = std::make_shared<const Event>(s.device(), false);
      auto op = k(slow_grid, src.cview(), out.view(), n, slow_cycles) >> record_event(done);
      auto graph = built ? CudaGraph<>::build(s.device(), op) : CudaGraph<>::capture(s, op);
      graph.launch_on(other);
      done->synchronize();
      CHECK(lgtest::relative_error(lgtest::to_host(s, out.cview()), as_reference(x)) == 0.0);
      graph.synchronize();
    }
  }

  TEST_CASE("wait_event run eagerly makes the stream wait for work on another stream") {
    Stream& s = lgtest::stream();
    Stream producer = s.device().create_stream();
    Stream consumer = s.device().create_stream();
    const int n = 1 << 18;
    const auto x = lgtest::random_floats(n);
    DeviceBuffer<float> src = from_host(x).sync_on(s);
    DeviceBuffer<float> mid = from_host(lgtest::random_floats(n)).sync_on(s);
    DeviceBuffer<float> out = from_host(lgtest::random_floats(n)).sync_on(s);
    auto ready = std::make_shared<const Event>(s.device(), false);
    slow_copy().launch(producer, slow_grid, src.cview(), mid.view(), n, slow_cycles);
    ready->record(producer);
    (wait_event(ready) >> copy(out.view(), mid.cview())).sync_on(consumer);
    CHECK(lgtest::relative_error(lgtest::to_host(consumer, out.cview()), as_reference(x)) == 0.0);
  }

  TEST_CASE("two graphs on two streams hand over through one graph's record and the other's wait") {
    Stream& s = lgtest::stream();
    Stream a = s.device().create_stream();
    Stream b = s.device().create_stream();
    const int n = 1 << 18;
    auto handed_over = std::make_shared<const Event>(s.device(), false);
    DeviceBuffer<float> src = from_host(lgtest::random_floats(n)).sync_on(s);
    DeviceBuffer<float> mid = from_host(lgtest::random_floats(n)).sync_on(s);
    DeviceBuffer<float> out = from_host(lgtest::random_floats(n)).sync_on(s);
    auto first = CudaGraph<>::build(
        s.device(), slow_copy()(slow_grid, src.cview(), mid.view(), n, slow_cycles) >> record_event(handed_over));
    auto second = CudaGraph<>::capture(s, wait_event(handed_over) >> copy(out.view(), mid.cview()));
    for (int round = 0; round < 2; ++round) {
      CAPTURE(round);
      const auto x = lgtest::random_floats(n);
      copy(src.view(), std::span<const float>(x)).sync_on(s);
      first.launch_on(a);
      second.launch_on(b);
      second.synchronize();
      CHECK(lgtest::relative_error(lgtest::to_host(b, out.cview()), as_reference(x)) == 0.0);
      first.synchronize();
    }
  }

  TEST_CASE("a graph keeps its events alive after every other handle is gone") {
    Stream& s = lgtest::stream();
    Stream other = s.device().create_stream();
    const int n = 4096;
    const auto x = lgtest::random_floats(n);
    DeviceBuffer<float> src = from_host(x).sync_on(s);
    DeviceBuffer<float> out = from_host(lgtest::random_floats(n)).sync_on(s);
    for (const bool built : {true, false}) {
      CAPTURE(built);
      std::optional<CudaGraph<>> graph;
      std::weak_ptr<const Event> watch_wait;
      std::weak_ptr<const Event> watch_record;
      {
        auto ready = std::make_shared<const Event>(s.device(), false);
        auto done = std::make_shared<const Event>(s.device(), false);
        watch_wait = ready;
        watch_record = done;
        ready->record(s);
        auto op = wait_event(ready) >> copy(out.view(), src.cview()) >> record_event(done);
        graph.emplace(built ? CudaGraph<>::build(s.device(), op) : CudaGraph<>::capture(s, op));
      }
      REQUIRE_FALSE(watch_wait.expired());
      REQUIRE_FALSE(watch_record.expired());
      graph->launch();
      graph->launch_on(other);
      graph->synchronize();
      CHECK(lgtest::relative_error(lgtest::to_host(s, out.cview()), as_reference(x)) == 0.0);
      graph.reset();
      CHECK(watch_wait.expired());
      CHECK(watch_record.expired());
    }
  }
}
