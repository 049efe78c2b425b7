// host_call: host functions on the stream, in graphs only through allow_in_graph, exceptions as HostCallError.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/gpu.hpp"
#include "common/host_call_error.hpp"

using namespace lazygraph;

static_assert(DeviceOp<HostCallOp> && !GraphNode<HostCallOp> && runs_host_code_v<HostCallOp>);
static_assert(GraphNode<HostCallInGraphOp> && BuildableNode<HostCallInGraphOp>);
static_assert(!runs_host_code_v<HostCallInGraphOp>);
static_assert(!GraphNode<SequenceOp<FillOp<float>, HostCallOp>>);
static_assert(runs_host_code_v<SequenceOp<FillOp<float>, HostCallOp>>);
static_assert(runs_host_code_v<AllOp<FillOp<float>, HostCallOp>>);
static_assert(GraphNode<SequenceOp<FillOp<float>, HostCallInGraphOp>>);
static_assert(std::is_same_v<decltype(host_call("x", [] {})), HostCallOp>);
static_assert(std::is_same_v<decltype(allow_in_graph(host_call("x", [] {}))), HostCallInGraphOp>);

using lgtest::contains;
using lgtest::host_call_error_of;

TEST_CASE("building a host_call runs nothing; its name labels it") {
  int calls = 0;
  const HostCallOp op = host_call("labelled", [&] { ++calls; });
  const HostCallInGraphOp in_graph = allow_in_graph(op);
  (void)in_graph;
  CHECK(op.name() == "labelled");
  CHECK(calls == 0);
}

TEST_CASE("a host node's callback runs the function and reports what it throws instead of letting it escape") {
  int calls = 0;
  bool fail = false;
  auto errors = std::make_shared<HostCallErrors>();
  detail::HostCallNode node{std::make_shared<const std::function<void()>>([&] {
                              ++calls;
                              if (fail) throw std::out_of_range("index 7");
                            }),
                            errors, "lookup"};
  detail::HostCallNode::run(&node);
  CHECK(calls == 1);
  CHECK_NOTHROW(errors->rethrow_pending());
  fail = true;
  detail::HostCallNode::run(&node);  // noexcept: the exception is kept, not thrown
  CHECK(calls == 2);
  const std::string what = host_call_error_of([&] { errors->rethrow_pending(); });
  CHECK(contains(what, "lookup"));
  CHECK(contains(what, "index 7"));
}

TEST_SUITE("gpu") {
  TEST_CASE("host_call runs its function once when executed eagerly, after the work before it") {
    Stream& s = lgtest::stream();
    const int n = 100'000;
    DeviceBuffer<float> b = from_host(lgtest::random_floats(n)).sync_on(s);
    std::vector<float> host(n, -1.0F);
    std::atomic<int> calls{0};
    std::atomic<bool> saw_fill{false};
    (fill(b.view(), 3.0F) >> copy(std::span<float>(host), b.cview()) >> host_call("count", [&] {
       calls.fetch_add(1);
       saw_fill = std::all_of(host.begin(), host.end(), [](float v) { return v == 3.0F; });
     })).sync_on(s);
    CHECK(calls.load() == 1);
    CHECK(saw_fill.load());
  }

  TEST_CASE("an eager context that submitted a host call waits for it when destroyed: the driver reads its record") {
    Stream& s = lgtest::stream();
    std::atomic<bool> ran{false};
    {
      ExecContext eager(s, false);
      // The op is a temporary: after this line only the context keeps the call's record alive.
      host_call("slow", [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        ran = true;
      }).execute(eager);
      CHECK_FALSE(ran.load());  // queued, not run: the stream needs 100 ms for it
    }
    CHECK(ran.load());
    // A context through which only device work went does not wait (the buffer is made first: freeing memory
    // waits for the device).
    DeviceBuffer<float> b(s.device(), 1024);
    std::atomic<bool> late{false};
    ExecContext keeps(s, false);
    host_call("later", [&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      late = true;
    }).execute(keeps);
    {
      ExecContext plain(s, false);
      fill(b.view(), 2.0F).execute(plain);
    }
    CHECK_FALSE(late.load());
    s.synchronize();
    CHECK(late.load());
  }

  TEST_CASE("host calls run in the order they were sequenced, eagerly and on every replay") {
    Stream& s = lgtest::stream();
    std::mutex mutex;
    std::vector<int> order;
    const auto log = [&](int i) {
      return host_call("log " + std::to_string(i), [&, i] {
        const std::lock_guard<std::mutex> lock(mutex);
        order.push_back(i);
      });
    };
    (log(1) >> log(2) >> log(3)).sync_on(s);
    CHECK(order == std::vector<int>{1, 2, 3});
    order.clear();
    for (const bool built : {true, false}) {
      CAPTURE(built);
      auto op = allow_in_graph(log(1)) >> allow_in_graph(log(2)) >> allow_in_graph(log(3));
      auto graph = built ? CudaGraph<>::build(s.device(), op) : CudaGraph<>::capture(s, op);
      graph.launch();
      graph.launch();
      CHECK(order == std::vector<int>{1, 2, 3, 1, 2, 3});
      order.clear();
    }
  }

  TEST_CASE("allow_in_graph(host_call) runs on every replay of a captured or built graph") {
    Stream& s = lgtest::stream();
    DeviceBuffer<float> b = from_host(lgtest::random_floats(1000)).sync_on(s);
    Stream other = s.device().create_stream();
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
      for (int i = 0; i < 5; ++i) graph.launch_on(other);
      graph.synchronize();
      CHECK(calls.load() == 10);
    }
  }

  TEST_CASE("a graph keeps its host function alive after the op is gone, and lets it go with the graph") {
    Stream& s = lgtest::stream();
    for (const bool built : {true, false}) {
      CAPTURE(built);
      auto counter = std::make_shared<std::atomic<int>>(0);
      const std::weak_ptr<std::atomic<int>> watch = counter;
      std::optional<CudaGraph<>> graph;
      {
        auto op = allow_in_graph(host_call("owned", [counter] { counter->fetch_add(1); }));
        graph.emplace(built ? CudaGraph<>::build(s.device(), op) : CudaGraph<>::capture(s, op));
      }
      std::atomic<int>* count = counter.get();
      counter.reset();  // only the function (held by the graph) holds the counter now
      REQUIRE_FALSE(watch.expired());
      graph->launch();
      graph->launch();
      CHECK(count->load() == 2);
      graph.reset();
      CHECK(watch.expired());
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
      fill(b.view(), -1.0F).sync_on(s);
      auto graph = built ? CudaGraph<>::build(s.device(), op) : CudaGraph<>::capture(s, op);
      const std::string what = host_call_error_of([&] { graph.launch(); });
      CHECK(contains(what, "flaky logger"));
      CHECK(contains(what, "disk full"));
      CHECK(calls.load() == 1);
      CHECK(graph.replay_count() == 1);
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
      CHECK_NOTHROW(graph.synchronize());
      fail = false;
      graph.launch();
      CHECK(calls.load() == 4);
      CHECK(graph.replay_count() == 4);
    }
  }

  TEST_CASE("launch_on after a replay whose host_call threw throws HostCallError and launches nothing") {
    Stream& s = lgtest::stream();
    Stream other = s.device().create_stream();
    for (const bool built : {true, false}) {
      CAPTURE(built);
      std::atomic<int> calls{0};
      std::atomic<bool> fail{true};
      auto op = allow_in_graph(host_call("checker", [&] {
        calls.fetch_add(1);
        if (fail.load()) throw std::invalid_argument("bad checksum");
      }));
      auto graph = built ? CudaGraph<>::build(s.device(), op) : CudaGraph<>::capture(s, op);
      graph.launch_on(other);
      other.synchronize();  // the replay ran and reported; synchronize on the graph was not called
      CHECK(calls.load() == 1);
      fail = false;
      const std::string what = host_call_error_of([&] { graph.launch_on(other); });
      CHECK(contains(what, "checker"));
      CHECK(contains(what, "bad checksum"));
      other.synchronize();
      CHECK(calls.load() == 1);  // that replay was not launched
      CHECK(graph.replay_count() == 1);
      graph.launch_on(other);  // reported once: this one runs
      graph.synchronize();
      CHECK(calls.load() == 2);
      CHECK(graph.replay_count() == 2);
    }
  }

  TEST_CASE("a host_call throwing something that is not a std::exception is reported too") {
    Stream& s = lgtest::stream();
    auto graph = CudaGraph<>::build(s.device(), allow_in_graph(host_call("thrower of ints", [] { throw 7; })));
    const std::string what = host_call_error_of([&] { graph.launch(); });
    CHECK(contains(what, "thrower of ints"));
    CHECK(contains(what, "not a std::exception"));
  }

  TEST_CASE("a host_call that throws when run eagerly makes sync_on throw HostCallError") {
    Stream& s = lgtest::stream();
    std::atomic<int> calls{0};
    const std::string what = host_call_error_of([&] {
      host_call("eager", [&] {
        calls.fetch_add(1);
        throw std::logic_error("nope");
      }).sync_on(s);
    });
    CHECK(contains(what, "eager"));
    CHECK(contains(what, "nope"));
    CHECK(calls.load() == 1);
    // The stream is still usable, and the error does not come back.
    DeviceBuffer<float> b = from_host(lgtest::random_floats(16)).sync_on(s);
    fill(b.view(), 1.0F).sync_on(s);
    CHECK(lgtest::to_host(s, b.cview())[0] == 1.0F);
    CHECK_NOTHROW(host_call("fine", [] {}).sync_on(s));
  }

  TEST_CASE("update_from to another host_call runs the new function from the next replay, built or captured") {
    Stream& s = lgtest::stream();
    std::atomic<int> old_calls{0};
    std::atomic<int> new_calls{0};
    for (const bool built : {true, false}) {
      CAPTURE(built);
      old_calls = 0;
      new_calls = 0;
      auto op = allow_in_graph(host_call("old", [&] { old_calls.fetch_add(1); }));
      auto graph = built ? CudaGraph<>::build(s.device(), op) : CudaGraph<>::capture(s, op);
      graph.launch();
      const UpdateResult r = graph.update_from(allow_in_graph(host_call("new", [&] { new_calls.fetch_add(1); })));
      CHECK_MESSAGE(r.ok(), r.message);
      graph.launch();
      graph.launch();
      CHECK(old_calls.load() == 1);
      CHECK(new_calls.load() == 2);
    }
  }
}
