// Quantized decoders against the fp16 one, on the same seeded weights: a Llama-3.2-1B-shaped decoder (d 2048, 32
// heads of 64, 8 kv heads, ffn 8192, 16 layers, vocab 128256) made dense, then quantized on the device per class
// (nn::DecoderQuantization). For each: the step's time (the step graph replayed alone, medians of 50, CUDA events),
// tokens/s, the bytes its weights occupy and that over the time as a fraction of the copy ceiling measured in the
// same run; and its accuracy, teacher-forced: over 256 positions of the fp16 decoder's own greedy continuation, how
// often its top token agrees with fp16's, and the logits' relative error (||q - f|| / ||f||, averaged).
//
// The weights are seeded random (DecoderWeights::generate), not a trained model's: the logits of a random model have
// small margins between their top values, so top-1 agreement here is a pessimistic measure of what quantization
// changes; the relative error does not depend on that.
#include <lazygraph/lazygraph.hpp>
#include <lazygraph/nn/decoder.hpp>
#include <lazygraph/nn/decoder_quantization.hpp>
#include <lazygraph/nn/device_quantizer.hpp>

#include <cmath>
#include <cstdio>
#include <optional>
#include <vector>

#include "ceiling.hpp"
#include "cli.hpp"
#include "model_shapes.hpp"

namespace lg = lazygraph;
namespace nn = lazygraph::nn;
using lg::half;

namespace {

constexpr const char* usage =
    "usage: bench_quantized_decoder\n"
    "  Times a Llama-3.2-1B-shaped decoder's step with fp16, int8 and int4 weights (seeded random, quantized on the\n"
    "  device) and measures each quantized decoder's top-1 agreement with fp16 and its logits' relative error over\n"
    "  256 teacher-forced positions. Prints a table. A benchmark, not a test.\n"
    "Exit status: 0 done, 1 failed, 2 usage error, 77 skipped (no GPU; the reason is printed).\n";

constexpr int kPositions = 256;

nn::DecoderConfig llama_1b() {
  nn::DecoderConfig c = bench::llama32_1b().config;
  c.context = kPositions + 8;
  c.prefill_chunk = 0;  // quantized decoders run prompts through the step
  return c;
}

struct Variant {
  const char* name;
  nn::DecoderQuantization quantization;
};

std::vector<Variant> variants() {
  const nn::QuantizedFormat int8{nn::WeightFormat::int8_channel, 0, false, nn::ScaleType::f16};
  const nn::QuantizedFormat g128{nn::WeightFormat::int4_group, 128, false, nn::ScaleType::f16};
  const nn::QuantizedFormat g128z{nn::WeightFormat::int4_group, 128, true, nn::ScaleType::f16};
  const nn::QuantizedFormat g32{nn::WeightFormat::int4_group, 32, false, nn::ScaleType::f16};
  std::vector<Variant> out(6);
  out[0].name = "fp16";
  out[1].name = "int8";
  out[1].quantization.attention = out[1].quantization.mlp = out[1].quantization.lm_head = int8;
  out[2].name = "int4 g128, LM head int8";
  out[2].quantization.attention = out[2].quantization.mlp = g128;
  out[2].quantization.lm_head = int8;
  out[3].name = "int4 g128 clip search, LM head int8";
  out[3].quantization = out[2].quantization;
  out[3].quantization.options.clip_search = true;
  out[4].name = "int4 g128 zero points, LM head int8";
  out[4].quantization.attention = out[4].quantization.mlp = g128z;
  out[4].quantization.lm_head = int8;
  out[5].name = "int4 g32, LM head int8";
  out[5].quantization.attention = out[5].quantization.mlp = g32;
  out[5].quantization.lm_head = int8;
  return out;
}

int run() {
  lg::Device device = lg::Device::first();
  lg::Stream s = device.create_stream();
  const lg::KernelLibrary library = nn::kernel_library(device);
  const nn::Kernels kernels(library);
  const nn::DeviceQuantizer quantizer(library);
  const double copy_bw = bench::copy_ceiling(s);
  const nn::DecoderConfig config = llama_1b();
  std::printf("%s; copy ceiling (1 GiB device-to-device copy, read + write): %.0f GB/s\n", device.name().c_str(),
              copy_bw * 1e-9);
  std::printf(
      "Llama-3.2-1B-shaped decoder, seeded random weights; step of one row (graph replay), accuracy over %d "
      "teacher-forced positions against fp16\n\n",
      kPositions);
  std::printf(
      "| weights | weight MB | step us | tokens/s | of ceiling | top-1 agreement | logits rel. error |\n"
      "|---|---|---|---|---|---|---|\n");

  std::vector<int> tokens;  // the fp16 decoder's greedy continuation, teacher-forced into every decoder
  std::vector<std::vector<float>> reference;  // its logits at each position
  for (const Variant& v : variants()) {
    nn::DecoderWeights weights = nn::DecoderWeights::generate(s, kernels, config);
    if (v.quantization.any()) {
      weights = nn::quantize_decoder_weights(s, quantizer, std::move(weights), config, v.quantization);
    }
    const double bytes = static_cast<double>(nn::decoder_device_bytes(config, v.quantization)) -
                         2.0 * config.vocab * config.d;  // the embedding: one row read per step, not the table
    nn::Decoder decoder(s, library, config, std::move(weights));

    if (tokens.empty()) tokens = decoder.generate(1, kPositions);
    decoder.reset();
    int agreed = 0;
    double error = 0;
    for (int p = 0; p < kPositions; ++p) {
      const int next = decoder.forward({p == 0 ? 1 : tokens[static_cast<std::size_t>(p - 1)], p});
      const std::vector<half> logits = decoder.logits();
      std::vector<float> f(logits.size());
      for (std::size_t i = 0; i < f.size(); ++i) f[i] = logits[i].to_float();
      if (reference.size() < static_cast<std::size_t>(kPositions)) {
        reference.push_back(std::move(f));
        ++agreed;
        continue;
      }
      const std::vector<float>& r = reference[static_cast<std::size_t>(p)];
      double diff = 0;
      double norm = 0;
      for (std::size_t i = 0; i < r.size(); ++i) {
        diff += (static_cast<double>(f[i]) - r[i]) * (static_cast<double>(f[i]) - r[i]);
        norm += static_cast<double>(r[i]) * r[i];
      }
      error += std::sqrt(diff / norm);
      agreed += next == tokens[static_cast<std::size_t>(p)] ? 1 : 0;
    }

    lg::CudaGraph<>& graph = decoder.graph(1);
    const double seconds = bench::median_seconds(s, 50, [&](int) { graph.launch_on(s); });
    if (v.quantization.any()) {
      std::printf("| %s | %.0f | %.1f | %.0f | %.2f | %.1f%% | %.2e |\n", v.name, bytes * 1e-6, seconds * 1e6,
                  1.0 / seconds, bytes / seconds / copy_bw, 100.0 * agreed / kPositions, error / kPositions);
    } else {
      std::printf("| %s | %.0f | %.1f | %.0f | %.2f | (reference) | (reference) |\n", v.name, bytes * 1e-6,
                  seconds * 1e6, 1.0 / seconds, bytes / seconds / copy_bw);
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (auto code = example::handle_arguments(argc, argv, usage)) return *code;
  if (example::skip_without_gpu("bench_quantized_decoder")) return example::exit_skipped;
  try {
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_quantized_decoder: %s\n", e.what());
    return 1;
  }
}
