#pragma once
/// \file
/// KernelCache: compiled kernel images on disk, so a process that has compiled a kernel once loads it in
/// milliseconds afterwards.
///
/// The key covers everything that changes the output: the source and every header, the options (which name
/// the architecture) and the NVRTC version. Entries are written to a temporary file and renamed into place,
/// so processes filling the cache at once never see a partial entry; an entry that is truncated or whose
/// checksum disagrees is treated as a miss, removed, and recompiled by the caller.
///
/// Thread safety: all members are safe to call concurrently, from threads or processes.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "lazygraph/detail/kernels/nvrtc.hpp"

namespace lazygraph {

class KernelCache {
 public:
  /// A cached image.
  struct Entry {
    std::vector<char> image;
    bool is_cubin = false;
  };

  /// `$LAZYGRAPH_CACHE_DIR` when set (an empty value disables the cache), else `$XDG_CACHE_HOME/lazygraph`,
  /// else `$HOME/.cache/lazygraph`; empty when none of these is set.
  static std::filesystem::path default_directory();

  /// A cache in `directory`, created on first store. An empty path disables caching: every load misses and
  /// stores do nothing.
  explicit KernelCache(std::filesystem::path directory);

  /// The key of one compilation, as 32 hex digits.
  static std::string key(const KernelSource& source, std::span<const KernelSource> headers,
                         std::span<const std::string> options, std::string_view nvrtc_version);

  /// The entry for `key`, or nothing on a miss. A corrupt entry is removed and reported as a miss.
  [[nodiscard]] std::optional<Entry> load(const std::string& key) const;
  /// Stores an entry. Best effort: returns false (and changes nothing) when the directory is not writable,
  /// since a cache that cannot be written must not stop the program.
  bool store(const std::string& key, const Entry& entry) const noexcept;

  [[nodiscard]] const std::filesystem::path& directory() const noexcept { return directory_; }
  [[nodiscard]] bool enabled() const noexcept { return !directory_.empty(); }
  /// The file that holds `key`'s entry.
  [[nodiscard]] std::filesystem::path path_for(const std::string& key) const;

 private:
  std::filesystem::path directory_;
};

}  // namespace lazygraph
