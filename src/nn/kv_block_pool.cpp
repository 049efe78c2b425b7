#include "lazygraph/nn/kv_block_pool.hpp"

#include <cmath>
#include <limits>
#include <string>

#include "lazygraph/driver/error.hpp"

namespace lazygraph::nn {

KvBlockPool::KvBlockPool(int blocks, int block_size) : block_size_(block_size) {
  if (block_size != 16 && block_size != 32) {
    throw UsageError("KvBlockPool: block_size must be 16 or 32 positions, not " + std::to_string(block_size));
  }
  if (blocks < 1) throw UsageError("KvBlockPool: blocks must be at least 1, not " + std::to_string(blocks));
  references_.assign(static_cast<std::size_t>(blocks), 0);
  free_.reserve(static_cast<std::size_t>(blocks));
  for (int b = blocks - 1; b >= 0; --b) free_.push_back(b);
}

const KvBlockPool::Sequence& KvBlockPool::sequence(SequenceId id, const char* what) const {
  if (id < 0 || static_cast<std::size_t>(id) >= sequences_.size() || !sequences_[static_cast<std::size_t>(id)].live) {
    throw UsageError(std::string("KvBlockPool::") + what + ": sequence " + std::to_string(id) +
                     " is not a live sequence of this pool");
  }
  return sequences_[static_cast<std::size_t>(id)];
}

KvBlockPool::SequenceId KvBlockPool::new_sequence() {
  SequenceId id = 0;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = static_cast<SequenceId>(sequences_.size());
    sequences_.emplace_back();
  }
  Sequence& s = sequences_[static_cast<std::size_t>(id)];
  s = Sequence{.live = true, .length = 0, .blocks = {}};
  ++live_;
  return id;
}

int KvBlockPool::take_block() {
  const int block = free_.back();
  free_.pop_back();
  references_[static_cast<std::size_t>(block)] = 1;
  return block;
}

void KvBlockPool::drop_block(int block) noexcept {
  int& count = references_[static_cast<std::size_t>(block)];
  if (--count == 0) free_.push_back(block);
}

int KvBlockPool::references(int block) const {
  if (block < 0 || block >= total_blocks()) {
    throw UsageError("KvBlockPool::references: block " + std::to_string(block) + " is outside the pool of " +
                     std::to_string(total_blocks()));
  }
  return references_[static_cast<std::size_t>(block)];
}

std::optional<KvBlockPool::SequenceId> KvBlockPool::allocate(int length) {
  if (length < 0) throw UsageError("KvBlockPool::allocate: length must not be negative, not " + std::to_string(length));
  if (blocks_for(length) > free_blocks()) return std::nullopt;
  const SequenceId id = new_sequence();
  Sequence& s = sequences_[static_cast<std::size_t>(id)];
  s.length = length;
  for (int b = blocks_for(length); b > 0; --b) s.blocks.push_back(take_block());
  return id;
}

KvBlockPool::SequenceId KvBlockPool::fork(SequenceId parent, int prefix) {
  const int parent_length = sequence(parent, "fork").length;
  if (prefix < 0 || prefix > parent_length) {
    throw UsageError("KvBlockPool::fork: prefix " + std::to_string(prefix) + " is outside sequence " +
                     std::to_string(parent) + "'s " + std::to_string(parent_length) + " positions");
  }
  const SequenceId id = new_sequence();  // may reallocate sequences_: look the parent up after
  const std::vector<int>& from = sequences_[static_cast<std::size_t>(parent)].blocks;
  Sequence& s = sequences_[static_cast<std::size_t>(id)];
  s.length = prefix;
  s.blocks.assign(from.begin(), from.begin() + blocks_for(prefix));
  for (const int block : s.blocks) ++references_[static_cast<std::size_t>(block)];
  return id;
}

int KvBlockPool::blocks_needed(const Sequence& s, int positions) const noexcept {
  if (positions == 0) return 0;
  const bool partial_last = s.length % block_size_ != 0;
  const bool copy = partial_last && references_[static_cast<std::size_t>(s.blocks.back())] > 1;
  return blocks_for(s.length + positions) - static_cast<int>(s.blocks.size()) + (copy ? 1 : 0);
}

bool KvBlockPool::can_append(SequenceId id, int positions) const {
  const Sequence& s = sequence(id, "append");
  if (positions < 0) {
    throw UsageError("KvBlockPool::append: positions must not be negative, not " + std::to_string(positions));
  }
  return blocks_needed(s, positions) <= free_blocks();
}

bool KvBlockPool::append(SequenceId id, int positions) {
  if (!can_append(id, positions)) return false;
  if (positions == 0) return true;
  Sequence& s = sequences_[static_cast<std::size_t>(id)];
  if (s.length % block_size_ != 0 && references_[static_cast<std::size_t>(s.blocks.back())] > 1) {
    const int shared = s.blocks.back();
    const int own = take_block();
    drop_block(shared);
    s.blocks.back() = own;
    copies_.push_back({.from = shared, .to = own});
  }
  s.length += positions;
  while (static_cast<int>(s.blocks.size()) < blocks_for(s.length)) s.blocks.push_back(take_block());
  return true;
}

void KvBlockPool::release(SequenceId id) {
  static_cast<void>(sequence(id, "release"));
  Sequence& s = sequences_[static_cast<std::size_t>(id)];
  // Last block first, so that a pool used by one sequence at a time hands out the same blocks again.
  for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) drop_block(*it);
  s = Sequence{};
  free_ids_.push_back(id);
  --live_;
}

int KvBlockPool::length(SequenceId id) const { return sequence(id, "length").length; }

std::span<const int> KvBlockPool::blocks(SequenceId id) const { return sequence(id, "blocks").blocks; }

std::vector<std::int32_t> KvBlockPool::table(std::span<const SequenceId> rows, int width) const {
  if (width < 0) throw UsageError("KvBlockPool::table: width must not be negative, not " + std::to_string(width));
  std::vector<std::int32_t> out(rows.size() * static_cast<std::size_t>(width), -1);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const Sequence& s = sequence(rows[r], "table");
    if (static_cast<int>(s.blocks.size()) > width) {
      throw UsageError("KvBlockPool::table: sequence " + std::to_string(rows[r]) + " (row " + std::to_string(r) +
                       ") holds " + std::to_string(s.blocks.size()) + " blocks, more than the width " +
                       std::to_string(width));
    }
    for (std::size_t b = 0; b < s.blocks.size(); ++b) {
      out[r * static_cast<std::size_t>(width) + b] = s.blocks[b];
    }
  }
  return out;
}

std::vector<KvBlockCopy> KvBlockPool::take_copies() {
  std::vector<KvBlockCopy> out;
  out.swap(copies_);
  return out;
}

int kv_blocks_that_fit(const KvPoolBudget& b) {
  if (b.block_bytes == 0) throw UsageError("kv_blocks_that_fit: block_bytes is 0");
  if (b.free_bytes > b.total_bytes) {
    throw UsageError("kv_blocks_that_fit: free_bytes (" + std::to_string(b.free_bytes) +
                     ") is more than total_bytes (" + std::to_string(b.total_bytes) + ")");
  }
  if (!(b.utilization > 0.0 && b.utilization <= 1.0)) {
    throw UsageError("kv_blocks_that_fit: utilization " + std::to_string(b.utilization) + " is outside (0, 1]");
  }
  const double allowed = std::floor(b.utilization * static_cast<double>(b.total_bytes));
  const double taken = static_cast<double>(b.total_bytes - b.free_bytes) + static_cast<double>(b.weight_bytes);
  if (allowed <= taken) return 0;
  const double blocks = std::floor((allowed - taken) / static_cast<double>(b.block_bytes));
  return blocks >= static_cast<double>(std::numeric_limits<int>::max()) ? std::numeric_limits<int>::max()
                                                                        : static_cast<int>(blocks);
}

}  // namespace lazygraph::nn
