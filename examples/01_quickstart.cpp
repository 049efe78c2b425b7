// 01 quickstart: open the GPU, build the kernel library from kernels/, run axpy on random data, and check the
// result against a float64 reference on the CPU. Without a GPU it says why and exits cleanly.
#include <lazygraph/lazygraph.hpp>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace lg = lazygraph;

int main() {
  std::string why;
  if (!lg::gpu_available(&why)) {
    std::printf("lazygraph quickstart: no GPU to run on (%s)\n", why.c_str());
    return 0;
  }
  lg::Device gpu = lg::Device::first();
  lg::Stream stream = gpu.create_stream();
  std::printf("device: %s, sm_%d, %d SMs, %.1f GiB\n", gpu.name().c_str(), gpu.compute_capability().as_int(),
              gpu.sm_count(), static_cast<double>(gpu.total_memory()) / (1ULL << 30U));

  // 1. Compile (or load from the disk cache) every kernel in kernels/ now, before any graph is captured.
  lg::KernelLibrary kernels(gpu);
  std::printf("kernel library: %zu modules in %.1f ms (%zu compiled, %zu from cache)\n", kernels.stats().modules,
              kernels.stats().milliseconds, kernels.stats().compiled, kernels.stats().cache_hits);
  // 2. A typed handle: the arguments of every launch are checked against this signature at compile time.
  auto axpy = kernels.get<void(float, const float*, float*, int)>("axpy");

  // 3. Random inputs, copied to the device.
  const int n = 1 << 20;
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  std::vector<float> x(n);
  std::vector<float> y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = dist(rng);
    y[i] = dist(rng);
  }
  lg::DeviceBuffer<float> dx(gpu, n);
  lg::DeviceBuffer<float> dy(gpu, n);
  lg::copy_async(stream, dx.view(), std::span<const float>(x));
  lg::copy_async(stream, dy.view(), std::span<const float>(y));

  // 4. y = 2x + y on the GPU. `dx.cview()` is read-only; passing it where the kernel writes would not compile.
  axpy.launch(stream, lg::grid_for(n, 256), 2.0F, dx.cview(), dy.view(), n);
  std::vector<float> out(n);
  lg::copy_async(stream, std::span<float>(out), dy.cview());
  stream.synchronize();

  // 5. Check against float64.
  double worst = 0;
  for (int i = 0; i < n; ++i) worst = std::max(worst, std::abs(out[i] - (2.0 * x[i] + y[i])));
  std::printf("axpy on %d elements: max abs error vs float64 %.3g\n", n, worst);
  if (!(worst < 1e-5)) {
    std::printf("FAILED\n");
    return 1;
  }
  std::printf("OK\n");
  return 0;
}
