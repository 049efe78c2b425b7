// The mixture-of-experts benchmark (issue 65, item 6): decode steps of the Qwen3-30B-A3B and OLMoE-1B-7B shapes with
// seeded weights generated on the device, at 1 and 8 rows. For each: the step's time (its graph replayed alone,
// medians of 31 samples of N replays, CUDA events), tokens/s, the bytes the step actually read (attention weights,
// norms, routers, the KV cache up to the step's position, the LM head, the embedding rows, and the weights of the
// distinct experts each layer chose, from the routes the decoder recorded: DecoderConfig::record_routes) and that over
// the time as a fraction of the copy ceiling measured in the same run; batch 8 over batch 1. With --torch, runs
// examples/bench/torch_moe.py on each shape (transformers' Qwen3MoeForCausalLM / OlmoeForCausalLM of the same shape,
// eager and as a CUDA graph) and adds its times and the ratios. With --format int8|fp8, the experts are quantized on
// the device after they are generated (the mlp class of a DecoderQuantization: the router and attention stay dense)
// and their bytes are counted in that format. One table at the end. With --prefill L, instead: the time of prefilling
// a prompt of L tokens on tensor cores (the experts as grouped products, nn/prefill_moe.hpp) against the same prompt
// through the decode step's graphs (8 rows at a time, prefill_chunk 0), each a fresh decoder of the same seeded
// weights, medians of wall-clock times of whole prefills. `--help` for the options.
#include <lazygraph/lazygraph.hpp>
#include <lazygraph/nn/decoder.hpp>
#include <lazygraph/nn/decoder_quantization.hpp>
#include <lazygraph/nn/moe_routes.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "ceiling.hpp"
#include "cli.hpp"
#include "companion.hpp"
#include "median.hpp"
#include "model_shapes.hpp"

namespace lg = lazygraph;
namespace nn = lazygraph::nn;

namespace {

constexpr const char* usage =
    "usage: bench_moe [--shape qwen3-30b-a3b|olmoe-1b-7b] [--layers N] [--dtype bf16|f16|both] [--max-gib N]\n"
    "                 [--position P] [--replays N] [--tensor-cores] [--format dense|int8|fp8] [--torch]\n"
    "                 [--torch-script PATH] [--out DIR] [--prefill L]\n"
    "Times decode steps of mixture-of-experts decoders with seeded weights generated on the device (q/k norms, a\n"
    "router and SwiGLU experts in every layer, as Qwen3-MoE and OLMoE have them) at 1 and 8 rows, after a prompt of P\n"
    "tokens in every row's sequence: the step graph replayed alone (medians of 31 samples of N replays, CUDA events),\n"
    "tokens/s, the bytes the step read (attention weights, norms, routers, KV cache, LM head, and the distinct\n"
    "experts each layer chose, counted from the recorded routes) and their fraction of the copy ceiling (a 1 GiB\n"
    "device-to-device copy measured in the same run), and 8 rows over 1. Prints one table at the end.\n"
    "  --shape NAME        one shape: qwen3-30b-a3b (d 2048, 48 layers, 32/4 heads of 128, 128 experts, top 8 of\n"
    "                      width 768, vocab 151936: 61 GB in bf16) or olmoe-1b-7b (d 2048, 16 layers, 16 heads of\n"
    "                      128, 64 experts, top 8 of width 1024, vocab 50304: 13.8 GB); default both\n"
    "  --layers N          run only the first N layers of each shape (a quick run; the bytes follow)\n"
    "  --dtype T           bf16 (default), f16 or both\n"
    "  --max-gib N         skip a shape whose decoder needs more than N GiB of device memory (default: what is free)\n"
    "  --position P        the prompt length, so the step's position (default 128)\n"
    "  --replays N         replays per sample (default 10)\n"
    "  --tensor-cores      run the projections and experts of the 8-row step on tensor cores\n"
    "                      (DecoderConfig::tensor_cores; the 1-row step is the same either way)\n"
    "  --format F          the experts' format: dense (default), int8 (per channel) or fp8 (e4m3 in blocks of\n"
    "                      128 x 128, as Qwen3-30B-A3B-FP8's), quantized on the device after generating them\n"
    "                      (--torch's companion still runs its experts dense)\n"
    "  --torch             also run the torch companion (needs python3 with torch and transformers) on each shape,\n"
    "                      after our decoder of it is freed, and print its times and theirs over ours\n"
    "  --torch-script P    the companion (default examples/bench/torch_moe.py, from the repository's root)\n"
    "  --out DIR           where the companion writes its results (default bench-results/moe)\n"
    "  --prefill L         time prefills of L tokens (tensor cores against the decode step's graphs) instead,\n"
    "                      of experts in --format's format\n"
    "Exit status: 0 done, 1 failed, 2 usage error, 77 skipped (no GPU; the reason is printed).\n";

struct Options {
  std::vector<std::string> shapes{"qwen3-30b-a3b", "olmoe-1b-7b"};
  int layers = 0;  ///< 0: every layer of the shape
  std::vector<std::string> dtypes{"bf16"};
  double max_gib = 0;  ///< 0: no limit beyond the free memory
  int position = 128;
  int replays = 10;
  bool tensor_cores = false;     ///< DecoderConfig::tensor_cores
  std::string format = "dense";  ///< the experts' format: dense, int8 or fp8
  bool torch = false;
  std::string torch_script = "examples/bench/torch_moe.py";
  std::string out = "bench-results/moe";
  int prefill = 0;  ///< --prefill: the prompt's tokens (0: the decode benchmark)
};

using Shape = bench::ModelShape;

/// The device memory a decoder of `c` holds, roughly: every weight (the whole embedding), the KV caches and the
/// step's activations and logits of kMaxRows rows.
double decoder_bytes(const nn::DecoderConfig& c) {
  const double elem = 2;
  const double kv = 2.0 * c.layers * c.max_batch * c.context * c.kv_dim() * elem;
  const double activations = nn::kMaxRows * elem *
                             (4.0 * c.d + 2.0 * c.q_dim() + 2.0 * c.kv_dim() + c.vocab +
                              static_cast<double>(c.moe.experts_per_token) * c.moe.expert_width);
  return static_cast<double>(c.weight_bytes()) + static_cast<double>(c.vocab) * c.d * elem + kv + activations;
}

/// The experts' quantization for --format `format` with T's scales (none for dense).
template <class T>
nn::DecoderQuantization experts_quantization(const std::string& format) {
  nn::DecoderQuantization q;
  const nn::ScaleType scales = nn::scale_type_of<T>;
  if (format == "int8") q.mlp = nn::QuantizedFormat{nn::WeightFormat::int8_channel, 0, false, scales};
  if (format == "fp8") q.mlp = nn::QuantizedFormat{nn::WeightFormat::fp8_block, 128, false, scales};
  return q;
}

/// Bytes of one expert's three matrices as the decoder holds them: 2 a weight dense, else the quantized layouts'
/// (values, scales).
double expert_bytes(const nn::DecoderConfig& c, const nn::DecoderQuantization& q) {
  if (!q.mlp) return 3.0 * c.moe.expert_width * c.d * 2.0;
  return 2.0 * static_cast<double>(nn::QuantizedLayout("gate", *q.mlp, c.moe.expert_width, c.d).bytes()) +
         static_cast<double>(nn::QuantizedLayout("down", *q.mlp, c.d, c.moe.expert_width).bytes());
}

/// The bytes a step of `rows` rows at `position` read at the least: each weight it uses once (the experts each layer
/// chose, counted once however many rows chose them, each `expert` bytes), each row's KV cache up to its position, its
/// embedding row. Returns the bytes and the mean count of distinct experts a layer.
std::pair<double, double> step_bytes(const nn::DecoderConfig& c, const nn::MoeRoutes& routes, int rows, int position,
                                     double expert) {
  const double elem = 2;
  const double d = c.d;
  const double attention = d + static_cast<double>(c.q_dim() + 2 * c.kv_dim()) * d +
                           static_cast<double>(c.q_dim()) * d +
                           (c.qk_norm_whole ? static_cast<double>(c.q_dim() + c.kv_dim())
                            : c.qk_norm     ? 2.0 * c.head_dim()
                                            : 0.0);
  const double kv = 2.0 * rows * (position + 1.0) * c.kv_dim();
  double elements = static_cast<double>(rows) * d + d + static_cast<double>(c.vocab) * d;  // embedding, final, head
  double distinct = 0;
  double expert_total = 0;  // bytes
  for (int l = 0; l < c.layers; ++l) {
    const auto chosen = static_cast<double>(routes.distinct_experts(l).size());
    distinct += chosen;
    elements += attention + kv + d + static_cast<double>(c.moe.experts) * d;
    expert_total += chosen * expert;
  }
  return {elements * elem + expert_total, distinct / c.layers};
}

/// One row of the table.
struct Row {
  std::string shape;
  int layers = 0;
  std::string dtype;
  int rows = 0;
  double seconds = 0;
  double bytes = 0;
  double distinct = 0;  ///< mean distinct experts a layer
  double ceiling_fraction = 0;
  double over_one_row = 0;  ///< this step's time over the 1-row step's
  std::string skipped;      ///< why this shape was not run, or empty
  std::optional<double> torch_eager_us;
  std::optional<double> torch_graph_us;
  std::string torch_note;  ///< why a torch time is missing
};

template <class T>
std::vector<Row> bench_shape(lg::Stream& s, const lg::KernelLibrary& library, const Shape& shape,
                             const std::string& dtype, const Options& o, double ceiling) {
  nn::DecoderConfig c = shape.config;
  c.context = o.position + 16;
  c.max_batch = 8;
  c.record_routes = true;
  c.tensor_cores = o.tensor_cores;
  const nn::DecoderQuantization q = experts_quantization<T>(o.format);
  // Weights generated on the device from c.seed; the experts then quantized there, each stack freed as it goes.
  nn::BasicDecoderWeights<T> weights = nn::BasicDecoderWeights<T>::generate(s, nn::BasicKernels<T>(library), c);
  if (q.any()) weights = nn::quantize_decoder_weights(s, nn::DeviceQuantizer(library), std::move(weights), c, q);
  nn::BasicDecoder<T> decoder(s, library, c, std::move(weights));
  // Every row's sequence first gets a prompt of `position` tokens, so that the step attends over real keys.
  for (int slot = 0; slot < c.max_batch; ++slot) {
    std::vector<int> prompt(static_cast<std::size_t>(o.position));
    for (int i = 0; i < o.position; ++i) prompt[static_cast<std::size_t>(i)] = (7 * i + 3 + 101 * slot) % c.vocab;
    (void)decoder.prefill(prompt, 0, slot);
  }
  std::vector<Row> out;
  for (const int rows : {1, 8}) {
    std::vector<nn::TokenAt> steps(static_cast<std::size_t>(rows));
    for (int r = 0; r < rows; ++r) steps[static_cast<std::size_t>(r)] = {(13 * r + 1) % c.vocab, o.position};
    (void)decoder.forward_batch(steps);  // sets the rows the graph replays; every replay recomputes this step
    const nn::MoeRoutes routes = decoder.last_routes();
    lg::CudaGraph<>& graph = decoder.graph(rows);
    const double seconds = bench::median_seconds(s, o.replays, [&](int) { graph.launch_on(s); });
    const auto [bytes, distinct] = step_bytes(c, routes, rows, o.position, expert_bytes(c, q));
    Row row;
    row.shape = shape.name;
    row.layers = c.layers;
    row.dtype = dtype;
    row.rows = rows;
    row.seconds = seconds;
    row.bytes = bytes;
    row.distinct = distinct;
    row.ceiling_fraction = bytes / seconds / ceiling;
    row.over_one_row = out.empty() ? 1.0 : seconds / out.front().seconds;
    out.push_back(row);
    std::printf("  %s %s, %d layers, %d rows: %.1f us, %.0f MB read, %.1f distinct experts a layer\n",
                shape.name.c_str(), dtype.c_str(), c.layers, rows, seconds * 1e6, bytes * 1e-6, distinct);
    std::fflush(stdout);
  }
  return out;
}

/// The median wall-clock seconds of prefilling `tokens` tokens into slots 1 .. 4 of a fresh decoder of `shape` with
/// prefill_chunk `chunk` (0: through the decode step's graphs) and its experts in `format` (--format), after one
/// prefill into slot 0 that captures its graphs.
template <class T>
double prefill_seconds(lg::Stream& s, const lg::KernelLibrary& library, const Shape& shape, int tokens, int chunk,
                       const std::string& format) {
  nn::DecoderConfig c = shape.config;
  c.context = tokens + 16;
  c.max_batch = 5;
  c.prefill_chunk = chunk;
  const nn::DecoderQuantization q = experts_quantization<T>(format);
  nn::BasicDecoderWeights<T> weights = nn::BasicDecoderWeights<T>::generate(s, nn::BasicKernels<T>(library), c);
  if (q.any()) weights = nn::quantize_decoder_weights(s, nn::DeviceQuantizer(library), std::move(weights), c, q);
  nn::BasicDecoder<T> decoder(s, library, c, std::move(weights));
  if (chunk > 0 && !decoder.prefill_fallback_reason().empty()) {
    throw lg::UsageError("prefill does not run on tensor cores here: " + decoder.prefill_fallback_reason());
  }
  std::vector<double> times;
  for (int slot = 0; slot < c.max_batch; ++slot) {
    std::vector<int> prompt(static_cast<std::size_t>(tokens));
    for (int i = 0; i < tokens; ++i) prompt[static_cast<std::size_t>(i)] = (7 * i + 3 + 101 * slot) % c.vocab;
    s.synchronize();
    const auto start = std::chrono::steady_clock::now();
    (void)decoder.prefill(prompt, 0, slot);  // returns the next token: the prefill has finished
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (slot > 0) times.push_back(took.count());
  }
  return bench::median(times);
}

/// --prefill: each shape's prefill on tensor cores against the decode step's graphs, one table.
int run_prefill(const Options& o, lg::Stream& s, const lg::KernelLibrary& library) {
  std::printf(
      "| shape | layers | dtype | experts | prompt | tensor cores ms | decode steps ms | steps / tensor cores | "
      "prompt tokens/s |\n|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& name : o.shapes) {
    Shape shape = name == "qwen3-30b-a3b" ? bench::qwen3_30b_a3b() : bench::olmoe_1b_7b();
    if (o.layers > 0 && o.layers < shape.config.layers) shape.config.layers = o.layers;
    for (const std::string& dtype : o.dtypes) {
      const bool bf16 = dtype == "bf16";
      const int chunk = nn::DecoderConfig{}.prefill_chunk;
      const double fast = bf16 ? prefill_seconds<lg::bfloat16>(s, library, shape, o.prefill, chunk, o.format)
                               : prefill_seconds<lg::half>(s, library, shape, o.prefill, chunk, o.format);
      const double slow = bf16 ? prefill_seconds<lg::bfloat16>(s, library, shape, o.prefill, 0, o.format)
                               : prefill_seconds<lg::half>(s, library, shape, o.prefill, 0, o.format);
      std::printf("| %s | %d | %s | %s | %d | %.2f | %.2f | %.1f | %.0f |\n", shape.name.c_str(), shape.config.layers,
                  dtype.c_str(), o.format.c_str(), o.prefill, fast * 1e3, slow * 1e3, slow / fast, o.prefill / fast);
      std::fflush(stdout);
    }
  }
  std::printf(
      "\n(wall-clock medians of 4 whole prefills each, after one that captures the graphs; chunks of up to %d "
      "rows on tensor cores)\n",
      nn::DecoderConfig{}.prefill_chunk);
  return 0;
}

/// Runs the torch companion on `shape` and reads its results into `rows` (the same shape's). A failure is a note in
/// the table, not an error of this program.
void run_torch(const Options& o, const Shape& shape, int layers, const std::string& dtype, std::vector<Row>& rows) {
  const std::filesystem::path file = std::filesystem::path(o.out) / ("torch_" + shape.name + "_" + dtype + ".txt");
  const bench::CompanionResult result = bench::run_companion(
      "torch_moe.py",
      "python3 '" + o.torch_script + "' --shape " + shape.name + " --layers " + std::to_string(layers) + " --dtype " +
          dtype + " --position " + std::to_string(o.position) + " --batch 1,8 --out '" + file.string() + "'",
      file);
  if (!result.failure.empty()) {
    for (Row& r : rows) r.torch_note = result.failure;
    return;
  }
  // Lines "batch B eager_us X graph_us Y|- note WORDS...": torch_moe.py's result format.
  for (const std::string& line : result.lines) {
    const std::optional<bench::CompanionLine> got = bench::parse_companion_line(line, "batch");
    if (!got) continue;
    for (Row& r : rows) {
      if (r.rows != got->count) continue;
      r.torch_eager_us = got->first;
      r.torch_graph_us = got->second;
      r.torch_note = got->note;
    }
  }
}

std::string us_or_dash(const std::optional<double>& us) {
  if (!us) return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%.0f", *us);
  return text;
}

std::string ratio_or_dash(const std::optional<double>& theirs_us, double ours_s) {
  if (!theirs_us) return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%.1fx", *theirs_us * 1e-6 / ours_s);
  return text;
}

int run(const Options& o) {
  lg::Device device = lg::Device::first();
  lg::Stream s = device.create_stream();
  const lg::KernelLibrary library = nn::kernel_library(device);
  const double ceiling = bench::copy_ceiling(s);
  std::printf("%s; copy ceiling (1 GiB device-to-device copy, read + write): %.0f GB/s; %.1f of %.1f GiB free\n\n",
              device.name().c_str(), ceiling * 1e-9, static_cast<double>(device.free_memory()) / (1ULL << 30U),
              static_cast<double>(device.total_memory()) / (1ULL << 30U));
  if (o.prefill > 0) return run_prefill(o, s, library);
  std::vector<Row> table;
  for (const std::string& name : o.shapes) {
    Shape shape = name == "qwen3-30b-a3b" ? bench::qwen3_30b_a3b() : bench::olmoe_1b_7b();
    if (o.layers > 0 && o.layers < shape.config.layers) shape.config.layers = o.layers;
    for (const std::string& dtype : o.dtypes) {
      nn::DecoderConfig sized = shape.config;
      sized.context = o.position + 16;
      sized.max_batch = 8;
      const double need = decoder_bytes(sized);
      const double free = static_cast<double>(device.free_memory());
      std::string skipped;
      if (o.max_gib > 0 && need > o.max_gib * (1ULL << 30U)) {
        skipped = "needs " + std::to_string(static_cast<int>(need / (1ULL << 30U))) + " GiB, over --max-gib";
      } else if (need + (1ULL << 30U) > free) {  // a GiB of room for the graphs, the kernels and the ceiling's copy
        skipped = "needs " + std::to_string(static_cast<int>(need / (1ULL << 30U))) + " GiB, " +
                  std::to_string(static_cast<int>(free / (1ULL << 30U))) + " GiB free";
      }
      std::printf("%s %s, %d layers: %.1f GiB on the device%s\n", shape.name.c_str(), dtype.c_str(),
                  shape.config.layers, need / (1ULL << 30U), skipped.empty() ? "" : (": skipped, " + skipped).c_str());
      std::fflush(stdout);
      if (!skipped.empty()) {
        Row row;
        row.shape = shape.name;
        row.layers = shape.config.layers;
        row.dtype = dtype;
        row.skipped = skipped;
        table.push_back(row);
        continue;
      }
      std::vector<Row> rows = dtype == "bf16" ? bench_shape<lg::bfloat16>(s, library, shape, dtype, o, ceiling)
                                              : bench_shape<lg::half>(s, library, shape, dtype, o, ceiling);
      s.synchronize();  // the decoder is gone: its memory is free for the companion
      if (o.torch) run_torch(o, shape, shape.config.layers, dtype, rows);
      table.insert(table.end(), rows.begin(), rows.end());
    }
  }

  std::printf(
      "\nMixture-of-experts decode steps on %s, seeded weights, %s experts, step graph replayed at position %d "
      "(medians of 31 samples of %d replays, CUDA events)%s; bytes read: attention, norms, routers, KV cache, LM head, "
      "embedding rows and the distinct chosen experts' weights; copy ceiling %.0f GB/s\n\n",
      device.name().c_str(), o.format.c_str(), o.position, o.replays, o.tensor_cores ? ", 8 rows on tensor cores" : "",
      ceiling * 1e-9);
  std::printf(
      "| shape | layers | dtype | rows | step us | tokens/s | MB read | experts read a layer | of ceiling | rows / 1 "
      "row |%s\n|---|---|---|---|---|---|---|---|---|---|%s\n",
      o.torch ? " torch eager us | torch graph us | eager / ours | graph / ours | torch note |" : "",
      o.torch ? "---|---|---|---|---|" : "");
  for (const Row& r : table) {
    if (!r.skipped.empty()) {
      std::printf("| %s | %d | %s | | skipped: %s | | | | | |%s\n", r.shape.c_str(), r.layers, r.dtype.c_str(),
                  r.skipped.c_str(), o.torch ? " | | | | |" : "");
      continue;
    }
    std::printf("| %s | %d | %s | %d | %.1f | %.0f | %.1f | %.1f | %.3f | %.2f |", r.shape.c_str(), r.layers,
                r.dtype.c_str(), r.rows, r.seconds * 1e6, r.rows / r.seconds, r.bytes * 1e-6, r.distinct,
                r.ceiling_fraction, r.over_one_row);
    if (o.torch) {
      std::printf(" %s | %s | %s | %s | %s |", us_or_dash(r.torch_eager_us).c_str(),
                  us_or_dash(r.torch_graph_us).c_str(), ratio_or_dash(r.torch_eager_us, r.seconds).c_str(),
                  ratio_or_dash(r.torch_graph_us, r.seconds).c_str(), r.torch_note.c_str());
    }
    std::printf("\n");
  }
  std::printf(
      "\n(of ceiling: bytes read / step time / copy ceiling; rows / 1 row: the step's time over the 1-row step's; "
      "eager / ours and graph / ours: transformers' step time over ours)\n");
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
    if (arg == "--shape") {
      const std::string shape = value();
      if (shape != "qwen3-30b-a3b" && shape != "olmoe-1b-7b") {
        throw lg::UsageError("--shape " + shape + ": not one of qwen3-30b-a3b, olmoe-1b-7b");
      }
      o.shapes = {shape};
    } else if (arg == "--layers") {
      o.layers = example::integers(value(), "--layers", 1).at(0);
    } else if (arg == "--dtype") {
      const std::string dtype = value();
      if (dtype == "both") {
        o.dtypes = {"bf16", "f16"};
      } else if (dtype == "bf16" || dtype == "f16") {
        o.dtypes = {dtype};
      } else {
        throw lg::UsageError("--dtype " + dtype + ": not one of bf16, f16, both");
      }
    } else if (arg == "--max-gib") {
      const std::string text = value();
      char* end = nullptr;
      o.max_gib = std::strtod(text.c_str(), &end);
      if (end == text.c_str() || *end != '\0' || !(o.max_gib > 0)) {
        throw lg::UsageError("--max-gib " + text + ": not a positive number");
      }
    } else if (arg == "--position") {
      o.position = example::integers(value(), "--position", 1).at(0);
      if (o.position + 16 > nn::kMaxContext) {
        throw lg::UsageError("--position " + std::to_string(o.position) + ": at most " +
                             std::to_string(nn::kMaxContext - 16));
      }
    } else if (arg == "--replays") {
      o.replays = example::integers(value(), "--replays", 1).at(0);
    } else if (arg == "--tensor-cores") {
      o.tensor_cores = true;
    } else if (arg == "--format") {
      o.format = value();
      if (o.format != "dense" && o.format != "int8" && o.format != "fp8") {
        throw lg::UsageError("--format " + o.format + ": not one of dense, int8, fp8");
      }
    } else if (arg == "--torch") {
      o.torch = true;
    } else if (arg == "--torch-script") {
      o.torch_script = value();
    } else if (arg == "--out") {
      o.out = value();
    } else if (arg == "--prefill") {
      o.prefill = example::integers(value(), "--prefill", 16).at(0);
      if (o.prefill + 16 > nn::kMaxContext) {
        throw lg::UsageError("--prefill " + std::to_string(o.prefill) + ": at most " +
                             std::to_string(nn::kMaxContext - 16));
      }
    } else {
      throw lg::UsageError(arg.starts_with("-") ? "unknown option " + arg : "unexpected argument " + arg);
    }
  }
  if (o.torch && !std::filesystem::exists(o.torch_script)) {
    throw lg::UsageError("--torch: no " + o.torch_script + " (run from the repository's root, or give --torch-script)");
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  return example::main_of_options<Options>(argc, argv, "bench_moe", usage, true, parse, run);
}
