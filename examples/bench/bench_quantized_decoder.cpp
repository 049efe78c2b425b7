// Quantized decoders against the fp16 one. Two tables.
//
// Speed: the default decoder (d 512, 8 layers), the TinyLlama and the Llama-3.2-1B shapes, seeded weights made dense
// and then quantized on the device per class (nn::DecoderQuantization), steps of 1 and 8 rows, and a 128-token prompt
// on tensor cores (wall time of Decoder::prefill, median of 5). For each: the step's time (the step graph replayed
// alone at position 128 or --position's, medians of 31 samples of 20 replays, CUDA events), tokens/s, the bytes its
// weights occupy (less the embedding table, of which a step reads one row per token) and those bytes over the time as a
// fraction of the copy ceiling measured in the same run. --kv-block-size puts the KV cache in a pool of blocks (each
// row through its own table; the prompt column left out) and --attention-blocks sets how the step attends, to compare
// the paged cache's attention with the contiguous one in the decoder's graph. Dense steps of 8 rows run on tensor cores
// (DecoderConfig::tensor_cores), as the quantized kernels always do. Formats: fp16, int8, fp8 in blocks, int4 g128, and
// int4 g128 with zero points as AWQ and GPTQ checkpoints are read, also with the q/k/v, o, gate and up matrices'
// columns stored in a random order of their inputs, as a GPTQ desc_act checkpoint loads (the kernels gather x; the
// orders' 8 bytes a column are not in the weight MB, about 0.1 % of them).
//
// Accuracy, teacher-forced over 256 positions, each quantized decoder against the fp16 decoder on the same weights:
// how often its top token agrees with fp16's, the logits' relative error (||q - f|| / ||f||, averaged over positions),
// and per layer the relative error of the keys and values it wrote to its KV cache (every position's, all heads: the
// layer's input as it reaches attention, so the error quantization has added up to that layer). On the seeded
// Llama-3.2-1B shape, teacher-forced with the fp16 decoder's own greedy continuation; with --checkpoint, on that
// model folder (a trained one: examples/bench/train_tiny_llama.py writes one), teacher-forced with the token ids of
// --tokens. Random weights give logits with small margins between their top values, so top-1 agreement on them is
// a pessimistic measure; a trained model's is the one that says what a user sees.
#include <lazygraph/lazygraph.hpp>
#include <lazygraph/nn/checkpoint.hpp>
#include <lazygraph/nn/decoder.hpp>
#include <lazygraph/nn/decoder_quantization.hpp>
#include <lazygraph/nn/device_quantizer.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "ceiling.hpp"
#include "cli.hpp"
#include "median.hpp"
#include "model_shapes.hpp"

namespace lg = lazygraph;
namespace nn = lazygraph::nn;
using lg::half;

namespace {

constexpr const char* usage =
    "usage: bench_quantized_decoder [--checkpoint DIR --tokens FILE] [--no-speed] [--no-accuracy] [--shape NAME]\n"
    "                               [--position P] [--kv-block-size B] [--attention-blocks N]\n"
    "  Times decoder steps with fp16, int8, fp8 and int4 weights (seeded, quantized on the device) on the default,\n"
    "  TinyLlama and Llama-3.2-1B shapes at 1 and 8 rows, and measures each quantized decoder's top-1 agreement with\n"
    "  fp16, its logits' relative error and its per-layer KV error over 256 teacher-forced positions: on the seeded\n"
    "  Llama-3.2-1B shape, and on a checkpoint when given. Prints tables. A benchmark, not a test.\n"
    "  --checkpoint DIR  a model folder (config.json, safetensors) to measure accuracy on, in fp16\n"
    "  --tokens FILE     the token ids to teacher-force it with, whitespace-separated (at least 257)\n"
    "  --no-speed        only the accuracy tables\n"
    "  --no-accuracy     only the speed table\n"
    "  --shape NAME      the speed table of one shape: default, tinyllama or llama32-1b\n"
    "  --position P      the position the speed table's steps attend up to (default 128; 1 to 32000): a step's\n"
    "                    attention reads its rows' P + 1 cached positions\n"
    "  --kv-block-size B the speed table on a paged KV cache of blocks of B positions (16 or 32; default: the\n"
    "                    contiguous cache), each row through its own table; no prefill column\n"
    "  --attention-blocks N\n"
    "                    DecoderConfig::attention_blocks for the speed table (default 1; with a paged cache 0\n"
    "                    attends on the grouped kernels, each kv head's keys and values read once for its query\n"
    "                    heads)\n"
    "Exit status: 0 done, 1 failed, 2 usage error, 77 skipped (no GPU; the reason is printed).\n";

constexpr int kPositions = 256;
constexpr int kSpeedPosition = 128;  ///< the speed table's default step position
constexpr int kMaxSpeedPosition = 32000;
constexpr int kPromptTokens = 128;

struct Options {
  std::string checkpoint;
  std::string tokens;
  bool speed = true;
  bool accuracy = true;
  std::string shape;              ///< the speed table's only shape, or empty for all
  int position = kSpeedPosition;  ///< the speed table's step position
  int kv_block_size = 0;          ///< the speed table's paged cache's block size, or 0 for the contiguous cache
  int attention_blocks = 1;       ///< the speed table's DecoderConfig::attention_blocks
};

struct Variant {
  const char* name;
  nn::DecoderQuantization quantization;
  bool reordered = false;  ///< int4 with zero points: every matrix's columns stored in a random order (GPTQ desc_act)
};

/// fp16 first (the reference), then the quantized variants; `all` adds the int4 variants the speed table leaves out,
/// the speed table (not `all`) int4 with zero points as AWQ and GPTQ checkpoints are read, with and without desc_act.
std::vector<Variant> variants(bool all) {
  const nn::QuantizedFormat int8{nn::WeightFormat::int8_channel, 0, false, nn::ScaleType::f16};
  const nn::QuantizedFormat g128{nn::WeightFormat::int4_group, 128, false, nn::ScaleType::f16};
  const nn::QuantizedFormat g128z{nn::WeightFormat::int4_group, 128, true, nn::ScaleType::f16};
  const nn::QuantizedFormat g32{nn::WeightFormat::int4_group, 32, false, nn::ScaleType::f16};
  const nn::QuantizedFormat fp8{nn::WeightFormat::fp8_block, 128, false, nn::ScaleType::f16};
  std::vector<Variant> out;
  out.push_back({"fp16", {}});
  out.push_back({"int8", {int8, int8, int8, {}}});
  out.push_back({"fp8 (128 x 128 blocks)", {fp8, fp8, fp8, {}}});
  out.push_back({"int4 g128, LM head int8", {g128, g128, int8, {}}});
  if (!all) {
    out.push_back({"int4 g128 zero points (AWQ, GPTQ), LM head int8", {g128z, g128z, int8, {}}});
    out.push_back({"int4 g128 zero points, inputs reordered (GPTQ desc_act)", {g128z, g128z, int8, {}}, true});
    return out;
  }
  out.push_back({"int4 g128 clip search, LM head int8", {g128, g128, int8, {.clip_search = true}}});
  out.push_back({"int4 g128 zero points, LM head int8", {g128z, g128z, int8, {}}});
  out.push_back({"int4 g32, LM head int8", {g32, g32, int8, {}}});
  return out;
}

/// ||a - b|| / ||b|| over `n` elements from `from`.
double relative_error(const std::vector<half>& a, const std::vector<half>& b, std::size_t from, std::size_t n) {
  double diff = 0;
  double norm = 0;
  for (std::size_t i = from; i < from + n; ++i) {
    const double x = a[i].to_float();
    const double y = b[i].to_float();
    diff += (x - y) * (x - y);
    norm += y * y;
  }
  return std::sqrt(diff / norm);
}

/// `w` with its columns stored in a random order of its inputs (seeded by `seed`), the bytes as they are: a GPTQ
/// desc_act matrix's speed (what it computes is not this benchmark's concern).
nn::Weight<half> reordered(lg::Stream& s, const nn::Weight<half>& w, unsigned seed) {
  const nn::QuantizedWeight q = w.quantized().download(s);
  std::vector<std::int32_t> order(static_cast<std::size_t>(q.layout().cols()));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  const nn::QuantizedWeight r(q.layout(), {q.values().begin(), q.values().end()},
                              {q.scale_bits().begin(), q.scale_bits().end()}, {q.zeros().begin(), q.zeros().end()},
                              std::move(order));
  return nn::Weight<half>(nn::DeviceQuantizedWeight<half>(s, r));
}

/// The attention and MLP matrices of `weights` reordered as a GPTQ desc_act checkpoint loads: q/k/v, o, gate and up
/// (gate and up alike: one kernel gathers their x); the down projection's order goes to gate's and up's rows, which
/// costs nothing, so it keeps its inputs' own.
void reorder_inputs(lg::Stream& s, nn::DecoderWeights& weights) {
  for (std::size_t l = 0; l < weights.attention.size(); ++l) {
    const auto seed = static_cast<unsigned>(4 * l);
    weights.attention[l].qkv = reordered(s, weights.attention[l].qkv, seed);
    weights.attention[l].wo = reordered(s, weights.attention[l].wo, seed + 1);
    weights.mlp[l].w1 = reordered(s, weights.mlp[l].w1, seed + 2);
    weights.mlp[l].w3 = reordered(s, weights.mlp[l].w3, seed + 2);
  }
}

void speed_table(lg::Stream& s, const lg::KernelLibrary& library, const nn::Kernels& kernels,
                 const nn::DeviceQuantizer& quantizer, double copy_bw, const Options& o) {
  const std::string& only = o.shape;
  const int position = o.position;
  std::printf(
      "Step time, seeded weights quantized on the device, the step graph replayed at position %d (dense 8-row steps "
      "on tensor cores), %s KV cache, attention_blocks %d\n\n",
      position,
      o.kv_block_size > 0 ? ("paged (blocks of " + std::to_string(o.kv_block_size) + ")").c_str() : "contiguous",
      o.attention_blocks);
  std::printf(
      "| shape | weights | weight MB | rows | step us | tokens/s | of ceiling | vs fp16 | prefill %d tokens ms |\n"
      "|---|---|---|---|---|---|---|---|---|\n",
      kPromptTokens);
  for (const bench::ModelShape& shape : {bench::ModelShape{"default", {}}, bench::tinyllama(), bench::llama32_1b()}) {
    if (!only.empty() && shape.name != only) continue;
    nn::DecoderConfig config = shape.config;
    config.context = std::max(256, position + 1);
    config.max_batch = 8;
    config.tensor_cores = true;
    config.attention_blocks = o.attention_blocks;
    // A paged cache: row r's table is blocks [r * width, (r + 1) * width) of the pool.
    std::vector<int> tables;
    std::size_t width = 0;  // ints per row's table
    if (o.kv_block_size > 0) {
      config.kv_block_size = o.kv_block_size;
      width = static_cast<std::size_t>(config.kv_table_width());
      config.kv_blocks = config.max_batch * config.kv_table_width();
      tables.resize(static_cast<std::size_t>(config.kv_blocks));
      std::iota(tables.begin(), tables.end(), 0);
    }
    double fp16_seconds[2] = {0, 0};
    for (const Variant& v : variants(false)) {
      nn::DecoderWeights weights = nn::DecoderWeights::generate(s, kernels, config);
      if (v.quantization.any()) {
        weights = nn::quantize_decoder_weights(s, quantizer, std::move(weights), config, v.quantization);
      }
      if (v.reordered) reorder_inputs(s, weights);
      const double bytes =
          static_cast<double>(nn::decoder_device_bytes(config, v.quantization)) - 2.0 * config.vocab * config.d;
      nn::Decoder decoder(s, library, config, std::move(weights));
      // A prompt on tensor cores (quantized matrices dequantized for the GEMMs): wall time of Decoder::prefill, which
      // waits for its result, median of 5 after one that plans and captures.
      std::vector<int> prompt(kPromptTokens);
      for (int i = 0; i < kPromptTokens; ++i) prompt[static_cast<std::size_t>(i)] = (7 * i + 3) % config.vocab;
      char prefill_ms[32] = "-";
      if (tables.empty()) {
        (void)decoder.prefill(prompt);
        std::vector<double> prefill_seconds;
        for (int i = 0; i < 5; ++i) {
          const auto start = std::chrono::steady_clock::now();
          (void)decoder.prefill(prompt);
          prefill_seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        }
        std::snprintf(prefill_ms, sizeof prefill_ms, "%.2f", bench::median(prefill_seconds) * 1e3);
      }
      for (const int rows : {1, 8}) {
        std::vector<nn::TokenAt> steps;
        for (int r = 0; r < rows; ++r) steps.push_back({1 + r, position});
        if (tables.empty()) {
          (void)decoder.forward_batch(steps);  // sets the rows the graph replays
        } else {
          (void)decoder.forward_batch(steps, std::span<const int>(tables).first(steps.size() * width));
        }
        lg::CudaGraph<>& graph = decoder.graph(rows);
        const double seconds = bench::median_seconds(s, 20, [&](int) { graph.launch_on(s); });
        double& reference = fp16_seconds[rows == 1 ? 0 : 1];
        if (!v.quantization.any()) reference = seconds;
        std::printf("| %s | %s | %.0f | %d | %.1f | %.0f | %.2f | %.2fx | %s |\n", shape.name.c_str(), v.name,
                    bytes * 1e-6, rows, seconds * 1e6, rows / seconds, bytes / seconds / copy_bw, seconds / reference,
                    rows == 1 ? prefill_ms : "");
        std::fflush(stdout);
      }
    }
  }
  std::printf("\n");
}

/// What one decoder computes over the teacher-forced positions: each position's logits and top token, and its KV
/// cache (every layer) afterwards.
struct Run {
  std::vector<std::vector<half>> logits;
  std::vector<int> top;
  std::vector<half> k_cache;
  std::vector<half> v_cache;
};

Run teacher_forced(lg::Stream& s, nn::Decoder& decoder, const std::vector<int>& tokens) {
  Run r;
  decoder.reset();
  for (int p = 0; p < kPositions; ++p) {
    r.top.push_back(decoder.forward({tokens[static_cast<std::size_t>(p)], p}));
    r.logits.push_back(decoder.logits());
  }
  r.k_cache.resize(decoder.k_cache().size());
  r.v_cache.resize(decoder.v_cache().size());
  lg::copy_async(s, std::span<half>(r.k_cache), decoder.k_cache().as_const());
  lg::copy_async(s, std::span<half>(r.v_cache), decoder.v_cache().as_const());
  s.synchronize();
  return r;
}

/// The accuracy tables of `make(variant)`'s decoders against the first variant's (fp16).
void accuracy_tables(lg::Stream& s, const std::string& title, const std::vector<int>& tokens_or_empty,
                     const std::function<nn::Decoder(const Variant&)>& make) {
  std::printf("Accuracy against fp16, %s, %d teacher-forced positions\n\n", title.c_str(), kPositions);
  std::printf("| weights | top-1 agreement | logits rel. error |\n|---|---|---|\n");
  std::vector<int> tokens = tokens_or_empty;
  std::optional<Run> reference;
  nn::DecoderConfig config;
  std::vector<std::pair<std::string, std::vector<double>>> per_layer;  // [variant] K and V error per layer
  for (const Variant& v : variants(true)) {
    nn::Decoder decoder = make(v);
    config = decoder.config();
    if (tokens.empty()) {  // the fp16 decoder's greedy continuation of token 1
      tokens = decoder.generate(1, kPositions);
      tokens.insert(tokens.begin(), 1);
    }
    Run run = teacher_forced(s, decoder, tokens);
    if (!reference) {
      reference = std::move(run);
      continue;
    }
    int agreed = 0;
    double error = 0;
    for (int p = 0; p < kPositions; ++p) {
      const auto i = static_cast<std::size_t>(p);
      agreed += run.top[i] == reference->top[i] ? 1 : 0;
      error += relative_error(run.logits[i], reference->logits[i], 0, run.logits[i].size());
    }
    std::printf("| %s | %.1f%% | %.2e |\n", v.name, 100.0 * agreed / kPositions, error / kPositions);
    std::fflush(stdout);
    // Slot 0's first kPositions positions of every kv head, per layer (cache layout [layer][slot][head][pos][dim]).
    const std::size_t per_layer_size = run.k_cache.size() / static_cast<std::size_t>(config.layers);
    const auto context = static_cast<std::size_t>(config.context);
    const auto head_dim = static_cast<std::size_t>(config.head_dim());
    std::vector<double> errors;
    for (int l = 0; l < config.layers; ++l) {
      for (const bool keys : {true, false}) {
        const std::vector<half>& got = keys ? run.k_cache : run.v_cache;
        const std::vector<half>& want = keys ? reference->k_cache : reference->v_cache;
        double diff = 0;
        double norm = 0;
        for (int h = 0; h < config.kv_head_count(); ++h) {
          const std::size_t from =
              static_cast<std::size_t>(l) * per_layer_size + static_cast<std::size_t>(h) * context * head_dim;
          const double e = relative_error(got, want, from, kPositions * head_dim);
          double n = 0;
          for (std::size_t i = from; i < from + kPositions * head_dim; ++i)
            n += want[i].to_float() * want[i].to_float();
          diff += e * e * n;
          norm += n;
        }
        errors.push_back(std::sqrt(diff / norm));
      }
    }
    per_layer.emplace_back(v.name, std::move(errors));
  }
  std::printf("\nPer layer: relative error of the keys | values each layer wrote to the KV cache\n\n| layer |");
  for (const auto& [name, errors] : per_layer) std::printf(" %s |", name.c_str());
  std::printf("\n|---|");
  for (std::size_t i = 0; i < per_layer.size(); ++i) std::printf("---|");
  std::printf("\n");
  for (int l = 0; l < config.layers; ++l) {
    std::printf("| %d |", l);
    for (const auto& [name, errors] : per_layer) {
      std::printf(" %.1e \\| %.1e |", errors[2 * static_cast<std::size_t>(l)],
                  errors[2 * static_cast<std::size_t>(l) + 1]);
    }
    std::printf("\n");
  }
  std::printf("\n");
}

std::vector<int> read_tokens(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw lg::UsageError("--tokens " + path + ": cannot read");
  std::vector<int> out;
  int t = 0;
  while (in >> t) out.push_back(t);
  if (!in.eof()) throw lg::UsageError("--tokens " + path + ": not whitespace-separated integers");
  if (out.size() < kPositions + 1) {
    throw lg::UsageError("--tokens " + path + ": " + std::to_string(out.size()) + " ids, at least " +
                         std::to_string(kPositions + 1) + " needed");
  }
  return out;
}

int run(const Options& o) {
  lg::Device device = lg::Device::first();
  lg::Stream s = device.create_stream();
  const lg::KernelLibrary library = nn::kernel_library(device);
  const nn::Kernels kernels(library);
  const nn::DeviceQuantizer quantizer(library);
  const double copy_bw = bench::copy_ceiling(s);
  std::printf("%s; copy ceiling (1 GiB device-to-device copy, read + write): %.0f GB/s\n\n", device.name().c_str(),
              copy_bw * 1e-9);
  if (o.speed) speed_table(s, library, kernels, quantizer, copy_bw, o);
  if (!o.accuracy) return 0;

  nn::DecoderConfig seeded = bench::llama32_1b().config;
  seeded.context = kPositions + 8;
  accuracy_tables(s, "seeded random Llama-3.2-1B shape", {}, [&](const Variant& v) {
    nn::DecoderWeights weights = nn::DecoderWeights::generate(s, kernels, seeded);
    if (v.quantization.any()) {
      weights = nn::quantize_decoder_weights(s, quantizer, std::move(weights), seeded, v.quantization);
    }
    return nn::Decoder(s, library, seeded, std::move(weights));
  });
  if (!o.checkpoint.empty()) {
    const std::vector<int> tokens = read_tokens(o.tokens);
    accuracy_tables(s, "checkpoint " + o.checkpoint, tokens, [&](const Variant& v) {
      nn::LoadOptions options;
      options.context = kPositions + 8;
      options.progress = false;
      options.quantization = v.quantization;
      return nn::load_decoder(s, library, o.checkpoint, options);
    });
  }
  return 0;
}

/// The options, or the exit code to stop with (0 after --help).
std::variant<Options, int> parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw lg::UsageError(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      std::printf("%s", usage);
      return 0;
    }
    if (arg == "--checkpoint") {
      o.checkpoint = value();
    } else if (arg == "--tokens") {
      o.tokens = value();
    } else if (arg == "--no-speed") {
      o.speed = false;
    } else if (arg == "--no-accuracy") {
      o.accuracy = false;
    } else if (arg == "--shape") {
      o.shape = value();
      if (o.shape != "default" && o.shape != "tinyllama" && o.shape != "llama32-1b") {
        throw lg::UsageError("--shape " + o.shape + ": not one of default, tinyllama, llama32-1b");
      }
    } else if (arg == "--position") {
      const std::string text = value();
      o.position = example::integers(text, "--position").at(0);
      if (o.position < 1 || o.position > kMaxSpeedPosition) {
        throw lg::UsageError("--position " + text + ": not in 1.." + std::to_string(kMaxSpeedPosition));
      }
    } else if (arg == "--kv-block-size") {
      const std::string text = value();
      o.kv_block_size = example::integers(text, "--kv-block-size").at(0);
      if (o.kv_block_size != 16 && o.kv_block_size != 32)
        throw lg::UsageError("--kv-block-size " + text + ": not 16 or 32");
    } else if (arg == "--attention-blocks") {
      const std::string text = value();
      o.attention_blocks = example::integers(text, "--attention-blocks").at(0);
      if (o.attention_blocks < 0 || o.attention_blocks > 64) {
        throw lg::UsageError("--attention-blocks " + text + ": not in 0..64");
      }
    } else {
      throw lg::UsageError(arg.starts_with("-") ? "unknown option " + arg : "unexpected argument " + arg);
    }
  }
  if (o.checkpoint.empty() != o.tokens.empty()) throw lg::UsageError("--checkpoint and --tokens go together");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  return example::main_of_options<Options>(argc, argv, "bench_quantized_decoder", usage, true, parse, run);
}
