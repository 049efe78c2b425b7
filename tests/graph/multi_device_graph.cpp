// MultiDeviceGraph (detail/graph/multi_device_graph.hpp): one graph per rank, recorded on a thread per rank,
// launched together, waited for with a bound. On a one-GPU machine with one rank; the two-rank comparison of what
// the ranks record is tested on the host (tests/driver/communicator.cpp) and on the two-GPU machine.
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>

#include <chrono>
#include <vector>

#include "common/gpu.hpp"
#include "common/nccl.hpp"

using namespace lazygraph;
using namespace std::chrono_literals;

TEST_SUITE("gpu") {
  TEST_CASE("a MultiDeviceGraph of every GPU's rank records, launches and waits with a bound") {
    if (!lgtest::have_nccl()) return;
    const std::vector<Communicator> comms = Communicator::create_all(std::vector<Device>{lgtest::device()});
    const Stream& s = lgtest::stream();
    const std::size_t n = 777;
    const std::vector<float> x0 = lgtest::random_floats(n);
    DeviceBuffer<float> x = lgtest::to_device(s, x0);
    DeviceBuffer<float> y(s.device(), n);
    MultiDeviceGraph graph = MultiDeviceGraph::capture(comms, [&](int rank, Scope& sc) {
      sc.record(fill(y.view(), 0.0F) >> all_gather<float>(comms[static_cast<std::size_t>(rank)], x.view(), y.view()));
    });
    CHECK(graph.size() == 1);
    graph.launch();
    CHECK(lgtest::to_host(s, y.view()) == x0);
    fill(y.view(), 0.0F).sync_on(s);
    graph.launch_async();
    graph.synchronize_for(10s);
    CHECK(lgtest::to_host(s, y.view()) == x0);
    CHECK_THROWS_WITH_AS(MultiDeviceGraph::capture(std::span<const Communicator>{}, [](int, Scope&) {}),
                         doctest::Contains("no communicators"), UsageError);
  }

  TEST_CASE("a rank whose recording throws fails the whole capture with its error") {
    if (!lgtest::have_nccl()) return;
    const std::vector<Communicator> comms = Communicator::create_all(std::vector<Device>{lgtest::device()});
    CHECK_THROWS_WITH_AS(MultiDeviceGraph::capture(comms, [](int, Scope&) { throw UsageError("rank's own error"); }),
                         doctest::Contains("rank's own error"), UsageError);
    CHECK_FALSE(comms[0].aborted());  // it failed alone: nobody waited for it
  }
}
