// fp16 GEMV bandwidth: weight bytes streamed per second for the decode-step shapes, for several block shapes.
// Two weight copies are used alternately so consecutive launches cannot hit in L2. Medians of many samples,
// timed with CUDA events; the floor is the weight bytes at the device-to-device copy bandwidth measured here.
#include <lazygraph/lazygraph.hpp>
#include <lazygraph/nn/kernels.hpp>

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "cli.hpp"
#include "median.hpp"

namespace lg = lazygraph;
using lg::half;

namespace {

using bench::median;

lg::DeviceBuffer<half> random_weights(const lg::Stream& s, std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  std::vector<half> h(n);
  for (half& v : h) v = half::from_float(dist(rng));
  return lg::from_host(h).sync_on(s);
}

template <class F>
double median_seconds(const lg::Stream& s, int reps, F&& submit) {
  lg::Event a(s.device());
  lg::Event b(s.device());
  for (int i = 0; i < 4; ++i) submit(i);
  std::vector<double> t;
  for (int k = 0; k < 31; ++k) {
    a.record(s);
    for (int i = 0; i < reps; ++i) submit(i);
    b.record(s);
    b.synchronize();
    t.push_back(lg::Event::elapsed_ms(a, b) * 1e-3 / reps);
  }
  return median(t);
}

constexpr const char* usage =
    "usage: bench_gemv\n"
    "Prints a table: fp16 GEMV weight bandwidth per block shape for the decode-step shapes, against the\n"
    "device-to-device copy bandwidth. A benchmark, not a test.\n"
    "Exit status: 0 done, 1 failed, 77 skipped (no GPU; the reason is printed).\n";

}  // namespace

int main(int argc, char** argv) {
  if (auto code = example::handle_arguments(argc, argv, usage)) return *code;
  if (example::skip_without_gpu("bench_gemv")) return example::exit_skipped;
  lg::Device gpu = lg::Device::first();
  lg::Stream s = gpu.create_stream();
  lg::KernelLibrary kernels = lg::nn::kernel_library(gpu);  // the core and the nn kernel sets
  const lg::nn::Kernels nn(kernels);
  const auto& gemv = nn.gemv;

  // Copy ceiling: a 1 GiB device-to-device copy, bytes read plus bytes written.
  const std::size_t big = 512ULL << 20U;
  auto src = lg::ones<half>(big).sync_on(s);
  auto dst = lg::empty<half>(big).sync_on(s);
  const double copy_s = median_seconds(s, 5, [&](int) { lg::copy_async(s, dst.view(), src.cview()); });
  const double copy_bw = 2.0 * static_cast<double>(big) * sizeof(half) / copy_s;
  std::printf("fp16 gemv on %s; device-to-device copy ceiling %.2f TB/s\n\n", gpu.name().c_str(), copy_bw * 1e-12);
  std::printf("%13s | %-14s | %9s | %7s | %s\n", "rows x cols", "block", "us", "TB/s", "of copy ceiling");
  for (const auto& shape : {std::pair{512, 1536}, std::pair{1536, 512}, std::pair{4096, 1024}, std::pair{1024, 4096},
                            std::pair{4096, 11008}, std::pair{11008, 4096}}) {
    const int rows = shape.first;
    const int cols = shape.second;
    const std::size_t size = static_cast<std::size_t>(rows) * cols;
    const auto w0 = random_weights(s, size, 1);
    const auto w1 = random_weights(s, size, 2);
    const auto x = random_weights(s, cols, 3);
    auto out = lg::empty<half>(rows).sync_on(s);
    for (const auto& [warps, per_block] :
         {std::pair{4U, 2U}, std::pair{2U, 4U}, std::pair{1U, 8U}, std::pair{8U, 1U}}) {
      const lg::LaunchConfig cfg{{(rows + per_block - 1) / per_block, 1, 1}, {32, warps, per_block}, 0};
      const double t = median_seconds(s, 50, [&](int i) {
        gemv.launch(s, cfg, (i % 2 == 0 ? w0 : w1).cview(), x.cview(), out.view(), rows, cols, 1);
      });
      const double bw = 2.0 * static_cast<double>(size) / t;
      std::printf("%6d x %5d | (32, %u, %u)     | %9.2f | %7.2f | %5.1f%%\n", rows, cols, warps, per_block, t * 1e6,
                  bw * 1e-12, 100.0 * bw / copy_bw);
    }
  }

  // Batches: one launch multiplies the weights with 1 to 8 vectors, reading them once.
  std::printf("\nbatched gemv, block shape of nn::Kernels::gemv_config; time per vector = us / batch\n");
  std::printf("%13s | %5s | %9s | %7s | %15s | %s\n", "rows x cols", "batch", "us", "TB/s", "of copy ceiling",
              "us vs batch 1");
  for (const auto& shape : {std::pair{4096, 4096}, std::pair{11008, 4096}, std::pair{4096, 11008}}) {
    const int rows = shape.first;
    const int cols = shape.second;
    const std::size_t size = static_cast<std::size_t>(rows) * cols;
    const auto w0 = random_weights(s, size, 1);
    const auto w1 = random_weights(s, size, 2);
    const auto x = random_weights(s, static_cast<std::size_t>(8) * cols, 3);
    auto out = lg::empty<half>(static_cast<std::size_t>(8) * rows).sync_on(s);
    const lg::LaunchConfig cfg = nn.gemv_config(rows, cols);
    double t1 = 0;
    for (const int batch : {1, 2, 4, 8}) {
      const double t = median_seconds(s, 50, [&](int i) {
        gemv.launch(s, cfg, (i % 2 == 0 ? w0 : w1).cview(), x.cview(), out.view(), rows, cols, batch);
      });
      if (batch == 1) t1 = t;
      const double bw = 2.0 * static_cast<double>(size) / t;
      std::printf("%6d x %5d | %5d | %9.2f | %7.2f | %14.1f%% | %.2f\n", rows, cols, batch, t * 1e6, bw * 1e-12,
                  100.0 * bw / copy_bw, t / t1);
    }
  }
  return 0;
}
