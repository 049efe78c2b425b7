#include "lazygraph/driver/communicator.hpp"

#include <cstring>
#include <fstream>
#include <set>
#include <thread>
#include <utility>

#include "lazygraph/detail/driver/driver_api.hpp"
#include "lazygraph/detail/driver/nccl_api.hpp"
#include "lazygraph/driver/error.hpp"
#include "lazygraph/driver/stream.hpp"

namespace lazygraph {

bool nccl_available(std::string* why) noexcept { return detail::nccl::try_load(why); }

std::string nccl_version() { return detail::nccl::version_text(detail::nccl::version()); }

bool nccl_bounded_join() noexcept { return detail::nccl::bounded_join_supported(); }

std::string nccl_library() { return detail::nccl::library_path(); }

void set_nccl_library(std::string path) { detail::nccl::set_library_path(std::move(path)); }

std::string_view reduce_op_name(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::product:
      return "product";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
    case ReduceOp::average:
      return "average";
  }
  return "unknown";
}

// ---- CommunicatorId ----

CommunicatorId CommunicatorId::create() {
  CommunicatorId id;
  id.id_ = detail::nccl::get_unique_id();
  return id;
}

CommunicatorId CommunicatorId::from_bytes(std::span<const std::byte> bytes) {
  CommunicatorId id;
  if (bytes.size() != id.id_.internal.size()) {
    throw UsageError("CommunicatorId::from_bytes: an id has " + std::to_string(id.id_.internal.size()) +
                     " bytes, got " + std::to_string(bytes.size()));
  }
  std::memcpy(id.id_.internal.data(), bytes.data(), bytes.size());
  return id;
}

std::span<const std::byte> CommunicatorId::bytes() const noexcept {
  return std::as_bytes(std::span<const char>(id_.internal));
}

void CommunicatorId::write_file(const std::filesystem::path& path) const {
  std::filesystem::path temporary = path;
  temporary += ".partial";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(id_.internal.data(), static_cast<std::streamsize>(id_.internal.size()));
    out.close();
    if (!out) throw Error("CommunicatorId::write_file: cannot write " + temporary.string());
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec)
    throw Error("CommunicatorId::write_file: cannot rename " + temporary.string() + " to " + path.string() + ": " +
                ec.message());
}

CommunicatorId CommunicatorId::read_file(const std::filesystem::path& path, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  CommunicatorId id;
  for (;;) {
    std::error_code ec;
    if (std::filesystem::exists(path, ec)) {
      const auto size = std::filesystem::file_size(path, ec);
      if (!ec && size != id.id_.internal.size()) {
        throw UsageError("CommunicatorId::read_file: " + path.string() + " has " + std::to_string(size) +
                         " bytes, not the " + std::to_string(id.id_.internal.size()) + " of an id");
      }
      std::ifstream in(path, std::ios::binary);
      in.read(id.id_.internal.data(), static_cast<std::streamsize>(id.id_.internal.size()));
      if (in.gcount() == static_cast<std::streamsize>(id.id_.internal.size())) return id;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      throw TimeoutError("CommunicatorId::read_file: no id appeared at " + path.string() + " within " +
                         std::to_string(timeout.count()) + " ms (has rank 0 written it with write_file?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// ---- Clique ----

namespace detail {

void Clique::begin_compare() {
  const std::lock_guard lock(mutex);
  for (auto& s : seen) s.clear();
  comparing = true;
}

void Clique::cancel_compare() noexcept {
  const std::lock_guard lock(mutex);
  comparing = false;
}

void Clique::end_compare() {
  const std::lock_guard lock(mutex);
  comparing = false;
  for (std::size_t r = 1; r < seen.size(); ++r) {
    if (seen[r].size() != seen[0].size()) {
      throw UsageError("the ranks recorded different collectives: rank 0 recorded " + std::to_string(seen[0].size()) +
                       ", rank " + std::to_string(r) + " " + std::to_string(seen[r].size()) +
                       " (every rank must record the same collectives in the same order)");
    }
  }
}

void Clique::note(int rank, const std::string& signature) {
  const std::lock_guard lock(mutex);
  if (!comparing) return;
  auto& mine = seen.at(static_cast<std::size_t>(rank));
  const std::size_t position = mine.size();
  for (std::size_t r = 0; r < seen.size(); ++r) {
    if (static_cast<int>(r) == rank || seen[r].size() <= position || seen[r][position] == signature) continue;
    throw UsageError("the ranks disagree at collective #" + std::to_string(position) + ": rank " + std::to_string(r) +
                     " recorded " + seen[r][position] + ", rank " + std::to_string(rank) + " " + signature +
                     " (every rank must record the same collectives, with the same sizes, types and "
                     "operations, in the same order)");
  }
  mine.push_back(signature);
}

CommunicatorState::CommunicatorState(const Device& device_in, nccl::Comm comm_in, int rank_in, int size_in,
                                     std::shared_ptr<Clique> clique_in)
    : device(device_in), comm(comm_in), rank(rank_in), size(size_in), clique(std::move(clique_in)) {}

CommunicatorState::~CommunicatorState() {
  if (!aborted.load()) nccl::comm_destroy_no_throw(comm);
}

}  // namespace detail

// ---- Communicator ----

std::vector<Communicator> Communicator::create_all(std::span<const Device> devices) {
  if (devices.empty()) throw UsageError("Communicator::create_all: no devices");
  std::vector<int> ordinals;
  ordinals.reserve(devices.size());
  std::set<int> distinct;
  for (const Device& d : devices) {
    if (!distinct.insert(d.ordinal()).second) {
      throw UsageError("Communicator::create_all: device " + std::to_string(d.ordinal()) +
                       " is listed twice (NCCL runs one rank per GPU)");
    }
    ordinals.push_back(d.ordinal());
  }
  const std::vector<detail::nccl::Comm> comms = detail::nccl::comm_init_all(ordinals);
  auto clique = std::make_shared<detail::Clique>(static_cast<int>(devices.size()));
  std::vector<Communicator> out;
  out.reserve(devices.size());
  for (std::size_t i = 0; i < devices.size(); ++i) {
    out.push_back(Communicator(std::make_shared<detail::CommunicatorState>(devices[i], comms[i], static_cast<int>(i),
                                                                           static_cast<int>(devices.size()), clique)));
  }
  return out;
}

Communicator::Communicator(const Device& device, int rank, int ranks, const CommunicatorId& id,
                           std::chrono::milliseconds join_timeout) {
  detail::check_join(rank, ranks, join_timeout);
  const std::string object = "rank " + std::to_string(rank) + " of " + std::to_string(ranks) + " on device " +
                             std::to_string(device.ordinal());
  detail::nccl::Comm comm = detail::nccl::comm_init_rank(device.context(), ranks, id.raw(), rank, object, join_timeout);
  try {
    state_ = std::make_shared<detail::CommunicatorState>(device, comm, rank, ranks, nullptr);
  } catch (...) {
    detail::nccl::comm_abort_no_throw(comm);  // not handed out yet: ours to free
    throw;
  }
}

std::string Communicator::describe() const {
  return "rank " + std::to_string(rank()) + " of " + std::to_string(size()) + " on device " +
         std::to_string(device().ordinal());
}

detail::nccl::Comm Communicator::get() const {
  if (aborted()) throw UsageError("communicator " + describe() + " was aborted: make a new one");
  return state_->comm;
}

void Communicator::check() const {
  const detail::nccl::Result r = detail::nccl::comm_async_error(get());
  if (r != detail::nccl::success && r != detail::nccl::in_progress) {
    detail::nccl::throw_error(r, "ncclCommGetAsyncError", "communicator " + describe(), state_->comm);
  }
}

void Communicator::abort() const noexcept {
  if (state_->aborted.exchange(true)) return;
  detail::nccl::comm_abort_no_throw(state_->comm);
}

void Communicator::wait(const Stream& stream, std::chrono::milliseconds timeout) const {
  if (stream.is_capturing()) {
    throw CaptureError("Communicator::wait on a stream that captures a graph: end the capture first");
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(2);
  for (;;) {
    if (stream.query()) return;
    detail::nccl::Result r = detail::nccl::success;
    try {
      r = detail::nccl::comm_async_error(get());
    } catch (...) {
      abort();
      throw;
    }
    if (r != detail::nccl::success && r != detail::nccl::in_progress) {
      try {
        detail::nccl::throw_error(r, "ncclCommGetAsyncError", "communicator " + describe() + " (aborted)",
                                  state_->comm);
      } catch (const NcclError&) {
        abort();
        throw;
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      abort();
      throw TimeoutError("Communicator::wait: the work on " + describe() + "'s stream did not finish within " +
                         std::to_string(timeout.count()) +
                         " ms (a peer that never joined the collective?); the communicator was aborted");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

namespace detail {

void check_join(int rank, int ranks, std::chrono::milliseconds join_timeout) {
  if (ranks <= 0 || rank < 0 || rank >= ranks) {
    throw UsageError("Communicator: rank " + std::to_string(rank) + " of " + std::to_string(ranks) +
                     " (a rank is in [0, ranks))");
  }
  if (join_timeout <= std::chrono::milliseconds::zero()) {
    throw UsageError("Communicator: rank " + std::to_string(rank) + " of " + std::to_string(ranks) +
                     ": the join timeout must be positive, got " + std::to_string(join_timeout.count()) +
                     " ms (to wait longer for the peers, pass a longer timeout)");
  }
}

void check_ranks_in_order(std::span<const Communicator> comms, std::string_view who, std::string_view why) {
  if (comms.empty()) throw UsageError(std::string(who) + ": no communicators");
  const std::shared_ptr<Clique>& clique = comms[0].state()->clique;
  for (std::size_t i = 0; i < comms.size(); ++i) {
    const Communicator& c = comms[i];
    if (c.state()->clique != clique || c.rank() != static_cast<int>(i) || c.size() != static_cast<int>(comms.size())) {
      throw UsageError(std::string(who) + " needs every rank of one Communicator::create_all, in rank order (" +
                       std::string(why) + "); position " + std::to_string(i) + " holds " + c.describe());
    }
  }
}

}  // namespace detail

}  // namespace lazygraph
