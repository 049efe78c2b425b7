#pragma once
/// \file
/// What the ranks of PeerExchange::create tell each other before any of them maps another's memory, and the verdict
/// every rank computes from all of them (driver/peer_exchange.hpp's file comment). The verdict is host code of the
/// descriptors alone, so every rank, given the same descriptors by the communicator, reaches the same one, and a test
/// can feed it mismatched descriptors without a GPU.

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "lazygraph/driver/peer_exchange.hpp"

namespace lazygraph::detail {

/// The sizes the peer kernels (kernels/nn/peer_all_reduce.cu) write by: this build's are PeerExchange's constants.
struct PeerLayout {
  std::uint32_t version = PeerExchange::layout_version;
  std::int32_t max_blocks = PeerExchange::max_blocks;
  std::int32_t words_per_block = PeerExchange::words_per_block;
  std::int32_t sum_capacity = PeerExchange::sum_capacity;
  std::int32_t counter_words = PeerExchange::counter_words;

  /// Bytes of one rank's receive slots for `ranks` ranks: [2][ranks][max_blocks][words_per_block] of 8 bytes.
  [[nodiscard]] std::uint64_t slot_bytes(int ranks) const noexcept;
  /// Bytes of one rank's sum slots for `ranks` ranks: [2][ranks][sum_capacity] of 8 bytes.
  [[nodiscard]] std::uint64_t sum_bytes(int ranks) const noexcept;
  /// Bytes of one rank's counters: counter_words of 4 bytes.
  [[nodiscard]] std::uint64_t counter_bytes() const noexcept;
};

/// The first word of every descriptor ("LGPX"): a rank that sent anything else is no PeerExchange of lazygraph.
inline constexpr std::uint32_t peer_descriptor_magic = 0x4C475058U;

/// One rank's descriptor, as it goes through the communicator (one all-gather of its bytes). Its size (128 bytes) and
/// the meaning of its first two fields never change: a later layout version puts new fields in `reserved`, so ranks of
/// different builds still gather each other's descriptor and refuse by name, instead of gathering different byte
/// counts (which NCCL does not detect).
struct PeerDescriptor {
  std::uint32_t magic = 0;    ///< peer_descriptor_magic
  std::uint32_t version = 0;  ///< the layout's version (PeerExchange::layout_version)
  std::int32_t rank = -1;     ///< the sender's rank
  std::int32_t ranks = 0;     ///< the sender's communicator size
  std::int32_t max_blocks = 0;
  std::int32_t words_per_block = 0;
  std::int32_t sum_capacity = 0;
  std::int32_t counter_words = 0;
  std::uint64_t slot_bytes = 0;     ///< what the sender says it allocated for its receive slots
  std::uint64_t sum_bytes = 0;      ///< ... for its sum slots
  std::uint64_t counter_bytes = 0;  ///< ... for its counters
  std::uint64_t machine = 0;        ///< a digest of the host's name and boot id
  std::int64_t process = 0;         ///< its process id
  std::array<std::uint8_t, 56> reserved{};
};
static_assert(sizeof(PeerDescriptor) == 128, "the descriptor's size is fixed across versions (see its comment)");

/// The descriptor of a rank of `layout` that allocated `slot_bytes`, `sum_bytes` and `counter_bytes`.
[[nodiscard]] PeerDescriptor describe_peer(const PeerLayout& layout, int rank, int ranks, std::uint64_t slot_bytes,
                                           std::uint64_t sum_bytes, std::uint64_t counter_bytes, std::uint64_t machine,
                                           std::int64_t process) noexcept;

/// Why the ranks that sent `all` (index r: rank r's) cannot share an exchange, or empty when they can. A function of
/// `all` alone, checked in this order, each in rank order: a descriptor without the magic; a layout version other than
/// rank 0's; a rank or size other than its place in `all`; a layout constant other than rank 0's; buffers other
/// than the rank's layout needs for all.size() ranks; a machine other than rank 0's; two ranks of one process.
[[nodiscard]] std::string peer_verdict(std::span<const PeerDescriptor> all);

/// The text in `bytes` up to its first NUL, or all of them when there is none: a peer's message, read within its
/// buffer whatever the peer sent.
[[nodiscard]] std::string bounded_text(std::span<const char> bytes);

/// Makes PeerExchange::create's exchanges. PeerExchange::create passes this build's layout as both layouts; a test
/// passes another to play a rank of another build (`advertised` and `allocated` alike) or a rank that allocates less
/// than it says (`allocated` smaller). An exchange made with any other layout than this build's must never reach the
/// kernels: they write by this build's.
struct PeerExchangeMaker {
  /// PeerExchange::create (its comment), this rank describing itself by `advertised` (its constants, and the bytes
  /// they need as what it allocated), checking its peers' mappings against `advertised` too, and allocating by
  /// `allocated`.
  static std::optional<PeerExchange> create(const Communicator& comm, const PeerLayout& advertised,
                                            const PeerLayout& allocated, std::string* why,
                                            std::chrono::milliseconds timeout);
};

}  // namespace lazygraph::detail
