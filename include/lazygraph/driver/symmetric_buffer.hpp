#pragma once
/// \file
/// SymmetricBuffer: device memory that NCCL's symmetric kernels use (NCCL 2.27 and newer). Every rank of a
/// communicator allocates one with ncclMemAlloc, and all of them are registered together as one window
/// (ncclCommWindowRegister with NCCL_WIN_COLL_SYMMETRIC): each GPU then maps its peers' buffers, and an all-reduce,
/// all-gather or reduce-scatter whose send and recv lie in such buffers, at the same offset on every rank, runs
/// kernels that read and write the peers' memory directly instead of staging through NCCL's own buffers. For small
/// messages, the all-reduces of a decode step, that is NCCL's lowest latency; for large ones its bandwidth is
/// NCCL's usual. Zeroed when created; ordinary device memory otherwise: kernels and copies read and write it like a
/// DeviceBuffer's.
///
///     auto x = SymmetricBuffer<half>::create_all(comms, d);       // one per rank, registered together
///     s.record(gemv(..., x[rank].view()) >> all_reduce(comms[rank], x[rank].view()));

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "lazygraph/detail/driver/nccl_types.hpp"
#include "lazygraph/driver/communicator.hpp"
#include "lazygraph/driver/device_span.hpp"

namespace lazygraph {

namespace detail {

/// One rank's symmetric memory: allocated by NCCL and registered in a window of its communicator, which it keeps
/// alive. Deregistered (a local call) and freed with the last owner; a communicator aborted meanwhile has no window
/// left to deregister.
struct SymmetricAllocation {
  SymmetricAllocation(std::shared_ptr<CommunicatorState> comm, CUdeviceptr address, std::size_t bytes);
  ~SymmetricAllocation();
  SymmetricAllocation(const SymmetricAllocation&) = delete;
  SymmetricAllocation& operator=(const SymmetricAllocation&) = delete;

  std::shared_ptr<CommunicatorState> comm;
  CUdeviceptr address;
  std::size_t bytes;
  nccl::Window window = nullptr;
};

/// `bytes` of symmetric memory for every communicator of `comms`, registered as one window.
/// \throws UsageError for no communicators, communicators of different cliques, an aborted one, or NCCL without
/// symmetric memory; NcclError (out of memory, or registration refused).
std::vector<std::shared_ptr<SymmetricAllocation>> allocate_symmetric(std::span<const Communicator> comms,
                                                                     std::size_t bytes);
/// `bytes` of symmetric memory for this rank of `comm` alone, registered in a window with its peers, which make theirs
/// at the same time (each from its own thread or process). \throws as allocate_symmetric.
std::shared_ptr<SymmetricAllocation> allocate_symmetric_rank(const Communicator& comm, std::size_t bytes);
/// Whether NCCL loads and has symmetric memory (2.27 or newer); false with the reason in `why` (when not null).
bool symmetric_supported(std::string* why) noexcept;

}  // namespace detail

/// One rank's buffer of `size()` elements of T in a symmetric window (see the file comment). Move-only; spans taken
/// from it, and graphs that recorded them, keep the memory (and its communicator) alive.
template <class T>
requires std::is_trivially_copyable_v<T>
class SymmetricBuffer {
 public:
  /// One buffer of `count` elements per communicator of `comms`, all the ranks of one create_all, in rank order,
  /// registered together (the registration is collective: it needs every rank, which this call provides).
  /// \throws UsageError for count 0, no communicators or ranks missing, an aborted communicator, or an NCCL without
  /// symmetric memory (symmetric_supported says why); NcclError; the memory is never left allocated.
  static std::vector<SymmetricBuffer> create_all(std::span<const Communicator> comms, std::size_t count) {
    if (count == 0) throw UsageError("SymmetricBuffer::create_all: count 0 (a window needs memory)");
    std::vector<SymmetricBuffer> out;
    for (auto& a : detail::allocate_symmetric(comms, count * sizeof(T))) out.push_back(SymmetricBuffer(a, count));
    return out;
  }
  /// This rank's buffer of `count` elements: every rank of `comm`'s communicator must call it at the same time, each
  /// from its own thread or process (the registration is collective), with the same count. For ranks in different
  /// processes. \throws as create_all.
  static SymmetricBuffer create(const Communicator& comm, std::size_t count) {
    if (count == 0) throw UsageError("SymmetricBuffer::create: count 0 (a window needs memory)");
    return SymmetricBuffer(detail::allocate_symmetric_rank(comm, count * sizeof(T)), count);
  }
  /// Whether the NCCL here has symmetric memory (2.27 or newer); false with the reason in `why` (when not null).
  static bool supported(std::string* why = nullptr) noexcept { return detail::symmetric_supported(why); }

  /// The whole buffer, writable; the span keeps the memory alive.
  [[nodiscard]] DeviceSpan<T> view() const noexcept { return {a_->address, count_, a_}; }
  /// The whole buffer, read-only.
  [[nodiscard]] DeviceSpan<const T> cview() const noexcept { return view(); }
  /// Its elements (NCCL may have allocated more bytes, to its granularity).
  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  /// The device of its rank.
  [[nodiscard]] const Device& device() const noexcept { return a_->comm->device; }

 private:
  SymmetricBuffer(std::shared_ptr<detail::SymmetricAllocation> a, std::size_t count)
      : a_(std::move(a)), count_(count) {}
  std::shared_ptr<detail::SymmetricAllocation> a_;
  std::size_t count_;
};

}  // namespace lazygraph
