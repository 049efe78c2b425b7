#include "lazygraph/ops/collective_log.hpp"

#include <array>
#include <cstdint>

#include "lazygraph/driver/device_buffer.hpp"
#include "lazygraph/driver/error.hpp"
#include "lazygraph/ops/collective.hpp"
#include "lazygraph/ops/copy.hpp"

namespace lazygraph {

namespace {
thread_local CollectiveLog* active_log = nullptr;
}  // namespace

CollectiveLog::CollectiveLog(const Communicator& comm) : comm_(comm) {
  if (active_log != nullptr) {
    throw UsageError("CollectiveLog: this thread already notes its collectives in another log (one at a time)");
  }
  active_log = this;
}

CollectiveLog::~CollectiveLog() {
  if (active_log == this) active_log = nullptr;
}

CollectiveLog* CollectiveLog::active() noexcept { return active_log; }

void CollectiveLog::note(const Communicator& comm, std::string signature) {
  if (comm == comm_) signatures_.push_back(std::move(signature));
}

std::uint64_t collectives_digest(const std::vector<std::string>& signatures) noexcept {
  std::uint64_t h = 14695981039346656037ULL;
  const auto mix = [&](unsigned char c) {
    h ^= c;
    h *= 1099511628211ULL;
  };
  for (const std::string& s : signatures) {
    for (const char c : s) mix(static_cast<unsigned char>(c));
    mix(0);  // "ab" + "c" differs from "a" + "bc"
  }
  return h;
}

void check_same_collectives(const Communicator& comm, const Stream& stream, CollectiveLog& log, std::string_view what) {
  if (active_log == &log) active_log = nullptr;  // the exchange below is not one of the logged collectives
  const auto ranks = static_cast<std::size_t>(comm.size());
  const std::array<std::uint64_t, 2> mine{static_cast<std::uint64_t>(log.signatures().size()),
                                          collectives_digest(log.signatures())};
  DeviceBuffer<std::uint64_t> send(comm.device(), 2);
  DeviceBuffer<std::uint64_t> all(comm.device(), 2 * ranks);
  copy(send.view(), std::span<const std::uint64_t>(mine)).sync_on(stream);
  all_gather<std::uint64_t>(comm, send.cview(), all.view()).sync_on(stream);
  std::vector<std::uint64_t> seen(2 * ranks);
  copy(std::span<std::uint64_t>(seen), all.cview()).sync_on(stream);
  std::string differ;
  for (std::size_t r = 1; r < ranks; ++r) {
    if (seen[2 * r] != seen[0] || seen[2 * r + 1] != seen[1]) {
      differ += (differ.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + " (" +
                std::to_string(seen[2 * r]) + " collectives)";
    }
  }
  if (!differ.empty()) {
    throw UsageError("the ranks made " + std::string(what) + " with different collectives: rank 0 recorded " +
                     std::to_string(seen[0]) + ", and these differ from it: " + differ +
                     " (every rank must make the same calls with the same shapes; replaying would hang in NCCL)");
  }
}

}  // namespace lazygraph
