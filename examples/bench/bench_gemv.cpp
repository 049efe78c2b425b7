// fp16 GEMV bandwidth: weight bytes streamed per second for the decode-step shapes, for several block shapes.
// Two weight copies are used alternately so consecutive launches cannot hit in L2. Medians of many samples,
// timed with CUDA events; the floor is the weight bytes at the device-to-device copy bandwidth measured here.
#include <lazygraph/lazygraph.hpp>
#include <lazygraph/nn/kernels.hpp>
#include <lazygraph/nn/random_weights.hpp>
#include <lazygraph/nn/swiglu.hpp>

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "ceiling.hpp"
#include "cli.hpp"
#include "median.hpp"

namespace lg = lazygraph;
using lg::half;

namespace {

using bench::median;
using bench::median_seconds;

lg::DeviceBuffer<half> random_weights(const lg::Stream& s, std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  std::vector<half> h(n);
  for (half& v : h) v = half::from_float(dist(rng));
  return lg::from_host(h).sync_on(s);
}

/// The shape sweep: for rows and cols from 512 to 32768, a graph of 10 early-launched gemvs (alternating between two
/// weight copies, so no launch finds its weights in L2), timed per gemv, with the launch shape of
/// nn::Kernels::gemv_config and with each warps-per-row choice; prints the fraction of the copy ceiling.
void shape_sweep(const lg::Stream& s, const lg::nn::Kernels& nn, double copy_bw) {
  const std::vector<int> sizes{512, 1024, 2048, 4096, 8192, 16384, 32768};
  const std::size_t largest = 32768ULL * 32768ULL;
  const auto w0 = lg::nn::device_tensor(s, nn.fill_uniform, 1, {1, largest, 0.01F, 0.0F});
  const auto w1 = lg::nn::device_tensor(s, nn.fill_uniform, 2, {2, largest, 0.01F, 0.0F});
  const auto x = lg::nn::device_tensor(s, nn.fill_uniform, 3, {3, 32768, 1.0F, 0.0F});
  auto out = lg::empty<half>(32768).sync_on(s);
  constexpr int chain_length = 10;
  std::printf(
      "\ngemv shape sweep: fraction of the copy ceiling, graph of %d early-launched gemvs (us per gemv)\n"
      "cell: the rule's launch shape %% (best warps per row: its %%)\n| rows \\ cols |",
      chain_length);
  for (const int c : sizes) std::printf(" %d |", c);
  std::printf("\n|---|");
  for (std::size_t i = 0; i < sizes.size(); ++i) std::printf("---|");
  std::printf("\n");
  for (const int rows : sizes) {
    std::printf("| %d |", rows);
    for (const int cols : sizes) {
      const std::size_t size = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
      const auto time_config = [&](const lg::LaunchConfig& cfg) {
        std::vector<lg::LaunchOp<const half*, const half*, half*, int, int, int>> ops;
        ops.reserve(chain_length);
        for (int i = 0; i < chain_length; ++i) {
          ops.push_back(
              nn.gemv(cfg, (i % 2 == 0 ? w0 : w1).cview().subspan(0, size), x.cview(), out.view(), rows, cols, 1));
        }
        auto graph = lg::CudaGraph<>::capture(s, lg::chain(std::move(ops)));
        const int reps = static_cast<int>(std::clamp<std::size_t>((64ULL << 20U) / (size * chain_length), 2, 50));
        return median_seconds(s, reps, [&](int) { graph.launch_on(s); }) / chain_length;
      };
      const auto fraction = [&](double t) { return 2.0 * static_cast<double>(size) / t / copy_bw; };
      const double rule = fraction(time_config(nn.gemv_config(rows, cols)));
      double best = 0;
      unsigned best_k = 0;
      for (const unsigned k : cols >= 4096 ? std::vector<unsigned>{1U, 2U, 4U, 8U} : std::vector<unsigned>{1U}) {
        const unsigned per_block = 8 / k;
        const double f = fraction(time_config(nn.step_config(
            {{(static_cast<unsigned>(rows) + per_block - 1) / per_block, 1, 1}, {32, k, per_block}, 0})));
        if (f > best) {
          best = f;
          best_k = k;
        }
      }
      std::printf(" %.0f%% (%u: %.0f%%) |", 100 * rule, best_k, 100 * best);
      std::fflush(stdout);
    }
    std::printf("\n");
  }
}

/// The MLP sweep: for SwiGLU shapes (d, ffn), a graph of whole blocks (rms_norm_gemv_swiglu, then gemv_add), as many
/// as it takes to read 256 MB of weights (so no replay finds them in L2), for each warps-per-row choice of the two
/// kernels; prints the fraction of the copy ceiling with nn::Kernels::gemv_config's choice and with the best pair.
void mlp_sweep(const lg::Stream& s, const lg::nn::Kernels& nn, double copy_bw) {
  std::printf(
      "\nMLP block sweep: fraction of the copy ceiling, graph of early-launched blocks reading >= 256 MB\n"
      "| d, ffn | blocks | rule (K gate/up, K down) | rule | best (K, K) | best |\n|---|---|---|---|---|---|\n");
  for (const auto& shape :
       {std::pair{512, 1536}, std::pair{768, 3072}, std::pair{1024, 4096}, std::pair{1536, 4096}, std::pair{2048, 5632},
        std::pair{2560, 6912}, std::pair{3072, 8192}, std::pair{4096, 8192}, std::pair{4096, 11008}}) {
    const int d = shape.first;
    const int ffn = shape.second;
    const std::size_t per_layer = 3ULL * static_cast<std::size_t>(d) * static_cast<std::size_t>(ffn);  // elements
    const int layers = std::max<int>(4, static_cast<int>((256ULL << 20U) / (per_layer * sizeof(half))) + 1);
    std::vector<lg::nn::SwigluWeights> w;
    w.reserve(static_cast<std::size_t>(layers));
    for (int l = 0; l < layers; ++l) w.push_back(lg::nn::generate_swiglu_weights(s, nn, 7, l, d, ffn));
    auto x = lg::nn::device_tensor(s, nn.fill_uniform, 9, {9, static_cast<std::size_t>(d), 1.0F, 0.0F});
    auto act = lg::empty<half>(static_cast<std::size_t>(ffn)).sync_on(s);
    const auto config = [&](int rows, unsigned k) {
      const unsigned per_block = 8 / k;
      return nn.step_config({{(static_cast<unsigned>(rows) + per_block - 1) / per_block, 1, 1}, {32, k, per_block}, 0});
    };
    const auto time = [&](const lg::LaunchConfig& a, const lg::LaunchConfig& b) {
      std::vector<decltype(nn.rms_norm_gemv_swiglu(a, w[0].w1.dense(), w[0].w3.dense(), x.cview(), w[0].gain.cview(),
                                                   act.view(), ffn, d, 1e-5F, 1) >>
                           nn.gemv_add(b, w[0].w2.dense(), act.cview(), x.view(), d, ffn, 1))>
          ops;
      ops.reserve(w.size());
      for (const auto& l : w) {
        ops.push_back(nn.rms_norm_gemv_swiglu(a, l.w1.dense(), l.w3.dense(), x.cview(), l.gain.cview(), act.view(), ffn,
                                              d, 1e-5F, 1) >>
                      nn.gemv_add(b, l.w2.dense(), act.cview(), x.view(), d, ffn, 1));
      }
      auto graph = lg::CudaGraph<>::capture(s, lg::chain(std::move(ops)));
      const double t = median_seconds(s, 3, [&](int) { graph.launch_on(s); });
      return 2.0 * static_cast<double>(per_layer) * layers / t / copy_bw;
    };
    const lg::LaunchConfig rule_a = nn.gemv_config(ffn, d);
    const lg::LaunchConfig rule_b = nn.gemv_config(d, ffn);
    const double rule = time(rule_a, rule_b);
    double best = 0;
    unsigned best_a = 0;
    unsigned best_b = 0;
    for (const unsigned ka : {1U, 2U, 4U, 8U}) {
      for (const unsigned kb : {1U, 2U, 4U, 8U}) {
        const double f = time(config(ffn, ka), config(d, kb));
        if (f > best) {
          best = f;
          best_a = ka;
          best_b = kb;
        }
      }
    }
    std::printf("| %d, %d | %d | (%u, %u) | %.0f%% | (%u, %u) | %.0f%% |\n", d, ffn, layers, rule_a.block.y,
                rule_b.block.y, 100 * rule, best_a, best_b, 100 * best);
    std::fflush(stdout);
  }
}

constexpr const char* usage =
    "usage: bench_gemv\n"
    "Prints tables: fp16 GEMV weight bandwidth per block shape for the decode-step shapes, batched gemv, a\n"
    "sweep of SwiGLU blocks per warps-per-row choice and a sweep of shapes from 512 to 32768 rows and columns,\n"
    "each against the device-to-device copy bandwidth measured in the same run. A benchmark, not a test.\n"
    "Exit status: 0 done, 1 failed, 2 usage error, 77 skipped (no GPU; the reason is printed).\n";

int run() {
  lg::Device gpu = lg::Device::first();
  lg::Stream s = gpu.create_stream();
  lg::KernelLibrary kernels = lg::nn::kernel_library(gpu);  // the core and the nn kernel sets
  const lg::nn::Kernels nn(kernels);
  const auto& gemv = nn.gemv;

  const double copy_bw = bench::copy_ceiling(s);
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
  mlp_sweep(s, nn, copy_bw);
  shape_sweep(s, nn, copy_bw);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (auto code = example::handle_arguments(argc, argv, usage)) return *code;
  if (example::skip_without_gpu("bench_gemv")) return example::exit_skipped;
  try {
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gemv: %s\n", e.what());
    return 1;
  }
}
