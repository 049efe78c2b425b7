#include <doctest/doctest.h>

#include <lazygraph/kernels.hpp>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "common/gpu.hpp"

using namespace lazygraph;

namespace {

KernelCache::Entry make_entry(std::size_t n, char seed) {
  KernelCache::Entry e;
  e.is_cubin = true;
  e.image.resize(n);
  for (std::size_t i = 0; i < n; ++i) e.image[i] = static_cast<char>(seed + static_cast<char>(i * 31));
  return e;
}

std::size_t count_files(const std::filesystem::path& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& f : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

const KernelSource source{"a.cu", "extern \"C\" __global__ void a() {}"};
const std::vector<std::string> options{"-arch=sm_90"};

}  // namespace

TEST_CASE("the cache misses, stores, then hits with the same bytes") {
  const KernelCache cache(lgtest::scratch_directory("cache"));
  const std::string key = KernelCache::key(source, {}, options, "13.0");
  CHECK(key.size() == 32);
  CHECK_FALSE(cache.load(key).has_value());
  const auto entry = make_entry(4096, 'x');
  REQUIRE(cache.store(key, entry));
  const auto hit = cache.load(key);
  REQUIRE(hit.has_value());
  CHECK(hit->image == entry.image);
  CHECK(hit->is_cubin);
}

TEST_CASE("the cache key changes with the source, headers, options and NVRTC version") {
  const std::string base = KernelCache::key(source, {}, options, "13.0");
  const KernelSource edited{"a.cu", source.text + " "};
  const KernelSource header{"h.cuh", "#define X 1"};
  const std::vector<std::string> other_arch{"-arch=sm_80"};
  CHECK(KernelCache::key(edited, {}, options, "13.0") != base);
  CHECK(KernelCache::key(source, std::span(&header, 1), options, "13.0") != base);
  CHECK(KernelCache::key(source, {}, other_arch, "13.0") != base);
  CHECK(KernelCache::key(source, {}, options, "13.1") != base);
  CHECK(KernelCache::key(source, {}, options, "13.0") == base);
}

TEST_CASE("a truncated cache entry is a miss and is removed") {
  const KernelCache cache(lgtest::scratch_directory("cache"));
  const std::string key = KernelCache::key(source, {}, options, "13.0");
  REQUIRE(cache.store(key, make_entry(1000, 'a')));
  const auto path = cache.path_for(key);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 10);
  CHECK_FALSE(cache.load(key).has_value());
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("a cache entry whose payload was altered fails its checksum") {
  const KernelCache cache(lgtest::scratch_directory("cache"));
  const std::string key = KernelCache::key(source, {}, options, "13.0");
  REQUIRE(cache.store(key, make_entry(1000, 'a')));
  {
    std::fstream f(cache.path_for(key), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);
    f.put('\x42');
  }
  CHECK_FALSE(cache.load(key).has_value());
  REQUIRE(cache.store(key, make_entry(1000, 'a')));  // recompiled and stored again, it hits
  CHECK(cache.load(key).has_value());
}

TEST_CASE("a file that is not a cache entry is a miss") {
  const KernelCache cache(lgtest::scratch_directory("cache"));
  const std::string key = KernelCache::key(source, {}, options, "13.0");
  std::ofstream(cache.path_for(key)) << "not a cache entry";
  CHECK_FALSE(cache.load(key).has_value());
}

TEST_CASE("concurrent writers of one key, threads and processes, leave one valid entry") {
  const auto dir = lgtest::scratch_directory("cache");
  const KernelCache cache(dir);
  const std::string key = KernelCache::key(source, {}, options, "13.0");
  const auto entry = make_entry(1 << 20, 'q');

  std::vector<pid_t> children;
  for (int p = 0; p < 3; ++p) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      bool ok = true;
      for (int i = 0; i < 20; ++i) ok = cache.store(key, entry) && ok;
      ::_exit(ok ? 0 : 1);
    }
    children.push_back(pid);
  }
  std::vector<std::thread> threads;
  threads.reserve(4);
  std::atomic<int> bad_reads{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        cache.store(key, entry);
        if (auto hit = cache.load(key); hit && hit->image != entry.image) ++bad_reads;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  CHECK(bad_reads == 0);
  const auto hit = cache.load(key);
  REQUIRE(hit.has_value());
  CHECK(hit->image == entry.image);
  CHECK(count_files(dir) == 1);  // no temporary file left behind
}

TEST_CASE("an empty cache directory disables the cache") {
  const KernelCache cache{std::filesystem::path{}};
  CHECK_FALSE(cache.enabled());
  CHECK_FALSE(cache.store("0123", make_entry(10, 'a')));
  CHECK_FALSE(cache.load("0123").has_value());
}

TEST_CASE("an unwritable cache directory makes store report false, not throw") {
  const auto dir = lgtest::scratch_directory("cache");
  const auto file = dir / "a-file";
  std::ofstream(file) << "x";
  const KernelCache cache(file / "sub");  // a directory below a regular file cannot be made
  CHECK_FALSE(cache.store("0123", make_entry(10, 'a')));
}

TEST_CASE("the default cache directory honours LAZYGRAPH_CACHE_DIR, then XDG_CACHE_HOME, then HOME") {
  const char* saved_dir = std::getenv("LAZYGRAPH_CACHE_DIR");
  const std::string saved = saved_dir != nullptr ? saved_dir : "";
  ::setenv("LAZYGRAPH_CACHE_DIR", "/tmp/lg-explicit", 1);
  CHECK(KernelCache::default_directory() == "/tmp/lg-explicit");
  ::unsetenv("LAZYGRAPH_CACHE_DIR");
  ::setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  CHECK(KernelCache::default_directory() == "/tmp/xdg/lazygraph");
  ::unsetenv("XDG_CACHE_HOME");
  ::setenv("HOME", "/home/someone", 1);
  CHECK(KernelCache::default_directory() == "/home/someone/.cache/lazygraph");
  if (saved_dir != nullptr) ::setenv("LAZYGRAPH_CACHE_DIR", saved.c_str(), 1);
}

TEST_CASE("usage counts the stored entries and their bytes, and stray temporaries apart") {
  const auto dir = lgtest::scratch_directory("cache");
  const KernelCache cache(dir);
  CHECK(cache.usage() == KernelCache::Usage{});
  const std::string a = KernelCache::key(source, {}, options, "13.0");
  const std::string b = KernelCache::key(source, {}, options, "13.1");
  REQUIRE(cache.store(a, make_entry(1000, 'a')));
  REQUIRE(cache.store(b, make_entry(3000, 'b')));
  std::ofstream(dir / (a + ".tmp.123.456.7")) << "partial";  // what a writer killed mid-store leaves
  const KernelCache::Usage u = cache.usage();
  CHECK(u.entries == 2);
  CHECK(u.bytes == std::filesystem::file_size(cache.path_for(a)) + std::filesystem::file_size(cache.path_for(b)));
  CHECK(u.bytes > 4000);  // payloads plus headers
  CHECK(u.temporary_files == 1);
  CHECK(u.temporary_bytes == 7);
}

TEST_CASE("clear removes entries and temporaries, reports them, and leaves other files alone") {
  const auto dir = lgtest::scratch_directory("cache");
  const KernelCache cache(dir);
  const std::string key = KernelCache::key(source, {}, options, "13.0");
  REQUIRE(cache.store(key, make_entry(500, 'c')));
  std::ofstream(dir / (key + ".tmp.1.2.3")) << "xy";
  std::ofstream(dir / "notes.txt") << "mine";                                  // not a cache file
  std::ofstream(dir / "0123.bin") << "short name";                             // not a 32-digit key
  std::filesystem::create_directories(dir / (std::string(32, 'a') + ".bin"));  // a folder, not a file
  const KernelCache::Usage before = cache.usage();
  const KernelCache::Usage removed = cache.clear();
  CHECK(removed == before);
  CHECK(removed.entries == 1);
  CHECK(removed.temporary_files == 1);
  CHECK(removed.temporary_bytes == 2);
  CHECK(cache.usage() == KernelCache::Usage{});
  CHECK_FALSE(cache.load(key).has_value());
  CHECK(std::filesystem::exists(dir / "notes.txt"));
  CHECK(std::filesystem::exists(dir / "0123.bin"));
  CHECK(std::filesystem::is_directory(dir / (std::string(32, 'a') + ".bin")));
  REQUIRE(cache.store(key, make_entry(500, 'c')));  // the cache still works after a clear
  CHECK(cache.load(key).has_value());
}

TEST_CASE("usage and clear of a missing directory or a disabled cache are empty, not errors") {
  const KernelCache missing(lgtest::scratch_directory("cache") / "never-made");
  CHECK(missing.usage() == KernelCache::Usage{});
  CHECK(missing.clear() == KernelCache::Usage{});
  const KernelCache disabled{std::filesystem::path{}};
  CHECK(disabled.usage() == KernelCache::Usage{});
  CHECK(disabled.clear() == KernelCache::Usage{});
}

TEST_CASE("usage of a cache path that is a regular file throws, naming the path") {
  const auto file = lgtest::scratch_directory("cache") / "a-file";
  std::ofstream(file) << "x";
  const KernelCache cache(file);
  CHECK_THROWS_WITH_AS((void)cache.usage(), doctest::Contains(file.c_str()), std::filesystem::filesystem_error);
}

namespace {

/// Overwrites the payload-size field of a stored entry (the 8 bytes after the 8-byte magic).
void patch_payload_size(const std::filesystem::path& path, std::uint64_t size) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(8);
  f.write(reinterpret_cast<const char*>(&size), sizeof size);
}

#if !defined(__SANITIZE_ADDRESS__)
/// The process's virtual size in bytes (the first field of /proc/self/statm, in pages).
std::uint64_t virtual_size() {
  std::uint64_t pages = 0;
  std::ifstream("/proc/self/statm") >> pages;
  return pages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}
#endif

}  // namespace

TEST_CASE("a cache entry whose size field exceeds its file is a miss, without allocating that size") {
  const KernelCache cache(lgtest::scratch_directory("cache"));
  const std::string key = KernelCache::key(source, {}, options, "13.0");
  REQUIRE(cache.store(key, make_entry(1000, 'a')));
  patch_payload_size(cache.path_for(key), (1ULL << 30U) - 1);  // claims ~1 GiB, the file holds ~1 KB
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer reserves terabytes of address space, so an address-space limit cannot be set here.
  CHECK_FALSE(cache.load(key).has_value());
#else
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // Room for ordinary work, not for a 1 GiB buffer: an allocation of the claimed size throws bad_alloc.
    const rlim_t limit = virtual_size() + (256ULL << 20U);
    const rlimit rl{limit, limit};
    if (::setrlimit(RLIMIT_AS, &rl) != 0) ::_exit(3);
    try {
      ::_exit(cache.load(key).has_value() ? 1 : 0);
    } catch (...) {
      ::_exit(2);
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  REQUIRE(WIFEXITED(status));
  CHECK_MESSAGE(WEXITSTATUS(status) == 0, "exit 1: a hit; 2: load threw (bad_alloc); 3: setrlimit failed");
#endif
  CHECK_FALSE(cache.load(key).has_value());
  CHECK_FALSE(std::filesystem::exists(cache.path_for(key)));  // corrupt: removed
}

TEST_CASE("a PTX cache entry without its terminating NUL is a miss") {
  const KernelCache cache(lgtest::scratch_directory("cache"));
  const std::string key = KernelCache::key(source, {}, options, "13.0");
  KernelCache::Entry ptx;
  ptx.is_cubin = false;
  const std::string text = ".version 9.0\n.target sm_90\n";  // no NUL: the driver would read past the end
  ptx.image.assign(text.begin(), text.end());
  REQUIRE(cache.store(key, ptx));
  CHECK_FALSE(cache.load(key).has_value());
  ptx.image.push_back('\0');
  REQUIRE(cache.store(key, ptx));
  const auto hit = cache.load(key);
  REQUIRE(hit.has_value());
  CHECK(hit->image == ptx.image);
}

TEST_CASE("storing sweeps temporary files older than the stale age, and keeps fresh ones") {
  const auto dir = lgtest::scratch_directory("cache");
  const auto stale = dir / "0123.tmp.999.1.0";
  const auto fresh = dir / "4567.tmp.999.2.0";
  const auto unrelated = dir / "notes.txt";
  std::ofstream(stale) << "left by a killed process";
  std::ofstream(fresh) << "being written by another process";
  std::ofstream(unrelated) << "not ours";
  const auto now = std::filesystem::file_time_type::clock::now();
  std::filesystem::last_write_time(stale, now - std::chrono::hours(1));
  std::filesystem::last_write_time(unrelated, now - std::chrono::hours(1));
  const KernelCache cache(dir);
  REQUIRE(cache.store(KernelCache::key(source, {}, options, "13.0"), make_entry(100, 'z')));
  CHECK_FALSE(std::filesystem::exists(stale));
  CHECK(std::filesystem::exists(fresh));
  CHECK(std::filesystem::exists(unrelated));
}

TEST_CASE("remove deletes an entry, after which the key misses") {
  const KernelCache cache(lgtest::scratch_directory("cache"));
  const std::string key = KernelCache::key(source, {}, options, "13.0");
  REQUIRE(cache.store(key, make_entry(100, 'r')));
  CHECK(cache.remove(key));
  CHECK_FALSE(cache.load(key).has_value());
  CHECK_FALSE(cache.remove(key));  // nothing left to remove
}
