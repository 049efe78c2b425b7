// PeerExchange (driver/peer_exchange.hpp): ranks it cannot serve refused by name before any GPU memory is touched;
// with two GPUs, one exchange per rank whose table lists every rank's slots and whose counters start at zero; create
// (ranks in processes) refusing ranks of one process on every rank alike. The kernel that uses it is tested in
// tests/nn/peer_all_reduce.cpp; create across processes by tests/nn/processes (tp-processes).
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>

#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/gpu.hpp"
#include "common/nccl.hpp"

using namespace lazygraph;

TEST_CASE("a PeerExchange of no ranks is refused before anything is touched, saying how many it serves") {
  std::string why;
  CHECK_FALSE(PeerExchange::supported(std::span<const Communicator>{}, &why));
  CHECK(why == "0 ranks (an exchange serves 2 to 8)");
  CHECK_THROWS_WITH_AS(PeerExchange::create_all(std::span<const Communicator>{}),
                       "PeerExchange::create_all: 0 ranks (an exchange serves 2 to 8)", UsageError);
  static_assert(PeerExchange::capacity_bytes == 128U * 1024U);
}

TEST_SUITE("gpu") {
  TEST_CASE("a PeerExchange refuses one rank, and ranks given out of order") {
    if (!lgtest::have_nccl()) return;
    const std::vector<Communicator> one = Communicator::create_all(std::vector<Device>{lgtest::device()});
    std::string why;
    CHECK_FALSE(PeerExchange::supported(one, &why));
    CHECK(why == "1 ranks (an exchange serves 2 to 8)");
    if (!lgtest::have_two_ranks()) return;
    const std::vector<Communicator> comms =
        Communicator::create_all(std::vector<Device>{Device::get(0), Device::get(1)});
    const std::vector<Communicator> swapped{comms[1], comms[0]};
    CHECK_THROWS_WITH_AS(PeerExchange::create_all(swapped),
                         doctest::Contains("communicator rank 1 of 2 on device 1 given as rank 0 of 2"), UsageError);
  }

  TEST_CASE("over two GPUs: one PeerExchange per rank, each table listing every rank's slots, counters at zero") {
    if (!lgtest::have_two_ranks()) return;
    const std::vector<Communicator> comms =
        Communicator::create_all(std::vector<Device>{Device::get(0), Device::get(1)});
    std::string why;
    if (!PeerExchange::supported(comms, &why)) {
      MESSAGE("skipped: " << why);
      return;
    }
    const std::vector<PeerExchange> ex = PeerExchange::create_all(comms);
    REQUIRE(ex.size() == 2);
    std::vector<std::vector<unsigned long long>> tables;
    std::vector<std::vector<unsigned long long>> sum_tables;
    for (std::size_t r = 0; r < 2; ++r) {
      CHECK(ex[r].ranks() == 2);
      CHECK(ex[r].communicator() == comms[r]);
      const Stream s(comms[r].device());
      tables.push_back(lgtest::to_host(s, ex[r].slot_table()));
      sum_tables.push_back(lgtest::to_host(s, ex[r].sum_table()));
      CHECK(lgtest::to_host(s, ex[r].counters()) == std::vector<unsigned>(PeerExchange::counter_words, 0U));
    }
    CHECK(tables[0] == tables[1]);  // every rank sees the same addresses
    CHECK(sum_tables[0] == sum_tables[1]);
    REQUIRE(sum_tables[0].size() == 2);
    CHECK(sum_tables[0][0] != sum_tables[0][1]);
    REQUIRE(tables[0].size() == 2);
    CHECK(tables[0][0] != tables[0][1]);
    CHECK(tables[0][0] != 0);
  }

  TEST_CASE("PeerExchange::create refuses one rank, and ranks of one process on every rank alike, with the reason") {
    if (!lgtest::have_nccl()) return;
    const std::vector<Communicator> one = Communicator::create_all(std::vector<Device>{lgtest::device()});
    std::string why;
    CHECK_FALSE(PeerExchange::create(one[0], &why).has_value());
    CHECK(why == "1 ranks (an exchange serves 2 to 8)");
    if (!lgtest::have_two_ranks()) return;
    // Two threads of this process, as if they were processes: the handles go round, and no rank can open a handle
    // of its own process, so both refuse with rank 0's reason (its first peer, rank 1, is in its process).
    const std::vector<Communicator> comms =
        Communicator::create_all(std::vector<Device>{Device::get(0), Device::get(1)});
    std::vector<std::optional<PeerExchange>> got(2);
    std::vector<std::string> reasons(2);
    std::vector<std::string> errors(2);
    std::vector<std::thread> threads;
    for (std::size_t r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        try {
          got[r] = PeerExchange::create(comms[r], &reasons[r]);
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (std::size_t r = 0; r < 2; ++r) {
      INFO("rank " << r);
      CHECK(errors[r].empty());
      CHECK_FALSE(got[r].has_value());
      CHECK(reasons[r] == "rank 0: rank 1 is in this rank's process (ranks of one process: create_all)");
    }
    // The communicators still work: create_all over the same ranks.
    if (PeerExchange::supported(comms)) CHECK(PeerExchange::create_all(comms).size() == 2);
  }
}
