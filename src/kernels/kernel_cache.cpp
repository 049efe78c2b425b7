#include "lazygraph/kernels/kernel_cache.hpp"

#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>

namespace lazygraph {

namespace {

constexpr std::array<char, 8> magic = {'L', 'G', 'K', 'C', 'A', 'C', 'H', '1'};

/// 64-bit FNV-1a, seeded, finished with a splitmix64 mix so nearby inputs spread over all bits.
class Hasher {
 public:
  explicit Hasher(std::uint64_t seed) : h_(0xcbf29ce484222325ULL ^ seed) {}
  void add(std::string_view bytes) {
    for (const char c : bytes) {
      h_ ^= static_cast<unsigned char>(c);
      h_ *= 0x100000001b3ULL;
    }
  }
  /// Length-prefixed, so ("ab","c") and ("a","bc") differ.
  void add_field(std::string_view bytes) {
    const std::uint64_t n = bytes.size();
    add(std::string_view(reinterpret_cast<const char*>(&n), sizeof n));
    add(bytes);
  }
  [[nodiscard]] std::uint64_t finish() const {
    std::uint64_t z = h_ + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30U)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27U)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31U);
  }

 private:
  std::uint64_t h_;
};

std::uint64_t checksum(std::span<const char> bytes) {
  Hasher h(0x5eed);
  h.add(std::string_view(bytes.data(), bytes.size()));
  return h.finish();
}

struct Header {
  std::array<char, 8> magic;
  std::uint64_t payload_size;
  std::uint64_t payload_checksum;
  std::uint32_t is_cubin;
  std::uint32_t key_size;
};

std::string hex(std::uint64_t v) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4U) s[static_cast<std::size_t>(i)] = digits[v & 0xfU];
  return s;
}

/// True for the name of a temporary file written by store: `<key>.tmp.<pid>.<thread>.<counter>`.
bool is_temporary_name(const std::string& name) { return name.find(".tmp.") != std::string::npos; }

/// Removes the temporary files in `directory` older than KernelCache::stale_temporary_age (left by a process
/// killed between writing and renaming), the first time it is called for `directory` in this process.
/// Best effort: a file that vanishes or cannot be removed is skipped.
void sweep_stale_temporaries_once(const std::filesystem::path& directory) noexcept {
  try {
    static std::mutex mutex;
    static std::set<std::filesystem::path> swept;
    {
      const std::lock_guard lock(mutex);
      if (!swept.insert(directory).second) return;
    }
    const auto cutoff = std::filesystem::file_time_type::clock::now() - KernelCache::stale_temporary_age;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec)) {
      std::error_code file_ec;
      if (!is_temporary_name(it->path().filename().string()) || !it->is_regular_file(file_ec)) continue;
      const auto written = std::filesystem::last_write_time(it->path(), file_ec);
      if (!file_ec && written < cutoff) std::filesystem::remove(it->path(), file_ec);
    }
  } catch (...) {  // NOLINT(bugprone-empty-catch): sweeping is housekeeping, never a reason to fail a store
  }
}

}  // namespace

std::filesystem::path KernelCache::default_directory() {
  if (const char* dir = std::getenv("LAZYGRAPH_CACHE_DIR")) return dir;  // empty disables
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::filesystem::path(xdg) / "lazygraph";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::filesystem::path(home) / ".cache" / "lazygraph";
  }
  return {};
}

KernelCache::KernelCache(std::filesystem::path directory) : directory_(std::move(directory)) {}

std::string KernelCache::key(const KernelSource& source, std::span<const KernelSource> headers,
                             std::span<const std::string> options, std::string_view nvrtc_version) {
  Hasher a(1);
  Hasher b(2);
  const auto add = [&](std::string_view field) {
    a.add_field(field);
    b.add_field(field);
  };
  add(nvrtc_version);
  add(source.name);
  add(source.text);
  for (const KernelSource& h : headers) {
    add(h.name);
    add(h.text);
  }
  for (const std::string& o : options) add(o);
  return hex(a.finish()) + hex(b.finish());
}

std::filesystem::path KernelCache::path_for(const std::string& key) const { return directory_ / (key + ".bin"); }

std::optional<KernelCache::Entry> KernelCache::load(const std::string& key) const {
  if (!enabled()) return std::nullopt;
  const std::filesystem::path path = path_for(key);
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;

  const auto corrupt = [&]() -> std::optional<Entry> {
    in.close();
    std::error_code ec;
    std::filesystem::remove(path, ec);  // a concurrent writer may already have replaced it; either is fine
    return std::nullopt;
  };

  Header h{};
  if (!in.read(reinterpret_cast<char*>(&h), sizeof h) || h.magic != magic || h.key_size != key.size()) {
    return corrupt();
  }
  std::string stored_key(h.key_size, '\0');
  if (!in.read(stored_key.data(), static_cast<std::streamsize>(h.key_size)) || stored_key != key) return corrupt();
  // The size field is checked against the size of the file opened (not of the path, which a concurrent store
  // may have replaced since) before anything is allocated: a corrupt field must cost a miss, not a gigabyte (or
  // a bad_alloc under a memory limit).
  const std::streamoff payload_start = in.tellg();
  in.seekg(0, std::ios::end);
  const std::streamoff file_end = in.tellg();
  in.seekg(payload_start);
  if (!in || payload_start < 0 || h.payload_size == 0 ||
      h.payload_size != static_cast<std::uint64_t>(file_end - payload_start)) {
    return corrupt();
  }
  Entry e;
  e.image.resize(h.payload_size);
  e.is_cubin = h.is_cubin != 0;
  if (!in.read(e.image.data(), static_cast<std::streamsize>(h.payload_size))) return corrupt();
  if (in.peek() != std::ifstream::traits_type::eof()) return corrupt();  // trailing bytes
  if (checksum(e.image) != h.payload_checksum) return corrupt();
  // The driver reads PTX up to its NUL: an entry without one would be read past its end.
  if (!e.is_cubin && e.image.back() != '\0') return corrupt();
  return e;
}

bool KernelCache::remove(const std::string& key) const noexcept {
  if (!enabled()) return false;
  std::error_code ec;
  return std::filesystem::remove(path_for(key), ec) && !ec;
}

bool KernelCache::store(const std::string& key, const Entry& entry) const noexcept {
  if (!enabled() || entry.image.empty()) return false;
  try {
    std::error_code ec;
    std::filesystem::create_directories(directory_, ec);
    if (ec) return false;
    sweep_stale_temporaries_once(directory_);
    static std::atomic<unsigned> counter{0};
    const std::filesystem::path final_path = path_for(key);
    const std::filesystem::path tmp =
        directory_ / (key + ".tmp." + std::to_string(::getpid()) + "." +
                      std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id())) + "." +
                      std::to_string(counter.fetch_add(1)));
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      if (!out) return false;
      Header h{};
      h.magic = magic;
      h.payload_size = entry.image.size();
      h.payload_checksum = checksum(entry.image);
      h.is_cubin = entry.is_cubin ? 1 : 0;
      h.key_size = static_cast<std::uint32_t>(key.size());
      out.write(reinterpret_cast<const char*>(&h), sizeof h);
      out.write(key.data(), static_cast<std::streamsize>(key.size()));
      out.write(entry.image.data(), static_cast<std::streamsize>(entry.image.size()));
      out.flush();
      if (!out) {
        out.close();
        std::filesystem::remove(tmp, ec);
        return false;
      }
    }
    std::filesystem::rename(tmp, final_path, ec);  // atomic replace: readers see the old or the new entry
    if (ec) {
      std::filesystem::remove(tmp, ec);
      return false;
    }
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace lazygraph

namespace lazygraph {

namespace {

enum class CacheFile { entry, temporary, other };

/// Classifies a file name by the names store() writes: `<32 hex digits>.bin` or `<32 hex digits>.tmp.<...>`.
CacheFile classify(const std::string& name) {
  constexpr std::size_t key_size = 32;
  if (name.size() <= key_size) return CacheFile::other;
  for (std::size_t i = 0; i < key_size; ++i) {
    const char c = name[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return CacheFile::other;
  }
  const std::string_view rest = std::string_view(name).substr(key_size);
  if (rest == ".bin") return CacheFile::entry;
  if (rest.starts_with(".tmp.")) return CacheFile::temporary;
  return CacheFile::other;
}

/// Calls `f(path, kind, size)` for each regular cache file in `directory`; nothing when it does not exist.
template <class F>
void for_each_cache_file(const std::filesystem::path& directory, F&& f) {
  if (directory.empty()) return;
  std::error_code ec;
  std::filesystem::directory_iterator it(directory, ec);
  if (ec == std::errc::no_such_file_or_directory) return;
  if (ec) throw std::filesystem::filesystem_error("cannot read the kernel cache directory", directory, ec);
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const CacheFile kind = classify(it->path().filename().string());
    std::error_code file_ec;  // per file, apart from `ec`, which reports the directory's own failures
    if (kind == CacheFile::other || !it->is_regular_file(file_ec)) continue;
    const std::uintmax_t size = std::filesystem::file_size(it->path(), file_ec);
    if (file_ec) continue;  // removed or replaced since it was listed
    f(it->path(), kind, size);
  }
  if (ec) throw std::filesystem::filesystem_error("cannot read the kernel cache directory", directory, ec);
}

void add(KernelCache::Usage& u, CacheFile kind, std::uintmax_t size) {
  if (kind == CacheFile::entry) {
    ++u.entries;
    u.bytes += size;
  } else {
    ++u.temporary_files;
    u.temporary_bytes += size;
  }
}

}  // namespace

KernelCache::Usage KernelCache::usage() const {
  Usage u;
  for_each_cache_file(directory_,
                      [&](const std::filesystem::path&, CacheFile kind, std::uintmax_t size) { add(u, kind, size); });
  return u;
}

KernelCache::Usage KernelCache::clear() const {
  Usage removed;
  for_each_cache_file(directory_, [&](const std::filesystem::path& path, CacheFile kind, std::uintmax_t size) {
    std::error_code ec;
    if (std::filesystem::remove(path, ec)) add(removed, kind, size);
  });
  return removed;
}

}  // namespace lazygraph
