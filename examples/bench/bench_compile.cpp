// Cold and warm start of a KernelLibrary per kernel set: what a program pays on its first run (NVRTC compiles
// every module; the disk cache is empty) and on later runs (images loaded from the cache). The core set alone is
// what a program that uses no model compiles; core + nn is what every KernelLibrary compiled before the nn kernels
// became a set of their own. Medians of 5 constructions each, wall time (KernelLibrary::stats).
#include <lazygraph/lazygraph.hpp>
#include <lazygraph/nn/kernels.hpp>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli.hpp"
#include "median.hpp"

namespace lg = lazygraph;

namespace {

constexpr const char* usage =
    "usage: bench_compile\n"
    "Prints the cold (empty cache) and warm (cached) construction time of a KernelLibrary for the core kernel\n"
    "set and for core + nn, on the GPU present. A benchmark, not a test.\n"
    "Exit status: 0 done, 1 failed, 2 usage error, 77 skipped (no GPU; the reason is printed).\n";

struct Row {
  std::size_t modules = 0;
  double cold_ms = 0;
  double warm_ms = 0;
};

Row measure(const lg::Device& gpu, const std::vector<lg::KernelSet>& sets, const std::filesystem::path& scratch) {
  std::vector<double> cold;
  std::vector<double> warm;
  Row row;
  for (int i = 0; i < 5; ++i) {
    const auto dir = scratch / std::to_string(i);
    std::filesystem::remove_all(dir);
    lg::KernelLibraryOptions options;
    options.cache_directory = dir;
    options.kernel_sets = sets;
    const lg::KernelLibrary first(gpu, options);
    cold.push_back(first.stats().milliseconds);
    row.modules = first.stats().modules;
    const lg::KernelLibrary second(gpu, options);
    warm.push_back(second.stats().milliseconds);
  }
  std::filesystem::remove_all(scratch);
  row.cold_ms = bench::median(cold);
  row.warm_ms = bench::median(warm);
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  if (auto code = example::handle_arguments(argc, argv, usage)) return *code;
  if (example::skip_without_gpu("bench_compile")) return example::exit_skipped;
  try {
    const lg::Device gpu = lg::Device::first();
    const auto scratch =
        std::filesystem::temp_directory_path() / ("lazygraph-bench-compile-" + std::to_string(::getpid()));
    const Row core = measure(gpu, {lg::core_kernels()}, scratch);
    const Row both = measure(gpu, {lg::core_kernels(), lg::nn::kernel_set()}, scratch);
    std::printf("KernelLibrary construction on %s, medians of 5 (ms)\n\n", gpu.name().c_str());
    std::printf("%-24s %8s %10s %10s %12s\n", "kernel sets", "modules", "cold", "warm", "cold/before");
    std::printf("%-24s %8zu %10.1f %10.2f %12.3f\n", "core (now the default)", core.modules, core.cold_ms, core.warm_ms,
                core.cold_ms / both.cold_ms);
    std::printf("%-24s %8zu %10.1f %10.2f %12.3f\n", "core + nn (before)", both.modules, both.cold_ms, both.warm_ms,
                1.0);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_compile: %s\n", e.what());
    return 1;
  }
}
