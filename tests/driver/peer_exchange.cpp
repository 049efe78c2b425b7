// PeerExchange (driver/peer_exchange.hpp): ranks it cannot serve refused by name before any GPU memory is touched;
// with two GPUs, one exchange per rank whose table lists every rank's slots and whose counters start at zero. The
// kernel that uses it is tested in tests/nn/peer_all_reduce.cpp.
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>

#include <string>
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
}
