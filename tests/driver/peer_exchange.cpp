// PeerExchange (driver/peer_exchange.hpp): ranks it cannot serve refused by name before any GPU memory is touched;
// the verdict create's ranks compute from each other's descriptors (detail/driver/peer_descriptor.hpp), fed
// mismatched ones on the host; with two GPUs, one exchange per rank whose table lists every rank's slots and whose
// counters start at zero; create (ranks in processes) refusing ranks of one process, and a rank of another layout, on
// every rank alike. The kernel that uses it is tested in tests/nn/peer_all_reduce.cpp; create across processes (a
// rank of another layout, a rank that allocates less than it says) by tests/nn/processes (tp-processes).
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>

#include <array>
#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <lazygraph/detail/driver/peer_descriptor.hpp>

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

namespace {

/// The descriptors of `ranks` agreeing ranks of this build, of one machine, each in a process of its own.
std::vector<detail::PeerDescriptor> agreeing(int ranks) {
  const detail::PeerLayout layout;
  std::vector<detail::PeerDescriptor> all;
  for (int r = 0; r < ranks; ++r) {
    all.push_back(detail::describe_peer(layout, r, ranks, layout.slot_bytes(ranks), layout.sum_bytes(ranks),
                                        layout.counter_bytes(), 42, 1000 + r));
  }
  return all;
}

}  // namespace

TEST_CASE("a PeerExchange's layout needs the bytes its kernels write: 2 parities of every sender's slots") {
  const detail::PeerLayout layout;
  CHECK(layout.version == PeerExchange::layout_version);
  CHECK(layout.slot_bytes(2) == 2ULL * 2 * 64 * 512 * 8);  // [2][ranks][max_blocks][words_per_block] of 8 bytes
  CHECK(layout.sum_bytes(4) == 2ULL * 4 * 32768 * 8);      // [2][ranks][sum_capacity] of 8 bytes
  CHECK(layout.counter_bytes() == (64ULL + 3) * 4);
  static_assert(sizeof(detail::PeerDescriptor) == 128);
}

TEST_CASE("ranks whose descriptors agree share an exchange; any difference is refused, naming the rank and the value") {
  CHECK(detail::peer_verdict(agreeing(2)).empty());
  CHECK(detail::peer_verdict(agreeing(8)).empty());
  CHECK(detail::peer_verdict({}) == "no ranks");
  {
    auto all = agreeing(3);
    all[2].magic = 0;
    CHECK(detail::peer_verdict(all) ==
          "rank 2 sent no PeerExchange descriptor (a rank of another program, or of a lazygraph older than layout "
          "version 1)");
  }
  {
    auto all = agreeing(2);
    all[1].version = 2;
    all[1].sum_capacity = 1;  // a layout of another version is not compared field by field
    CHECK(detail::peer_verdict(all) ==
          "rank 1's PeerExchange layout is version 2, rank 0's 1 (every rank must run the same lazygraph)");
  }
  {
    auto all = agreeing(2);
    all[0].rank = 1;
    CHECK(detail::peer_verdict(all) == "rank 0's descriptor says rank 1 of 2, not 0 of 2");
    all = agreeing(2);
    all[1].ranks = 3;
    CHECK(detail::peer_verdict(all) == "rank 1's descriptor says rank 1 of 3, not 1 of 2");
  }
  {
    // A peer with smaller buffers: the kernels of the others would write past their end.
    const detail::PeerLayout small{.sum_capacity = 4096};
    auto all = agreeing(4);
    all[3] =
        detail::describe_peer(small, 3, 4, small.slot_bytes(4), small.sum_bytes(4), small.counter_bytes(), 42, 1003);
    CHECK(detail::peer_verdict(all) ==
          "rank 3's PeerExchange sum_capacity is 4096, rank 0's 32768 (every rank must run the same lazygraph)");
    all = agreeing(2);
    all[1].max_blocks = 128;
    CHECK(detail::peer_verdict(all) ==
          "rank 1's PeerExchange max_blocks is 128, rank 0's 64 (every rank must run the same lazygraph)");
  }
  {
    // The same constants, but allocations the layout does not explain.
    auto all = agreeing(2);
    all[1].sum_bytes -= 8;
    CHECK(detail::peer_verdict(all) == "rank 1's sum slots hold 1048568 bytes, the layout needs 1048576 for 2 ranks");
    all = agreeing(2);
    all[0].slot_bytes *= 2;
    CHECK(detail::peer_verdict(all) ==
          "rank 0's receive slots hold 2097152 bytes, the layout needs 1048576 for 2 ranks");
  }
  {
    auto all = agreeing(3);
    all[2].machine = 7;
    CHECK(detail::peer_verdict(all) == "rank 2 runs on another machine than rank 0");
    all = agreeing(3);
    all[2].process = all[1].process;
    CHECK(detail::peer_verdict(all) == "ranks 1 and 2 are in one process (ranks of one process: create_all)");
  }
}

TEST_CASE("a peer's verdict is read within its buffer, whatever the peer sent") {
  const std::array<char, 8> full{'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'};  // no terminating zero
  CHECK(detail::bounded_text(full) == "abcdefgh");
  const std::array<char, 8> shorter{'o', 'k', '\0', 'x', 'y', 'z', '\0', '\0'};
  CHECK(detail::bounded_text(shorter) == "ok");
  CHECK(detail::bounded_text(std::span<const char>{}).empty());
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
      CHECK(reasons[r] == "ranks 0 and 1 are in one process (ranks of one process: create_all)");
    }
    // The communicators still work: create_all over the same ranks.
    if (PeerExchange::supported(comms)) CHECK(PeerExchange::create_all(comms).size() == 2);
  }

  TEST_CASE("PeerExchange::create refuses a rank of another layout on every rank alike, before any handle goes round") {
    if (!lgtest::have_two_ranks()) return;
    // Rank 1 plays a rank of another build, whose sum slots are an eighth of this build's: the others' kernels would
    // write past their end. The descriptors go round first, so both ranks refuse with the layout's reason, not with
    // the reason their process gives (ranks of one process), which comes later in the verdict and at the mapping.
    const std::vector<Communicator> comms =
        Communicator::create_all(std::vector<Device>{Device::get(0), Device::get(1)});
    std::vector<std::optional<PeerExchange>> got(2);
    std::vector<std::string> reasons(2);
    lgtest::on_rank_threads(2, [&](std::size_t r) {
      detail::PeerLayout layout;
      if (r == 1) layout.sum_capacity /= 8;
      got[r] = detail::PeerExchangeMaker::create(comms[r], layout, layout, &reasons[r], std::chrono::seconds(60));
    });
    for (std::size_t r = 0; r < 2; ++r) {
      INFO("rank " << r);
      CHECK_FALSE(got[r].has_value());
      CHECK(reasons[r] ==
            "rank 1's PeerExchange sum_capacity is 4096, rank 0's 32768 (every rank must run the same lazygraph)");
    }
    // Another layout version alike; then the communicators still work.
    lgtest::on_rank_threads(2, [&](std::size_t r) {
      detail::PeerLayout layout;
      if (r == 0) layout.version += 1;
      got[r] = detail::PeerExchangeMaker::create(comms[r], layout, layout, &reasons[r], std::chrono::seconds(60));
    });
    for (std::size_t r = 0; r < 2; ++r) {
      INFO("rank " << r);
      CHECK_FALSE(got[r].has_value());
      CHECK(reasons[r] ==
            "rank 1's PeerExchange layout is version 1, rank 0's 2 (every rank must run the same "
            "lazygraph)");
    }
    if (PeerExchange::supported(comms)) CHECK(PeerExchange::create_all(comms).size() == 2);
  }
}
