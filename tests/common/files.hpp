#pragma once
// Whole files written and read back by the host tests of the checkpoint readers.

#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace lgtest {

/// Writes `bytes` as a new file `path`. Removing it first is much faster than truncating it: ext4 flushes a file
/// truncated and rewritten when it is closed (2.4 ms a file on the development machine, against 50 us), which the
/// fuzz test's thousands of files would feel.
inline void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::filesystem::remove(path);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

/// `value` as the 8 little-endian bytes of a safetensors header length.
inline std::string le64(std::uint64_t value) {
  std::string bytes(8, '\0');
  for (char& b : bytes) {
    b = static_cast<char>(value & 0xffU);
    value >>= 8U;
  }
  return bytes;
}

/// The whole content of `path`.
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace lgtest
