// The lowering of a persistent program (detail/kernels/persistent_schedule.hpp), on the host: which calls wait for
// which, every tile in exactly one block's queue in program order, and the co-residency refusal.
#include <doctest/doctest.h>

#include <lazygraph/detail/kernels/persistent_schedule.hpp>
#include <lazygraph/driver/error.hpp>
#include <lazygraph/kernels/persistent_program.hpp>

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

using namespace lazygraph;
using detail::persistent_blocks;
using detail::schedule_persistent;

namespace {

AccessSet reads_writes(std::vector<CUdeviceptr> reads, std::vector<CUdeviceptr> writes) {
  AccessSet s;
  for (const CUdeviceptr r : reads) s.read(r, 256, "r");
  for (const CUdeviceptr w : writes) s.write(w, 256, "w");
  return s;
}

}  // namespace

TEST_CASE(
    "a call waits for the calls it conflicts with, not for those its waits imply or those it shares nothing with") {
  constexpr CUdeviceptr a = 0x1000;
  constexpr CUdeviceptr b = 0x2000;
  constexpr CUdeviceptr c = 0x3000;
  constexpr CUdeviceptr d = 0x4000;
  const std::vector<AccessSet> sets{
      reads_writes({a}, {b}),     // 0: b = f(a)
      reads_writes({a}, {c}),     // 1: c = f(a)       independent of 0
      reads_writes({b, c}, {d}),  // 2: d = f(b, c)    after 0 and 1
      reads_writes({d}, {a}),     // 3: a = f(d)       after 2; its write after 0's and 1's reads is implied through 2
      reads_writes({b}, {}),      // 4: reads b         after 0 alone (no other call writes b)
  };
  const std::vector<unsigned> tiles{3, 2, 1, 4, 1};
  const auto s = schedule_persistent(sets, tiles, 4);
  CHECK(s.after[0].empty());
  CHECK(s.after[1].empty());
  CHECK(s.after[2] == std::vector<std::uint32_t>{0, 1});
  CHECK(s.after[3] == std::vector<std::uint32_t>{2});
  CHECK(s.after[4] == std::vector<std::uint32_t>{0});

  AccessSet opaque;
  opaque.opaque("mine");
  const std::vector<AccessSet> with_opaque{reads_writes({a}, {b}), opaque, reads_writes({c}, {d})};
  const auto o = schedule_persistent(with_opaque, std::vector<unsigned>{1, 1, 1}, 2);
  CHECK(o.after[1] == std::vector<std::uint32_t>{0});
  CHECK(o.after[2] == std::vector<std::uint32_t>{1});
}

TEST_CASE("every tile is in exactly one block's queue, dealt round-robin in program order") {
  const std::vector<AccessSet> sets(3);
  const std::vector<unsigned> tiles{5, 1, 3};
  const auto s = schedule_persistent(sets, tiles, 4);
  REQUIRE(s.blocks == 4);
  REQUIRE(s.queue_begin.size() == 5);
  CHECK(s.queue_begin.front() == 0);
  CHECK(s.queue_begin.back() == 9);
  std::set<std::pair<std::uint32_t, std::uint32_t>> seen;
  std::size_t k = 0;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> program_order;
  for (std::uint32_t call = 0; call < 3; ++call) {
    for (std::uint32_t t = 0; t < tiles[call]; ++t) program_order.emplace_back(call, t);
  }
  for (unsigned block = 0; block < 4; ++block) {
    std::pair<std::uint32_t, std::uint32_t> last{0, 0};
    bool first = true;
    for (std::uint32_t q = s.queue_begin[block]; q < s.queue_begin[block + 1]; ++q, ++k) {
      const std::pair<std::uint32_t, std::uint32_t> item{s.queue[2 * q], s.queue[2 * q + 1]};
      CHECK(seen.insert(item).second);
      if (!first) CHECK(last < item);  // program order within a block: what rules out a deadlock
      first = false;
      last = item;
      // Tile k of the program (in program order) went to block k % blocks.
      const auto at =
          static_cast<std::size_t>(std::find(program_order.begin(), program_order.end(), item) - program_order.begin());
      CHECK(at % 4 == block);
    }
  }
  CHECK(k == 9);
  CHECK(seen.size() == 9);
  CHECK_THROWS_AS(schedule_persistent(sets, std::vector<unsigned>{1, 0, 1}, 4), UsageError);
  CHECK_THROWS_AS(schedule_persistent(sets, std::vector<unsigned>{1, 1}, 4), UsageError);
  CHECK_THROWS_AS(schedule_persistent(sets, tiles, 0), UsageError);
}

TEST_CASE("a persistent kernel runs only as many blocks as can be resident at once, and refuses more") {
  CHECK(persistent_blocks(0, 3, 132, 100000, 256, 0) == 396);
  CHECK(persistent_blocks(0, 3, 132, 50, 256, 0) == 50);  // no block without a tile
  CHECK(persistent_blocks(200, 3, 132, 100000, 256, 0) == 200);
  CHECK(persistent_blocks(396, 3, 132, 100000, 256, 0) == 396);
  CHECK_THROWS_WITH_AS(persistent_blocks(397, 3, 132, 100000, 256, 0),
                       doctest::Contains("only 396 (3 per multiprocessor x 132) can be resident at once"), UsageError);
  CHECK_THROWS_WITH_AS(persistent_blocks(0, 0, 132, 10, 1024, 200000),
                       doctest::Contains("no block of 1024 threads with 200000 bytes"), UsageError);
}
