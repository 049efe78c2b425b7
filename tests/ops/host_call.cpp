// host_call: host functions on the stream, in graphs only through allow_in_graph, exceptions as HostCallError.
#include <doctest/doctest.h>

#include <atomic>
#include <stdexcept>
#include <string>

#include "common/gpu.hpp"

using namespace lazygraph;

static_assert(DeviceOp<HostCallOp> && !GraphNode<HostCallOp> && runs_host_code_v<HostCallOp>);
static_assert(GraphNode<HostCallInGraphOp> && BuildableNode<HostCallInGraphOp>);
static_assert(!GraphNode<SequenceOp<FillOp<float>, HostCallOp>>);
static_assert(runs_host_code_v<SequenceOp<FillOp<float>, HostCallOp>>);

TEST_SUITE("gpu") {
  TEST_CASE("host_call runs its function once when executed eagerly, after the work before it") {
    Stream& s = lgtest::stream();
    const int n = 100'000;
    DeviceBuffer<float> b = from_host(lgtest::random_floats(n)).sync_on(s);
    std::atomic<int> calls{0};
    (fill(b.view(), 3.0F) >> host_call("count", [&] { calls.fetch_add(1); })).sync_on(s);
    CHECK(calls.load() == 1);
  }

  TEST_CASE("allow_in_graph(host_call) runs on every replay of a captured or built graph") {
    Stream& s = lgtest::stream();
    DeviceBuffer<float> b = from_host(lgtest::random_floats(1000)).sync_on(s);
    for (const bool built : {true, false}) {
      CAPTURE(built);
      std::atomic<int> calls{0};
      auto op = fill(b.view(), 1.0F) >> allow_in_graph(host_call("count", [&] { calls.fetch_add(1); }));
      auto graph = built ? CudaGraph<>::build(s.device(), op) : CudaGraph<>::capture(s, op);
      CHECK(calls.load() == 0);  // recording runs nothing
      const auto kinds = graph.node_kinds();
      CHECK(std::count(kinds.begin(), kinds.end(), NodeKind::host) == 1);
      for (int i = 0; i < 5; ++i) graph.launch();
      CHECK(calls.load() == 5);
    }
  }

  TEST_CASE("a host_call that throws surfaces as HostCallError at the next launch, and the graph stays usable") {
    Stream& s = lgtest::stream();
    DeviceBuffer<float> b = from_host(lgtest::random_floats(1000)).sync_on(s);
    std::atomic<int> calls{0};
    std::atomic<bool> fail{true};
    auto op = allow_in_graph(host_call("flaky logger",
                                       [&] {
                                         calls.fetch_add(1);
                                         if (fail.load()) throw std::runtime_error("disk full");
                                       })) >>
              fill(b.view(), 2.0F);
    for (const bool built : {true, false}) {
      CAPTURE(built);
      calls = 0;
      fail = true;
      auto graph = built ? CudaGraph<>::build(s.device(), op) : CudaGraph<>::capture(s, op);
      try {
        graph.launch();
        FAIL("launch did not throw");
      } catch (const HostCallError& e) {
        const std::string what = e.what();
        CHECK(what.find("flaky logger") != std::string::npos);
        CHECK(what.find("disk full") != std::string::npos);
      }
      // The replay itself completed: the fill after the host node ran.
      const auto filled = lgtest::to_host(s, b.cview());
      CHECK(std::all_of(filled.begin(), filled.end(), [](float v) { return v == 2.0F; }));
      fail = false;
      graph.launch();  // the error was reported once; this replay is fine
      CHECK(calls.load() == 2);
      // An error from a replay on another stream surfaces at synchronize.
      fail = true;
      Stream other = s.device().create_stream();
      graph.launch_on(other);
      CHECK_THROWS_AS(graph.synchronize(), HostCallError);
      fail = false;
      graph.launch();
      CHECK(calls.load() == 4);
    }
  }

  TEST_CASE("a host_call that throws when run eagerly makes sync_on throw HostCallError") {
    Stream& s = lgtest::stream();
    CHECK_THROWS_AS(host_call("eager", [] { throw std::logic_error("nope"); }).sync_on(s), HostCallError);
    // The stream is still usable.
    DeviceBuffer<float> b = from_host(lgtest::random_floats(16)).sync_on(s);
    fill(b.view(), 1.0F).sync_on(s);
    CHECK(lgtest::to_host(s, b.cview())[0] == 1.0F);
  }
}
