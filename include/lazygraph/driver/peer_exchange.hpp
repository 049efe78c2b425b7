#pragma once
/// \file
/// PeerExchange: memory through which the GPUs of one process hand each other small messages directly, with peer
/// access (NVLink, or PCIe where the GPUs allow it), for kernels that all-reduce without NCCL (nn's peer_all_reduce).
/// create_all makes one per rank of a communicator whose ranks all live in this process: it enables peer access
/// between every pair of their GPUs and gives each rank receive slots that the others' kernels write into, a table
/// of every rank's slots (readable on each GPU) and counters of its own. The memory is shared by the whole group:
/// any rank's exchange, or a graph that recorded it, keeps every rank's alive.
///
///     if (PeerExchange::supported(comms)) exchanges = PeerExchange::create_all(comms);   // comms in rank order
///
/// The layouts are the kernels' (kernels/nn/peer_all_reduce.cu), and the constants below must match them:
///   - slots (peer_all_reduce): [2 parities][ranks senders][max_blocks blocks][words_per_block words] of 8 bytes, 4 of
///     payload and 4 of the block's epoch;
///   - sums (gemv_all_reduce): [2 parities][ranks senders][sum_capacity outputs] of 8 bytes, an fp32 value and the
///     call's epoch;
///   - counters: max_blocks epochs (one per block of peer_all_reduce), then gemv_all_reduce's epoch, its count of
///     finished blocks and its count of parts added up.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lazygraph/driver/communicator.hpp"
#include "lazygraph/driver/device_buffer.hpp"

namespace lazygraph {

namespace detail {
/// Every rank's memory of one create_all (PeerExchange's file comment).
struct PeerExchangeGroup {
  std::vector<Communicator> comms;
  std::vector<DeviceBuffer<std::uint64_t>> slots;            ///< per rank, its receive slots
  std::vector<DeviceBuffer<std::uint64_t>> sums;             ///< per rank, its receive slots for gemv_all_reduce
  std::vector<DeviceBuffer<unsigned>> counters;              ///< per rank, the kernels' epochs (file comment)
  std::vector<DeviceBuffer<unsigned long long>> tables;      ///< per rank, every rank's slots address, in rank order
  std::vector<DeviceBuffer<unsigned long long>> sum_tables;  ///< per rank, every rank's sums address, in rank order
};
}  // namespace detail

/// One rank's share of the exchange (see the file comment). Copies share it.
class PeerExchange {
 public:
  static constexpr int max_ranks = 8;          ///< ranks one exchange serves
  static constexpr int max_blocks = 64;        ///< blocks a message may take
  static constexpr int words_per_block = 512;  ///< 4-byte words each block moves
  /// The largest message, in bytes: 128 KiB (8 rows of d 8192 in fp16).
  static constexpr std::size_t capacity_bytes = static_cast<std::size_t>(max_blocks) * words_per_block * 4;
  /// The most outputs (rows times batch) of one gemv_all_reduce: 8 rows of d 4096.
  static constexpr int sum_capacity = 32768;
  /// Words of counters(): peer_all_reduce's epochs per block, gemv_all_reduce's epoch and two counts.
  static constexpr int counter_words = max_blocks + 3;

  /// Whether create_all(comms) can work: 2 to max_ranks ranks of one communicator given in rank order, on distinct
  /// devices, every pair of which has peer access (cuDeviceCanAccessPeer); false with the reason in `why` (when not
  /// null). Touches no GPU memory.
  static bool supported(std::span<const Communicator> comms, std::string* why = nullptr);
  /// One exchange per rank of `comms` (in rank order, all of one communicator): peer access enabled between every
  /// pair of their GPUs, each rank's slots and counters zeroed. \throws UsageError when supported() says no (with its
  /// reason); CudaError.
  static std::vector<PeerExchange> create_all(std::span<const Communicator> comms);

  /// This rank's communicator.
  [[nodiscard]] const Communicator& communicator() const noexcept { return group_->comms[index()]; }
  /// The number of ranks.
  [[nodiscard]] int ranks() const noexcept { return static_cast<int>(group_->comms.size()); }
  /// The table of every rank's slots address, in rank order, on this rank's device.
  [[nodiscard]] DeviceSpan<const unsigned long long> slot_table() const noexcept {
    return group_->tables[index()].cview();
  }
  /// The table of every rank's sums address (gemv_all_reduce's receive slots), in rank order, on this rank's device.
  [[nodiscard]] DeviceSpan<const unsigned long long> sum_table() const noexcept {
    return group_->sum_tables[index()].cview();
  }
  /// This rank's counters (counter_words, see the file comment), on its device.
  [[nodiscard]] DeviceSpan<unsigned> counters() const noexcept { return group_->counters[index()].view(); }
  /// Keeps every rank's memory alive (for a graph that records a kernel using it).
  [[nodiscard]] std::shared_ptr<const void> owner() const noexcept { return group_; }

 private:
  PeerExchange(std::shared_ptr<detail::PeerExchangeGroup> group, int rank) : group_(std::move(group)), rank_(rank) {}
  [[nodiscard]] std::size_t index() const noexcept { return static_cast<std::size_t>(rank_); }

  std::shared_ptr<detail::PeerExchangeGroup> group_;
  int rank_;
};

}  // namespace lazygraph
