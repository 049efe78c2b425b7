#include "lazygraph/driver/communicator.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <set>
#include <thread>
#include <utility>

#include "lazygraph/detail/driver/communicator_id_file.hpp"
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

namespace {

/// `what` failed on `path`: an Error naming both and the system's reason (errno `error`).
[[noreturn]] void throw_file_error(const std::string& what, const std::filesystem::path& path, int error) {
  throw Error("CommunicatorId::" + what + " " + path.string() + ": " + std::strerror(error));
}

/// A file descriptor, closed when it goes; the file it created is removed then too, unless kept.
class OpenFile {
 public:
  OpenFile(int fd, std::filesystem::path created) : fd_(fd), created_(std::move(created)) {}
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;
  OpenFile(OpenFile&&) = delete;
  OpenFile& operator=(OpenFile&&) = delete;
  ~OpenFile() {
    if (fd_ >= 0) (void)::close(fd_);
    if (!created_.empty()) (void)::unlink(created_.c_str());
  }
  [[nodiscard]] int get() const noexcept { return fd_; }
  /// The file it created (empty when it opened one).
  [[nodiscard]] const std::filesystem::path& created() const noexcept { return created_; }
  /// Closes it now. \returns the errno of a failed close, or 0.
  int close() noexcept {
    const int r = ::close(fd_);
    fd_ = -1;
    return r == 0 ? 0 : errno;
  }
  /// Keeps the file it created (renamed into place).
  void keep() noexcept { created_.clear(); }

 private:
  int fd_;
  std::filesystem::path created_;
};

/// Opens a new file beside `path`, under a name no file has (path.<pid>-<random>.partial), with mode 0600, O_EXCL and
/// O_NOFOLLOW: nothing already there (a file, a symbolic link someone planted) is followed or reused.
std::unique_ptr<OpenFile> create_beside(const std::filesystem::path& path) {
  std::random_device random;
  for (int attempt = 0;; ++attempt) {
    std::filesystem::path temporary = path;
    temporary += "." + std::to_string(::getpid()) + "-" + std::to_string(random()) + ".partial";
    const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) return std::make_unique<OpenFile>(fd, std::move(temporary));
    if (errno != EEXIST || attempt == 16) throw_file_error("write_file: cannot create", temporary, errno);
  }
}

}  // namespace

void CommunicatorId::write_file(const std::filesystem::path& path) const {
  const std::unique_ptr<OpenFile> file = create_beside(path);
  // The umask may have taken bits of 0600 away; the file is for its owner to read and write, and no one else.
  if (::fchmod(file->get(), 0600) != 0) throw_file_error("write_file: cannot set the mode of", file->created(), errno);
  const char* at = id_.internal.data();
  std::size_t left = id_.internal.size();
  while (left > 0) {
    const ssize_t wrote = ::write(file->get(), at, left);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) throw_file_error("write_file: cannot write", file->created(), wrote < 0 ? errno : EIO);
    at += wrote;
    left -= static_cast<std::size_t>(wrote);
  }
  // On disk before it takes its name, so that a reader (on another machine of a shared file system too) finds it whole.
  if (::fsync(file->get()) != 0) throw_file_error("write_file: cannot flush", file->created(), errno);
  if (const int error = file->close(); error != 0) throw_file_error("write_file: cannot close", file->created(), error);
  // rename replaces what was at `path` (a symbolic link itself, never its target) in one step.
  if (::rename(file->created().c_str(), path.c_str()) != 0) {
    const int error = errno;
    throw Error("CommunicatorId::write_file: cannot rename " + file->created().string() + " to " + path.string() +
                ": " + std::strerror(error));
  }
  file->keep();
}

CommunicatorId CommunicatorId::read_file(const std::filesystem::path& path, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  CommunicatorId id;
  const std::size_t size = id.id_.internal.size();
  for (;;) {
    // O_NOFOLLOW: a symbolic link at `path` is refused (ELOOP); O_NONBLOCK: a FIFO there does not block the open.
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
      const OpenFile file(fd, {});
      struct stat st {};
      if (::fstat(fd, &st) != 0) throw_file_error("read_file: cannot inspect", path, errno);
      const detail::IdFileFacts facts{S_ISREG(st.st_mode), static_cast<std::uint32_t>(st.st_mode & 07777U),
                                      static_cast<std::uint32_t>(st.st_uid), static_cast<std::uint64_t>(st.st_size)};
      if (std::string why = detail::id_file_refusal(facts, static_cast<std::uint32_t>(::geteuid()), size);
          !why.empty()) {
        throw UsageError("CommunicatorId::read_file: " + path.string() + " " + why);
      }
      std::size_t got = 0;
      while (got < size) {
        const ssize_t r = ::read(fd, id.id_.internal.data() + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) throw_file_error("read_file: cannot read", path, errno);
        if (r == 0) break;
        got += static_cast<std::size_t>(r);
      }
      if (got != size) {
        throw UsageError("CommunicatorId::read_file: " + path.string() + " ended after " + std::to_string(got) +
                         " of its " + std::to_string(size) + " bytes (changed while it was read?)");
      }
      return id;
    }
    if (errno == ELOOP) {
      throw UsageError("CommunicatorId::read_file: " + path.string() +
                       " is a symbolic link; an id is read from a regular file only (give the file's own path)");
    }
    if (errno != ENOENT) throw_file_error("read_file: cannot open", path, errno);
    if (std::chrono::steady_clock::now() >= deadline) {
      throw TimeoutError("CommunicatorId::read_file: no id appeared at " + path.string() + " within " +
                         std::to_string(timeout.count()) + " ms (has rank 0 written it with write_file?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

namespace detail {

std::string id_file_refusal(const IdFileFacts& facts, std::uint32_t reader, std::uint64_t id_bytes) {
  if (!facts.regular) return "is not a regular file (a directory, FIFO, socket or device)";
  if (facts.owner != reader && facts.owner != 0) {
    return "belongs to user " + std::to_string(facts.owner) + ", not to this process's user " + std::to_string(reader) +
           " (or root): an id of another user would join this rank to their communicator";
  }
  if ((facts.mode & 022U) != 0) {
    std::string mode = "0000";
    for (std::size_t k = 0; k < 4; ++k) mode[3 - k] = static_cast<char>('0' + ((facts.mode >> (3 * k)) & 7U));
    return "has mode " + mode +
           ": others than its owner may write it, so the id may not be rank 0's (write_file makes it 0600)";
  }
  if (facts.bytes != id_bytes) {
    return "has " + std::to_string(facts.bytes) + " bytes, not the " + std::to_string(id_bytes) + " of an id";
  }
  return {};
}

}  // namespace detail

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
