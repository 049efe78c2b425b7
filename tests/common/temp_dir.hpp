#pragma once
// A fresh folder under the system's temp directory for a test, removed with everything in it at scope exit.

#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>
#include <system_error>

namespace lgtest {

class TempDir {
 public:
  /// A new, empty folder named lazygraph-<label>-<pid>-<random>.
  explicit TempDir(const std::string& label = "test") {
    std::mt19937 rng{std::random_device{}()};
    for (;;) {
      path_ = std::filesystem::temp_directory_path() /
              ("lazygraph-" + label + "-" + std::to_string(::getpid()) + "-" + std::to_string(rng()));
      if (std::filesystem::create_directory(path_)) return;
    }
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  [[nodiscard]] std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

}  // namespace lgtest
