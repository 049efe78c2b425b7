// The test runner of both test programs: lazygraph_tests (the core layers, linking only liblazygraph) and
// lazygraph_nn_tests (tests/nn/, which adds liblazygraph_nn and common/nn.cpp). Meson registers each per suite:
//   host      runs without a GPU (everything but the gpu and no-driver suites);
//   gpu       needs a device: with none, it prints why and exits 77 (Meson's "skipped");
//   reliability  soak, threads and failure recovery; needs a device like gpu;
//   no-driver runs with LAZYGRAPH_CUDA_DRIVER pointing nowhere, to test the path of a machine without driver.
// Nothing here may include an nn header: the core tests build and run without the nn layer.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <unistd.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/gpu.hpp"

namespace lgtest {

namespace {
std::optional<lazygraph::Device> g_device;
std::unique_ptr<lazygraph::KernelLibrary> g_kernels;
std::optional<lazygraph::Stream> g_stream;
std::vector<std::function<void()>> g_teardown;
}  // namespace

void at_teardown(std::function<void()> release) { g_teardown.push_back(std::move(release)); }

lazygraph::Device& device() {
  // main sets the device up only for --test-suite=gpu (or reliability): a gpu case picked by name alone has none.
  if (!g_device) throw std::logic_error("this test needs the gpu suite's device: run it with --test-suite=gpu");
  return *g_device;
}

lazygraph::KernelLibrary& kernels() {
  if (!g_kernels) g_kernels = std::make_unique<lazygraph::KernelLibrary>(device());
  return *g_kernels;
}

lazygraph::Stream& stream() {
  if (!g_stream) g_stream.emplace(device());
  return *g_stream;
}

bool under_compute_sanitizer() { return std::getenv("NV_SANITIZER_INJECTION_PORT_BASE") != nullptr; }

std::filesystem::path scratch_directory(const std::string& label) {
  static std::atomic<int> counter{0};
  auto dir = std::filesystem::temp_directory_path() /
             ("lazygraph-test-" + std::to_string(::getpid()) + "-" + label + "-" + std::to_string(counter++));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

lazygraph::KernelLibraryOptions own_kernels(std::vector<lazygraph::KernelSource> sources, std::filesystem::path cache) {
  lazygraph::KernelLibraryOptions opts;
  opts.cache_directory = std::move(cache);
  opts.kernel_sets = {lazygraph::KernelSet{"test", std::move(sources), {}}};
  return opts;
}

std::vector<float> random_floats(std::size_t n) {
  static std::mt19937_64 rng{std::random_device{}()};
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  std::vector<float> v(n);
  for (float& x : v) {
    do {
      x = dist(rng);
    } while (x == 0.0F);
  }
  return v;
}

std::vector<lazygraph::half> random_halves(std::size_t n) {
  std::vector<lazygraph::half> out;
  out.reserve(n);
  for (const float f : random_floats(n)) out.push_back(lazygraph::half::from_float(f));
  return out;
}

std::vector<double> axpy_reference(float a, const std::vector<float>& x, const std::vector<float>& y0, int times) {
  std::vector<double> y(y0.begin(), y0.end());
  for (int t = 0; t < times; ++t) {
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(double(a) * x[i] + y[i]);
  }
  return y;
}

double relative_error(const std::vector<float>& a, const std::vector<double>& b) {
  double worst = 0;
  double scale = 1e-30;
  for (std::size_t i = 0; i < b.size(); ++i) {
    if (std::isnan(a[i])) return INFINITY;
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return worst / scale;
}

}  // namespace lgtest

int main(int argc, char** argv) {
  doctest::Context context;
  bool gpu_suite = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    gpu_suite = gpu_suite || arg == "--test-suite=gpu" || arg == "--test-suite=reliability";
  }
  context.applyCommandLine(argc, argv);
  if (gpu_suite) {
    std::string why;
    if (!lazygraph::gpu_available(&why)) {
      // doctest's --count names how many cases are not run ("[doctest] unskipped test cases passing the
      // current filters: N"); tests/run_all.sh's summary prints it with the reason, which comes last.
      const std::array<const char*, 1> count_flag{"--count"};  // a flag: setOption("count", true) does not set it
      context.applyCommandLine(1, count_flag.data());
      static_cast<void>(context.run());
      std::printf("gpu suites skipped: %s\n", why.c_str());
      return 77;
    }
    lgtest::g_device = lazygraph::Device::first();
    std::printf("gpu suite on %s (sm_%d, %d SMs)\n", lgtest::g_device->name().c_str(),
                lgtest::g_device->compute_capability().as_int(), lgtest::g_device->sm_count());
  }
  const int result = context.run();
  while (!lgtest::g_teardown.empty()) {  // the latest first
    lgtest::g_teardown.back()();
    lgtest::g_teardown.pop_back();
  }
  lgtest::g_stream.reset();
  lgtest::g_kernels.reset();
  lgtest::g_device.reset();
  return result;
}
