// Communicator and CommunicatorId (driver/communicator.hpp): ids as bytes and files, the ranks' comparison
// (Clique), and on the GPU real NCCL communicators: of one rank, and with two GPUs of two ranks made as two
// processes would make them (one rank per thread here, from an id passed through a file).
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <lazygraph/detail/driver/communicator_id_file.hpp>
#include <lazygraph/detail/driver/nccl_api.hpp>
#include <lazygraph/lazygraph.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <span>
#include <string>
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
  // Only its owner may read or write it, and the temporary file is gone (renamed into place).
  CHECK(std::filesystem::status(path).permissions() ==
        (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write));
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()) == 1);
  // A second write replaces the first whole.
  const std::vector<std::byte> shifted = some_bytes(129);
  const CommunicatorId other = CommunicatorId::from_bytes(std::span(shifted).subspan(1));
  other.write_file(path);
  const CommunicatorId again = CommunicatorId::read_file(path, 1s);
  CHECK(std::equal(again.bytes().begin(), again.bytes().end(), other.bytes().begin()));
}

TEST_CASE("writing a CommunicatorId replaces a symbolic link at the path, never the file it points to") {
  const lgtest::TempDir dir("communicator-id-link");
  const auto target = dir.path() / "someone-elses-file";
  std::ofstream(target) << "keep me";
  std::filesystem::create_symlink(target, dir.path() / "id");
  const CommunicatorId id = CommunicatorId::from_bytes(some_bytes(128));
  id.write_file(dir.path() / "id");
  CHECK(std::filesystem::is_regular_file(std::filesystem::symlink_status(dir.path() / "id")));
  CHECK(std::filesystem::file_size(target) == 7);  // untouched
  const CommunicatorId read = CommunicatorId::read_file(dir.path() / "id", 1s);
  CHECK(std::equal(read.bytes().begin(), read.bytes().end(), id.bytes().begin()));
  CHECK_THROWS_WITH_AS(id.write_file(dir.path() / "no-such-folder" / "id"),
                       doctest::Contains("CommunicatorId::write_file: cannot create"), Error);
}

TEST_CASE("reading a CommunicatorId times out with the path, and refuses a file of another size") {
  const lgtest::TempDir dir("communicator-id-bad");
  CHECK_THROWS_WITH_AS(CommunicatorId::read_file(dir.path() / "missing", 30ms), doctest::Contains("no id appeared at"),
                       TimeoutError);
  std::ofstream(dir.path() / "short") << "not an id";
  std::filesystem::permissions(dir.path() / "short", std::filesystem::perms::owner_read);
  CHECK_THROWS_WITH_AS(CommunicatorId::read_file(dir.path() / "short", 1s), doctest::Contains("has 9 bytes"),
                       UsageError);
}

TEST_CASE("reading a CommunicatorId refuses what write_file never makes: a link, a folder, a FIFO, a shared file") {
  const lgtest::TempDir dir("communicator-id-untrusted");
  const CommunicatorId id = CommunicatorId::from_bytes(some_bytes(128));
  id.write_file(dir.path() / "id");
  std::filesystem::create_symlink(dir.path() / "id", dir.path() / "link");
  CHECK_THROWS_WITH_AS(CommunicatorId::read_file(dir.path() / "link", 1s),
                       doctest::Contains("link is a symbolic link; an id is read from a regular file only"),
                       UsageError);
  std::filesystem::create_directory(dir.path() / "folder");
  CHECK_THROWS_WITH_AS(CommunicatorId::read_file(dir.path() / "folder", 1s),
                       doctest::Contains("folder is not a regular file"), UsageError);
  REQUIRE(::mkfifo((dir.path() / "fifo").c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS(CommunicatorId::read_file(dir.path() / "fifo", 1s),
                       doctest::Contains("fifo is not a regular file"), UsageError);  // and the open did not block
  std::filesystem::permissions(dir.path() / "id", std::filesystem::perms::group_write,
                               std::filesystem::perm_options::add);
  CHECK_THROWS_WITH_AS(CommunicatorId::read_file(dir.path() / "id", 1s),
                       doctest::Contains("id has mode 0620: others than its owner may write it"), UsageError);
}

TEST_CASE("the rule for an id file: regular, of this user or root, written by its owner alone, of 128 bytes") {
  const detail::IdFileFacts good{.regular = true, .mode = 0600, .owner = 1000, .bytes = 128};
  CHECK(detail::id_file_refusal(good, 1000, 128).empty());
  auto f = good;
  f.mode = 0644;  // others may read it: the writer's choice, not a reason to distrust it
  CHECK(detail::id_file_refusal(f, 1000, 128).empty());
  f.owner = 0;  // root's: root could have written anything anyway
  CHECK(detail::id_file_refusal(f, 1000, 128).empty());
  f = good;
  f.owner = 1001;
  CHECK(detail::id_file_refusal(f, 1000, 128) ==
        "belongs to user 1001, not to this process's user 1000 (or root): an id of another user would join this rank "
        "to their communicator");
  CHECK(detail::id_file_refusal(good, 0, 128).find("belongs to user 1000") == 0);  // root reads root's files only
  f = good;
  f.mode = 0602;
  CHECK(detail::id_file_refusal(f, 1000, 128) ==
        "has mode 0602: others than its owner may write it, so the id may not be rank 0's (write_file makes it 0600)");
  f.mode = 04620;
  CHECK(detail::id_file_refusal(f, 1000, 128).find("has mode 4620") == 0);
  f = good;
  f.regular = false;
  CHECK(detail::id_file_refusal(f, 1000, 128) == "is not a regular file (a directory, FIFO, socket or device)");
  f = good;
  f.bytes = 0;
  CHECK(detail::id_file_refusal(f, 1000, 128) == "has 0 bytes, not the 128 of an id");
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

TEST_CASE("a Communicator's rank and join timeout are checked before NCCL is touched") {
  CHECK_NOTHROW(detail::check_join(0, 1, 1ms));
  CHECK_NOTHROW(detail::check_join(1, 2, 60s));
  CHECK_THROWS_WITH_AS(detail::check_join(1, 1, 1s), doctest::Contains("rank 1 of 1 (a rank is in [0, ranks))"),
                       UsageError);
  CHECK_THROWS_AS(detail::check_join(-1, 2, 1s), UsageError);
  CHECK_THROWS_AS(detail::check_join(0, 0, 1s), UsageError);
  CHECK_THROWS_WITH_AS(detail::check_join(0, 2, 0ms),
                       doctest::Contains("rank 0 of 2: the join timeout must be positive, got 0 ms"), UsageError);
  CHECK_THROWS_WITH_AS(detail::check_join(1, 2, -5ms), doctest::Contains("must be positive, got -5 ms"), UsageError);
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
    CAPTURE(nccl_bounded_join());
    const CommunicatorId id = CommunicatorId::create();
    const Communicator comm(lgtest::device(), 0, 1, id);
    CHECK(comm.rank() == 0);
    CHECK(comm.size() == 1);
    CHECK(detail::nccl::comm_count(comm.get()) == 1);
    CHECK(detail::nccl::comm_rank(comm.get()) == 0);
    CHECK_THROWS_WITH_AS(Communicator(lgtest::device(), 1, 1, id), doctest::Contains("rank 1 of 1"), UsageError);
    CHECK_THROWS_WITH_AS(Communicator(lgtest::device(), 0, 1, id, 0ms), doctest::Contains("must be positive"),
                         UsageError);
    const Communicator copy = comm;  // NOLINT(performance-unnecessary-copy-initialization): copies are the point
    CHECK(copy == comm);
    comm.abort();
    CHECK(copy.aborted());
    CHECK_THROWS_WITH_AS((void)copy.get(), doctest::Contains("was aborted"), UsageError);
  }

  TEST_CASE("a rank whose peer never comes gets a TimeoutError within its join timeout; the GPU stays usable") {
    if (!lgtest::have_nccl()) return;
    if (!nccl_bounded_join()) {
      MESSAGE("skipped: NCCL " << nccl_version() << " cannot bound a join (2.18 or newer)");
      return;
    }
    const auto timeout = 500ms;
    std::string message;
    const auto start = std::chrono::steady_clock::now();
    try {
      const Communicator alone(lgtest::device(), 0, 2, CommunicatorId::create(), timeout);  // rank 1 never comes
      FAIL("rank 0 of 2 joined without rank 1");
    } catch (const TimeoutError& e) {
      message = e.what();
    }
    const auto elapsed = std::chrono::steady_clock::now() - start;
    CHECK(elapsed >= timeout);
    CHECK(elapsed < timeout + 5s);
    const std::string device = std::to_string(lgtest::device().ordinal());
    CHECK_MESSAGE(message.find("rank 0 of 2 on device " + device + " did not join within 500 ms") != std::string::npos,
                  message);
    CHECK_MESSAGE(message.find("a peer never came") != std::string::npos, message);
    CHECK_MESSAGE(message.find("aborted") != std::string::npos, message);

    // The GPU still works: memory, a kernel, and new communicators (of create_all, and from an id) with a
    // collective each.
    const Stream& s = lgtest::stream();
    const std::size_t n = 1024 + 3;
    const std::vector<float> x = lgtest::random_floats(n);
    const std::vector<float> y = lgtest::random_floats(n);
    DeviceBuffer<float> xd = lgtest::to_device(s, x);
    DeviceBuffer<float> data = lgtest::to_device(s, y);
    lgtest::axpy()(grid_for(n, 256), 2.0F, xd.cview(), data.view(), static_cast<int>(n)).sync_on(s);
    const std::vector<double> expect = lgtest::axpy_reference(2.0F, x, y, 1);
    const Communicator one = Communicator::create_all(std::vector<Device>{lgtest::device()}).at(0);
    all_reduce(one, data.view()).sync_on(s);
    const Communicator again(lgtest::device(), 0, 1, CommunicatorId::create(), 30s);
    all_reduce(again, data.view()).sync_on(s);
    const std::vector<float> got = lgtest::to_host(s, data.cview());
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += got[i] != static_cast<float>(expect[i]) ? 1 : 0;
    CHECK(wrong == 0);
  }

  TEST_CASE("over two GPUs: one rank per thread from an id in a file, as one process per GPU would") {
    if (!lgtest::have_two_ranks()) return;
    const lgtest::TempDir dir("communicator-two-ranks");
    const auto path = dir.path() / "id";
    std::vector<std::optional<Communicator>> comms(2);
    lgtest::on_rank_threads(2, [&](std::size_t r) {
      if (r == 0) CommunicatorId::create().write_file(path);  // rank 0 makes the id, the other reads it
      const CommunicatorId id = CommunicatorId::read_file(path, 10s);
      const int rank = static_cast<int>(r);
      comms[r].emplace(Device::get(rank), rank, 2, id, 30s);  // returns when both have come
    });
    for (int r = 0; r < 2; ++r) {
      const Communicator& c = *comms[static_cast<std::size_t>(r)];
      CHECK(c.rank() == r);
      CHECK(c.size() == 2);
      CHECK(c.device().ordinal() == r);
      CHECK(c.describe() == "rank " + std::to_string(r) + " of 2 on device " + std::to_string(r));
      CHECK_NOTHROW(c.check());
      CHECK(detail::nccl::comm_count(c.get()) == 2);  // NCCL's own count: not a one-rank communicator
      CHECK(detail::nccl::comm_rank(c.get()) == r);
    }
    CHECK(*comms[0] != *comms[1]);
  }

  TEST_CASE(
      "over two GPUs: ranks that joined with a timeout run collectives eagerly and captured in a graph, replayed with "
      "new data each time: exact sums") {
    // A communicator made from an id must be a blocking one: a collective captured through a non-blocking
    // communicator replayed wrong data (NCCL 2.28 launches its kernels from its own thread, after the capture).
    if (!lgtest::have_two_ranks()) return;
    CAPTURE(nccl_bounded_join());
    const CommunicatorId id = CommunicatorId::create();
    const std::size_t n = 5000 + 11;
    constexpr std::size_t replays = 3;
    // inputs[k][r]: rank r's data for step k (0 eager, 1.. the replays).
    std::vector<std::vector<std::vector<float>>> inputs;
    for (std::size_t k = 0; k <= replays; ++k) inputs.push_back({lgtest::random_floats(n), lgtest::random_floats(n)});
    // reduced[r][k]: rank r's all_reduce after step k; gathered[r][k - 1]: its all_gather of that (2 n) after replay k.
    std::vector<std::vector<std::vector<float>>> reduced(2);
    std::vector<std::vector<std::vector<float>>> gathered(2);
    lgtest::on_rank_threads(2, [&](std::size_t i) {
      const int r = static_cast<int>(i);
      const Communicator comm(Device::get(r), r, 2, id, 30s);
      const Stream stream(comm.device());
      DeviceBuffer<float> data = lgtest::to_device(stream, inputs[0][i]);
      DeviceBuffer<float> all(comm.device(), 2 * n);
      all_reduce(comm, data.view()).sync_on(stream);
      reduced[i].push_back(lgtest::to_host(stream, data.cview()));
      auto graph = CudaGraph<>::capture(
          stream, all_reduce(comm, data.view()) >> all_gather<float>(comm, data.view(), all.view()));
      for (std::size_t k = 1; k <= replays; ++k) {
        copy(data.view(), std::span<const float>(inputs[k][i])).sync_on(stream);
        graph.launch();
        comm.wait(stream, 30s);
        reduced[i].push_back(lgtest::to_host(stream, data.cview()));
        gathered[i].push_back(lgtest::to_host(stream, all.cview()));
      }
    });
    for (std::size_t r = 0; r < 2; ++r) {
      CAPTURE(r);
      REQUIRE(reduced[r].size() == replays + 1);
      REQUIRE(gathered[r].size() == replays);
      for (std::size_t k = 0; k <= replays; ++k) {
        CAPTURE(k);
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < n; ++i) {
          const float sum = inputs[k][0][i] + inputs[k][1][i];
          wrong += reduced[r][k][i] != sum ? 1 : 0;
          if (k > 0) {
            wrong += gathered[r][k - 1][i] != sum ? 1 : 0;
            wrong += gathered[r][k - 1][n + i] != sum ? 1 : 0;
          }
        }
        CHECK(wrong == 0);
      }
    }
  }
}
