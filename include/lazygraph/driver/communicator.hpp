#pragma once
/// \file
/// Communicator: one GPU's membership in an NCCL communicator (a clique of ranks that run collectives together),
/// as a cheap copyable handle like Device. NCCL is loaded at run time (nccl_api.hpp): without it, everything
/// else in lazygraph works, and making a communicator throws NcclUnavailable saying where NCCL was looked for.
///
/// Two ways to make one:
///   - every GPU of this process at once: `Communicator::create_all({Device::get(0), Device::get(1)})`, rank i
///     on device i (ncclCommInitAll). Drive the ranks from one thread per device (MultiDeviceGraph does), or
///     capture their collectives into graphs: one thread issuing rank 0's collective and then rank 1's would
///     wait in rank 0's for a peer that never comes.
///   - one GPU per process: rank 0 makes a CommunicatorId, the caller hands its 128 bytes to every other process
///     (CommunicatorId::write_file / read_file over a shared file system, or any channel of the caller's), and each
///     process makes `Communicator(device, rank, ranks, id, join_timeout)`: it returns once every rank has come,
///     and with NCCL 2.18 or newer (nccl_bounded_join()) throws TimeoutError when they have not within the timeout.
///
/// Failure: a rank that fails (its process dies, a peer's kernel faults) leaves the others' collectives waiting.
/// `wait(stream, timeout)` bounds that: it polls the stream and the communicator's asynchronous error and, on an
/// error or when the time runs out, aborts the communicator (its kernels stop waiting) and throws. An aborted
/// communicator refuses further collectives (UsageError); make a new one.

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lazygraph/detail/driver/nccl_types.hpp"
#include "lazygraph/driver/device.hpp"
#include "lazygraph/driver/device_buffer.hpp"

namespace lazygraph {

class Stream;

/// True when NCCL loads (nccl_api.hpp says where it looks); otherwise false with the reason in `why` (when given).
/// Never throws.
bool nccl_available(std::string* why = nullptr) noexcept;
/// The loaded NCCL's version, e.g. "2.28.3". \throws NcclUnavailable.
std::string nccl_version();
/// The file NCCL was loaded from. \throws NcclUnavailable.
std::string nccl_library();
/// True when NCCL loads and a Communicator made from an id bounds its wait for the other ranks by its join timeout
/// (NCCL 2.18 or newer, with ncclCommInitRankConfig and ncclCommSplit). False with older NCCL, whose join waits for
/// the other ranks without a bound, and without NCCL. Never throws.
bool nccl_bounded_join() noexcept;
/// Uses the NCCL library at `path` (instead of LAZYGRAPH_NCCL_LIBRARY and the search). Call it before the first
/// communicator. \throws UsageError when NCCL is already loaded from another file.
void set_nccl_library(std::string path);

/// The reduction of all_reduce and reduce_scatter.
enum class ReduceOp {
  sum,      ///< the sum over the ranks
  product,  ///< the product over the ranks
  max,      ///< the largest value
  min,      ///< the smallest value
  average,  ///< the sum divided by the number of ranks
};

/// The name of `op` ("sum", "product", ...), for messages.
std::string_view reduce_op_name(ReduceOp op) noexcept;

/// The 128 bytes that name one communicator: made once (by rank 0) and given to every rank's constructor.
class CommunicatorId {
 public:
  /// A new id (ncclGetUniqueId). \throws NcclUnavailable, NcclError.
  static CommunicatorId create();
  /// The id whose bytes() were `bytes`. \throws UsageError unless there are exactly 128 bytes.
  static CommunicatorId from_bytes(std::span<const std::byte> bytes);
  /// The id's bytes, to send to the other ranks.
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept;

  /// Writes the id to `path` atomically, so a reader never sees half of it: into a new file beside it under a unique
  /// name (made with O_EXCL and O_NOFOLLOW, mode 0600: nothing already there is followed or reused), flushed to disk,
  /// then renamed to `path` (replacing what was there, a symbolic link itself rather than its target). Whoever can
  /// read the id can join the communicator: keep it in a folder that only the ranks' user can write.
  /// \throws Error naming the file and the system's reason when it cannot be written.
  void write_file(const std::filesystem::path& path) const;
  /// Reads the id from `path`, waiting until the file appears (rank 0 writes it), at most `timeout`. It trusts only
  /// what write_file makes (detail::id_file_refusal): a regular file, not a symbolic link, owned by this process's user
  /// or root, that no one else may write, of exactly 128 bytes; it checks the file it opened (fstat), not the path.
  /// \throws TimeoutError when no file appeared in time; UsageError for a file it does not trust, saying why;
  ///         Error when the file cannot be opened or read (permissions).
  static CommunicatorId read_file(const std::filesystem::path& path, std::chrono::milliseconds timeout);

  /// The raw id NCCL takes.
  [[nodiscard]] const detail::nccl::UniqueId& raw() const noexcept { return id_; }

 private:
  detail::nccl::UniqueId id_;
};

namespace detail {

/// The ranks of one process's create_all. While comparing (MultiDeviceGraph's capture), every collective a rank
/// records is compared with the other ranks' collective at the same position before NCCL sees it, so that ranks
/// that disagree (another size, type or kind) fail with a UsageError instead of hanging in NCCL.
struct Clique {
  explicit Clique(int ranks) : seen(static_cast<std::size_t>(ranks)) {}
  /// Forgets what was recorded and starts comparing.
  void begin_compare();
  /// Stops comparing. \throws UsageError when the ranks recorded different numbers of collectives.
  void end_compare();
  /// Stops comparing, without checking (after a failure).
  void cancel_compare() noexcept;
  /// Rank `rank` is about to record `signature` ("all_reduce sum of 1024 float16"): \throws UsageError naming both
  /// ranks when another rank recorded something else at this position.
  void note(int rank, const std::string& signature);

  std::mutex mutex;
  bool comparing = false;
  std::vector<std::vector<std::string>> seen;  ///< per rank, its collectives in order
};

/// What a Communicator handle shares: the NCCL communicator, its device, rank and size.
struct CommunicatorState {
  CommunicatorState(const Device& device, nccl::Comm comm, int rank, int size, std::shared_ptr<Clique> clique);
  ~CommunicatorState();
  CommunicatorState(const CommunicatorState&) = delete;
  CommunicatorState& operator=(const CommunicatorState&) = delete;

  Device device;
  nccl::Comm comm;
  int rank;
  int size;
  std::shared_ptr<Clique> clique;  ///< null for a communicator made per process
  mutable std::mutex mutex;        ///< NCCL calls on one communicator must not overlap
  mutable std::atomic<bool> aborted{false};
  /// A word set on the stream before each eager collective, so that the collective starts after the work before
  /// it has completed (ops/collective.cpp says why); made at the first, under `mutex`.
  mutable std::optional<DeviceBuffer<std::uint32_t>> fence;
};

}  // namespace detail

/// One rank of an NCCL communicator, on one device (see the file comment). Copies share the communicator, which
/// is destroyed (ncclCommFinalize, ncclCommDestroy) when the last handle and the last graph that captured one of its
/// collectives are gone.
///
/// Thread safety: collectives on one communicator are serialised by the handle (NCCL forbids concurrent calls on
/// one communicator); different communicators may be driven from different threads at once.
class Communicator {
 public:
  /// One communicator per device, rank i on devices[i] (ncclCommInitAll).
  /// \throws UsageError for no devices or a device listed twice; NcclUnavailable; NcclError.
  static std::vector<Communicator> create_all(std::span<const Device> devices);
  /// This process's rank `rank` of `ranks`, on `device`: returns once all ranks have joined, as a blocking
  /// communicator like create_all's (its later calls, collectives captured into graphs included, behave the same).
  /// With NCCL 2.18 or newer (nccl_bounded_join()) the join waits at most `join_timeout`: past it, the NCCL
  /// communicator is aborted (the GPU stays usable) and TimeoutError names the rank, the ranks and the timeout.
  /// Every rank must then use NCCL 2.18 or newer (they join through a non-blocking communicator and split it into
  /// this one). With older NCCL the join waits for the other ranks without a bound and `join_timeout` is unused.
  /// \throws UsageError for a rank outside [0, ranks) or a join_timeout that is not positive (before NCCL is
  ///         touched); NcclUnavailable; NcclError; TimeoutError.
  Communicator(const Device& device, int rank, int ranks, const CommunicatorId& id,
               std::chrono::milliseconds join_timeout = std::chrono::seconds(60));

  /// This rank, from 0.
  [[nodiscard]] int rank() const noexcept { return state_->rank; }
  /// The number of ranks.
  [[nodiscard]] int size() const noexcept { return state_->size; }
  /// The device this rank runs on.
  [[nodiscard]] const Device& device() const noexcept { return state_->device; }
  /// True once abort() ran (or wait() aborted it).
  [[nodiscard]] bool aborted() const noexcept { return state_->aborted.load(); }

  /// \throws NcclError when the communicator's background work reported an error (ncclCommGetAsyncError).
  void check() const;
  /// Waits until `stream` has finished its work, for at most `timeout`, checking this communicator's asynchronous
  /// error meanwhile. On an error or a timeout it aborts the communicator (so that its kernels stop waiting for
  /// peers) and throws NcclError or TimeoutError, naming the rank. Not while the stream captures (CaptureError).
  void wait(const Stream& stream, std::chrono::milliseconds timeout) const;
  /// Aborts the communicator now (ncclCommAbort): kernels of its collectives stop waiting; later collectives on it
  /// are refused. For a rank that gives up on its peers.
  void abort() const noexcept;

  /// The NCCL communicator. \throws UsageError once aborted.
  [[nodiscard]] detail::nccl::Comm get() const;
  /// The shared state; a graph that captured a collective keeps it.
  [[nodiscard]] const std::shared_ptr<detail::CommunicatorState>& state() const noexcept { return state_; }
  /// "rank 0 of 2 on device 0", for messages.
  [[nodiscard]] std::string describe() const;

  /// True for copies of one handle.
  friend bool operator==(const Communicator& a, const Communicator& b) noexcept { return a.state_ == b.state_; }

 private:
  explicit Communicator(std::shared_ptr<detail::CommunicatorState> state) : state_(std::move(state)) {}
  std::shared_ptr<detail::CommunicatorState> state_;
};

namespace detail {

/// The arguments of Communicator(device, rank, ranks, id, join_timeout), checked before NCCL is touched.
/// \throws UsageError naming them for a rank outside [0, ranks) or a join_timeout that is not positive (zero would
///         give up before the peers could answer; there is no "wait for ever": pass a long timeout instead).
void check_join(int rank, int ranks, std::chrono::milliseconds join_timeout);

/// Checks that `comms` are the ranks of one communicator in rank order: rank i at position i, each of
/// comms.size() ranks, all from one Communicator::create_all (or all made per process). Code that waits for every
/// rank (a multi-device capture, a symmetric registration) needs that.
/// \throws UsageError naming `who`, `why` and the first position that breaks it, or `who` when there is none.
void check_ranks_in_order(std::span<const Communicator> comms, std::string_view who, std::string_view why);

}  // namespace detail

}  // namespace lazygraph
