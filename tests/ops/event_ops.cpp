// record_event / wait_event: ordering a graph against work outside it.
#include <doctest/doctest.h>

#include <memory>

#include "common/gpu.hpp"

using namespace lazygraph;

static_assert(BuildableNode<EventOp<true>> && BuildableNode<EventOp<false>>);

TEST_SUITE("gpu") {
  TEST_CASE("a graph that waits on an event runs after the work recorded on another stream") {
    Stream& s = lgtest::stream();
    Stream producer = s.device().create_stream();
    Stream consumer = s.device().create_stream();
    const int n = 1 << 22;  // big enough that the producer is still running when the graph is launched
    const auto x = lgtest::random_floats(n);
    DeviceBuffer<float> src = from_host(x).sync_on(s);
    DeviceBuffer<float> mid = zeros<float>(n).sync_on(s);
    DeviceBuffer<float> out = zeros<float>(n).sync_on(s);
    auto ready = std::make_shared<const Event>(s.device(), false);
    auto done = std::make_shared<const Event>(s.device(), false);
    auto axpy = lgtest::kernels().get<void(float, const float*, float*, int)>("axpy");
    for (const bool built : {true, false}) {
      CAPTURE(built);
      fill(mid.view(), 0.0F).sync_on(s);
      fill(out.view(), 0.0F).sync_on(s);
      auto op = wait_event(ready) >> copy(out.view(), mid.cview()) >> record_event(done);
      auto graph = built ? CudaGraph<>::build(s.device(), op) : CudaGraph<>::capture(s, op);
      const auto kinds = graph.node_kinds();
      CHECK(std::count(kinds.begin(), kinds.end(), NodeKind::wait_event) == 1);
      CHECK(std::count(kinds.begin(), kinds.end(), NodeKind::event_record) == 1);
      // The producer computes mid = 2 * src (several passes, to take a while), then records `ready`.
      for (int pass = 0; pass < 8; ++pass) axpy.launch(producer, grid_for(n, 256), 0.25F, src.cview(), mid.view(), n);
      ready->record(producer);
      graph.launch_on(consumer);
      done->synchronize();  // the graph's own record: its copy has completed
      const auto got = lgtest::to_host(s, out.cview());
      std::vector<double> ref(x.size());
      for (std::size_t i = 0; i < ref.size(); ++i) {
        float m = 0.0F;
        for (int pass = 0; pass < 8; ++pass) m = 0.25F * x[i] + m;
        ref[i] = m;
      }
      CHECK(lgtest::relative_error(got, ref) < 1e-6);
      graph.synchronize();
    }
  }

  TEST_CASE("event ops refuse a null event") {
    CHECK_THROWS_AS((void)record_event(nullptr), UsageError);
    CHECK_THROWS_AS((void)wait_event(nullptr), UsageError);
  }
}
