// The prompt benchmark (issue 37, item 5), lazygraph side: time to first token of two seeded decoder shapes
// (TinyLlama and Llama-3.2-1B) in fp16 and bf16 for prompts of 128, 512 and 2048 tokens, against the compute floor
// measured in the same run: the prompt's GEMMs of every layer as cuBLASLt products (Gemm<T>) captured into graphs,
// the causal attention as the flash-attention kernel (nn::prefill_attention), a large GEMM for the peak. Writes
// DIR/prefill.json, which examples/bench/torch_prefill.py reads to time transformers on the same seeded weights and
// print the comparison. `--help` for the options.
#include <lazygraph/lazygraph.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include <lazygraph/kernels/gemm.hpp>
#include <lazygraph/nn/decoder.hpp>
#include <lazygraph/nn/prefill_attention.hpp>
#include <lazygraph/nn/random_weights.hpp>
#include "ceiling.hpp"
#include "cli.hpp"
#include "median.hpp"
#include "model_shapes.hpp"

namespace lg = lazygraph;
namespace nn = lazygraph::nn;

namespace {

using bench::median;

// ----------------------------------------------------------------------------- what is measured

/// The absolute targets for the TinyLlama shape's prefill, in ms (0: none for this length).
double prefill_target_ms(const std::string& shape, int tokens) {
  if (shape != "tinyllama") return 0;
  if (tokens == 128) return 2.5;
  if (tokens == 512) return 4.0;
  if (tokens == 2048) return 10.0;
  return 0;
}
constexpr double floor_ratio_target = 1.8;     ///< prefill / floor, every length
constexpr double gemm_fraction_target = 0.70;  ///< of the peak, GEMMs of M >= 256
constexpr int gemm_target_min_rows = 256;

/// Token i of an n-token prompt: mix(1000 + i) mod vocab (torch_prefill.py makes the same).
std::vector<int> prompt_of(int n, int vocab) {
  std::vector<int> prompt(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) prompt[static_cast<std::size_t>(i)] = static_cast<int>(nn::mix(1000U + i) % vocab);
  return prompt;
}

/// What the command line asks for.
struct Options {
  std::vector<bench::ModelShape> shapes;
  std::vector<int> tokens{128, 512, 2048};
  std::vector<std::string> dtypes{"fp16", "bf16"};
  int reps = 10;             ///< timed repetitions of prefill + first step per row
  int warmup = 2;            ///< untimed ones before (the first captures the step graphs)
  double max_seconds = 20;   ///< a row's timed repetitions stop growing past this (at least 3 run)
  int gemm_reps = 30;        ///< replays per median of a floor graph
  int peak_size = 8192;      ///< M = N = K of the peak GEMM
  bool tensor_cores = true;  ///< DecoderConfig::tensor_cores
  std::string out = ".";
};

// ----------------------------------------------------------------------------- time to first token

/// One row of the benchmark: a shape, an element type, a prompt length.
struct Row {
  std::string shape;
  std::string dtype;
  int tokens = 0;
  nn::DecoderConfig config;
  int reps = 0;             ///< timed repetitions that ran (fewer than asked when one takes long)
  double prefill_ms = 0;    ///< median wall time of Decoder::prefill(prompt)
  double step_ms = 0;       ///< median wall time of the forward() after it (the first decoded token's step)
  double ttft_ms = 0;       ///< median of prefill + step, repetition by repetition
  int next = -1;            ///< the token prefill returned
  int second = -1;          ///< the token the step returned
  std::string logits_file;  ///< the step's logits (raw fp16 / bf16), for torch_prefill.py's check
  // The floor (same run): the prompt's products of every layer, its attention, the LM head's last row; one step's
  // weight read at the copy ceiling.
  struct Product {
    std::string name;
    lg::GemmShape shape;
    int count = 0;  ///< products of this shape in the whole prompt (per layer times layers)
    double ms = 0;  ///< all of them, replayed as one graph
    double flops = 0;
  };
  std::vector<Product> products;
  double attention_ms = -1;  ///< -1: not measured (no flash-attention kernel on this GPU)
  double attention_flops = 0;
  double floor_prefill_ms = 0;
  double floor_step_ms = 0;
};

/// Wall milliseconds since `from`.
double ms_since(std::chrono::steady_clock::time_point from) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - from).count();
}

template <class T>
void write_raw(const std::string& path, const std::vector<T>& values) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(T)));
  if (!out) throw std::runtime_error("cannot write " + path);
}

/// Times prefill(prompt) then forward({next, n}) on `decoder`, reset() before each (untimed): `o.warmup` untimed
/// repetitions, then o.reps timed ones, fewer (at least 3) when they would take more than o.max_seconds. Both calls
/// wait for their tokens, so wall time is what a caller waits. Writes the step's logits to `logits_path`.
template <class T>
void time_to_first_token(nn::BasicDecoder<T>& decoder, const std::vector<int>& prompt, const Options& o,
                         const std::string& logits_path, Row& row) {
  const int n = static_cast<int>(prompt.size());
  std::vector<double> prefill;
  std::vector<double> step;
  std::vector<double> both;
  const auto once = [&] {
    decoder.reset();
    const auto t0 = std::chrono::steady_clock::now();
    row.next = decoder.prefill(prompt);
    const double p = ms_since(t0);
    const auto t1 = std::chrono::steady_clock::now();
    row.second = decoder.forward({row.next, n});
    const double s = ms_since(t1);
    return std::pair{p, s};
  };
  double last = 0;
  for (int i = 0; i < o.warmup; ++i) {
    const auto [p, s] = once();
    last = p + s;
  }
  const int runs =
      last > 0 ? std::clamp(static_cast<int>(o.max_seconds * 1e3 / last), std::min(3, o.reps), o.reps) : o.reps;
  for (int i = 0; i < runs; ++i) {
    const auto [p, s] = once();
    prefill.push_back(p);
    step.push_back(s);
    both.push_back(p + s);
  }
  write_raw(logits_path, decoder.logits(0));  // after the one-row step: row 0, whatever prefill's chunks were
  row.reps = runs;
  row.prefill_ms = median(prefill);
  row.step_ms = median(step);
  row.ttft_ms = median(both);
}

// ----------------------------------------------------------------------------- the floor

/// Median device milliseconds of one replay of `graph` on `s`: `reps` replays queued back to back, each between its
/// own pair of events, after 3 untimed ones.
double replay_ms(const lg::Stream& s, lg::CudaGraph<>& graph, int reps) {
  for (int i = 0; i < 3; ++i) graph.launch_on(s);
  s.synchronize();
  std::vector<lg::Event> begin;
  std::vector<lg::Event> end;
  for (int i = 0; i < reps; ++i) {
    begin.emplace_back(s.device());
    end.emplace_back(s.device());
  }
  for (std::size_t i = 0; i < begin.size(); ++i) {
    begin[i].record(s);
    graph.launch_on(s);
    end[i].record(s);
  }
  s.synchronize();
  std::vector<double> ms;
  for (std::size_t i = 0; i < begin.size(); ++i) ms.push_back(lg::Event::elapsed_ms(begin[i], end[i]));
  return median(ms);
}

/// Seeded weights of `rows` x `cols` (scale 1/sqrt(cols), as the decoder's): never zeros, which can run faster than
/// real data. Tensor ids from 3000000 up, apart from the decoder's.
template <class T>
lg::DeviceBuffer<T> random_matrix(const lg::Stream& s, const nn::BasicKernels<T>& k, std::uint32_t id, std::size_t rows,
                                  std::size_t cols) {
  return nn::device_tensor(s, k.fill_uniform, 77U,
                           nn::matrix_spec(3000000U + id, static_cast<int>(rows), static_cast<int>(cols)));
}

/// Seeded activations: `n` values uniform in [-1, 1).
template <class T>
lg::DeviceBuffer<T> random_values(const lg::Stream& s, const nn::BasicKernels<T>& k, std::uint32_t id, std::size_t n) {
  return nn::device_tensor(s, k.fill_uniform, 77U, nn::TensorSpec{3000000U + id, n, 1.0F, 0.0F});
}

/// One kind of product of a prefill: D[M, n] = X[M, k] W^T, `per_layer` of them in every layer (gate and up: 2),
/// or one for the whole prompt (the LM head of the last row: M = 1).
struct ProductKind {
  std::string name;
  std::size_t n = 0;
  std::size_t k = 0;
  int per_layer = 1;
  bool last_row_only = false;
};

/// The products of a Llama layer's prefill, QKV fused, the LM head of the last row (what a GEMM prefill must do).
std::vector<ProductKind> product_kinds(const nn::DecoderConfig& c) {
  const auto d = static_cast<std::size_t>(c.d);
  const auto q = static_cast<std::size_t>(c.q_dim());
  const auto kv = static_cast<std::size_t>(c.kv_dim());
  const auto ffn = static_cast<std::size_t>(c.ffn);
  return {{"QKV", q + 2 * kv, d, 1, false},
          {"O", d, q, 1, false},
          {"gate, up", ffn, d, 2, false},
          {"down", d, ffn, 1, false},
          {"LM head, last row", static_cast<std::size_t>(c.vocab), d, 1, true}};
}

/// The floor of every prompt length of `rows` (one shape, one element type): each product kind as a graph of all
/// its products (every layer its own weights, so that none is read from L2), the attention of every layer, and one
/// decode step's weight read at the copy ceiling.
template <class T>
void measure_floor(const lg::Stream& s, const lg::KernelLibrary& library, const Options& o, double copy_ceiling,
                   std::vector<Row>& rows) {
  const nn::BasicKernels<T> k(library);
  const nn::DecoderConfig& c = rows.front().config;
  const int max_m = std::ranges::max(o.tokens);
  const std::vector<ProductKind> kinds = product_kinds(c);
  const auto m_max = static_cast<std::size_t>(max_m);
  std::size_t x_size = 0;
  std::size_t y_size = 0;
  for (const ProductKind& kind : kinds) {
    const std::size_t m = kind.last_row_only ? 1 : m_max;
    x_size = std::max(x_size, m * kind.k);
    y_size = std::max(y_size, m * kind.n);
  }
  const lg::DeviceBuffer<T> x = random_values(s, k, 0, x_size);
  lg::DeviceBuffer<T> y(s.device(), y_size);
  std::uint32_t next_id = 1;
  for (const ProductKind& kind : kinds) {
    const int count = kind.last_row_only ? 1 : kind.per_layer * c.layers;
    std::vector<lg::DeviceBuffer<T>> weights;
    weights.reserve(static_cast<std::size_t>(count));
    for (int i = 0; i < count; ++i) weights.push_back(random_matrix(s, k, next_id++, kind.n, kind.k));
    for (Row& row : rows) {
      const std::size_t m = kind.last_row_only ? 1 : static_cast<std::size_t>(row.tokens);
      const lg::Gemm<T> gemm(s.device(), {m, kind.n, kind.k});
      const lg::DeviceSpan<const T> xs = x.cview().subspan(0, m * kind.k);
      const lg::DeviceSpan<T> ys = y.view().subspan(0, m * kind.n);
      gemm(ys, xs, weights.front().cview()).sync_on(s);  // once eagerly: any lazy loading stays out of the capture
      auto graph = lg::CudaGraph<>::scope(s, [&](lg::Scope& sc) {
        for (const lg::DeviceBuffer<T>& w : weights) sc.record(gemm(ys, xs, w.cview()));
      });
      row.products.push_back({kind.name,
                              {m, kind.n, kind.k},
                              count,
                              replay_ms(s, graph, o.gemm_reps),
                              2.0 * static_cast<double>(m * kind.n * kind.k) * count});
    }
  }

  // Causal attention of the whole prompt in every layer: the flash-attention kernel, each layer its own caches.
  if (s.device().compute_capability().major >= 8) {
    const auto q_row = static_cast<std::size_t>(c.q_dim());
    const auto kv_row = static_cast<std::size_t>(c.kv_dim());
    const lg::DeviceBuffer<T> q = random_values(s, k, next_id++, m_max * q_row);
    const lg::DeviceBuffer<T> kk = random_values(s, k, next_id++, m_max * kv_row);
    const lg::DeviceBuffer<T> v = random_values(s, k, next_id++, m_max * kv_row);
    lg::DeviceBuffer<T> out(s.device(), m_max * q_row);
    std::vector<lg::DeviceBuffer<T>> caches;
    caches.reserve(2 * static_cast<std::size_t>(c.layers));
    for (int i = 0; i < 2 * c.layers; ++i) caches.emplace_back(s.device(), m_max * kv_row);
    for (Row& row : rows) {
      const auto m = static_cast<std::size_t>(row.tokens);
      const auto rows_m = static_cast<double>(row.tokens);
      const lg::DeviceBuffer<int> chunk =
          lg::from_host(std::vector<int>{0, row.tokens, 0}).sync_on(s);  // start, rows, slot
      const nn::PrefillAttentionShape shape{.rows = row.tokens,
                                            .heads = c.heads,
                                            .kv_heads = c.kv_head_count(),
                                            .head_dim = c.head_dim(),
                                            .context = row.tokens,
                                            .slots = 1};
      const auto attention = [&](int layer) {
        const auto l = static_cast<std::size_t>(layer);
        return nn::prefill_attention(
            k,
            {q.cview().subspan(0, m * q_row), kk.cview().subspan(0, m * kv_row), v.cview().subspan(0, m * kv_row),
             caches[2 * l].view().subspan(0, m * kv_row), caches[2 * l + 1].view().subspan(0, m * kv_row),
             out.view().subspan(0, m * q_row), chunk.cview()},
            shape);
      };
      attention(0).sync_on(s);  // the first launch sets the kernel's shared memory limit: outside the capture
      auto graph = lg::CudaGraph<>::scope(s, [&](lg::Scope& sc) {
        for (int layer = 0; layer < c.layers; ++layer) sc.record(attention(layer));
      });
      row.attention_ms = replay_ms(s, graph, o.gemm_reps);
      // Causal: row p attends p + 1 keys; q.k and p.v are 2 * head_dim flops each per key and head.
      row.attention_flops = 4.0 * c.head_dim() * c.heads * c.layers * (rows_m * (rows_m + 1) / 2);
    }
  }
  for (Row& row : rows) {
    double ms = std::max(row.attention_ms, 0.0);
    for (const Row::Product& p : row.products) ms += p.ms;
    row.floor_prefill_ms = ms;
    row.floor_step_ms = static_cast<double>(c.weight_bytes()) / copy_ceiling * 1e3;
  }
}

/// TFLOP/s of one large GEMM (M = N = K = size) replayed from a graph.
template <class T>
double peak_tflops(const lg::Stream& s, const lg::KernelLibrary& library, const Options& o) {
  const nn::BasicKernels<T> k(library);
  const auto n = static_cast<std::size_t>(o.peak_size);
  const lg::DeviceBuffer<T> x = random_values(s, k, 900000, n * n);
  const lg::DeviceBuffer<T> w = random_matrix(s, k, 900001, n, n);
  lg::DeviceBuffer<T> y(s.device(), n * n);
  const lg::Gemm<T> gemm(s.device(), {n, n, n});
  gemm(y.view(), x.cview(), w.cview()).sync_on(s);
  auto graph = lg::CudaGraph<>::capture(s, gemm(y.view(), x.cview(), w.cview()));
  for (int i = 0; i < 10; ++i) graph.launch_on(s);  // let the clocks settle under load
  const double ms = replay_ms(s, graph, std::max(o.gemm_reps, 20));
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / (ms * 1e-3) * 1e-12;
}

// ----------------------------------------------------------------------------- report

std::string verdict(bool met) { return met ? "met" : "MISSED"; }

/// The GEMM table of one shape and element type: every product kind per prompt length, TFLOP/s and fraction of
/// the peak; the attention; the floor.
void print_products(const std::vector<Row>& rows, double peak) {
  std::printf(
      "\n| shape | dtype | tokens | product | M x N x K | count | ms (all) | TFLOP/s | of peak | target: M >= %d at "
      ">= %.2f of peak |\n|---|---|---|---|---|---|---|---|---|---|\n",
      gemm_target_min_rows, gemm_fraction_target);
  for (const Row& row : rows) {
    for (const Row::Product& p : row.products) {
      const double tflops = p.flops / (p.ms * 1e-3) * 1e-12;
      const bool judged = p.shape.m >= static_cast<std::size_t>(gemm_target_min_rows);
      std::printf("| %s | %s | %d | %s | %zu x %zu x %zu | %d | %.3f | %.0f | %.2f | %s |\n", row.shape.c_str(),
                  row.dtype.c_str(), row.tokens, p.name.c_str(), p.shape.m, p.shape.n, p.shape.k, p.count, p.ms, tflops,
                  tflops / peak, judged ? verdict(tflops / peak >= gemm_fraction_target).c_str() : "-");
    }
    if (row.attention_ms >= 0) {
      const double tflops = row.attention_flops / (row.attention_ms * 1e-3) * 1e-12;
      std::printf(
          "| %s | %s | %d | attention (flash, causal) | %d rows, %d/%d heads of %d | %d | %.3f | %.0f | %.2f "
          "| - |\n",
          row.shape.c_str(), row.dtype.c_str(), row.tokens, row.tokens, row.config.heads, row.config.kv_head_count(),
          row.config.head_dim(), row.config.layers, row.attention_ms, tflops, tflops / peak);
    } else {
      std::printf(
          "| %s | %s | %d | attention | not measured: the flash-attention kernel needs compute capability 8.0 "
          "| | | | | |\n",
          row.shape.c_str(), row.dtype.c_str(), row.tokens);
    }
    std::printf("| %s | %s | %d | floor: all of the above | | | %.3f | | | |\n", row.shape.c_str(), row.dtype.c_str(),
                row.tokens, row.floor_prefill_ms);
  }
  std::fflush(stdout);
}

/// The summary: time to first token against the floor, and the targets.
void print_summary(const std::vector<Row>& rows) {
  std::printf(
      "\nTime to first token: wall time of Decoder::prefill(prompt) then forward(next) (the first decoded token's "
      "step); floor = the prompt's GEMMs + attention (above; norms, RoPE and SwiGLU not counted) + one step's weight "
      "read at the copy ceiling\n"
      "| shape | dtype | tokens | reps | prefill ms | step ms | TTFT ms | floor prefill ms | floor TTFT ms | "
      "prefill / floor | TTFT / floor | targets (prefill) |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    const double floor_ttft = r.floor_prefill_ms + r.floor_step_ms;
    const double ratio = r.prefill_ms / r.floor_prefill_ms;
    std::ostringstream targets;
    targets << "<= " << floor_ratio_target << "x floor " << verdict(ratio <= floor_ratio_target);
    if (const double t = prefill_target_ms(r.shape, r.tokens); t > 0) {
      targets << "; <= " << t << " ms " << verdict(r.prefill_ms <= t);
    }
    std::printf("| %s | %s | %d | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.1f | %.1f | %s |\n", r.shape.c_str(),
                r.dtype.c_str(), r.tokens, r.reps, r.prefill_ms, r.step_ms, r.ttft_ms, r.floor_prefill_ms, floor_ttft,
                ratio, r.ttft_ms / floor_ttft, targets.str().c_str());
  }
}

std::string json_of(const lg::Device& gpu, const Options& o, double ceiling, double peak_fp16, double peak_bf16,
                    const std::vector<Row>& rows) {
  std::ostringstream json;
  json << "{\n  \"device\": \"" << gpu.name() << "\",\n  \"warmup\": " << o.warmup << ",\n  \"reps\": " << o.reps
       << ",\n  \"tensor_cores\": " << (o.tensor_cores ? "true" : "false")
       << ",\n  \"copy_ceiling_bytes_per_s\": " << ceiling << ",\n  \"peak_tflops\": {\"fp16\": " << peak_fp16
       << ", \"bf16\": " << peak_bf16 << "},\n  \"prompt\": \"token i = mix(1000 + i) % vocab\",\n  \"rows\": [\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const nn::DecoderConfig& c = r.config;
    json << "    {\"shape\": \"" << r.shape << "\", \"dtype\": \"" << r.dtype << "\", \"tokens\": " << r.tokens
         << ",\n     \"config\": {\"d\": " << c.d << ", \"heads\": " << c.heads
         << ", \"kv_heads\": " << c.kv_head_count() << ", \"head_dim\": " << c.head_dim()
         << ", \"layers\": " << c.layers << ", \"ffn\": " << c.ffn << ", \"vocab\": " << c.vocab
         << ", \"context\": " << c.context << ", \"theta\": " << c.theta << ", \"eps\": " << c.eps
         << ", \"seed\": " << c.seed << ", \"rope_type\": \"" << nn::rope_type_name(c.rope_scaling.type)
         << "\", \"rope_factor\": " << c.rope_scaling.factor
         << ", \"low_freq_factor\": " << c.rope_scaling.low_freq_factor
         << ", \"high_freq_factor\": " << c.rope_scaling.high_freq_factor
         << ", \"original_max_position_embeddings\": " << c.rope_scaling.original_max_position_embeddings
         << "},\n     \"reps\": " << r.reps << ", \"prefill_ms\": " << r.prefill_ms << ", \"step_ms\": " << r.step_ms
         << ", \"ttft_ms\": " << r.ttft_ms << ", \"floor_prefill_ms\": " << r.floor_prefill_ms
         << ", \"floor_step_ms\": " << r.floor_step_ms << ", \"attention_ms\": " << r.attention_ms
         << ", \"next\": " << r.next << ", \"second\": " << r.second << ", \"step_logits\": \"" << r.logits_file
         << "\"}" << (i + 1 < rows.size() ? ",\n" : "\n");
  }
  json << "  ]\n}\n";
  return json.str();
}

// ----------------------------------------------------------------------------- run

/// Every row of one element type: per shape, the decoder's time to first token for every prompt length, then (the
/// decoder freed) the floor of each.
template <class T>
void run_dtype(const lg::Stream& s, const lg::KernelLibrary& library, const Options& o, const std::string& dtype,
               double ceiling, double peak, std::vector<Row>& all) {
  const int max_tokens = std::ranges::max(o.tokens);
  for (const bench::ModelShape& shape : o.shapes) {
    nn::DecoderConfig config = shape.config;
    config.context = std::min(8192, (max_tokens + 1 + 63) / 64 * 64);  // the prompt and one step
    config.tensor_cores = o.tensor_cores;
    std::vector<Row> rows;
    {
      std::fprintf(stderr, "bench_prefill: %s %s: generating the decoder's weights\n", shape.name.c_str(),
                   dtype.c_str());
      nn::BasicDecoder<T> decoder(s, library, config);
      for (const int tokens : o.tokens) {
        std::fprintf(stderr, "bench_prefill: %s %s, %d tokens: prefill + first step\n", shape.name.c_str(),
                     dtype.c_str(), tokens);
        Row& row = rows.emplace_back();
        row.shape = shape.name;
        row.dtype = dtype;
        row.tokens = tokens;
        row.config = config;
        row.logits_file = shape.name + "_" + dtype + "_" + std::to_string(tokens) + "_step_logits." + dtype;
        time_to_first_token(decoder, prompt_of(tokens, config.vocab), o, o.out + "/" + row.logits_file, row);
      }
    }
    std::fprintf(stderr, "bench_prefill: %s %s: the floor (cuBLASLt GEMMs, flash attention)\n", shape.name.c_str(),
                 dtype.c_str());
    measure_floor<T>(s, library, o, ceiling, rows);
    print_products(rows, peak);
    all.insert(all.end(), rows.begin(), rows.end());
  }
}

int run(const Options& o) {
  if (example::skip_without_gpu("bench_prefill")) return example::exit_skipped;
  std::string why;
  if (!lg::cublaslt_available(&why)) {
    std::printf("bench_prefill: skipped, no cuBLASLt to measure the floor with: %s\n", why.c_str());
    return example::exit_skipped;
  }
  std::filesystem::create_directories(o.out);
  lg::Device gpu = lg::Device::first();
  lg::Stream s = gpu.create_stream();
  const lg::KernelLibrary library = nn::kernel_library(gpu);
  const double ceiling = bench::copy_ceiling(s);
  const bool fp16 = std::find(o.dtypes.begin(), o.dtypes.end(), "fp16") != o.dtypes.end();
  const bool bf16 = std::find(o.dtypes.begin(), o.dtypes.end(), "bf16") != o.dtypes.end();
  const double peak_fp16 = fp16 ? peak_tflops<lg::half>(s, library, o) : 0;
  const double peak_bf16 = bf16 ? peak_tflops<lg::bfloat16>(s, library, o) : 0;
  std::printf(
      "lazygraph prefill on %s; time to first token = wall time of prefill(prompt) + forward(next), median of up to "
      "%d repetitions after %d warm-ups, reset() between; DecoderConfig::tensor_cores %s; copy ceiling %.2f TB/s "
      "(1 GiB device-to-device copy, read + written bytes, this run)\n",
      gpu.name().c_str(), o.reps, o.warmup, o.tensor_cores ? "on" : "off", ceiling * 1e-12);
  std::printf("\n| dtype | peak GEMM (cuBLASLt, graph replay) | TFLOP/s |\n|---|---|---|\n");
  if (fp16) std::printf("| fp16 | %d x %d x %d | %.0f |\n", o.peak_size, o.peak_size, o.peak_size, peak_fp16);
  if (bf16) std::printf("| bf16 | %d x %d x %d | %.0f |\n", o.peak_size, o.peak_size, o.peak_size, peak_bf16);
  std::fflush(stdout);

  std::vector<Row> rows;
  if (fp16) run_dtype<lg::half>(s, library, o, "fp16", ceiling, peak_fp16, rows);
  if (bf16) run_dtype<lg::bfloat16>(s, library, o, "bf16", ceiling, peak_bf16, rows);
  print_summary(rows);
  std::ofstream(o.out + "/prefill.json") << json_of(gpu, o, ceiling, peak_fp16, peak_bf16, rows);
  return 0;
}

// ----------------------------------------------------------------------------- command line

constexpr const char* usage =
    "usage: bench_prefill [--shape tinyllama|llama32-1b|all] [--tokens N,N,...] [--dtype fp16|bf16|all]\n"
    "                     [--reps N] [--warmup N] [--max-seconds S] [--gemm-reps N] [--peak-size N]\n"
    "                     [--no-tensor-cores] [--out DIR]\n"
    "Time to first token of seeded Llama-shaped decoders (nn::Decoder, nn::DecoderBf16): the wall time of\n"
    "prefill(prompt) plus the forward() of the token it returns, median of N repetitions with reset() between,\n"
    "for each shape, element type and prompt length; against the floor measured in the same run: the prompt's\n"
    "GEMMs of every layer (QKV fused, O, gate, up, down; the LM head of the last row) as cuBLASLt products\n"
    "captured into graphs, the flash-attention kernel of every layer (nn::prefill_attention), and one step's\n"
    "weight read at the copy ceiling; each GEMM's TFLOP/s as a fraction of a large GEMM's, and the targets of\n"
    "issue 37. Writes DIR/prefill.json and the first step's logits for examples/bench/torch_prefill.py, which\n"
    "times Hugging Face transformers on the same weights (examples/bench/run_gpu.sh prefill runs both).\n"
    "  --shape S          tinyllama (d 2048, 32/4 heads, 22 layers, ffn 5632, vocab 32000), llama32-1b\n"
    "                     (d 2048, 32/8 heads, 16 layers, ffn 8192, vocab 128256) or all (default)\n"
    "  --tokens N,...     prompt lengths, 1 to 8191 (default 128,512,2048)\n"
    "  --dtype T          fp16, bf16 or all (default)\n"
    "  --reps N           timed repetitions per row (default 10); fewer, at least 3, where N would take\n"
    "  --max-seconds S    more than S seconds (default 20)\n"
    "  --warmup N         untimed repetitions before them (default 2; the first captures the step graphs)\n"
    "  --gemm-reps N      graph replays per median of the floor (default 30)\n"
    "  --peak-size N      M = N = K of the peak GEMM (default 8192)\n"
    "  --no-tensor-cores  DecoderConfig::tensor_cores off (default on: prefill's 8-row steps on tensor cores)\n"
    "  --out DIR          where prefill.json and the logits go (default .)\n"
    "Exit status: 0 done (a missed target is only reported), 1 failed, 2 usage error, 77 skipped (no GPU or no\n"
    "cuBLASLt; the reason is printed).\n";

/// The options, or the exit code to stop with (0 after --help).
std::variant<Options, int> parse(int argc, char** argv) {
  Options o;
  std::string shape = "all";
  std::string dtype = "all";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw lg::UsageError(arg + " needs a value");
      return argv[++i];
    };
    const auto one = [&]() { return example::integers(value(), arg, 1).at(0); };
    if (arg == "--help" || arg == "-h") {
      std::printf("%s", usage);
      return 0;
    }
    if (arg == "--shape") {
      shape = value();
    } else if (arg == "--tokens") {
      o.tokens = example::integers(value(), arg, 1);
    } else if (arg == "--dtype") {
      dtype = value();
    } else if (arg == "--reps") {
      o.reps = one();
    } else if (arg == "--warmup") {
      const std::string v = value();
      o.warmup = v == "0" ? 0 : example::integers(v, arg, 1).at(0);
    } else if (arg == "--max-seconds") {
      o.max_seconds = one();
    } else if (arg == "--gemm-reps") {
      o.gemm_reps = one();
    } else if (arg == "--peak-size") {
      o.peak_size = one();
    } else if (arg == "--no-tensor-cores") {
      o.tensor_cores = false;
    } else if (arg == "--out") {
      o.out = value();
    } else {
      throw lg::UsageError(arg.starts_with("-") ? "unknown option " + arg : "unexpected argument " + arg);
    }
  }
  if (shape == "tinyllama" || shape == "all") o.shapes.push_back(bench::tinyllama());
  if (shape == "llama32-1b" || shape == "all") o.shapes.push_back(bench::llama32_1b());
  if (o.shapes.empty()) throw lg::UsageError("--shape " + shape + ": not tinyllama, llama32-1b or all");
  if (dtype == "fp16" || dtype == "bf16") {
    o.dtypes = {dtype};
  } else if (dtype != "all") {
    throw lg::UsageError("--dtype " + dtype + ": not fp16, bf16 or all");
  }
  for (const int t : o.tokens) {
    if (t > 8191) throw lg::UsageError("--tokens: " + std::to_string(t) + " is more than 8191 (the context is 8192)");
  }
  if (o.peak_size % 8 != 0)
    throw lg::UsageError("--peak-size: " + std::to_string(o.peak_size) + " is not a multiple of 8");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  return example::main_of_options<Options>(argc, argv, "bench_prefill", usage, false, parse, run);
}
