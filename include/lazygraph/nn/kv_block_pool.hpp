#pragma once
/// \file
/// nn::KvBlockPool: the host side of a paged KV cache. The cache is one pool of fixed-size blocks (16 or 32
/// positions each); a sequence holds a table of block ids, one per `block_size` positions, taken from the pool as it
/// grows and returned when it ends. Blocks are reference counted, so sequences can share a prompt prefix (fork): a
/// block two sequences hold is never written; the first append into it gives the writer a block of its own, and the
/// copy the device must make before the next step is queued (copy-on-write).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace lazygraph::nn {

/// A copy of one block into another that the device must make before the step that writes `to` (copy-on-write).
struct KvBlockCopy {
  int from = 0;  ///< the shared block
  int to = 0;    ///< the writer's new block
};

/// A pool of KV-cache blocks and the block tables of the sequences that hold them.
///
/// A sequence of `length` positions holds ceil(length / block_size) blocks: position p lies in block
/// `blocks(id)[p / block_size]`, at offset p % block_size. Nothing here touches the device: `table` writes what the
/// attention kernels read, ready to be staged.
///
/// Thread safety: none; one owner (the engine) calls it. Exception safety: an operation that cannot get its blocks
/// returns false or nullopt and changes nothing; misuse (an unknown id, a negative length) throws UsageError and
/// changes nothing.
class KvBlockPool {
 public:
  /// A sequence's handle, reused after `release`.
  using SequenceId = int;

  /// A pool of `blocks` blocks of `block_size` positions. \throws UsageError when blocks < 1 or block_size is not 16
  /// or 32, naming the value.
  explicit KvBlockPool(int blocks, int block_size = 16);

  /// Blocks needed to hold `positions` positions (0 for 0).
  [[nodiscard]] int blocks_for(int positions) const noexcept { return (positions + block_size_ - 1) / block_size_; }

  /// A new sequence of `length` positions (0 or more), with its blocks; nullopt when the pool lacks them.
  /// \throws UsageError for a negative length.
  [[nodiscard]] std::optional<SequenceId> allocate(int length);

  /// A new sequence that shares the first `prefix` positions of `parent` (its blocks, whose reference counts grow):
  /// no block is taken now. Its length is `prefix`; a write into a block it shares copies that block first.
  /// \throws UsageError for an unknown parent, or a prefix outside [0, length(parent)].
  SequenceId fork(SequenceId parent, int prefix);

  /// Grows sequence `id` by `positions` positions, taking the blocks it needs and, when its last block is shared and
  /// the new positions fall into it, a block of its own for that one (its copy queued: take_copies). Returns false,
  /// changing nothing, when the pool lacks the blocks. \throws UsageError for an unknown id or negative positions.
  [[nodiscard]] bool append(SequenceId id, int positions = 1);

  /// Whether append(id, positions) would succeed now. \throws as append.
  [[nodiscard]] bool can_append(SequenceId id, int positions = 1) const;

  /// Ends sequence `id`: each of its blocks that no other sequence holds returns to the pool.
  /// \throws UsageError for an unknown id.
  void release(SequenceId id);

  /// The positions sequence `id` holds. \throws UsageError for an unknown id.
  [[nodiscard]] int length(SequenceId id) const;
  /// Sequence `id`'s block table: block ids in position order. \throws UsageError for an unknown id.
  [[nodiscard]] std::span<const int> blocks(SequenceId id) const;

  /// What the device reads: for each of `rows`, its block table padded with -1 to `width` entries, row after row
  /// (rows.size() * width int32 values). \throws UsageError for an unknown id or a table longer than `width`.
  [[nodiscard]] std::vector<std::int32_t> table(std::span<const SequenceId> rows, int width) const;

  /// The copies appends queued since the last call, in order; the queue is emptied.
  [[nodiscard]] std::vector<KvBlockCopy> take_copies();

  /// Sequences alive.
  [[nodiscard]] int sequences() const noexcept { return live_; }
  /// Positions per block.
  [[nodiscard]] int block_size() const noexcept { return block_size_; }
  /// Blocks in the pool.
  [[nodiscard]] int total_blocks() const noexcept { return static_cast<int>(references_.size()); }
  /// Blocks no sequence holds.
  [[nodiscard]] int free_blocks() const noexcept { return static_cast<int>(free_.size()); }
  /// Blocks some sequence holds (a shared block counts once).
  [[nodiscard]] int used_blocks() const noexcept { return total_blocks() - free_blocks(); }
  /// How many sequences hold block `block` (0: free). \throws UsageError for a block outside the pool.
  [[nodiscard]] int references(int block) const;

 private:
  struct Sequence {
    bool live = false;
    int length = 0;
    std::vector<int> blocks;
  };
  /// The live sequence `id`, or UsageError naming `what` (the caller).
  [[nodiscard]] const Sequence& sequence(SequenceId id, const char* what) const;
  /// A free slot of sequences_ (reused or new).
  [[nodiscard]] SequenceId new_sequence();
  /// Blocks append(id, positions) takes from the pool (new blocks and a copy-on-write block).
  [[nodiscard]] int blocks_needed(const Sequence& s, int positions) const noexcept;
  /// A free block, its count set to 1 (the caller checked there is one).
  int take_block();
  /// Drops one reference to `block`, returning it to the pool at the last one.
  void drop_block(int block) noexcept;

  int block_size_;
  std::vector<int> references_;  ///< per block: sequences holding it
  std::vector<int> free_;        ///< free blocks, taken from the back (lowest ids first)
  std::vector<Sequence> sequences_;
  std::vector<SequenceId> free_ids_;
  std::vector<KvBlockCopy> copies_;
  int live_ = 0;
};

/// What sizes a paged KV cache's pool to a device before the model loads (kv_blocks_that_fit).
struct KvPoolBudget {
  std::size_t total_bytes = 0;   ///< the device's memory (Device::total_memory)
  std::size_t free_bytes = 0;    ///< what is free now, before the model loads (Device::free_memory)
  std::size_t weight_bytes = 0;  ///< the weights about to be loaded (DecoderCheckpoint::device_bytes)
  std::size_t block_bytes = 0;   ///< one block: its positions' keys and values in every layer
  /// The share of the device's memory this process may fill, counting what is in use already (other processes',
  /// the context's): the rest is left for the decoder's buffers, graphs and GEMM workspaces.
  double utilization = 0.9;
};

/// The KV blocks that fit: utilization x total_bytes, less what is in use (total_bytes - free_bytes) and the
/// weights, in blocks of block_bytes (at most INT_MAX); 0 when nothing is left.
/// \throws UsageError for block_bytes 0, free_bytes above total_bytes, or a utilization outside (0, 1].
[[nodiscard]] int kv_blocks_that_fit(const KvPoolBudget& budget);

}  // namespace lazygraph::nn
