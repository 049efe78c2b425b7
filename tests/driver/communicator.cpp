// Communicator and CommunicatorId (driver/communicator.hpp): ids as bytes and files, the ranks' comparison
// (Clique), and on the GPU real NCCL communicators: of one rank, and with two GPUs of two ranks made as two
// processes would make them (one rank per thread here, from an id passed through a file).
#include <doctest/doctest.h>

#include <lazygraph/lazygraph.hpp>

#include <chrono>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>
#include <vector>

#include "common/gpu.hpp"
#include "common/nccl.hpp"
#include "common/temp_dir.hpp"

using namespace lazygraph;
using namespace std::chrono_literals;

namespace {

std::vector<std::byte> some_bytes(std::size_t n) {
  std::vector<std::byte> b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>(i * 7 + 3);
  return b;
}

}  // namespace

TEST_CASE("a CommunicatorId round-trips through its bytes and refuses another size") {
  const auto bytes = some_bytes(128);
  const CommunicatorId id = CommunicatorId::from_bytes(bytes);
  CHECK(std::equal(id.bytes().begin(), id.bytes().end(), bytes.begin()));
  CHECK_THROWS_WITH_AS(CommunicatorId::from_bytes(some_bytes(127)), doctest::Contains("128 bytes, got 127"),
                       UsageError);
}

TEST_CASE("a CommunicatorId written to a file is read back whole; a reader waits for the writer") {
  const lgtest::TempDir dir("communicator-id");
  const auto path = dir.path() / "id";
  const CommunicatorId id = CommunicatorId::from_bytes(some_bytes(128));
  std::thread writer([&] {
    std::this_thread::sleep_for(50ms);
    id.write_file(path);
  });
  const CommunicatorId read = CommunicatorId::read_file(path, 10s);
  writer.join();
  CHECK(std::equal(read.bytes().begin(), read.bytes().end(), id.bytes().begin()));
  CHECK_FALSE(std::filesystem::exists(dir.path() / "id.partial"));
}

TEST_CASE("reading a CommunicatorId times out with the path, and refuses a file of another size") {
  const lgtest::TempDir dir("communicator-id-bad");
  CHECK_THROWS_WITH_AS(CommunicatorId::read_file(dir.path() / "missing", 30ms), doctest::Contains("no id appeared at"),
                       TimeoutError);
  std::ofstream(dir.path() / "short") << "not an id";
  CHECK_THROWS_WITH_AS(CommunicatorId::read_file(dir.path() / "short", 1s), doctest::Contains("has 9 bytes"),
                       UsageError);
}

TEST_CASE("ranks that record different collectives are named, with both collectives, before NCCL sees them") {
  detail::Clique clique(2);
  clique.note(0, "ignored: not comparing");
  clique.begin_compare();
  clique.note(0, "all_reduce sum of 1024 float16");
  clique.note(1, "all_reduce sum of 1024 float16");
  clique.note(1, "all_gather of 8 float32");
  CHECK_THROWS_WITH_AS(clique.note(0, "all_gather of 16 float32"),
                       doctest::Contains("collective #1: rank 1 recorded all_gather of 8 float32, rank 0 "
                                         "all_gather of 16 float32"),
                       UsageError);
  clique.note(0, "all_gather of 8 float32");
  clique.note(0, "broadcast of 4 int32 from rank 0");
  CHECK_THROWS_WITH_AS(clique.end_compare(), doctest::Contains("rank 0 recorded 3, rank 1 2"), UsageError);
  clique.begin_compare();  // starts afresh
  clique.note(1, "x");
  clique.note(0, "x");
  CHECK_NOTHROW(clique.end_compare());
}

TEST_SUITE("gpu") {
  TEST_CASE("a communicator of every GPU of this process: ranks in device order, checked, waited for") {
    if (!lgtest::have_nccl()) return;
    const std::vector<Device> devices{lgtest::device()};
    const std::vector<Communicator> comms = Communicator::create_all(devices);
    REQUIRE(comms.size() == 1);
    CHECK(comms[0].rank() == 0);
    CHECK(comms[0].size() == 1);
    CHECK(comms[0].device().ordinal() == lgtest::device().ordinal());
    CHECK(comms[0].describe() == "rank 0 of 1 on device " + std::to_string(lgtest::device().ordinal()));
    CHECK_NOTHROW(comms[0].check());
    CHECK_NOTHROW(comms[0].wait(lgtest::stream(), 1s));
    CHECK_THROWS_WITH_AS(Communicator::create_all(std::vector<Device>{lgtest::device(), lgtest::device()}),
                         doctest::Contains("listed twice"), UsageError);
    CHECK_THROWS_AS(Communicator::create_all(std::vector<Device>{}), UsageError);
  }

  TEST_CASE("a communicator per process from an id; a rank outside the communicator is refused") {
    if (!lgtest::have_nccl()) return;
    const CommunicatorId id = CommunicatorId::create();
    const Communicator comm(lgtest::device(), 0, 1, id);
    CHECK(comm.rank() == 0);
    CHECK(comm.size() == 1);
    CHECK_THROWS_WITH_AS(Communicator(lgtest::device(), 1, 1, id), doctest::Contains("rank 1 of 1"), UsageError);
    const Communicator copy = comm;  // NOLINT(performance-unnecessary-copy-initialization): copies are the point
    CHECK(copy == comm);
    comm.abort();
    CHECK(copy.aborted());
    CHECK_THROWS_WITH_AS((void)copy.get(), doctest::Contains("was aborted"), UsageError);
  }

  TEST_CASE("over two GPUs: one rank per thread from an id in a file, as one process per GPU would") {
    if (!lgtest::have_nccl()) return;
    if (Device::count() < 2) {
      MESSAGE("skipped: two GPUs needed for two ranks; this machine has " << Device::count());
      return;
    }
    const lgtest::TempDir dir("communicator-two-ranks");
    const auto path = dir.path() / "id";
    std::vector<std::optional<Communicator>> comms(2);
    std::vector<std::exception_ptr> errors(2);
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.emplace_back([&, r] {
        try {
          if (r == 0) CommunicatorId::create().write_file(path);  // rank 0 makes the id, the other reads it
          const CommunicatorId id = CommunicatorId::read_file(path, 10s);
          comms[static_cast<std::size_t>(r)].emplace(Device::get(r), r, 2, id);  // returns when both have come
        } catch (...) {
          errors[static_cast<std::size_t>(r)] = std::current_exception();
        }
      });
    }
    for (std::thread& t : ranks) t.join();
    for (const std::exception_ptr& e : errors) {
      if (e) std::rethrow_exception(e);
    }
    for (int r = 0; r < 2; ++r) {
      const Communicator& c = *comms[static_cast<std::size_t>(r)];
      CHECK(c.rank() == r);
      CHECK(c.size() == 2);
      CHECK(c.device().ordinal() == r);
      CHECK(c.describe() == "rank " + std::to_string(r) + " of 2 on device " + std::to_string(r));
      CHECK_NOTHROW(c.check());
    }
    CHECK(*comms[0] != *comms[1]);
  }
}
