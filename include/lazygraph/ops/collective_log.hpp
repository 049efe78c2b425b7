#pragma once
/// \file
/// Ranks in different processes cannot see each other's graphs, so a rank that captured other collectives than its
/// peers (another size, count or order: a different config, batch or call) would meet them in NCCL and hang there,
/// or mix their data. CollectiveLog records what one rank's collectives were while a graph is made;
/// check_same_collectives then compares a digest of that record across the ranks with one small eager all-gather,
/// before the graph's first replay, and every rank throws the same UsageError when they differ. (Ranks of one
/// process recorded together by MultiDeviceGraph are compared collective by collective instead: communicator.hpp's
/// Clique.)
///
///     CollectiveLog log(comm);                      // while this lives, this thread's collectives on comm are noted
///     CudaGraph<> g = CudaGraph<>::capture(stream, step);
///     check_same_collectives(comm, stream, log, "the step graph");  // every rank, before g's first launch

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lazygraph/driver/communicator.hpp"
#include "lazygraph/driver/stream.hpp"

namespace lazygraph {

/// Notes every collective this thread executes or captures on `comm` while it lives (one log per thread at a time).
class CollectiveLog {
 public:
  /// Starts noting. \throws UsageError when this thread already has a log.
  explicit CollectiveLog(const Communicator& comm);
  ~CollectiveLog();
  CollectiveLog(const CollectiveLog&) = delete;
  CollectiveLog& operator=(const CollectiveLog&) = delete;

  /// What was noted so far, in order: "all_reduce sum of 1024 float16", ...
  [[nodiscard]] const std::vector<std::string>& signatures() const noexcept { return signatures_; }
  /// The communicator it notes.
  [[nodiscard]] const Communicator& communicator() const noexcept { return comm_; }

  /// The log of this thread, or null. For the collectives (ops layer), which note themselves in it.
  [[nodiscard]] static CollectiveLog* active() noexcept;
  /// Notes `signature` when this log's communicator is `comm`'s.
  void note(const Communicator& comm, std::string signature);

 private:
  Communicator comm_;
  std::vector<std::string> signatures_;
};

/// Compares `log`'s collectives with every other rank's of its communicator: each rank's count and a 64-bit digest of
/// its signatures, all-gathered eagerly on `stream` (which must not be capturing; the log stops noting first). Every
/// rank must call it at the same point. \throws UsageError, on every rank alike, naming `what` and the ranks whose
/// collectives differ from rank 0's (their counts); NcclError.
void check_same_collectives(const Communicator& comm, const Stream& stream, CollectiveLog& log, std::string_view what);

/// The 64-bit FNV-1a digest of `signatures` in order (what check_same_collectives exchanges).
[[nodiscard]] std::uint64_t collectives_digest(const std::vector<std::string>& signatures) noexcept;

}  // namespace lazygraph
