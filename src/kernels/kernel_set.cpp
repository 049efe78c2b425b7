#include "lazygraph/kernels/kernel_set.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "lazygraph/driver/error.hpp"

namespace lazygraph {

namespace {

std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  if (!in || !(text << in.rdbuf())) {
    throw UsageError("KernelSet::from_directory: cannot read " + file.string());
  }
  return std::move(text).str();
}

bool by_name(const KernelSource& a, const KernelSource& b) { return a.name < b.name; }

}  // namespace

KernelSet KernelSet::from_directory(const std::filesystem::path& directory, std::string name) {
  std::error_code ec;
  if (!std::filesystem::is_directory(directory, ec)) {
    throw UsageError("KernelSet::from_directory: " + directory.string() + " is not a directory");
  }
  KernelSet set;
  set.name = name.empty() ? directory.filename().string() : std::move(name);
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    if (entry.is_regular_file() && entry.path().extension() == ".cu") {
      set.sources.push_back({set.name + "/" + entry.path().filename().string(), read_text(entry.path())});
    }
  }
  if (set.sources.empty()) {
    throw UsageError("KernelSet::from_directory: " + directory.string() +
                     " holds no .cu file (kernel files sit directly in the directory, headers below include/)");
  }
  const std::filesystem::path include = directory / "include";
  if (std::filesystem::is_directory(include, ec)) {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(include)) {
      const std::filesystem::path ext = entry.path().extension();
      if (entry.is_regular_file() && (ext == ".cuh" || ext == ".h")) {
        set.headers.push_back(
            {std::filesystem::relative(entry.path(), include).generic_string(), read_text(entry.path())});
      }
    }
  }
  std::sort(set.sources.begin(), set.sources.end(), by_name);  // a stable order: directory order is not
  std::sort(set.headers.begin(), set.headers.end(), by_name);
  return set;
}

std::span<const KernelSource> core_kernel_headers() { return core_kernels().headers; }

std::vector<KernelSet> detail::with_core_kernels(std::vector<KernelSet> sets) {
  const KernelSet& core = core_kernels();
  bool listed = false;
  for (const KernelSet& set : sets) {
    if (set.name != core.name) continue;
    if (set != core) {
      throw UsageError("kernel set " + set.name +
                       " differs from core_kernels(), whose name it has: every library compiles the core set, "
                       "which cannot be replaced; give this set another name");
    }
    listed = true;
  }
  if (!listed) sets.insert(sets.begin(), core);
  return sets;
}

}  // namespace lazygraph
