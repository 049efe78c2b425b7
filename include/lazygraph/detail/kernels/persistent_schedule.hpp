#pragma once
/// \file
/// The lowering of a persistent program, on the host and without a GPU: what each tile waits for (from the calls'
/// access sets, as dataflow orders ops, and from their tiles' own when a call declares them), how many blocks run,
/// and which tiles each block runs in which order. The persistent kernel (kernels/include/lazygraph/persistent.cuh)
/// runs exactly this.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "lazygraph/ops/access.hpp"

namespace lazygraph::detail {

/// What one call touches: as a whole, and, when `per_tile` is set, tile by tile (each tile's accesses must lie within
/// the call's). Tiles of calls that both say what each tile touches wait only for the tiles they conflict with.
struct CallAccesses {
  AccessSet call;                                      ///< the whole call's
  unsigned tiles = 1;                                  ///< how many tiles it has
  std::function<void(unsigned, AccessSet&)> per_tile;  ///< adds tile t's accesses to the set; may be empty
  std::string name;                                    ///< for messages
};

/// One thing a tile waits for: all of call `call` (first == kWholeCall), or its tiles [first, first + count).
struct TileWait {
  std::uint32_t call = 0;
  std::uint32_t first = 0;
  std::uint32_t count = 0;
  friend bool operator==(const TileWait&, const TileWait&) = default;
};

/// TileWait::first for a wait on a whole call (its count of finished tiles, not its tiles one by one).
inline constexpr std::uint32_t kWholeCall = 0xffffffffU;

/// A program's lowering (see the file comment).
struct PersistentSchedule {
  /// Per call, the earlier calls some tile of it waits for (ascending): the program's dependency graph.
  std::vector<std::vector<std::uint32_t>> after;
  /// The blocks of the kernel.
  unsigned blocks = 0;
  /// Per call, the program-wide index of its first tile; one more entry at the end (the program's tiles).
  std::vector<std::uint32_t> tiles_begin;
  /// Per tile (program-wide index), where its waits start in `waits` and how many there are, flattened.
  std::vector<std::uint32_t> tile_waits;
  /// The waits of every tile (tiles with the same waits share them).
  std::vector<TileWait> waits;
  /// Per block, where its entries start in `queue`; one more entry at the end.
  std::vector<std::uint32_t> queue_begin;
  /// (call, tile) pairs, flattened: each block's in the order it runs them.
  std::vector<std::uint32_t> queue;

  /// The waits of tile `tile` of call `call`.
  [[nodiscard]] std::span<const TileWait> waits_of(std::size_t call, std::size_t tile) const {
    const std::size_t t = tiles_begin[call] + tile;
    return std::span<const TileWait>(waits).subspan(tile_waits[2 * t], tile_waits[2 * t + 1]);
  }
};

/// Lowers calls (program order) onto `blocks` blocks.
///
/// Waits: tile t of call j waits for each earlier call i whose accesses conflict with j's (read after write, write
/// after read or write, or either opaque) — for the tiles of i whose accesses conflict with tile t's when both calls
/// declare per-tile accesses (none: t waits for nothing of i), else for all of i — less what its other waits imply
/// (a call all of whose tiles waited for all of h, once any of its tiles is done, implies h is done).
///
/// Queues: tile k of the program (calls in order, each call's tiles in order) goes to block k mod blocks, so each
/// call's tiles spread over the GPU and the next call's start on the blocks the last one left free. Every block's
/// queue is in program order, which with co-resident blocks rules out a deadlock (persistent.cuh).
/// \throws UsageError when a call has no tiles, blocks is 0, or a tile's accesses leave its call's (naming both).
PersistentSchedule schedule_persistent(std::span<const CallAccesses> calls, unsigned blocks);

/// The blocks of a persistent kernel: `requested` (0: as many as are resident at once) when at most
/// `per_sm * sms` (the occupancy query's blocks per multiprocessor times the multiprocessors) are; capped at the
/// program's tiles (`tiles`), since a block without a tile has nothing to do.
/// \throws UsageError when no block fits on a multiprocessor (naming the block's threads and shared memory) or
///         more are requested than can be resident, which could deadlock: a block spinning on a counter that a
///         block never scheduled would increment.
unsigned persistent_blocks(unsigned requested, int per_sm, int sms, std::size_t tiles, unsigned threads,
                           unsigned shared_bytes);

}  // namespace lazygraph::detail
