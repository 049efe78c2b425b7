#pragma once
/// \file
/// The lowering of a persistent program, on the host and without a GPU: which calls each call waits for (from
/// their access sets, as dataflow orders ops), how many blocks run, and which tiles each block runs in which order.
/// The persistent kernel (kernels/include/lazygraph/persistent.cuh) runs exactly this.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "lazygraph/ops/access.hpp"

namespace lazygraph::detail {

/// A program's lowering (see the file comment).
struct PersistentSchedule {
  /// Per call, the earlier calls it waits for: those whose accesses conflict with its own (read after write, write
  /// after read or write, or either opaque), less those implied through others (infer_dependencies).
  std::vector<std::vector<std::uint32_t>> after;
  /// The blocks of the kernel.
  unsigned blocks = 0;
  /// Per block, where its entries start in `queue`; one more entry at the end.
  std::vector<std::uint32_t> queue_begin;
  /// (call, tile) pairs, flattened: each block's in the order it runs them.
  std::vector<std::uint32_t> queue;
};

/// Lowers calls with the given access sets and tile counts (program order) onto `blocks` blocks: tile k of the
/// program (calls in order, each call's tiles in order) goes to block k mod blocks, so each call's tiles spread
/// over the GPU and the next call's start on the blocks the last one left free. Every block's queue is in program
/// order, which with co-resident blocks rules out a deadlock (persistent.cuh).
/// \throws UsageError when the counts differ, a call has no tiles, or blocks is 0.
PersistentSchedule schedule_persistent(std::span<const AccessSet> sets, std::span<const unsigned> tiles,
                                       unsigned blocks);

/// The blocks of a persistent kernel: `requested` (0: as many as are resident at once) when at most
/// `per_sm * sms` (the occupancy query's blocks per multiprocessor times the multiprocessors) are; capped at the
/// program's tiles (`tiles`), since a block without a tile has nothing to do.
/// \throws UsageError when no block fits on a multiprocessor (naming the block's threads and shared memory) or
///         more are requested than can be resident, which could deadlock: a block spinning on a counter that a
///         block never scheduled would increment.
unsigned persistent_blocks(unsigned requested, int per_sm, int sms, std::size_t tiles, unsigned threads,
                           unsigned shared_bytes);

}  // namespace lazygraph::detail
