// Weight-only quantized matrix-vector kernels (kernels/nn/qgemv.cu) against the fp16 gemv family, on the weight
// shapes of a Llama-3.2-1B decode step (d 2048, 32 heads of 64, 8 kv heads, ffn 8192, vocab 128256): time per launch,
// bytes read per second, and that as a fraction of the device-to-device copy ceiling measured in the same run.
// Each cell is a graph of early-launched kernels cycling through enough copies of the weights (256 MB or more in all)
// that no launch finds its weights in L2; medians of 31 samples, timed with CUDA events. The weights' values do not
// change the time (every byte is read and dequantized alike), so they are constant bytes, not a quantized checkpoint.
// The q, k, v row times the plain norm + product kernels (rms_norm_gemv, rms_norm_qgemv: the LM head's, which shares
// its sum of x^2 out over the block, a cost a small matrix pays in latency); a decoder step reads these weights with
// the fused qkv_rope_append and quantized_qkv_rope_append, which bench_quantized_decoder times in place.
#include <lazygraph/lazygraph.hpp>
#include <lazygraph/nn/kernels.hpp>
#include <lazygraph/nn/quantized_kernels.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "ceiling.hpp"
#include "cli.hpp"
#include "median.hpp"

namespace lg = lazygraph;
namespace nn = lazygraph::nn;
using lg::half;

namespace {

constexpr const char* usage =
    "usage: bench_quantized\n"
    "  Times the quantized matrix-vector kernels (int8 per channel, int4 in groups of 128, fp8 e4m3 in groups of\n"
    "  128) against the fp16 gemv\n"
    "  family on the weight shapes of a Llama-3.2-1B decode step, batch 1 and 8, and prints a table: time per\n"
    "  launch and the fraction of the copy ceiling measured in the same run. A benchmark, not a test.\n"
    "Exit status: 0 done, 1 failed, 2 usage error, 77 skipped (no GPU; the reason is printed).\n";

/// One weight shape of the step: rows x cols, `matrices` of them per launch (2: gate and up), the kernel kind.
struct Shape {
  const char* name;
  int rows;
  int cols;
  int matrices;
  int per_step;  ///< launches of this shape per decode step
  enum Kind { plain, add, norm, swiglu } kind;
  bool lm_head = false;  ///< read in 8 bits in the int4 step
};

/// The weights of one launch, in one format: fp16 (dense) or quantized with constant bytes and scales.
struct Weights {
  std::vector<lg::DeviceBuffer<half>> dense;
  std::vector<lg::DeviceBuffer<std::uint8_t>> values;
  std::vector<lg::DeviceBuffer<half>> scales;
  std::vector<nn::QuantizedMatrix> matrices;
};

Weights make_weights(const lg::Stream& s, const Shape& shape, nn::WeightFormat format, int group) {
  Weights w;
  const std::size_t n = static_cast<std::size_t>(shape.rows) * static_cast<std::size_t>(shape.cols);
  for (int m = 0; m < shape.matrices; ++m) {
    if (format == nn::WeightFormat::dense) {
      w.dense.push_back(lg::DeviceBuffer<half>(s.device(), n));
      lg::fill(w.dense.back().view(), half::from_float(0.01F)).sync_on(s);
      continue;
    }
    const std::size_t bytes = format == nn::WeightFormat::int4_group ? n / 2 : n;
    const std::size_t scale_count = n / static_cast<std::size_t>(group);
    w.values.push_back(lg::DeviceBuffer<std::uint8_t>(s.device(), bytes));
    lg::fill(w.values.back().view(), std::uint8_t{0x5A}).sync_on(s);  // int8 -38, int4 5 and -6, e4m3 20
    w.scales.push_back(lg::DeviceBuffer<half>(s.device(), scale_count));
    lg::fill(w.scales.back().view(), half::from_float(0.001F)).sync_on(s);
    w.matrices.push_back(
        {w.values.back().cview().address(), w.scales.back().cview().address(), 0, 0, static_cast<int>(format), group});
  }
  return w;
}

std::size_t bytes_of(const Shape& shape, nn::WeightFormat format, int group) {
  const std::size_t n = static_cast<std::size_t>(shape.rows) * static_cast<std::size_t>(shape.cols) *
                        static_cast<std::size_t>(shape.matrices);
  if (format == nn::WeightFormat::dense) return 2 * n;
  const std::size_t scales = 2 * n / static_cast<std::size_t>(group);
  return (format == nn::WeightFormat::int4_group ? n / 2 : n) + scales;
}

struct Bench {
  const lg::Stream& s;
  const nn::Kernels& dense;     // fp32 variants (batch 1)
  const nn::Kernels& dense_tc;  // tensor-core variants (batches of 2 to 8)
  const nn::QuantizedKernels& quant;
  lg::DeviceBuffer<half> x;
  lg::DeviceBuffer<half> gain;
  lg::DeviceBuffer<half> out;

  /// Seconds per launch of `shape` in `format` for `batch` vectors.
  double time(const Shape& shape, nn::WeightFormat format, int group, int batch) {
    const std::size_t bytes = bytes_of(shape, format, group);
    const int copies = static_cast<int>(std::clamp<std::size_t>((256ULL << 20U) / bytes + 1, 2, 64));
    std::vector<Weights> weights;
    weights.reserve(static_cast<std::size_t>(copies));
    for (int i = 0; i < copies; ++i) weights.push_back(make_weights(s, shape, format, group));
    const int launches = std::max(copies, 8);
    const int r = shape.rows;
    const int c = shape.cols;
    const auto xs = x.cview();
    const auto g = gain.cview();
    const auto o = out.view();
    auto graph = [&] {
      if (format == nn::WeightFormat::dense) {
        const nn::Kernels& k = batch == 1 ? dense : dense_tc;
        const lg::LaunchConfig cfg = k.gemv_config(r, c, batch, shape.matrices);
        switch (shape.kind) {
          case Shape::plain:
          case Shape::add: {
            std::vector<lg::LaunchOp<const half*, const half*, half*, int, int, int>> ops;
            for (int i = 0; i < launches; ++i) {
              const auto& w = weights[static_cast<std::size_t>(i % copies)].dense[0].cview();
              ops.push_back(shape.kind == Shape::add ? k.gemv_add(cfg, w, xs, o, r, c, batch)
                                                     : k.gemv(cfg, w, xs, o, r, c, batch));
            }
            return lg::CudaGraph<>::capture(s, lg::chain(std::move(ops)));
          }
          case Shape::norm: {
            std::vector<lg::LaunchOp<const half*, const half*, const half*, half*, int, int, float, int>> ops;
            for (int i = 0; i < launches; ++i) {
              const auto& w = weights[static_cast<std::size_t>(i % copies)].dense[0].cview();
              ops.push_back(k.rms_norm_gemv(k.rms_norm_gemv_config(r, c, batch), w, xs, g, o, r, c, 1e-5F, batch));
            }
            return lg::CudaGraph<>::capture(s, lg::chain(std::move(ops)));
          }
          case Shape::swiglu: {
            std::vector<lg::LaunchOp<const half*, const half*, const half*, const half*, half*, int, int, float, int>>
                ops;
            for (int i = 0; i < launches; ++i) {
              const Weights& w = weights[static_cast<std::size_t>(i % copies)];
              ops.push_back(
                  k.rms_norm_gemv_swiglu(cfg, w.dense[0].cview(), w.dense[1].cview(), xs, g, o, r, c, 1e-5F, batch));
            }
            return lg::CudaGraph<>::capture(s, lg::chain(std::move(ops)));
          }
        }
      }
      const lg::LaunchConfig cfg = quant.config(weights[0].matrices[0], r, c);
      switch (shape.kind) {
        case Shape::plain:
        case Shape::add: {
          std::vector<lg::LaunchOp<nn::QuantizedMatrix, const half*, half*, int, int, int>> ops;
          for (int i = 0; i < launches; ++i) {
            const nn::QuantizedMatrix& w = weights[static_cast<std::size_t>(i % copies)].matrices[0];
            ops.push_back(shape.kind == Shape::add ? quant.qgemv_add(cfg, w, xs, o, r, c, batch)
                                                   : quant.qgemv(cfg, w, xs, o, r, c, batch));
          }
          return lg::CudaGraph<>::capture(s, lg::chain(std::move(ops)));
        }
        case Shape::norm: {
          std::vector<lg::LaunchOp<nn::QuantizedMatrix, const half*, const half*, half*, int, int, float, int>> ops;
          for (int i = 0; i < launches; ++i) {
            const nn::QuantizedMatrix& w = weights[static_cast<std::size_t>(i % copies)].matrices[0];
            ops.push_back(quant.rms_norm_qgemv(cfg, w, xs, g, o, r, c, 1e-5F, batch));
          }
          return lg::CudaGraph<>::capture(s, lg::chain(std::move(ops)));
        }
        case Shape::swiglu:
        default: {
          std::vector<lg::LaunchOp<nn::QuantizedMatrix, nn::QuantizedMatrix, const half*, const half*, half*, int, int,
                                   float, int>>
              ops;
          for (int i = 0; i < launches; ++i) {
            const Weights& w = weights[static_cast<std::size_t>(i % copies)];
            ops.push_back(quant.rms_norm_qgemv_swiglu(cfg, w.matrices[0], w.matrices[1], xs, g, o, r, c, 1e-5F, batch));
          }
          return lg::CudaGraph<>::capture(s, lg::chain(std::move(ops)));
        }
      }
    }();
    const int reps = static_cast<int>(std::clamp<std::size_t>((512ULL << 20U) / (bytes * launches), 2, 50));
    return bench::median_seconds(s, reps, [&](int) { graph.launch_on(s); }) / launches;
  }
};

int run() {
  lg::Device device = lg::Device::first();
  lg::Stream s = device.create_stream();
  const lg::KernelLibrary library = nn::kernel_library(device);
  const nn::Kernels dense(library);
  const nn::Kernels dense_tc(library, nn::KernelOptions{.tensor_cores = true});
  const nn::QuantizedKernels quant(library);
  const double copy_bw = bench::copy_ceiling(s);
  Bench b{s,
          dense,
          dense_tc,
          quant,
          lg::DeviceBuffer<half>(device, 8 * 8192),
          lg::DeviceBuffer<half>(device, 8192),
          lg::DeviceBuffer<half>(device, 8 * 131072)};
  lg::fill(b.x.view(), half::from_float(0.5F)).sync_on(s);
  lg::fill(b.gain.view(), half::from_float(1.0F)).sync_on(s);
  lg::fill(b.out.view(), half::from_float(0.0F)).sync_on(s);

  const std::vector<Shape> shapes = {
      {"q, k, v (norm)", 3072, 2048, 1, 16, Shape::norm},        {"o proj (+x)", 2048, 2048, 1, 16, Shape::add},
      {"gate, up (swiglu)", 8192, 2048, 2, 16, Shape::swiglu},   {"down (+x)", 2048, 8192, 1, 16, Shape::add},
      {"lm head (norm)", 128256, 2048, 1, 1, Shape::norm, true},
  };
  struct Format {
    const char* name;
    nn::WeightFormat kind;
    int group;
  };
  const std::vector<Format> formats = {{"fp16", nn::WeightFormat::dense, 1},
                                       {"int8", nn::WeightFormat::int8_channel, 0},
                                       {"int4", nn::WeightFormat::int4_group, 128},
                                       {"fp8", nn::WeightFormat::fp8_block, 128}};
  constexpr std::size_t int8_column = 1;  // the format the int4 step reads its LM head in
  constexpr std::size_t int4_column = 2;
  const std::size_t count = formats.size();
  std::printf("%s; copy ceiling (1 GiB device-to-device copy, read + write): %.0f GB/s\n", device.name().c_str(),
              copy_bw * 1e-9);
  std::printf(
      "Llama-3.2-1B step weight shapes; us per launch, fraction of the copy ceiling for the bytes read (int4 in groups "
      "of 128, fp8 e4m3 in groups of 128)\n\n");
  std::printf("| weights | rows x cols | batch |");
  for (const Format& f : formats) std::printf(" %s us |", f.name);
  for (const Format& f : formats) std::printf(" %s of ceiling |", f.name);
  for (std::size_t i = 1; i < count; ++i) std::printf(" %s / fp16 |", formats[i].name);
  std::printf("\n|---|---|---|");
  for (std::size_t i = 0; i < 3 * count - 1; ++i) std::printf("---|");
  std::printf("\n");
  for (const int batch : {1, 8}) {
    std::vector<double> step(count, 0.0);
    std::vector<double> step_bytes(count, 0.0);
    for (const Shape& shape : shapes) {
      std::vector<double> t(count);
      std::vector<double> f(count);
      std::vector<double> bytes(count);
      for (std::size_t i = 0; i < count; ++i) {
        const int group = formats[i].kind == nn::WeightFormat::int8_channel ? shape.cols : formats[i].group;
        t[i] = b.time(shape, formats[i].kind, group, batch);
        bytes[i] = static_cast<double>(bytes_of(shape, formats[i].kind, group));
        f[i] = bytes[i] / t[i] / copy_bw;
      }
      for (std::size_t i = 0; i < count; ++i) {
        // The int4 step reads its LM head in 8 bits (the model: 4-bit layers, an 8-bit LM head).
        const std::size_t in_step = shape.lm_head && i == int4_column ? int8_column : i;
        step[i] += t[in_step] * shape.per_step;
        step_bytes[i] += bytes[in_step] * shape.per_step;
      }
      std::printf("| %s | %d x %d%s | %d |", shape.name, shape.rows, shape.cols, shape.matrices == 2 ? " (x2)" : "",
                  batch);
      for (std::size_t i = 0; i < count; ++i) std::printf(" %.2f |", t[i] * 1e6);
      for (std::size_t i = 0; i < count; ++i) std::printf(" %.2f |", f[i]);
      for (std::size_t i = 1; i < count; ++i) std::printf(" %.2f |", t[i] / t[0]);
      std::printf("\n");
    }
    std::printf("| **step's weight kernels** (sum; int4: LM head int8) | | %d |", batch);
    for (std::size_t i = 0; i < count; ++i) std::printf(" %.1f |", step[i] * 1e6);
    for (std::size_t i = 0; i < count; ++i) std::printf(" %.2f |", step_bytes[i] / step[i] / copy_bw);
    for (std::size_t i = 1; i < count; ++i) std::printf(" %.2f |", step[i] / step[0]);
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (auto code = example::handle_arguments(argc, argv, usage)) return *code;
  if (example::skip_without_gpu("bench_quantized")) return example::exit_skipped;
  try {
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_quantized: %s\n", e.what());
    return 1;
  }
}
