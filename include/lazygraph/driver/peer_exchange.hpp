#pragma once
/// \file
/// PeerExchange: memory through which the GPUs of one machine hand each other small messages directly, with peer
/// access (NVLink, or PCIe where the GPUs allow it), for kernels that all-reduce without NCCL (nn's peer_all_reduce).
/// Each rank has receive slots that the others' kernels write into, a table of every rank's slots (readable on its
/// GPU) and counters of its own. Two ways to make them:
///   - create_all, for a communicator whose ranks all live in this process: enables peer access between every pair
///     of their GPUs. The memory is shared by the whole group: any rank's exchange, or a graph that recorded it, keeps
///     every rank's alive.
///   - create, for one rank of a communicator whose ranks are processes of one machine (one process per GPU, as
///     deployments run): a collective call of every rank. Each maps its peers' slots into its own address space with
///     CUDA IPC (the handles go round through the communicator), and the ranks agree: either every rank gets an
///     exchange or none does, each with the same reason. The peers' mappings live as long as this rank's exchange (or
///     a graph that recorded it); destroy it on every rank once no rank replays a graph that uses it.
///
/// create trusts nothing a peer sends. Before any handle goes round, the ranks all-gather a fixed-size descriptor each
/// (layout version, the constants below, the bytes of each of its buffers, machine and process; detail/driver/
/// peer_descriptor.hpp), and every rank computes the same verdict from all of them: ranks of another layout version or
/// constants, buffers smaller or larger than the layout needs, another machine, two ranks of one process are
/// refused on every rank with the same reason, before anything is mapped. After mapping, each rank checks the size of
/// every mapping against the layout (cuMemGetAddressRange), and the ranks all-gather their verdicts (each read within
/// its buffer) so that all accept or all refuse, again with the same reason.
///
///     if (PeerExchange::supported(comms)) exchanges = PeerExchange::create_all(comms);   // comms in rank order
///     std::optional<PeerExchange> mine = PeerExchange::create(comm, &why);                // every process
///
/// The layouts are the kernels' (kernels/nn/peer_all_reduce.cu), and the constants below must match them:
///   - slots (peer_all_reduce): [2 parities][ranks senders][max_blocks blocks][words_per_block words] of 8 bytes, 4 of
///     payload and 4 of the block's epoch;
///   - sums (gemv_all_reduce): [2 parities][ranks senders][sum_capacity outputs] of 8 bytes, an fp32 value and the
///     call's epoch;
///   - counters: max_blocks epochs (one per block of peer_all_reduce), then gemv_all_reduce's epoch, its count of
///     finished blocks and its count of parts added up.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "lazygraph/driver/communicator.hpp"
#include "lazygraph/driver/device_buffer.hpp"

namespace lazygraph {

namespace detail {
struct PeerExchangeMaker;

/// A peer's allocation mapped into this process (PeerExchange::create): unmapped when destroyed.
struct IpcMapping {
  IpcMapping(const Device& on, unsigned long long at) : device(on), address(at) {}
  ~IpcMapping();
  IpcMapping(const IpcMapping&) = delete;
  IpcMapping& operator=(const IpcMapping&) = delete;
  IpcMapping(IpcMapping&&) = delete;
  IpcMapping& operator=(IpcMapping&&) = delete;
  Device device;
  unsigned long long address;
};

/// The memory of one create_all (every rank's, indexed by rank) or of one create (this rank's, at index 0, and its
/// peers' mappings). PeerExchange's file comment.
struct PeerExchangeGroup {
  std::vector<Communicator> comms;
  std::vector<DeviceBuffer<std::uint64_t>> slots;            ///< per rank, its receive slots
  std::vector<DeviceBuffer<std::uint64_t>> sums;             ///< per rank, its receive slots for gemv_all_reduce
  std::vector<DeviceBuffer<unsigned>> counters;              ///< per rank, the kernels' epochs (file comment)
  std::vector<DeviceBuffer<unsigned long long>> tables;      ///< per rank, every rank's slots address, in rank order
  std::vector<DeviceBuffer<unsigned long long>> sum_tables;  ///< per rank, every rank's sums address, in rank order
  std::vector<std::unique_ptr<IpcMapping>> mappings;         ///< create: the peers' slots and sums (unmapped first)
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
  /// The version of the layout above (the file comment), which create's ranks compare: one more whenever the kernels
  /// write a layout that another build's would not read alike.
  static constexpr std::uint32_t layout_version = 1;

  /// Whether create_all(comms) can work: 2 to max_ranks ranks of one communicator given in rank order, on distinct
  /// devices, every pair of which has peer access (cuDeviceCanAccessPeer); false with the reason in `why` (when not
  /// null). Touches no GPU memory.
  static bool supported(std::span<const Communicator> comms, std::string* why = nullptr);
  /// One exchange per rank of `comms` (in rank order, all of one communicator): peer access enabled between every
  /// pair of their GPUs, each rank's slots and counters zeroed. \throws UsageError when supported() says no (with its
  /// reason); CudaError.
  static std::vector<PeerExchange> create_all(std::span<const Communicator> comms);
  /// This rank's exchange, where the ranks of `comm` are processes of one machine whose GPUs all reach each other's
  /// memory (see the file comment); std::nullopt on every rank alike, with the reason in `why` (when not null), where
  /// the ranks' descriptors disagree (another layout version or size, another machine, ranks of one process:
  /// create_all), any rank cannot map every peer's memory whole (GPUs without peer access, a driver that refuses CUDA
  /// IPC, a mapping smaller than the layout), or the communicator has fewer than 2 or more than max_ranks ranks. A
  /// collective call: every rank of `comm` makes it, at the same point of its work; it waits for the others at most
  /// `timeout` (TimeoutError, and the communicator is aborted, as Communicator::wait). \throws NcclError, CudaError
  /// (allocating).
  static std::optional<PeerExchange> create(const Communicator& comm, std::string* why = nullptr,
                                            std::chrono::milliseconds timeout = std::chrono::seconds(60));

  /// This rank's communicator.
  [[nodiscard]] const Communicator& communicator() const noexcept { return group_->comms[index()]; }
  /// The number of ranks.
  [[nodiscard]] int ranks() const noexcept { return communicator().size(); }
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
  friend struct detail::PeerExchangeMaker;
  PeerExchange(std::shared_ptr<detail::PeerExchangeGroup> group, int index) : group_(std::move(group)), index_(index) {}
  [[nodiscard]] std::size_t index() const noexcept { return static_cast<std::size_t>(index_); }

  std::shared_ptr<detail::PeerExchangeGroup> group_;
  int index_;  ///< this rank's place in group_'s vectors: its rank (create_all) or 0 (create)
};

}  // namespace lazygraph
