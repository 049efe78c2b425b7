// The serving benchmark (issue 66, item 6): nn::Engine over a paged decoder of the Llama-3.2-1B or TinyLlama shape, or
// of a mixture of experts' (Qwen3-30B-A3B, OLMoE-1B-7B; --layers for the first N of them),
// (seeded weights generated on the device), at several counts of concurrent requests, each a prompt of seeded tokens
// and a fixed number of new tokens (greedy, no stop). For each count: the wall time from submitting every request to
// the last token (engine steps on this thread, as lazygraph-serve runs them, so its host work counts), tokens made per
// second, the time to first token (p50, p99) from submission, and the decode phase, while every admitted sequence
// decodes (from the last first token of the first wave to the first finish): its mean step time against the step's
// floor, the bytes it must read (the weights once, plus each row's KV cache up to its position) over the copy ceiling
// measured in the same run; and that step through Decoder::forward_batch alone at the same rows and position (so
// the engine's share of the step shows). At most max_batch sequences step together (default: the largest count, at
// least 8): with more than 8 the steps of more than 8 rows run the wide step (nn/wide_step.hpp), every bucket of which
// is captured before the requests and reported (capture time, memory). With --torch, runs
// examples/bench/torch_serving.py (transformers' continuous batching, generate_batch, over LlamaForCausalLM of the same
// shape and the same prompts) and adds its tokens/s and ours over it to each row. One table at the end. `--help` for
// the options.
#include <lazygraph/lazygraph.hpp>
#include <lazygraph/nn/decoder.hpp>
#include <lazygraph/nn/decoder_quantization.hpp>
#include <lazygraph/nn/decoder_step_model.hpp>
#include <lazygraph/nn/device_quantizer.hpp>
#include <lazygraph/nn/engine.hpp>
#include <lazygraph/nn/wide_step_report.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "ceiling.hpp"
#include "cli.hpp"
#include "companion.hpp"
#include "model_shapes.hpp"

namespace lg = lazygraph;
namespace nn = lazygraph::nn;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* usage =
    "usage: bench_serving [--shape llama32-1b|tinyllama|qwen3-30b-a3b|olmoe-1b-7b] [--layers N] [--dtype f16|bf16]\n"
    "                     [--concurrency N,N,...] [--prompt P]\n"
    "                     [--new N] [--block-size 16|32] [--prefill-chunk C] [--max-batch M] [--torch]\n"
    "                     [--torch-script PATH] [--out DIR] [--shared-prefix S] [--prefix-cache] [--rounds R]\n"
    "                     [--format dense|int8|int4] [--context C]\n"
    "Serves N concurrent requests through nn::Engine over a paged decoder with seeded weights: each a prompt of P\n"
    "seeded tokens and N new tokens (greedy, no stop token), submitted at once, the engine stepped on this thread,\n"
    "after an untimed warm-up of up to 8 requests of other prompts (a server that has served before).\n"
    "Prints, for each N: wall time, tokens made per second, time to first token (p50, p99), and the decode phase's\n"
    "step time against its floor (weights plus KV bytes read, over the copy ceiling measured in the same run), and\n"
    "that step through Decoder::forward_batch alone (the engine's host work left out), and that host work in a\n"
    "step of the phase (EngineStats: the step's wall time less the model's).\n"
    "  --shape NAME        llama32-1b (default; d 2048, 16 layers, 8 kv heads, vocab 128256), tinyllama, or the\n"
    "                      mixtures of experts qwen3-30b-a3b and olmoe-1b-7b (their floor counts every expert's\n"
    "                      weights: a floor where the rows choose them all, about 64 rows or more)\n"
    "  --layers N          only the first N layers of the shape (a quick run; the floor follows)\n"
    "  --dtype T           f16 (default) or bf16\n"
    "  --format F          the attention's and MLP's (or experts') weights: dense (default), int8 (per channel) or\n"
    "                      int4 (groups of 128), quantized on the device; the LM head dense; the floor counts\n"
    "                      their bytes in that format\n"
    "  --concurrency LIST  request counts (default 1,8,32,64,256); at most --max-batch sequences step together,\n"
    "                      the others wait in the engine's queue; steps of more than 8 rows run the wide step\n"
    "  --prompt P          prompt tokens per request (default 512)\n"
    "  --new N             tokens each request makes (default 256)\n"
    "  --block-size B      KV block size, 16 (default) or 32\n"
    "  --context C         DecoderConfig::context, positions a sequence may reach (default: just what the prompt and\n"
    "                      the new tokens take): a server's setting, whose block tables (C / block size entries a\n"
    "                      row) a step stages; the pool still holds only what the requests take\n"
    "  --prefill-chunk C   DecoderConfig::prefill_chunk (default: the config's)\n"
    "  --max-batch M       DecoderConfig::max_batch, 1 to 256 (default: the largest count, at least 8); above 8 every\n"
    "                      bucket of the wide step is captured before the requests and its capture time and memory\n"
    "                      printed\n"
    "  --torch             also serve the same requests with transformers' continuous batching (generate_batch;\n"
    "                      needs python3 with torch and transformers) and print its tokens/s beside ours\n"
    "  --torch-script P    the companion (default examples/bench/torch_serving.py, from the repository's root)\n"
    "  --out DIR           where the companion writes its results (default bench-out)\n"
    "  --shared-prefix S   the first S tokens of every prompt are the same (a system prompt; default 0)\n"
    "  --prefix-cache      the engine shares cached prompt prefixes (EngineOptions::cache_prefixes)\n"
    "  --rounds R          closed loop (default 1: every request at once): each of the N requests is a stream that\n"
    "                      sends R requests, the next as soon as its last one ends, each making a seeded number of\n"
    "                      tokens from half to one and a half times --new, so that the streams drift apart; first\n"
    "                      token then counts the requests after each stream's first, from their submission (a server\n"
    "                      under a steady load of N streams), and a line compares its p50 with the first count's\n"
    "Exit status: 0 done, 1 failed, 2 usage error, 77 skipped (no GPU; the reason is printed).\n";

struct Options {
  std::string shape = "llama32-1b";
  int layers = 0;  ///< --layers: 0 for every layer of the shape
  std::string dtype = "f16";
  std::vector<int> concurrency{1, 8, 32, 64, 256};
  int prompt = 512;
  int fresh = 256;
  int block_size = 16;
  int context = 0;         ///< --context: 0 for just what the requests take
  int prefill_chunk = -1;  ///< -1: the config's default
  int max_batch = 0;       ///< 0: the largest concurrency, at least kMaxRows, at most kMaxWideRows
  bool torch = false;
  std::string torch_script = "examples/bench/torch_serving.py";
  std::string out = "bench-out";
  int shared_prefix = 0;         ///< tokens every prompt begins with
  bool prefix_cache = false;     ///< EngineOptions::cache_prefixes
  int rounds = 1;                ///< requests each stream sends one after another (1: all at once)
  std::string format = "dense";  ///< --format: the attention's and the MLP's (or experts') weights
};

/// --format's quantization: int8 per channel or int4 in groups of 128 for the attention and the MLP (or the experts),
/// the LM head dense, as downloaded AWQ, GPTQ and FP8 checkpoints keep it; none for dense.
template <class T>
nn::DecoderQuantization quantization_of(const std::string& format) {
  nn::DecoderQuantization q;
  if (format == "dense") return q;
  const nn::QuantizedFormat f =
      format == "int8" ? nn::QuantizedFormat{nn::WeightFormat::int8_channel, 0, false, nn::scale_type_of<T>}
                       : nn::QuantizedFormat{nn::WeightFormat::int4_group, 128, false, nn::scale_type_of<T>};
  q.attention = f;
  q.mlp = f;
  return q;
}

struct Row {
  int requests = 0;
  double wall_s = 0;
  double tokens_per_s = 0;
  double ttft_p50_s = 0;
  double ttft_p99_s = 0;
  int decode_rows = 0;        ///< sequences stepping together in the decode phase
  double decode_step_s = 0;   ///< its mean step time
  double floor_s = 0;         ///< its step's bytes over the ceiling
  double decoder_step_s = 0;  ///< Decoder::forward_batch of as many rows at that position, without the engine
  double engine_host_s = 0;   ///< the engine's own host work in a step of that phase (EngineStats), mean
  std::uint64_t preemptions = 0;
  std::uint64_t cached_prompt_tokens = 0;    ///< prompt tokens shared from cached prefixes, not fed
  std::vector<nn::WideBucketReport> wide;    ///< the wide step's buckets, captured before the requests
  std::optional<double> torch_tokens_per_s;  ///< transformers' continuous batching on the same requests
  std::string torch_note;                    ///< how it ran, or why it has no figure
};

/// The q-quantile of `v` (nearest rank).
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

/// What one request saw.
struct Seen {
  Clock::time_point submitted;
  Clock::time_point first;
  Clock::time_point last;
  int stream = 0;  ///< the stream that sent it
  int round = 0;   ///< its place among the stream's requests
  int wanted = 0;  ///< its max_tokens
  int tokens = 0;
  bool done = false;
};

template <class T>
Row serve(lg::Stream& s, const lg::KernelLibrary& library, nn::DecoderConfig c, const Options& o, int requests,
          double ceiling) {
  // Weights generated on the device from c.seed, then quantized there (--format).
  const nn::DecoderQuantization q = quantization_of<T>(o.format);
  nn::BasicDecoderWeights<T> weights = nn::BasicDecoderWeights<T>::generate(s, nn::BasicKernels<T>(library), c);
  if (q.any()) weights = nn::quantize_decoder_weights(s, nn::DeviceQuantizer(library), std::move(weights), c, q);
  nn::BasicDecoder<T> decoder(s, library, c, std::move(weights));
  std::vector<nn::WideBucketReport> wide;
  if (c.max_batch > nn::kMaxRows) {
    decoder.capture_wide_steps();  // every bucket now: the timed run below captures nothing
    wide = decoder.wide_step_report();
  }
  nn::BasicDecoderStepModel<T> model(decoder);
  nn::Engine engine(model, {.kv_blocks = c.kv_blocks,
                            .block_size = c.kv_block_size,
                            .max_queue = requests,
                            .cache_prefixes = o.prefix_cache});
  // Request i's prompt (the first shared_prefix tokens request 0's); in 64 bits, as torch_serving.py's integers:
  // t * 104729 passes INT_MAX from t = 20505 on.
  const auto prompt = [&](long long i, int shared) {
    std::vector<int> tokens;
    for (int t = 0; t < o.prompt; ++t) {
      tokens.push_back(static_cast<int>(((t < shared ? 0 : i) * 7919LL + t * 104729LL + 13) % c.vocab));
    }
    return tokens;
  };
  // Not timed: as many requests as step together (up to kMaxRows), of prompts no timed request begins with, so that
  // the timed run finds the prompt's prefill buffers, plans and graphs and the step's graph made, as a server that has
  // served before does: an idle server's first token is then what the timed requests' first tokens compare with.
  for (int i = 0; i < std::min(requests, nn::kMaxRows); ++i) {
    nn::GenerationRequest r;
    r.prompt = prompt(1000003LL + i, 0);
    r.max_tokens = 2;
    if (!engine.submit(std::move(r)).has_value()) throw lg::UsageError("the engine refused a warm-up request");
  }
  while (engine.step()) {
  }
  const nn::EngineStats warm = engine.stats();
  std::map<nn::RequestId, Seen> seen;  // written by the events, which come on this thread (it steps the engine)
  std::vector<int> ended;              // streams whose request ended in the last step, in the order they ended
  std::mt19937 lengths(12345);         // --rounds: each request's new tokens, seeded
  const auto wanted = [&] {
    if (o.rounds == 1) return o.fresh;
    return std::uniform_int_distribution<int>(std::max(1, o.fresh / 2), o.fresh + o.fresh / 2)(lengths);
  };
  const Clock::time_point start = Clock::now();
  const auto send = [&](int stream, int round) {
    nn::GenerationRequest r;
    r.prompt = prompt(static_cast<long long>(round) * requests + stream, o.shared_prefix);
    r.max_tokens = wanted();
    r.on_event = [&](const nn::GenerationEvent& e) {
      Seen& x = seen[e.id];
      const Clock::time_point now = Clock::now();
      if (e.token.has_value()) {
        if (x.tokens == 0) x.first = now;
        ++x.tokens;
        x.last = now;
      }
      if (e.finished.has_value()) {
        x.done = true;
        if (x.round + 1 < o.rounds) ended.push_back(x.stream);
      }
    };
    const int max_tokens = r.max_tokens;
    const Clock::time_point at = Clock::now();
    const std::optional<nn::RequestId> id = engine.submit(std::move(r));
    if (!id.has_value()) throw lg::UsageError("the engine refused a request");
    Seen& x = seen[*id];
    x.submitted = at;
    x.stream = stream;
    x.round = round;
    x.wanted = max_tokens;
  };
  std::vector<int> sent(static_cast<std::size_t>(requests), 1);  // requests each stream has sent
  for (int i = 0; i < requests; ++i) send(i, 0);
  // Step until idle, noting each step's time and how many sequences ran in it; a stream whose request ended sends its
  // next one before the next step.
  std::vector<std::pair<Clock::time_point, int>> steps;  // the step's end, sequences running in it
  std::vector<double> engine_host;                       // each step's engine host work (outside the model), s
  while (true) {
    const nn::EngineStats before = engine.stats();
    if (!engine.step()) break;
    const nn::EngineStats after = engine.stats();
    steps.emplace_back(Clock::now(), std::max(before.running, after.running));
    engine_host.push_back((after.step_seconds_sum - before.step_seconds_sum) -
                          (after.model_seconds_sum - before.model_seconds_sum));
    for (const int stream : ended) send(stream, sent[static_cast<std::size_t>(stream)]++);
    ended.clear();
  }
  const Clock::time_point end = Clock::now();
  Row row;
  row.requests = requests;
  row.wall_s = std::chrono::duration<double>(end - start).count();
  std::vector<double> ttft;
  Clock::time_point first_finish = end;
  int made = 0;
  for (const auto& [id, x] : seen) {
    if (!x.done || x.tokens != x.wanted)
      throw lg::UsageError("request " + std::to_string(id) + " made " + std::to_string(x.tokens) + " tokens, not " +
                           std::to_string(x.wanted));
    // Every request's from the start (all sent at once), or with --rounds the later ones' from their submission.
    if (o.rounds == 1 || x.round > 0) ttft.push_back(std::chrono::duration<double>(x.first - x.submitted).count());
    if (x.round == 0) first_finish = std::min(first_finish, x.last);
    made += x.tokens;
  }
  row.tokens_per_s = made / row.wall_s;
  row.ttft_p50_s = quantile(ttft, 0.5);
  row.ttft_p99_s = quantile(ttft, 0.99);
  row.preemptions = engine.stats().preemptions - warm.preemptions;
  row.cached_prompt_tokens = engine.stats().cached_prompt_tokens - warm.cached_prompt_tokens;
  row.wide = std::move(wide);
  // The decode phase: the first wave's sequences (min(requests, slots)) all decoding, from the last of their first
  // tokens to the first finish.
  const int wave = std::min(requests, c.max_batch);
  std::vector<double> firsts;
  for (const auto& [id, x] : seen) {
    if (x.round == 0) firsts.push_back(std::chrono::duration<double>(x.first - start).count());
  }
  std::sort(firsts.begin(), firsts.end());
  const Clock::time_point from = start + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(firsts[static_cast<std::size_t>(wave - 1)]));
  int decode_steps = 0;
  double decode_engine_host = 0;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const auto& [at, running] = steps[i];
    if (at > from && at <= first_finish && running == wave) {
      ++decode_steps;
      decode_engine_host += engine_host[i];
    }
  }
  const double phase = std::chrono::duration<double>(first_finish - from).count();
  row.decode_rows = wave;
  row.decode_step_s = decode_steps > 0 ? phase / decode_steps : 0.0;
  row.engine_host_s = decode_steps > 0 ? decode_engine_host / decode_steps : 0.0;
  // The floor of such a step: the weights once (matrices, gains, the LM head) and each row's keys and values up to
  // its mean position in the phase.
  const double elem = 2;
  const double position = o.prompt + o.fresh / 2.0;
  const double kv = 2.0 * wave * c.layers * (position + 1.0) * c.kv_dim() * elem;
  // Quantized (--format): the weights' bytes in their formats, what a step must read at least.
  const double stored = static_cast<double>(q.any() ? nn::decoder_device_bytes(c, q) : c.weight_bytes());
  const double bytes = stored + static_cast<double>(c.vocab) * c.d * elem + kv;
  row.floor_s = bytes / ceiling;
  // The same step without the engine: forward_batch of `wave` rows at that position, each through blocks of its own
  // (the pool is free again; what they hold is not read for anything but time), timed on the host as the engine's.
  const int per_row = (static_cast<int>(position) + c.kv_block_size) / c.kv_block_size;
  if (wave > 0 && wave * per_row <= c.kv_blocks && per_row <= c.kv_table_width()) {
    std::vector<nn::TokenAt> rows_at;
    std::vector<int> tables(static_cast<std::size_t>(wave) * static_cast<std::size_t>(c.kv_table_width()), -1);
    for (int r = 0; r < wave; ++r) {
      rows_at.push_back({.token = 1 + r, .position = static_cast<int>(position)});
      for (int b = 0; b < per_row; ++b) {
        tables[static_cast<std::size_t>(r) * static_cast<std::size_t>(c.kv_table_width()) +
               static_cast<std::size_t>(b)] = r * per_row + b;
      }
    }
    for (int i = 0; i < 3; ++i) static_cast<void>(decoder.forward_batch(rows_at, tables));
    constexpr int kTimed = 50;
    const Clock::time_point t0 = Clock::now();
    for (int i = 0; i < kTimed; ++i) static_cast<void>(decoder.forward_batch(rows_at, tables));
    row.decoder_step_s = std::chrono::duration<double>(Clock::now() - t0).count() / kTimed;
  }
  s.synchronize();
  return row;
}

/// The wide step's buckets: capture time and memory each, and the targets (every bucket captured in at most
/// 2 s; the graphs' memory at most 1.2x the largest bucket's).
void print_wide_report(const std::vector<nn::WideBucketReport>& wide) {
  if (wide.empty()) return;
  std::printf(
      "\nThe wide step's buckets (captured before the requests; its buffers, for the largest bucket, are shared):\n\n"
      "| rows | capture ms | graph MiB | GEMM workspace alone MiB |\n|---|---|---|---|\n");
  double seconds = 0;
  std::size_t graphs = 0;
  std::size_t workspace = 0;  // one, shared by every bucket: the most one needs
  const nn::WideBucketReport* largest = &wide.front();
  for (const nn::WideBucketReport& b : wide) {
    std::printf("| %d | %.1f | %.2f | %.2f |\n", b.rows, b.capture_seconds * 1e3,
                static_cast<double>(b.graph_bytes) / (1 << 20),
                static_cast<double>(b.gemm_workspace_bytes) / (1 << 20));
    seconds += b.capture_seconds;
    graphs += b.graph_bytes;
    workspace = std::max(workspace, b.gemm_workspace_bytes);
    if (b.rows > largest->rows) largest = &b;
  }
  const auto ratio = [](std::size_t all, std::size_t one) {
    return one > 0 ? static_cast<double>(all) / static_cast<double>(one) : 0.0;
  };
  std::printf(
      "\nall buckets: captured in %.2f s (target: at most 2 s); graphs %.2f MiB, %.2fx the largest bucket's; with the "
      "shared GEMM workspace %.2f MiB, %.2fx (target: at most 1.2x)\n",
      seconds, static_cast<double>(graphs) / (1 << 20), ratio(graphs, largest->graph_bytes),
      static_cast<double>(graphs + workspace) / (1 << 20),
      ratio(graphs + workspace, largest->graph_bytes + largest->gemm_workspace_bytes));
}

/// Runs the torch companion on the same shape, dtype, prompts and counts, and reads its results into `rows`. A failure
/// is a note in the table, not an error of this program.
void run_torch(const Options& o, const std::string& shape, std::vector<Row>& rows) {
  const std::filesystem::path file = std::filesystem::path(o.out) / ("torch_serving_" + shape + "_" + o.dtype + ".txt");
  std::string counts;
  for (const Row& r : rows) counts += (counts.empty() ? "" : ",") + std::to_string(r.requests);
  const bench::CompanionResult result =
      bench::run_companion("torch_serving.py",
                           "python3 '" + o.torch_script + "' --shape " + shape + " --dtype " + o.dtype +
                               " --concurrency " + counts + " --prompt " + std::to_string(o.prompt) + " --new " +
                               std::to_string(o.fresh) + " --out '" + file.string() + "'",
                           file);
  if (!result.failure.empty()) {
    for (Row& r : rows) r.torch_note = result.failure;
    return;
  }
  // Lines "requests N tokens_per_s X|- wall_s Y|- NOTE...": torch_serving.py's result format.
  for (const std::string& line : result.lines) {
    const std::optional<bench::CompanionLine> got = bench::parse_companion_line(line, "requests");
    if (!got) continue;
    for (Row& r : rows) {
      if (r.requests != got->count) continue;
      r.torch_tokens_per_s = got->first;
      r.torch_note = got->note;
    }
  }
}

int run(const Options& o) {
  lg::Device device = lg::Device::first();
  lg::Stream s = device.create_stream();
  const lg::KernelLibrary library = nn::kernel_library(device);
  const double ceiling = bench::copy_ceiling(s);
  bench::ModelShape shape = o.shape == "tinyllama"       ? bench::tinyllama()
                            : o.shape == "qwen3-30b-a3b" ? bench::qwen3_30b_a3b()
                            : o.shape == "olmoe-1b-7b"   ? bench::olmoe_1b_7b()
                                                         : bench::llama32_1b();
  nn::DecoderConfig c = shape.config;
  if (o.layers > 0 && o.layers < c.layers) c.layers = o.layers;
  c.max_batch = o.max_batch > 0 ? o.max_batch
                                : std::clamp(*std::max_element(o.concurrency.begin(), o.concurrency.end()),
                                             nn::kMaxRows, nn::kMaxWideRows);
  c.kv_block_size = o.block_size;
  const int longest = o.fresh + (o.rounds > 1 ? o.fresh / 2 : 0);  // new tokens of the longest request
  const int per_sequence = (o.prompt + longest + o.block_size) / o.block_size + 1;
  c.context = std::max(per_sequence * o.block_size, o.context);
  c.kv_blocks = c.max_batch * per_sequence;  // every slot's whole sequence: no preemption
  c.attention_blocks = 0;                    // as lazygraph-serve: the grouped kernels, split as the library picks
  c.tensor_cores = device.compute_capability().major >= 8;  // as lazygraph-serve: steps of 2 to 8 rows on them
  if (o.prefill_chunk >= 0) c.prefill_chunk = o.prefill_chunk;
  std::printf("%s; copy ceiling (1 GiB device-to-device copy, read + write): %.0f GB/s\n", device.name().c_str(),
              ceiling * 1e-9);
  std::printf(
      "%s %s, paged KV cache of %d blocks of %d, max_batch %d, prompts of %d tokens (the first %d the same), %d new "
      "tokens each, prefill_chunk %d, prefix cache %s\n\n",
      (shape.name + " (" + std::to_string(c.layers) + " layers)").c_str(), o.dtype.c_str(), c.kv_blocks,
      c.kv_block_size, c.max_batch, o.prompt, o.shared_prefix, o.fresh, c.prefill_chunk, o.prefix_cache ? "on" : "off");
  std::fflush(stdout);
  std::vector<Row> rows;
  for (const int n : o.concurrency) {
    rows.push_back(o.dtype == "bf16" ? serve<lg::bfloat16>(s, library, c, o, n, ceiling)
                                     : serve<lg::half>(s, library, c, o, n, ceiling));
    const Row& r = rows.back();
    std::printf("  %d requests: %.2f s, %.0f tokens/s, first token p50 %.0f ms, prompt tokens shared %llu\n", n,
                r.wall_s, r.tokens_per_s, r.ttft_p50_s * 1e3, static_cast<unsigned long long>(r.cached_prompt_tokens));
    std::fflush(stdout);
  }
  if (o.torch) run_torch(o, shape.name, rows);
  std::printf(
      "\nServing through nn::Engine on %s: %s %s, seeded weights (%s), prompts of %d tokens, %d new tokens each, "
      "greedy; wall-clock times (the engine's host work included); copy ceiling %.0f GB/s\n\n",
      device.name().c_str(), shape.name.c_str(), o.dtype.c_str(), o.format.c_str(), o.prompt, o.fresh, ceiling * 1e-9);
  // The column compares every row with the first (its request count named, 1 unless --concurrency starts higher).
  const std::string versus =
      "vs " + std::to_string(rows.front().requests) + (rows.front().requests == 1 ? " request" : " requests");
  std::printf(
      "| requests | wall s | tokens/s | %s | first token p50 ms | p99 ms | decode rows | decode step us | "
      "floor us | of floor | decoder alone us | engine host us | preemptions |%s\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|%s\n",
      versus.c_str(), o.torch ? " transformers tokens/s | ours / transformers | transformers note |" : "",
      o.torch ? "---|---|---|" : "");
  for (const Row& r : rows) {
    std::printf("| %d | %.2f | %.0f | %.2fx | %.0f | %.0f | %d | %.0f | %.0f | %.2f | %.0f | %.1f | %llu |", r.requests,
                r.wall_s, r.tokens_per_s, r.tokens_per_s / rows.front().tokens_per_s, r.ttft_p50_s * 1e3,
                r.ttft_p99_s * 1e3, r.decode_rows, r.decode_step_s * 1e6, r.floor_s * 1e6,
                r.decode_step_s > 0 ? r.floor_s / r.decode_step_s : 0.0, r.decoder_step_s * 1e6, r.engine_host_s * 1e6,
                static_cast<unsigned long long>(r.preemptions));
    if (o.torch) {
      if (r.torch_tokens_per_s) {
        std::printf(" %.0f | %.2fx | %s |", *r.torch_tokens_per_s, r.tokens_per_s / *r.torch_tokens_per_s,
                    r.torch_note.c_str());
      } else {
        std::printf(" - | - | %s |", r.torch_note.c_str());
      }
    }
    std::printf("\n");
  }
  std::printf(
      "\n(%s: tokens/s over the first row's; decode step: the mean step while the first wave's sequences "
      "all decode; floor: the weights plus those rows' KV bytes at their mean position, over the copy ceiling; of "
      "floor: floor / step; decoder alone: forward_batch of the decode rows at their mean position without the "
      "engine, the engine's host work left out; engine host: that host work in a step of the phase, "
      "EngineStats::step_seconds_sum less model_seconds_sum)\n",
      versus.c_str());
  if (o.rounds > 1) {
    for (const Row& r : rows) {
      std::printf("first token p50 under %d streams / under %d: %.2fx\n", r.requests, rows.front().requests,
                  r.ttft_p50_s / rows.front().ttft_p50_s);
    }
  }
  print_wide_report(rows.back().wide);
  return 0;
}

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
      o.shape = value();
      if (o.shape != "llama32-1b" && o.shape != "tinyllama" && o.shape != "qwen3-30b-a3b" && o.shape != "olmoe-1b-7b") {
        throw lg::UsageError("--shape " + o.shape + ": unknown");
      }
    } else if (arg == "--layers") {
      o.layers = example::integers(value(), "--layers", 1).at(0);
    } else if (arg == "--dtype") {
      o.dtype = value();
      if (o.dtype != "f16" && o.dtype != "bf16") throw lg::UsageError("--dtype " + o.dtype + ": f16 or bf16");
    } else if (arg == "--concurrency") {
      o.concurrency = example::integers(value(), "--concurrency", 1);
    } else if (arg == "--prompt") {
      o.prompt = example::integers(value(), "--prompt", 1).at(0);
    } else if (arg == "--new") {
      o.fresh = example::integers(value(), "--new", 1).at(0);
    } else if (arg == "--block-size") {
      o.block_size = example::integers(value(), "--block-size", 1).at(0);
      if (o.block_size != 16 && o.block_size != 32) throw lg::UsageError("--block-size: 16 or 32");
    } else if (arg == "--context") {
      o.context = example::integers(value(), "--context", 1).at(0);
      if (o.context > nn::kMaxPagedContext) {
        throw lg::UsageError("--context: 1 to " + std::to_string(nn::kMaxPagedContext));
      }
    } else if (arg == "--prefill-chunk") {
      o.prefill_chunk = example::integers(value(), "--prefill-chunk", 0).at(0);
    } else if (arg == "--max-batch") {
      o.max_batch = example::integers(value(), "--max-batch", 1).at(0);
      if (o.max_batch > nn::kMaxWideRows) throw lg::UsageError("--max-batch: 1 to " + std::to_string(nn::kMaxWideRows));
    } else if (arg == "--torch") {
      o.torch = true;
    } else if (arg == "--torch-script") {
      o.torch_script = value();
    } else if (arg == "--out") {
      o.out = value();
    } else if (arg == "--shared-prefix") {
      o.shared_prefix = example::integers(value(), "--shared-prefix", 0).at(0);
    } else if (arg == "--prefix-cache") {
      o.prefix_cache = true;
    } else if (arg == "--format") {
      o.format = value();
      if (o.format != "dense" && o.format != "int8" && o.format != "int4") {
        throw lg::UsageError("--format " + o.format + ": dense, int8 or int4");
      }
    } else if (arg == "--rounds") {
      o.rounds = example::integers(value(), "--rounds", 1).at(0);
    } else {
      throw lg::UsageError(arg.starts_with("-") ? "unknown option " + arg : "unexpected argument " + arg);
    }
  }
  if (o.shared_prefix > o.prompt) {
    throw lg::UsageError("--shared-prefix " + std::to_string(o.shared_prefix) + " is longer than --prompt " +
                         std::to_string(o.prompt));
  }
  if (o.torch && o.rounds > 1) throw lg::UsageError("--torch serves every request at once: leave --rounds out");
  if (o.torch && o.format != "dense")
    throw lg::UsageError("--torch: the companion's weights are dense; leave --format out");
  if (o.torch && o.shape != "llama32-1b" && o.shape != "tinyllama") {
    throw lg::UsageError("--torch: the companion serves LlamaForCausalLM shapes only, not " + o.shape);
  }
  if (o.torch && o.shared_prefix > 0) {
    throw lg::UsageError("--torch serves the companion's own prompts: leave --shared-prefix out");
  }
  if (o.torch && !std::filesystem::exists(o.torch_script)) {
    throw lg::UsageError("--torch: no " + o.torch_script + " (run from the repository's root, or give --torch-script)");
  }
  if (o.prompt + o.fresh + o.fresh / 2 + 2 * o.block_size > nn::kMaxPagedContext) {
    throw lg::UsageError("--prompt plus --new: at most " + std::to_string(nn::kMaxPagedContext - 2 * o.block_size));
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  return example::main_of_options<Options>(argc, argv, "bench_serving", usage, true, parse, run);
}
