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

AccessSet schedule_reads_writes(std::vector<CUdeviceptr> reads, std::vector<CUdeviceptr> writes) {
  AccessSet s;
  for (const CUdeviceptr r : reads) s.read(r, 256, "r");
  for (const CUdeviceptr w : writes) s.write(w, 256, "w");
  return s;
}

std::vector<detail::CallAccesses> schedule_whole_calls(const std::vector<AccessSet>& sets,
                                                       const std::vector<unsigned>& tiles) {
  std::vector<detail::CallAccesses> out;
  for (std::size_t i = 0; i < sets.size(); ++i) out.push_back({sets[i], tiles[i], {}, "call " + std::to_string(i)});
  return out;
}

using detail::kWholeCall;
using detail::TileWait;

}  // namespace

TEST_CASE(
    "a call waits for the calls it conflicts with, not for those its waits imply or those it shares nothing with") {
  constexpr CUdeviceptr a = 0x1000;
  constexpr CUdeviceptr b = 0x2000;
  constexpr CUdeviceptr c = 0x3000;
  constexpr CUdeviceptr d = 0x4000;
  const std::vector<AccessSet> sets{
      schedule_reads_writes({a}, {b}),     // 0: b = f(a)
      schedule_reads_writes({a}, {c}),     // 1: c = f(a)       independent of 0
      schedule_reads_writes({b, c}, {d}),  // 2: d = f(b, c)    after 0 and 1
      schedule_reads_writes({d},
                            {a}),  // 3: a = f(d)       after 2; its write after 0's and 1's reads is implied through 2
      schedule_reads_writes({b}, {}),  // 4: reads b         after 0 alone (no other call writes b)
  };
  const std::vector<unsigned> tiles{3, 2, 1, 4, 1};
  const auto s = schedule_persistent(schedule_whole_calls(sets, tiles), 4);
  CHECK(s.after[0].empty());
  CHECK(s.after[1].empty());
  CHECK(s.after[2] == std::vector<std::uint32_t>{0, 1});
  CHECK(s.after[3] == std::vector<std::uint32_t>{2});
  CHECK(s.after[4] == std::vector<std::uint32_t>{0});
  // Every tile of a call without per-tile accesses waits for the whole of what its call waits for.
  for (unsigned t = 0; t < 4; ++t)
    CHECK(std::vector<TileWait>(s.waits_of(3, t).begin(), s.waits_of(3, t).end()) ==
          std::vector<TileWait>{{2, kWholeCall, 1}});
  CHECK(s.waits_of(2, 0).size() == 2);
  CHECK(s.waits_of(0, 2).empty());

  AccessSet opaque;
  opaque.opaque("mine");
  const std::vector<AccessSet> with_opaque{schedule_reads_writes({a}, {b}), opaque, schedule_reads_writes({c}, {d})};
  const auto o = schedule_persistent(schedule_whole_calls(with_opaque, {1, 1, 1}), 2);
  CHECK(o.after[1] == std::vector<std::uint32_t>{0});
  CHECK(o.after[2] == std::vector<std::uint32_t>{1});
}

TEST_CASE("every tile is in exactly one block's queue, dealt round-robin in program order") {
  const std::vector<AccessSet> sets(3);
  const std::vector<unsigned> tiles{5, 1, 3};
  const auto s = schedule_persistent(schedule_whole_calls(sets, tiles), 4);
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
  CHECK(s.tiles_begin == std::vector<std::uint32_t>{0, 5, 6, 9});
  CHECK_THROWS_AS(schedule_persistent(schedule_whole_calls(sets, {1, 0, 1}), 4), UsageError);
  CHECK_THROWS_AS(schedule_persistent(schedule_whole_calls(sets, tiles), 0), UsageError);
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

TEST_CASE("tiles that say what they touch wait for just the tiles of earlier calls they conflict with") {
  constexpr CUdeviceptr x = 0x10000;  // 4 slices of 256 bytes
  constexpr CUdeviceptr h = 0x20000;  // 8 slices of 128 bytes
  constexpr CUdeviceptr y = 0x30000;
  const auto slice = [](CUdeviceptr base, std::size_t bytes, bool write) {
    return [=](unsigned tile, AccessSet& out) {
      if (write) {
        out.write(base + tile * bytes, bytes, "w");
      } else {
        out.read(base + tile * bytes, bytes, "r");
      }
    };
  };
  std::vector<detail::CallAccesses> calls(4);
  // 0: h = f(x), 8 tiles each writing a 128-byte slice of h and reading all of x.
  calls[0].call.read(x, 1024, "0");
  calls[0].call.write(h, 1024, "0");
  calls[0].tiles = 8;
  calls[0].per_tile = [&](unsigned t, AccessSet& out) {
    out.read(x, 1024, "0");
    slice(h, 128, true)(t, out);
  };
  calls[0].name = "call 0";
  // 1: y slices from h slices, 4 tiles, tile t reading h slices 2t and 2t + 1 (256 bytes) and writing y slice t.
  calls[1].call.read(h, 1024, "1");
  calls[1].call.write(y, 1024, "1");
  calls[1].tiles = 4;
  calls[1].per_tile = [&](unsigned t, AccessSet& out) {
    out.read(h + 256 * t, 256, "1");
    out.write(y + 256 * t, 256, "1");
  };
  calls[1].name = "call 1";
  // 2: reads all of y and writes x, no per-tile accesses: waits for the whole of call 1, and for the whole of call 0
  // (whose reads of x it overwrites), which call 1's tiles, each waiting for only some of call 0, do not imply.
  calls[2].call.read(y, 1024, "2");
  calls[2].call.write(x, 1024, "2");
  calls[2].tiles = 2;
  calls[2].name = "call 2";
  // 3: writes h again, a slice per tile: after the tile of call 1 that read that slice and the tile of call 0 that
  // wrote it, and nothing else (it shares nothing with call 2).
  calls[3].call.write(h, 1024, "3");
  calls[3].tiles = 8;
  calls[3].per_tile = [&](unsigned t, AccessSet& out) { slice(h, 128, true)(t, out); };
  calls[3].name = "call 3";
  const auto s = schedule_persistent(calls, 3);
  for (unsigned t = 0; t < 4; ++t) {
    CAPTURE(t);
    const auto w = s.waits_of(1, t);
    REQUIRE(w.size() == 1);
    CHECK(w[0] == TileWait{0, 2 * t, 2});
  }
  REQUIRE(s.waits_of(2, 1).size() == 2);  // call 1 whole; call 0 (its write of x after 0's reads) whole
  CHECK(s.waits_of(2, 1)[0] == TileWait{1, kWholeCall, 4});
  CHECK(s.waits_of(2, 1)[1] == TileWait{0, kWholeCall, 8});
  CHECK(std::vector<TileWait>(s.waits_of(3, 5).begin(), s.waits_of(3, 5).end()) ==
        std::vector<TileWait>{{1, 2, 1}, {0, 5, 1}});
  CHECK(s.after[1] == std::vector<std::uint32_t>{0});
  CHECK(s.after[2] == std::vector<std::uint32_t>{0, 1});

  // A tile that says it touches more than its call does is refused, naming it.
  calls[1].per_tile = [&](unsigned t, AccessSet& out) { out.read(h + 256 * t, 512, "1"); };
  CHECK_THROWS_WITH_AS(schedule_persistent(calls, 3), doctest::Contains("tile 3 of call 1 reads 512 bytes"),
                       UsageError);
}
