// 08 own kernels: an application's own CUDA kernels, kept as .cu files in a folder of its own (examples/kernels/),
// compiled at run time beside lazygraph's core kernels and launched in one graph with them. Usage:
// 08_own_kernels [KERNEL_DIR]
#include <lazygraph/lazygraph.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cli.hpp"

// examples/meson.build passes the folder of the source tree; a program installed elsewhere is given its folder.
#ifndef EXAMPLE_KERNEL_DIR
#define EXAMPLE_KERNEL_DIR "examples/kernels"
#endif

namespace lg = lazygraph;

namespace {

int run(const std::filesystem::path& kernel_dir) {
  if (example::skip_without_gpu("08_own_kernels")) return example::exit_skipped;
  lg::Device gpu = lg::Device::first();
  lg::Stream stream = gpu.create_stream();

  // 1. A KernelLibrary compiles exactly the kernel sets it is given: the core set (axpy, fills, while_guard...) and
  //    every .cu file directly in kernel_dir ("app/clip.cu", "app/scale_add.cu"; headers would go below
  //    kernel_dir/include/). The files are read now and compiled (or loaded from the disk cache) before any capture.
  lg::KernelLibraryOptions options;
  options.kernel_sets = {lg::core_kernels(), lg::KernelSet::from_directory(kernel_dir, "app")};
  lg::KernelLibrary kernels(gpu, std::move(options));
  std::printf("kernel library: %zu modules, %zu compiled, %zu from cache; kernels:", kernels.stats().modules,
              kernels.stats().compiled, kernels.stats().cache_hits);
  for (const std::string& name : kernels.kernel_names()) std::printf(" %s", name.c_str());
  std::printf("\n");

  // 2. Typed handles. The signature is checked against the declaration in the .cu file: asking for scale_add with
  //    `const float*` for y, which the kernel writes, throws UsageError naming the parameter.
  auto scale_add = kernels.get<void(float, const float*, float, float*, int)>("scale_add");  // app
  auto clip = kernels.get<void(float*, float, float, int)>("clip");                          // app
  auto axpy = kernels.get<void(float, const float*, float*, int)>("axpy");                   // core

  const int n = 100'000;
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  std::vector<float> host_x(n);
  std::vector<float> host_y(n);
  for (int i = 0; i < n; ++i) {
    host_x[i] = dist(rng);
    host_y[i] = dist(rng);
  }
  lg::DeviceBuffer<float> x = lg::from_host(host_x).sync_on(stream);
  lg::DeviceBuffer<float> y = lg::from_host(host_y).sync_on(stream);
  lg::DeviceBuffer<float> z = lg::zeros<float>(n).sync_on(stream);

  // 3. Their launches are ops like any other: y = clip(2x + 0.5y, -1, 1), then z += 3y with the core axpy.
  const auto cfg = lg::grid_for(n, 256);
  auto step = scale_add(cfg, 2.0F, x.cview(), 0.5F, y.view(), n) >> clip(cfg, y.view(), -1.0F, 1.0F, n) >>
              axpy(cfg, 3.0F, y.cview(), z.view(), n);
  auto graph = lg::CudaGraph<>::capture(stream, step);
  const int replays = 3;
  for (int r = 0; r < replays; ++r) graph.launch();

  // 4. Check against float64, rounded to float after each kernel as the GPU rounds.
  std::vector<float> got(n);
  lg::copy(std::span<float>(got), z.cview()).sync_on(stream);
  double worst = 0;
  for (int i = 0; i < n; ++i) {
    float yi = host_y[i];
    float zi = 0;
    for (int r = 0; r < replays; ++r) {
      yi = std::clamp(static_cast<float>(2.0 * host_x[i] + 0.5 * yi), -1.0F, 1.0F);
      zi = static_cast<float>(3.0 * yi + zi);
    }
    worst = std::max(worst, std::abs(got[i] - zi) / std::max(1.0, std::abs(double(zi))));
  }
  std::printf("graph of %zu kernels (2 of the app, 1 of the core) replayed %d times; max relative error %.3g\n",
              graph.node_count(), replays, worst);
  const bool ok = worst < 1e-5;
  std::printf("%s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}

constexpr const char* usage =
    "usage: 08_own_kernels [KERNEL_DIR]\n"
    "Compiles the application's own kernels, the .cu files in KERNEL_DIR, beside the core kernels, launches two of\n"
    "them and a core one in a graph and checks the result against float64.\n"
    "KERNEL_DIR defaults to " EXAMPLE_KERNEL_DIR
    ".\n"
    "Exit status: 0 checked, 1 failed, 2 usage error (also: KERNEL_DIR is not a folder), 77 skipped (no GPU;\n"
    "the reason is printed).\n";

}  // namespace

int main(int argc, char** argv) {
  return example::main_of(argc, argv, "08_own_kernels", usage, 1, [&] {
    const std::filesystem::path kernel_dir = argc > 1 ? argv[1] : EXAMPLE_KERNEL_DIR;
    if (!std::filesystem::is_directory(kernel_dir)) {
      std::fprintf(stderr, "08_own_kernels: %s is not a folder\n%s", kernel_dir.c_str(), usage);
      return example::exit_usage;
    }
    return run(kernel_dir);
  });
}
