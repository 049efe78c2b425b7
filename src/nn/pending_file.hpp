#pragma once
/// \file
/// Private to src/nn: a file written under a temporary name beside the file it replaces, then renamed over it, so
/// that the file it replaces is whole, old or new, whatever happens (a full disk, an exception, a crash). Not
/// installed.
///
/// The temporary file is created with O_CREAT | O_EXCL | O_NOFOLLOW under a name no one can guess in advance
/// (".<name>.<16 random hex digits>.tmp"): an existing file or a symbolic link planted under that name is never
/// opened, truncated or followed, and a name taken is retried with another. Renaming replaces the directory entry of
/// the target: a symbolic link there is replaced by the new file, its target left as it was.

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace lazygraph::nn::detail {

/// A new file being written under a temporary name, to be renamed over `target`. Move-only. Destroying it before
/// commit() removes the temporary file (and never throws).
class PendingFile {
 public:
  /// Creates the temporary file beside `target` (mode 0644 less the umask). \throws CheckpointError naming `target`
  /// and the temporary file, with strerror, when it cannot be created.
  explicit PendingFile(std::filesystem::path target);
  PendingFile(PendingFile&& other) noexcept;
  PendingFile& operator=(PendingFile&&) = delete;
  PendingFile(const PendingFile&) = delete;
  PendingFile& operator=(const PendingFile&) = delete;
  ~PendingFile();

  /// Appends `bytes`. \throws CheckpointError naming the target, with strerror (e.g. "No space left on device").
  void write(std::span<const std::byte> bytes);
  /// Appends `text`, as write().
  void write(std::string_view text);
  /// Flushes the file to disk (fsync) and closes it. \throws CheckpointError as write().
  void finish();
  /// Renames the finished file over the target (atomically, on one filesystem). The folder itself is not flushed:
  /// call sync_folder once the files that belong together are renamed. \throws CheckpointError as write(); the
  /// temporary file is removed then.
  void commit();

  /// The file this one will replace.
  [[nodiscard]] const std::filesystem::path& target() const noexcept { return target_; }
  /// Where it is written until commit().
  [[nodiscard]] const std::filesystem::path& temporary() const noexcept { return temporary_; }

 private:
  [[noreturn]] void fail(std::string_view doing, int error) const;

  std::filesystem::path target_;
  std::filesystem::path temporary_;
  int fd_ = -1;
  bool pending_ = true;  // the temporary file exists and is ours to remove
};

/// Flushes the directory entries of `folder` (renames, removals) to disk. A filesystem that cannot flush a folder
/// (EINVAL) is left as it is. \throws CheckpointError naming the folder, with strerror, on any other failure.
void sync_folder(const std::filesystem::path& folder);

/// Whether `name` is the name PendingFile gives the temporary file of a file named `target_name`.
[[nodiscard]] bool is_temporary_of(std::string_view name, std::string_view target_name) noexcept;

/// The folder that holds `path` ("." for a bare file name).
[[nodiscard]] std::filesystem::path folder_of(const std::filesystem::path& path);

/// 16 random lowercase hex digits (64 bits from std::random_device).
[[nodiscard]] std::string random_hex16();

}  // namespace lazygraph::nn::detail
