#pragma once
/// \file
/// KernelCache: compiled kernel images on disk, so a process that has compiled a kernel once loads it in
/// milliseconds afterwards.
///
/// The key covers everything that changes the output: the source and every header, the options (which name
/// the architecture) and the NVRTC version. Entries are written to a temporary file and renamed into place,
/// so processes filling the cache at once never see a partial entry; an entry that is truncated or whose
/// checksum disagrees, whose size field disagrees with the file's size (checked before anything is allocated),
/// or that holds PTX without its terminating NUL is treated as a miss, removed, and recompiled by the caller.
/// An entry that passes these checks but that the driver rejects is removed by KernelLibrary (`remove`).
///
/// A process killed between writing a temporary file and renaming it leaves `<key>.tmp.*` behind: the first
/// store into a directory in each process removes those older than `stale_temporary_age`.
///
/// Thread safety: all members are safe to call concurrently, from threads or processes.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "lazygraph/kernels/nvrtc.hpp"

namespace lazygraph {

/// Compiled kernel images on disk, by key (see the file comment). KernelLibrary uses it; `usage` and `clear`
/// serve tools such as lazygraph-info.
class KernelCache {
 public:
  /// A cached image.
  struct Entry {
    /// CUBIN bytes, or PTX with its terminating NUL.
    std::vector<char> image;
    /// True for CUBIN, false for PTX.
    bool is_cubin = false;
  };

  /// `$LAZYGRAPH_CACHE_DIR` when set (an empty value disables the cache), else `$XDG_CACHE_HOME/lazygraph`,
  /// else `$HOME/.cache/lazygraph`; empty when none of these is set.
  static std::filesystem::path default_directory();

  /// The age beyond which a temporary file is taken to be left by a killed process and swept. Writing an
  /// entry takes milliseconds, so ten minutes leaves a wide margin for a slow (network) file system.
  static constexpr std::chrono::minutes stale_temporary_age{10};

  /// A cache in `directory`, created on first store. An empty path disables caching: every load misses and
  /// stores do nothing.
  explicit KernelCache(std::filesystem::path directory);

  /// The key of one compilation, as 32 hex digits.
  static std::string key(const KernelSource& source, std::span<const KernelSource> headers,
                         std::span<const std::string> options, std::string_view nvrtc_version);

  /// The entry for `key`, or nothing on a miss. A corrupt entry is removed and reported as a miss.
  [[nodiscard]] std::optional<Entry> load(const std::string& key) const;
  /// Removes `key`'s entry (for one the driver rejected); false when there was none or it could not be removed.
  bool remove(const std::string& key) const noexcept;
  /// Stores an entry. Best effort: returns false (and changes nothing) when the directory is not writable,
  /// since a cache that cannot be written must not stop the program.
  bool store(const std::string& key, const Entry& entry) const noexcept;

  /// The cache directory; empty when caching is disabled.
  [[nodiscard]] const std::filesystem::path& directory() const noexcept { return directory_; }
  /// False when the directory is empty: loads miss, stores do nothing.
  [[nodiscard]] bool enabled() const noexcept { return !directory_.empty(); }
  /// The file that holds `key`'s entry.
  [[nodiscard]] std::filesystem::path path_for(const std::string& key) const;

 private:
  std::filesystem::path directory_;

 public:
  /// What the cache directory holds. Only files named as the cache names them count: `<key>.bin` entries
  /// (the key is 32 hex digits) and `<key>.tmp.*` temporaries, which a writer renames into place and which
  /// stay behind only when a writer was killed mid-store. Other files and folders are never counted or
  /// removed, so a cache directory pointed at a shared folder loses nothing else.
  struct Usage {
    /// Entries: `<key>.bin` files.
    std::size_t entries = 0;
    std::uintmax_t bytes = 0;  ///< of the entries
    /// Temporaries: `<key>.tmp.*` files.
    std::size_t temporary_files = 0;
    /// Bytes of the temporaries.
    std::uintmax_t temporary_bytes = 0;
    /// Every count equal.
    friend bool operator==(const Usage&, const Usage&) = default;
  };

  /// The entries and temporaries now in the directory; all zero when the cache is disabled or the directory
  /// does not exist. Files that vanish while being counted (a concurrent clear or replace) are skipped.
  /// \throws std::filesystem::filesystem_error when the directory exists but cannot be read.
  [[nodiscard]] Usage usage() const;

  /// Removes every entry and temporary and returns what was removed (a file that could not be removed is not
  /// counted: compare with usage() afterwards). Safe while other processes use the cache: a load that already
  /// opened an entry reads it whole, a later load misses and recompiles, and a store whose temporary was
  /// removed returns false.
  /// \throws std::filesystem::filesystem_error when the directory exists but cannot be read.
  Usage clear() const;
};

}  // namespace lazygraph
