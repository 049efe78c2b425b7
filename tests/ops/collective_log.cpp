// Comparing ranks' collectives across processes (ops/collective_log.hpp): the digest (host); on the GPU, a log notes
// what a captured graph's collectives are and ranks that agree pass; on two GPUs, ranks that recorded different
// collectives both throw the same UsageError instead of meeting in NCCL.
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>

#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "common/gpu.hpp"
#include "common/nccl.hpp"

using namespace lazygraph;

TEST_CASE("the collectives' digest depends on every signature, their order and where each ends") {
  const std::vector<std::string> a{"all_reduce sum of 8 float16", "all_gather of 4 float16"};
  const std::vector<std::string> b{"all_gather of 4 float16", "all_reduce sum of 8 float16"};
  const std::vector<std::string> c{"all_reduce sum of 8 float16all_gather of 4 float16"};
  CHECK(collectives_digest(a) == collectives_digest(a));
  CHECK(collectives_digest(a) != collectives_digest(b));
  CHECK(collectives_digest(a) != collectives_digest(c));
  CHECK(collectives_digest({}) != collectives_digest({""}));
}

TEST_SUITE("gpu") {
  TEST_CASE("a collective log notes a captured graph's collectives in order; one rank agrees with itself") {
    if (!lgtest::have_nccl()) return;
    const std::vector<Communicator> comms = Communicator::create_all(std::vector<Device>{lgtest::device()});
    const Stream stream(lgtest::device());
    // Set before the graph reads it: the collectives read x (initcheck reported an uninitialized read without this).
    DeviceBuffer<half> x = lgtest::to_device(stream, std::vector<half>(64, half::from_float(1.0F)));
    DeviceBuffer<half> gathered(lgtest::device(), 64);
    CollectiveLog log(comms[0]);
    CHECK(CollectiveLog::active() == &log);
    CHECK_THROWS_AS((void)CollectiveLog(comms[0]), UsageError);  // one per thread
    CudaGraph<> g = CudaGraph<>::capture(
        stream, all_reduce(comms[0], x.view()) >> all_gather<half>(comms[0], x.cview(), gathered.view()));
    REQUIRE(log.signatures().size() == 2);
    CHECK(log.signatures()[0].find("all_reduce") != std::string::npos);
    CHECK(log.signatures()[1].find("all_gather") != std::string::npos);
    CHECK_NOTHROW(check_same_collectives(comms[0], stream, log, "the test graph"));
    CHECK(CollectiveLog::active() == nullptr);  // the exchange ends the noting
    g.launch();
  }

  TEST_CASE("over two GPUs: ranks that captured different collectives both throw, naming the rank that differs") {
    if (!lgtest::have_two_ranks()) return;
    const std::vector<Communicator> comms =
        Communicator::create_all(std::vector<Device>{Device::get(0), Device::get(1)});
    std::vector<std::string> errors(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        try {
          const Device device = Device::get(r);
          const Stream stream(device);
          DeviceBuffer<float> x(device, 256);
          CollectiveLog log(comms[static_cast<std::size_t>(r)]);
          // Rank 1 sums twice as many elements: NCCL would pair them and hang or mix the data.
          const std::size_t n = r == 0 ? 128 : 256;
          CudaGraph<> g =
              CudaGraph<>::capture(stream, all_reduce(comms[static_cast<std::size_t>(r)], x.view().subspan(0, n)));
          check_same_collectives(comms[static_cast<std::size_t>(r)], stream, log, "the test graph");
        } catch (const UsageError& e) {
          errors[static_cast<std::size_t>(r)] = e.what();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (const std::string& e : errors) {
      CHECK(e.find("the test graph with different collectives") != std::string::npos);
      CHECK(e.find("rank 1 (1 collectives)") != std::string::npos);
    }
  }
}
