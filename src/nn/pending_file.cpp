#include "pending_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <random>
#include <utility>

#include "json_util.hpp"

namespace lazygraph::nn::detail {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kTemporarySuffix = ".tmp";
constexpr std::size_t kRandomDigits = 16;

}  // namespace

std::string random_hex16() {
  std::random_device device;
  const std::uint64_t bits = (std::uint64_t{device()} << 32U) ^ std::uint64_t{device()};
  char text[kRandomDigits + 1];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(bits));
  return text;
}

fs::path folder_of(const fs::path& path) {
  fs::path folder = path.parent_path();
  return folder.empty() ? fs::path(".") : folder;
}

bool is_temporary_of(std::string_view name, std::string_view target_name) noexcept {
  // "." target_name "." 16 hex digits ".tmp"
  if (name.size() != 1 + target_name.size() + 1 + kRandomDigits + kTemporarySuffix.size()) return false;
  if (name.front() != '.' || name.substr(1, target_name.size()) != target_name) return false;
  std::string_view rest = name.substr(1 + target_name.size());
  if (rest.front() != '.' || !rest.ends_with(kTemporarySuffix)) return false;
  rest = rest.substr(1, kRandomDigits);
  for (const char c : rest) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

PendingFile::PendingFile(fs::path target) : target_(std::move(target)) {
  const fs::path folder = folder_of(target_);
  const std::string name = target_.filename().string();
  // 64 random bits: a taken name is a planted file or link, or a save running at the same time; try a few others.
  for (int attempt = 0;; ++attempt) {
    temporary_ = folder / ("." + name + "." + random_hex16() + std::string(kTemporarySuffix));
    fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd_ >= 0) return;
    if (errno != EEXIST || attempt == 8) {
      pending_ = false;  // nothing of ours to remove
      fail("cannot create the temporary file", errno);
    }
  }
}

PendingFile::PendingFile(PendingFile&& other) noexcept
    : target_(std::move(other.target_)),
      temporary_(std::move(other.temporary_)),
      fd_(std::exchange(other.fd_, -1)),
      pending_(std::exchange(other.pending_, false)) {}

PendingFile::~PendingFile() {
  if (fd_ >= 0) ::close(fd_);
  if (pending_) ::unlink(temporary_.c_str());
}

void PendingFile::fail(std::string_view doing, int error) const {
  throw CheckpointError(
      target_, "",
      std::string(doing) + " " + temporary_.string() + " (to be renamed over this file): " + errno_text(error));
}

void PendingFile::write(std::span<const std::byte> bytes) {
  const auto* data = reinterpret_cast<const char*>(bytes.data());
  std::size_t size = bytes.size();
  while (size > 0) {
    const ssize_t written = ::write(fd_, data, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      fail("cannot write", errno);
    }
    data += written;
    size -= static_cast<std::size_t>(written);
  }
}

void PendingFile::write(std::string_view text) {
  write(std::as_bytes(std::span<const char>(text.data(), text.size())));
}

void PendingFile::finish() {
  if (::fsync(fd_) != 0) fail("cannot flush", errno);
  const int closed = ::close(std::exchange(fd_, -1));
  if (closed != 0) fail("cannot close", errno);
}

void PendingFile::commit() {
  if (fd_ >= 0) finish();
  if (::rename(temporary_.c_str(), target_.c_str()) != 0) fail("cannot rename", errno);
  pending_ = false;
}

void sync_folder(const fs::path& folder) {
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw CheckpointError(folder, "", "cannot open the folder to flush it: " + errno_text(errno));
  const int synced = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (synced != 0 && error != EINVAL) {
    throw CheckpointError(folder, "", "cannot flush the folder: " + errno_text(error));
  }
}

}  // namespace lazygraph::nn::detail
