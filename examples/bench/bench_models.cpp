// The models benchmark, lazygraph side: the SwiGLU MLP stack at three sizes and the decoder, timed with CUDA
// events (medians of many forwards), checked against float64, and written to OUTDIR/lazygraph.json with the raw
// outputs, which examples/bench/torch_models.py then compares with PyTorch eager and torch.cuda.graph.
//   usage: bench_models [OUTDIR] [forwards]
#include <lazygraph/lazygraph.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <lazygraph/nn/decoder.hpp>
#include <lazygraph/nn/mlp.hpp>
#include <lazygraph/nn/random_weights.hpp>
#include <lazygraph/nn/reference.hpp>
#include "cli.hpp"
#include "median.hpp"

namespace lg = lazygraph;
using lg::half;

namespace {

using bench::median;

/// Median time in microseconds of `count` runs of `submit()` (work queued on `s`), each between its own pair of
/// events, after `warmup` untimed runs. All runs are queued back to back; one synchronisation at the end.
template <class F>
double median_us(const lg::Stream& s, int count, F&& submit, int warmup = 20) {
  for (int i = 0; i < warmup; ++i) submit();
  s.synchronize();
  std::vector<lg::Event> begin;
  std::vector<lg::Event> end;
  begin.reserve(static_cast<std::size_t>(count));
  end.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    begin.emplace_back(s.device());
    end.emplace_back(s.device());
  }
  for (int i = 0; i < count; ++i) {
    begin[static_cast<std::size_t>(i)].record(s);
    submit();
    end[static_cast<std::size_t>(i)].record(s);
  }
  s.synchronize();
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    us.push_back(lg::Event::elapsed_ms(begin[static_cast<std::size_t>(i)], end[static_cast<std::size_t>(i)]) * 1e3);
  }
  return median(us);
}

/// The values' raw bytes (fp16 or bf16), for torch_models.py to read.
template <class T>
void write_halves(const std::string& path, const std::vector<T>& values) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(T)));
  if (!out) throw std::runtime_error("cannot write " + path);
}

struct MlpResult {
  lazygraph::nn::MlpConfig config;
  double graph_us = 0;
  double graph_plain_us = 0;  ///< the graph with ordinary launches (early_launch off)
  double forward_us = 0;
  double eager_us = 0;
  double staged_graph_us = 0;  ///< the module's graph: staging copy in, compute, staging copy out
  double resident_us = 0;      ///< forward_resident: input already on the device
  double pageable_us = 0;      ///< the old way: pageable copy in and wait, replay, copy out and wait
  double bare_waited_us = 0;   ///< the bare graph launched and waited for, one call at a time (as forward is)
  double rel_err = 0;
  std::string output;
};

MlpResult bench_mlp(const lg::Stream& s, const lg::KernelLibrary& kernels, const lazygraph::nn::MlpConfig& config,
                    int forwards, const std::string& dir) {
  MlpResult r{config, 0, 0, 0, 0, 0, 0, 0, 0, 0, ""};
  lazygraph::nn::Mlp mlp(s, kernels, config);
  const std::vector<half> input =
      lazygraph::nn::host_tensor(config.seed, {2000000, static_cast<std::size_t>(config.d), 1, 0});
  const std::vector<half> output = mlp.forward(input);
  r.rel_err = lazygraph::nn::relative_error(lazygraph::nn::widen(output),
                                            lazygraph::nn::mlp_reference(config, lazygraph::nn::widen(input)));
  r.output = "mlp_" + std::to_string(config.d) + "_" + std::to_string(config.ffn) + "_" +
             std::to_string(config.layers) + ".f16";
  write_halves(dir + "/" + r.output, output);

  // The bare graph (the forward pass alone, input already in place), the module's graph (staging copies
  // included), Module::forward with host input and output (one replay, one wait), forward_resident, the old way
  // (pageable copy in, replay, copy out, two waits), and the same ops launched eagerly without a graph.
  lg::DeviceBuffer<half> x = lg::from_host(input).sync_on(s);
  lg::DeviceBuffer<half> y(s.device(), input.size());
  const auto op = mlp.forward_op(x.cview(), y.view());
  auto bare = lg::CudaGraph<>::capture(s, op);
  r.graph_us = median_us(s, forwards, [&] { bare.launch_on(s); });
  r.staged_graph_us = median_us(s, forwards, [&] { mlp.graph().launch_on(s); });
  r.bare_waited_us = median_us(s, forwards, [&] { bare.launch(); });
  std::vector<half> out(output.size());
  r.forward_us = median_us(s, forwards, [&] { mlp.forward_into(input, out); });
  r.resident_us = median_us(s, forwards, [&] { mlp.forward_resident(x.cview(), out); });
  r.pageable_us = median_us(s, forwards, [&] {
    lg::copy(x.view(), input).sync_on(s);
    bare.launch_on(s);
    lg::copy_async(s, std::span<half>(out), y.cview());
    s.synchronize();
  });
  lg::ExecContext ctx(s, false);
  r.eager_us = median_us(s, forwards, [&] { op.execute(ctx); });

  lazygraph::nn::MlpConfig plain_config = config;
  plain_config.early_launch = false;
  lazygraph::nn::Mlp plain(s, kernels, plain_config);
  const std::vector<half> plain_output = plain.forward(input);
  if (!std::equal(output.begin(), output.end(), plain_output.begin(),
                  [](half a, half b) { return a.bits == b.bits; })) {
    throw std::runtime_error("MLP: early and ordinary launches disagree");
  }
  auto plain_bare = lg::CudaGraph<>::capture(s, plain.forward_op(x.cview(), y.view()));
  r.graph_plain_us = median_us(s, forwards, [&] { plain_bare.launch_on(s); });
  return r;
}

struct DecoderResult {
  std::vector<int> tokens;
  double tokens_per_s = 0;
  double tokens_per_s_plain = 0;  ///< early_launch off
  double step_graph_us = 0;
  double step_eager_us = 0;
  double generate_tokens_per_s = 0;  ///< Decoder::generate: every step in one replay's WHILE loop
  bool generate_equal = false;       ///< generate's tokens are the forward loop's
};

/// Greedy generation of `steps` tokens from position 0, a host round trip per token; the best tokens/s of two
/// runs after a warm-up.
double tokens_per_second(lazygraph::nn::Decoder& decoder, int first_token, int steps, std::vector<int>& tokens) {
  const auto run = [&] {
    decoder.reset();
    tokens.clear();
    int token = first_token;
    const auto start = std::chrono::steady_clock::now();
    for (int p = 0; p < steps; ++p) tokens.push_back(token = decoder.forward({token, p}));
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  run();
  return steps / std::min(run(), run());
}

DecoderResult bench_decoder(const lg::Stream& s, const lg::KernelLibrary& kernels,
                            const lazygraph::nn::DecoderConfig& config, int first_token, int steps, int forwards,
                            const std::string& dir) {
  DecoderResult r;
  {
    lazygraph::nn::DecoderConfig plain_config = config;
    plain_config.early_launch = false;
    lazygraph::nn::Decoder plain(s, kernels, plain_config);
    std::vector<int> tokens;
    r.tokens_per_s_plain = tokens_per_second(plain, first_token, steps, tokens);
  }
  lazygraph::nn::Decoder decoder(s, kernels, config);
  decoder.forward({first_token, 0});
  write_halves(dir + "/decoder_logits0.f16", decoder.logits());
  r.tokens_per_s = tokens_per_second(decoder, first_token, steps, r.tokens);

  // One step's device time at a mid-sequence position (the io buffer still holds the last step's).
  r.step_graph_us = median_us(s, forwards, [&] { decoder.graph().launch_on(s); });
  const auto op = decoder.step_op();
  lg::ExecContext ctx(s, false);
  r.step_eager_us = median_us(s, forwards, [&] { op.execute(ctx); });

  // The same tokens from one replay of the generate graph (a WHILE loop on the device), best of two after a warm-up.
  std::vector<int> generated;
  const auto generate = [&] {
    decoder.reset();
    const auto start = std::chrono::steady_clock::now();
    generated = decoder.generate(first_token, steps);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  generate();
  r.generate_tokens_per_s = steps / std::min(generate(), generate());
  r.generate_equal = generated == r.tokens;
  return r;
}

/// The features a real checkpoint needs, on one GQA decoder (kv_heads 2, max_batch 8), for torch_models.py to
/// check: greedy tokens, a batch of 4 sequences, a prefilled prompt; and the step time per row count.
std::string bench_features(const lg::Stream& s, const lg::KernelLibrary& kernels, int forwards,
                           const std::string& dir) {
  lazygraph::nn::DecoderConfig c;
  c.kv_heads = 2;
  c.max_batch = 8;
  lazygraph::nn::Decoder decoder(s, kernels, c);
  std::ostringstream json;
  json << "{\"config\": {\"d\": " << c.d << ", \"heads\": " << c.heads << ", \"kv_heads\": " << c.kv_heads
       << ", \"layers\": " << c.layers << ", \"ffn\": " << c.ffn << ", \"vocab\": " << c.vocab
       << ", \"context\": " << c.context << ", \"theta\": " << c.theta << ", \"eps\": " << c.eps
       << ", \"seed\": " << c.seed << "},\n";

  // Greedy, one sequence.
  std::vector<int> tokens;
  int token = 1;
  for (int p = 0; p < 64; ++p) {
    tokens.push_back(token = decoder.forward({token, p}));
    if (p == 0) write_halves(dir + "/gqa_logits0.f16", decoder.logits());
  }
  json << "  \"gqa\": {\"start_token\": 1, \"tokens\": [";
  for (std::size_t i = 0; i < tokens.size(); ++i) json << (i > 0 ? ", " : "") << tokens[i];
  json << "], \"logits0\": \"gqa_logits0.f16\"},\n";

  // A batch of four sequences, greedy.
  decoder.reset();
  std::vector<int> current{1, 2, 3, 4};
  std::vector<std::vector<int>> batch_tokens(current.size());
  const int batch_steps = 32;
  for (int p = 0; p < batch_steps; ++p) {
    std::vector<lazygraph::nn::TokenAt> steps;
    for (const int t : current) steps.push_back({t, p});
    current = decoder.forward_batch(steps);
    for (std::size_t r = 0; r < current.size(); ++r) batch_tokens[r].push_back(current[r]);
  }
  std::vector<half> last;
  for (int r = 0; r < 4; ++r) {
    const std::vector<half> l = decoder.logits(r);
    last.insert(last.end(), l.begin(), l.end());
  }
  write_halves(dir + "/batch_logits.f16", last);
  json << "  \"batch\": {\"starts\": [1, 2, 3, 4], \"steps\": " << batch_steps << ", \"tokens\": [";
  for (std::size_t r = 0; r < batch_tokens.size(); ++r) {
    json << (r > 0 ? ", [" : "[");
    for (std::size_t i = 0; i < batch_tokens[r].size(); ++i) json << (i > 0 ? ", " : "") << batch_tokens[r][i];
    json << "]";
  }
  json << "], \"logits\": \"batch_logits.f16\",\n    \"step_us\": {";
  // Device time of one step of B rows at position 100 (every row its own sequence).
  for (const int rows : {1, 2, 4, 8}) {
    std::vector<lazygraph::nn::TokenAt> steps(static_cast<std::size_t>(rows), {7, 100});
    (void)decoder.forward_batch(steps);
    const double us = median_us(s, forwards, [&] { decoder.graph(rows).launch_on(s); });
    json << (rows > 1 ? ", " : "") << "\"" << rows << "\": " << us;
    std::printf("| GQA decoder, %d rows | step graph %.1f us | %.0f tokens/s |\n", rows, us, rows * 1e6 / us);
  }
  json << "}},\n";

  // A prompt of 40 tokens through prefill (5 steps of 8 rows) into sequence 0.
  decoder.reset();
  std::vector<int> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back(static_cast<int>(lazygraph::nn::mix(1000U + i) % c.vocab));
  const int next = decoder.prefill(prompt);
  write_halves(dir + "/prefill_logits.f16", decoder.logits(7));
  std::vector<double> wall;
  for (int i = 0; i < 21; ++i) {
    const auto start = std::chrono::steady_clock::now();
    (void)decoder.prefill(prompt);
    wall.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  std::vector<double> one_by_one;
  for (int i = 0; i < 5; ++i) {
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t p = 0; p < prompt.size(); ++p) (void)decoder.forward({prompt[p], static_cast<int>(p)});
    one_by_one.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  std::printf("| prefill, 40 tokens | %.0f us | token by token %.0f us |\n", median(wall), median(one_by_one));
  json << "  \"prefill\": {\"prompt\": [";
  for (std::size_t i = 0; i < prompt.size(); ++i) json << (i > 0 ? ", " : "") << prompt[i];
  json << "], \"next\": " << next << ", \"logits\": \"prefill_logits.f16\", \"prefill_us\": " << median(wall)
       << ", \"token_by_token_us\": " << median(one_by_one) << "}}";
  return json.str();
}

/// The features decoder's shape in bf16 (DecoderBf16): greedy tokens and the first logits for torch_models.py to
/// compare with PyTorch in bf16, and the step time per row count.
std::string bench_bf16(const lg::Stream& s, const lg::KernelLibrary& kernels, int forwards, const std::string& dir) {
  lazygraph::nn::DecoderConfig c;
  c.kv_heads = 2;
  c.max_batch = 8;
  lazygraph::nn::DecoderBf16 decoder(s, kernels, c);
  std::ostringstream json;
  std::vector<int> tokens;
  int token = 1;
  for (int p = 0; p < 64; ++p) {
    tokens.push_back(token = decoder.forward({token, p}));
    if (p == 0) write_halves(dir + "/bf16_logits0.bf16", decoder.logits());
  }
  json << "{\"start_token\": 1, \"tokens\": [";
  for (std::size_t i = 0; i < tokens.size(); ++i) json << (i > 0 ? ", " : "") << tokens[i];
  json << "], \"logits0\": \"bf16_logits0.bf16\", \"step_us\": {";
  for (const int rows : {1, 4, 8}) {
    std::vector<lazygraph::nn::TokenAt> steps(static_cast<std::size_t>(rows), {7, 100});
    (void)decoder.forward_batch(steps);
    const double us = median_us(s, forwards, [&] { decoder.graph(rows).launch_on(s); });
    json << (rows > 1 ? ", " : "") << "\"" << rows << "\": " << us;
    std::printf("| bf16 GQA decoder, %d rows | step graph %.1f us | %.0f tokens/s |\n", rows, us, rows * 1e6 / us);
  }
  json << "}}";
  return json.str();
}

/// The MLP (4096, 11008, 4) as a BucketedModule with buckets of 1..16 rows, its activations in scratch memory:
/// the graph memory its 16 graphs reserve in their pool, against the largest graph alone; and whether a row comes
/// out as the Mlp module computes it.
void bucketed_mlp_memory(const lg::Stream& s, const lg::KernelLibrary& kernels) {
  lazygraph::nn::MlpConfig config;
  config.d = 4096;
  config.ffn = 11008;
  config.layers = 4;
  lazygraph::nn::Mlp mlp(s, kernels, config);
  const lazygraph::nn::Kernels k(kernels);
  const auto d = static_cast<std::size_t>(config.d);
  const auto ffn = static_cast<std::size_t>(config.ffn);
  lg::BucketShape shape{{}, d, d, 0};
  for (std::size_t b = 1; b <= 16; ++b) shape.buckets.push_back(b);
  lg::BucketedModule<lg::half, lg::half> bucketed(
      s, kernels, shape,
      [&](std::size_t rows, lg::Scope& sc, lg::DeviceSpan<const lg::half> x, lg::DeviceSpan<lg::half> y) {
        const lg::DeviceSpan<lg::half> act = sc.scratch<lg::half>(rows * ffn);
        sc.record(lg::copy(y, x));
        for (std::size_t r0 = 0; r0 < rows; r0 += 8) {
          const std::size_t b = std::min<std::size_t>(8, rows - r0);
          for (const auto& w : mlp.layers()) {
            sc.record(lazygraph::nn::swiglu_block(k, w, y.subspan(r0 * d, b * d), act.subspan(r0 * ffn, b * ffn),
                                                  config.d, config.ffn, config.eps, static_cast<int>(b)));
          }
        }
      });
  std::vector<lg::half> row(d);
  for (std::size_t i = 0; i < d; ++i) row[i] = lg::half::from_float(static_cast<float>((i * 37) % 101) / 101.0F - 0.5F);
  const std::vector<lg::half> a = bucketed.forward(row);
  const std::vector<lg::half> b = mlp.forward(row);
  const bool same_row = std::memcmp(a.data(), b.data(), a.size() * sizeof(lg::half)) == 0;
  std::vector<lg::half> rows(16 * d);
  for (std::size_t r = 0; r < 16; ++r)
    std::copy(row.begin(), row.end(), rows.begin() + static_cast<std::ptrdiff_t>(r * d));
  lg::GraphPool pool = bucketed.pool();
  const auto reserved_after = [&](const std::function<void()>& f) {
    s.device().synchronize();
    pool.trim();
    pool.reset_peaks();
    f();
    return static_cast<double>(pool.usage().reserved_peak) / (1024.0 * 1024.0);
  };
  for (std::size_t r = 1; r <= 16; ++r) (void)bucketed.forward(std::span<const lg::half>(rows.data(), r * d));
  const double largest = reserved_after([&] { (void)bucketed.forward(rows); });
  const double all = reserved_after([&] {
    for (std::size_t r = 1; r <= 16; ++r) (void)bucketed.forward(std::span<const lg::half>(rows.data(), r * d));
  });
  std::printf("\nBucketedModule of the MLP (4096, 11008, 4), buckets 1..16 rows, activations in scratch memory\n");
  std::printf(
      "| graphs | scratch, largest KiB | scratch, all KiB | reserved, largest alone MiB | reserved, 16 in one pool "
      "MiB | pool / largest | one row as Mlp::forward |\n|---|---|---|---|---|---|---|\n");
  std::printf("| %zu | %.0f | %.0f | %.1f | %.1f | %.2f | %s |\n", bucketed.graph_count(),
              static_cast<double>(pool.largest_scratch_bytes()) / 1024.0,
              static_cast<double>(pool.total_scratch_bytes()) / 1024.0, largest, all, all / largest,
              same_row ? "bit-identical" : "DIFFERS");
}

int run(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : ".";
  const int forwards = argc > 2 ? std::max(1, std::atoi(argv[2])) : 300;
  if (example::skip_without_gpu("bench_models")) return example::exit_skipped;
  std::filesystem::create_directories(dir);
  lg::Device gpu = lg::Device::first();
  lg::Stream s = gpu.create_stream();
  lg::KernelLibrary kernels = lg::nn::kernel_library(gpu);  // the core and the nn kernel sets

  std::printf("lazygraph models on %s; medians of %d forwards, CUDA events\n\n", gpu.name().c_str(), forwards);
  std::printf(
      "| MLP (d, ffn, layers) | weights MB | graph us | graph, no early launch us | forward() us | eager us "
      "| eager/graph | TB/s | rel err f64 |\n|---|---|---|---|---|---|---|---|---|\n");
  std::vector<MlpResult> mlps;
  for (const auto& [d, ffn, layers] :
       {std::tuple{512, 1536, 16}, std::tuple{1024, 4096, 8}, std::tuple{4096, 11008, 4}}) {
    lazygraph::nn::MlpConfig config;
    config.d = d;
    config.ffn = ffn;
    config.layers = layers;
    const MlpResult& r = mlps.emplace_back(bench_mlp(s, kernels, config, forwards, dir));
    const double mb = static_cast<double>(config.weight_bytes()) / 1e6;
    std::printf("| (%d, %d, %d) | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %.1e |\n", d, ffn, layers, mb,
                r.graph_us, r.graph_plain_us, r.forward_us, r.eager_us, r.eager_us / r.graph_us, mb / r.graph_us,
                r.rel_err);
    std::fflush(stdout);
  }
  std::printf(
      "\n| MLP (d, ffn, layers) | bare graph us | bare graph, launched and waited us | graph with staging copies us "
      "| forward() us | forward_resident() us | before: pageable, two waits us | forward - bare us | forward - bare "
      "waited us | before / forward |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (const MlpResult& r : mlps) {
    std::printf("| (%d, %d, %d) | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.3f |\n", r.config.d,
                r.config.ffn, r.config.layers, r.graph_us, r.bare_waited_us, r.staged_graph_us, r.forward_us,
                r.resident_us, r.pageable_us, r.forward_us - r.graph_us, r.forward_us - r.bare_waited_us,
                r.pageable_us / r.forward_us);
  }

  const lazygraph::nn::DecoderConfig dc;
  const int first_token = 1;
  const int steps = 256;
  const DecoderResult dr = bench_decoder(s, kernels, dc, first_token, steps, forwards, dir);
  std::printf(
      "\n| decoder | tokens/s (forward per token) | tokens/s, no early launch | step graph us | step eager "
      "us | eager/graph |\n|---|---|---|---|---|---|\n| d %d, %d layers, vocab %d | %.0f | %.0f | %.1f | %.1f | "
      "%.2f |\n",
      dc.d, dc.layers, dc.vocab, dr.tokens_per_s, dr.tokens_per_s_plain, dr.step_graph_us, dr.step_eager_us,
      dr.step_eager_us / dr.step_graph_us);
  const double bound = 1e6 / dr.step_graph_us;  // tokens/s if nothing but the step graph's device time counted
  std::printf(
      "\n| decoder, %d tokens | tokens/s | of 1e6 / step graph us (%.0f) | us per token beyond the step graph |\n"
      "|---|---|---|---|\n| forward() per token | %.0f | %.3f | %.1f |\n| generate(): one replay, WHILE on the device "
      "| %.0f | %.3f (target >= 0.97) | %.1f |\n| generate() tokens equal forward()'s | %s | | |\n",
      steps, bound, dr.tokens_per_s, dr.tokens_per_s / bound, 1e6 / dr.tokens_per_s - dr.step_graph_us,
      dr.generate_tokens_per_s, dr.generate_tokens_per_s / bound, 1e6 / dr.generate_tokens_per_s - dr.step_graph_us,
      dr.generate_equal ? "yes" : "NO");
  std::printf("\n");
  const std::string features = bench_features(s, kernels, forwards, dir);
  const std::string bf16 = bench_bf16(s, kernels, forwards, dir);

  std::ostringstream json;
  json << "{\n  \"device\": \"" << gpu.name() << "\",\n  \"forwards\": " << forwards << ",\n  \"mlp\": [\n";
  for (std::size_t i = 0; i < mlps.size(); ++i) {
    const MlpResult& r = mlps[i];
    json << "    {\"d\": " << r.config.d << ", \"ffn\": " << r.config.ffn << ", \"layers\": " << r.config.layers
         << ", \"seed\": " << r.config.seed << ", \"graph_us\": " << r.graph_us
         << ", \"graph_plain_us\": " << r.graph_plain_us << ", \"forward_us\": " << r.forward_us
         << ", \"eager_us\": " << r.eager_us << ", \"weight_bytes\": " << r.config.weight_bytes()
         << ", \"rel_err_f64\": " << r.rel_err << ", \"output\": \"" << r.output << "\"}"
         << (i + 1 < mlps.size() ? ",\n" : "\n");
  }
  json << "  ],\n  \"decoder\": {\"config\": {\"d\": " << dc.d << ", \"heads\": " << dc.heads
       << ", \"layers\": " << dc.layers << ", \"ffn\": " << dc.ffn << ", \"vocab\": " << dc.vocab
       << ", \"context\": " << dc.context << ", \"theta\": " << dc.theta << ", \"eps\": " << dc.eps
       << ", \"seed\": " << dc.seed << "},\n    \"start_token\": " << first_token << ", \"steps\": " << steps
       << ", \"tokens_per_s\": " << dr.tokens_per_s << ", \"tokens_per_s_plain\": " << dr.tokens_per_s_plain
       << ", \"step_graph_us\": " << dr.step_graph_us << ", \"step_eager_us\": " << dr.step_eager_us
       << ", \"generate_tokens_per_s\": " << dr.generate_tokens_per_s
       << ", \"generate_equal\": " << (dr.generate_equal ? "true" : "false")
       << ", \"logits0\": \"decoder_logits0.f16\",\n    \"tokens\": [";
  for (std::size_t i = 0; i < dr.tokens.size(); ++i) json << (i > 0 ? ", " : "") << dr.tokens[i];
  json << "]},\n  \"features\": " << features << ",\n  \"bf16\": " << bf16 << "\n}\n";
  std::ofstream(dir + "/lazygraph.json") << json.str();
  bucketed_mlp_memory(s, kernels);
  return 0;
}

constexpr const char* usage =
    "usage: bench_models [OUTDIR [FORWARDS]]\n"
    "Times the SwiGLU MLP at three sizes and the decoder (medians of FORWARDS forwards, default 300), checks\n"
    "them against float64 and writes OUTDIR/lazygraph.json (default .) with the raw outputs, for\n"
    "examples/bench/torch_models.py to compare with PyTorch.\n"
    "Exit status: 0 done, 1 failed, 77 skipped (no GPU; the reason is printed).\n";

}  // namespace

int main(int argc, char** argv) {
  if (auto code = example::handle_arguments(argc, argv, usage, 2)) return *code;
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_models: %s\n", e.what());
    return 1;
  }
}
