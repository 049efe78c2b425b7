// Host tests of lazygraph::nn::KvBlockPool: block accounting as sequences grow and end, exhaustion that changes
// nothing, the pool empty again after every sequence ends, prefix sharing with copy-on-write, and the block table the
// device reads; and how many blocks fit a device beside the weights.
#include <doctest/doctest.h>

#include <lazygraph/driver/error.hpp>
#include <lazygraph/nn/kv_block_pool.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <vector>

using lazygraph::UsageError;
using lazygraph::nn::kv_blocks_that_fit;
using lazygraph::nn::KvBlockPool;
using lazygraph::nn::KvPoolBudget;

TEST_CASE("a block pool hands out one block per block_size positions and takes them back when a sequence ends") {
  KvBlockPool pool(8, 16);
  CHECK(pool.total_blocks() == 8);
  CHECK(pool.free_blocks() == 8);
  const std::optional<int> a = pool.allocate(17);  // two blocks
  REQUIRE(a.has_value());
  CHECK(pool.blocks(*a).size() == 2);
  CHECK(pool.used_blocks() == 2);
  CHECK(pool.length(*a) == 17);
  CHECK(pool.append(*a, 15));  // 32 positions: still two blocks
  CHECK(pool.used_blocks() == 2);
  CHECK(pool.append(*a));  // 33: a third
  CHECK(pool.used_blocks() == 3);
  const std::optional<int> b = pool.allocate(0);
  REQUIRE(b.has_value());
  CHECK(pool.blocks(*b).empty());
  CHECK(pool.append(*b));
  CHECK(pool.used_blocks() == 4);
  CHECK(pool.sequences() == 2);
  pool.release(*a);
  pool.release(*b);
  CHECK(pool.free_blocks() == 8);
  CHECK(pool.sequences() == 0);
  for (int block = 0; block < 8; ++block) CHECK(pool.references(block) == 0);
}

TEST_CASE("a block pool that lacks the blocks refuses the allocation or append and changes nothing") {
  KvBlockPool pool(4, 32);
  const std::optional<int> a = pool.allocate(96);  // three blocks
  REQUIRE(a.has_value());
  CHECK_FALSE(pool.allocate(33).has_value());  // two more: one is left
  CHECK(pool.free_blocks() == 1);
  CHECK(pool.append(*a, 32));  // the fourth block
  CHECK(pool.free_blocks() == 0);
  CHECK_FALSE(pool.can_append(*a));
  CHECK_FALSE(pool.append(*a));
  CHECK(pool.length(*a) == 128);
  CHECK(pool.blocks(*a).size() == 4);
  const std::optional<int> empty = pool.allocate(0);  // no block needed: allowed when the pool is full
  REQUIRE(empty.has_value());
  CHECK_FALSE(pool.append(*empty));
  pool.release(*a);
  CHECK(pool.append(*empty));
  pool.release(*empty);
  CHECK(pool.free_blocks() == 4);
}

TEST_CASE("a block pool refuses misuse by name") {
  CHECK_THROWS_WITH_AS(KvBlockPool(8, 8), doctest::Contains("block_size must be 16 or 32"), UsageError);
  CHECK_THROWS_WITH_AS(KvBlockPool(0, 16), doctest::Contains("blocks must be at least 1, not 0"), UsageError);
  KvBlockPool pool(4);
  CHECK_THROWS_WITH_AS(static_cast<void>(pool.allocate(-1)), doctest::Contains("length must not be negative"),
                       UsageError);
  CHECK_THROWS_WITH_AS(pool.release(3), doctest::Contains("sequence 3 is not a live sequence"), UsageError);
  const std::optional<int> a = pool.allocate(5);
  REQUIRE(a.has_value());
  CHECK_THROWS_WITH_AS(static_cast<void>(pool.append(*a, -2)), doctest::Contains("positions must not be negative"),
                       UsageError);
  CHECK_THROWS_WITH_AS(static_cast<void>(pool.fork(*a, 6)), doctest::Contains("prefix 6 is outside sequence"),
                       UsageError);
  pool.release(*a);
  CHECK_THROWS_WITH_AS(pool.release(*a), doctest::Contains("is not a live sequence"), UsageError);
  CHECK_THROWS_WITH_AS(static_cast<void>(pool.references(4)), doctest::Contains("block 4 is outside the pool of 4"),
                       UsageError);
}

TEST_CASE("a forked sequence shares its parent's prefix blocks and copies the shared block it first writes") {
  KvBlockPool pool(8, 16);
  const std::optional<int> parent = pool.allocate(40);  // blocks for 0-15, 16-31, 32-39 (partly filled)
  REQUIRE(parent.has_value());
  const std::vector<int> parent_blocks(pool.blocks(*parent).begin(), pool.blocks(*parent).end());
  const int child = pool.fork(*parent, 20);  // shares the first two blocks, the second partly
  CHECK(pool.used_blocks() == 3);
  CHECK(pool.length(child) == 20);
  CHECK(pool.references(parent_blocks[0]) == 2);
  CHECK(pool.references(parent_blocks[1]) == 2);
  CHECK(pool.references(parent_blocks[2]) == 1);

  // Position 20 lies in the shared second block: the child gets its own copy of it.
  REQUIRE(pool.append(child));
  const std::vector<int> child_blocks(pool.blocks(child).begin(), pool.blocks(child).end());
  REQUIRE(child_blocks.size() == 2);
  CHECK(child_blocks[0] == parent_blocks[0]);
  CHECK(child_blocks[1] != parent_blocks[1]);
  const std::vector<lazygraph::nn::KvBlockCopy> copies = pool.take_copies();
  REQUIRE(copies.size() == 1);
  CHECK(copies[0].from == parent_blocks[1]);
  CHECK(copies[0].to == child_blocks[1]);
  CHECK(pool.take_copies().empty());
  CHECK(pool.references(parent_blocks[1]) == 1);
  CHECK(pool.used_blocks() == 4);

  // A fork at a block boundary shares whole blocks: its appends start a new block, with no copy.
  const int whole = pool.fork(*parent, 32);
  REQUIRE(pool.append(whole, 3));
  CHECK(pool.take_copies().empty());
  CHECK(pool.references(parent_blocks[1]) == 2);

  // The parent appending into its own partly filled block that nobody shares copies nothing.
  REQUIRE(pool.append(*parent));
  CHECK(pool.take_copies().empty());

  pool.release(*parent);
  CHECK(pool.references(parent_blocks[0]) == 2);  // child and whole still hold it
  pool.release(child);
  pool.release(whole);
  CHECK(pool.free_blocks() == 8);
}

TEST_CASE("a copy-on-write append that lacks the block for its copy is refused and changes nothing") {
  KvBlockPool pool(2, 16);
  const std::optional<int> parent = pool.allocate(20);  // both blocks
  REQUIRE(parent.has_value());
  const int child = pool.fork(*parent, 20);
  CHECK_FALSE(pool.append(child));
  CHECK_FALSE(pool.append(*parent));
  CHECK(pool.take_copies().empty());
  CHECK(pool.length(child) == 20);
  pool.release(child);
  CHECK(pool.append(*parent));  // no longer shared: written in place
  CHECK(pool.take_copies().empty());
  pool.release(*parent);
  CHECK(pool.free_blocks() == 2);
}

TEST_CASE("a block table is each row's block ids padded with -1, row after row") {
  KvBlockPool pool(8, 16);
  const std::optional<int> a = pool.allocate(33);
  const std::optional<int> b = pool.allocate(1);
  REQUIRE(a.has_value());
  REQUIRE(b.has_value());
  const std::vector<int> rows = {*b, *a};
  const std::vector<std::int32_t> table = pool.table(rows, 4);
  const std::vector<std::int32_t> expected = {pool.blocks(*b)[0], -1, -1, -1, pool.blocks(*a)[0], pool.blocks(*a)[1],
                                              pool.blocks(*a)[2], -1};
  CHECK(table == expected);
  CHECK_THROWS_WITH_AS(static_cast<void>(pool.table(rows, 2)),
                       doctest::Contains("holds 3 blocks, more than the width 2"), UsageError);
}

TEST_CASE("a block pool returns to empty after random allocations, forks, appends and releases") {
  KvBlockPool pool(64, 16);
  std::mt19937 random(7);
  std::vector<int> live;
  for (int round = 0; round < 2000; ++round) {
    const int action = static_cast<int>(random() % 4);
    if (action == 0 || live.empty()) {
      if (const std::optional<int> id = pool.allocate(static_cast<int>(random() % 70))) live.push_back(*id);
    } else if (action == 1) {
      const int parent = live[random() % live.size()];
      live.push_back(pool.fork(parent, static_cast<int>(random() % (pool.length(parent) + 1))));
    } else if (action == 2) {
      static_cast<void>(pool.append(live[random() % live.size()], static_cast<int>(random() % 20)));
    } else {
      const std::size_t i = random() % live.size();
      pool.release(live[i]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
    // Every block's count is the number of tables holding it, and a free block is held by none.
    std::vector<int> held(64, 0);
    for (const int id : live) {
      CHECK(static_cast<int>(pool.blocks(id).size()) == pool.blocks_for(pool.length(id)));
      for (const int block : pool.blocks(id)) ++held[static_cast<std::size_t>(block)];
    }
    int used = 0;
    for (int block = 0; block < 64; ++block) {
      REQUIRE(pool.references(block) == held[static_cast<std::size_t>(block)]);
      used += held[static_cast<std::size_t>(block)] > 0 ? 1 : 0;
    }
    REQUIRE(pool.used_blocks() == used);
  }
  for (const int id : live) pool.release(id);
  CHECK(pool.free_blocks() == 64);
  CHECK(pool.sequences() == 0);
}

TEST_CASE("the blocks that fit a device are its memory's allowed share less what is in use and the weights") {
  constexpr std::size_t gib = std::size_t{1} << 30U;
  // An 80 GiB GPU with 1 GiB in use, 16 GiB of weights, blocks of 2 MiB: 0.9 x 80 - 1 - 16 = 55 GiB, 28160 blocks.
  const KvPoolBudget h100{
      .total_bytes = 80 * gib, .free_bytes = 79 * gib, .weight_bytes = 16 * gib, .block_bytes = std::size_t{2} << 20U};
  CHECK(kv_blocks_that_fit(h100) == 28160);
  // A partial block does not count.
  KvPoolBudget odd = h100;
  odd.block_bytes = 3 * (std::size_t{1} << 20U);
  CHECK(kv_blocks_that_fit(odd) == 55 * 1024 / 3);
  // Other processes' memory counts against the share; weights that leave nothing give 0.
  KvPoolBudget crowded = h100;
  crowded.free_bytes = 20 * gib;
  CHECK(kv_blocks_that_fit(crowded) == 0);
  KvPoolBudget heavy = h100;
  heavy.weight_bytes = 71 * gib;
  CHECK(kv_blocks_that_fit(heavy) == 0);
  // All of the memory when asked, and never more blocks than an int holds.
  KvPoolBudget all = h100;
  all.utilization = 1.0;
  all.weight_bytes = 0;
  CHECK(kv_blocks_that_fit(all) == 79 * 512);
  all.block_bytes = 1;
  CHECK(kv_blocks_that_fit(all) == std::numeric_limits<int>::max());
}

TEST_CASE("the blocks that fit refuses a zero block, more free memory than there is and a share outside (0, 1]") {
  const KvPoolBudget ok{.total_bytes = 1000, .free_bytes = 900, .weight_bytes = 0, .block_bytes = 10};
  KvPoolBudget b = ok;
  b.block_bytes = 0;
  CHECK_THROWS_WITH_AS((void)kv_blocks_that_fit(b), doctest::Contains("block_bytes is 0"), UsageError);
  b = ok;
  b.free_bytes = 1001;
  CHECK_THROWS_WITH_AS((void)kv_blocks_that_fit(b), doctest::Contains("is more than total_bytes"), UsageError);
  for (const double share : {0.0, -0.5, 1.5, std::nan("")}) {
    b = ok;
    b.utilization = share;
    CHECK_THROWS_WITH_AS((void)kv_blocks_that_fit(b), doctest::Contains("is outside (0, 1]"), UsageError);
  }
  CHECK(kv_blocks_that_fit(ok) == 80);  // 900 allowed - 100 in use
}
