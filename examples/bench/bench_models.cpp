// The models benchmark, lazygraph side: SwiGLU MLP stacks and decoders of any shape (three MLPs and the default
// decoder when none is given), timed with CUDA events (medians of many forwards) against the copy ceiling measured
// in the same run, checked against float64, and written to DIR/lazygraph.json with the raw outputs, which
// examples/bench/torch_models.py then compares with PyTorch eager and torch.cuda.graph. `--help` for the options.
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
#include <variant>
#include <vector>

#include <lazygraph/nn/decoder.hpp>
#include <lazygraph/nn/mlp.hpp>
#include <lazygraph/nn/random_weights.hpp>
#include <lazygraph/nn/reference.hpp>
#include "ceiling.hpp"
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
std::vector<T> to_host(const lg::Stream& s, lg::DeviceSpan<const T> src) {
  std::vector<T> out(src.size());
  lg::copy_async(s, std::span<T>(out), src);
  s.synchronize();
  return out;
}

/// True when a and b hold the same bits.
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <class T>
void write_halves(const std::string& path, const std::vector<T>& values) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(T)));
  if (!out) throw std::runtime_error("cannot write " + path);
}

struct MlpResult {
  lazygraph::nn::MlpConfig config;
  int batch = 1;
  double kernels_us = 0;        ///< bare graph: the input copy and two early-launched kernels per block (the module's)
  double persistent_us = 0;     ///< bare graph: the input copy and the persistent stack kernel (MlpConfig::persistent)
  double kernels_plain_us = 0;  ///< the same with ordinary launches (early_launch off)
  double eager_us = 0;          ///< the kernels launched eagerly, without a graph
  // Batch 1 only (Module::forward takes one row): the module's ways in and out.
  double forward_us = 0;           ///< Module::forward: staging copy in, replay, copy out, one wait
  double staged_graph_us = 0;      ///< the module's graph: staging copy in, compute, staging copy out
  double resident_us = 0;          ///< forward_resident: input already on the device
  double bare_waited_us = 0;       ///< the bare kernels graph launched and waited for, one call at a time
  double rel_err = 0;              ///< kernel-per-launch path vs float64, every row
  double persistent_rel_err = 0;   ///< persistent path vs float64, every row
  double tensor_core_us = 0;       ///< batch > 1: the kernels graph with KernelOptions::tensor_cores
  double tensor_core_rel_err = 0;  ///< its output vs float64, every row
  std::string output;
  std::vector<lg::KernelTiming> profile;  ///< the kernels path, kernel by kernel (--profile)
};

/// The batch's rows of input: the first batch * d values of the seeded input tensor (torch_models.py makes the
/// same).
std::vector<half> mlp_input(const lazygraph::nn::MlpConfig& config, int batch) {
  return lazygraph::nn::host_tensor(config.seed, {2000000, static_cast<std::size_t>(config.d * batch), 1, 0});
}

/// The largest relative error of any row of `y` ([batch][d]) against `want`, the float64 rows (mlp_reference).
double rows_error(const std::vector<double>& want, const std::vector<half>& y, int d) {
  double worst = 0;
  for (std::size_t at = 0; at < want.size(); at += static_cast<std::size_t>(d)) {
    const auto from = static_cast<std::ptrdiff_t>(at);
    const std::vector<half> got(y.begin() + from, y.begin() + from + d);
    worst = std::max(worst,
                     lazygraph::nn::relative_error(lazygraph::nn::widen(got),
                                                   std::vector<double>(want.begin() + from, want.begin() + from + d)));
  }
  return worst;
}

/// The kernel-per-launch forward pass of `batch` rows: the input copy, then every block as two kernels.
auto kernels_forward(const lazygraph::nn::Kernels& k, const lazygraph::nn::Mlp& mlp,
                     const lg::DeviceSpan<const half>& x, const lg::DeviceSpan<half>& y,
                     const lg::DeviceSpan<half>& act, int batch) {
  const lazygraph::nn::MlpConfig& c = mlp.config();
  std::vector<lazygraph::nn::SwigluBlockOp> blocks;
  blocks.reserve(mlp.layers().size());
  for (const auto& w : mlp.layers())
    blocks.push_back(lazygraph::nn::swiglu_block(k, w, y, act, c.d, c.ffn, c.eps, batch));
  return lg::copy(y, x) >> lg::chain(std::move(blocks));
}

MlpResult bench_mlp(const lg::Stream& s, const lg::KernelLibrary& kernels, const lazygraph::nn::MlpConfig& config,
                    int batch, int forwards, bool profile, const std::string& dir) {
  MlpResult r;
  r.config = config;
  r.batch = batch;
  lazygraph::nn::Mlp mlp(s, kernels, config);
  const lazygraph::nn::Kernels k(kernels, config.early_launch);
  const lazygraph::nn::Kernels plain(kernels, false);
  const auto rows = static_cast<std::size_t>(batch);
  const auto d = static_cast<std::size_t>(config.d);
  const std::vector<half> input = mlp_input(config, batch);
  lg::DeviceBuffer<half> x = lg::from_host(input).sync_on(s);
  lg::DeviceBuffer<half> y(s.device(), rows * d);
  lg::DeviceBuffer<half> act(s.device(), rows * static_cast<std::size_t>(config.ffn));

  auto persistent =
      lg::CudaGraph<>::capture(s, lg::copy(y.view(), x.cview()) >> mlp.stack().op(y.view(), act.view(), batch));
  persistent.launch();
  const std::vector<half> persistent_output = to_host(s, y.cview());
  auto by_kernels = lg::CudaGraph<>::capture(s, kernels_forward(k, mlp, x.cview(), y.view(), act.view(), batch));
  by_kernels.launch();
  const std::vector<half> output = to_host(s, y.cview());
  auto by_plain_kernels =
      lg::CudaGraph<>::capture(s, kernels_forward(plain, mlp, x.cview(), y.view(), act.view(), batch));
  by_plain_kernels.launch();
  if (!same_bits(to_host(s, y.cview()), output)) throw std::runtime_error("MLP: early and ordinary launches disagree");
  const std::vector<double> want = lazygraph::nn::mlp_reference(config, lazygraph::nn::widen(input));
  r.rel_err = rows_error(want, output, config.d);
  if (batch > 1) {  // the same forward with batches on tensor cores
    const lazygraph::nn::Kernels tc(kernels, {.early_launch = config.early_launch, .tensor_cores = true});
    auto by_tensor_cores =
        lg::CudaGraph<>::capture(s, kernels_forward(tc, mlp, x.cview(), y.view(), act.view(), batch));
    by_tensor_cores.launch();
    r.tensor_core_rel_err = rows_error(want, to_host(s, y.cview()), config.d);
    r.tensor_core_us = median_us(s, forwards, [&] { by_tensor_cores.launch_on(s); });
  }
  r.persistent_rel_err = rows_error(want, persistent_output, config.d);
  r.output = "mlp_" + std::to_string(config.d) + "_" + std::to_string(config.ffn) + "_" +
             std::to_string(config.layers) + "_b" + std::to_string(batch) + ".f16";
  write_halves(dir + "/" + r.output, output);

  r.persistent_us = median_us(s, forwards, [&] { persistent.launch_on(s); });
  r.kernels_us = median_us(s, forwards, [&] { by_kernels.launch_on(s); });
  r.kernels_plain_us = median_us(s, forwards, [&] { by_plain_kernels.launch_on(s); });
  const auto eager = kernels_forward(k, mlp, x.cview(), y.view(), act.view(), batch);
  lg::ExecContext ctx(s, false);
  r.eager_us = median_us(s, forwards, [&] { eager.execute(ctx); });
  if (profile) r.profile = lg::profile_kernels(s, eager);
  if (batch == 1) {
    // Module::forward with host input and output (one replay, one wait), its graph alone, forward_resident, and
    // the bare graph launched and waited for.
    std::vector<half> out(d);
    r.forward_us = median_us(s, forwards, [&] { mlp.forward_into(input, out); });
    r.staged_graph_us = median_us(s, forwards, [&] { mlp.graph().launch_on(s); });
    r.resident_us = median_us(s, forwards, [&] { mlp.forward_resident(x.cview(), out); });
    r.bare_waited_us = median_us(s, forwards, [&] { by_kernels.launch(); });
  }
  return r;
}

struct DecoderResult {
  std::vector<int> tokens;
  double tokens_per_s = 0;
  double tokens_per_s_plain = 0;  ///< early_launch off
  double step_graph_us = 0;
  double step_eager_us = 0;
  double generate_tokens_per_s = 0;      ///< Decoder::generate: every step in one replay's WHILE loop
  bool generate_equal = false;           ///< generate's tokens are the forward loop's
  double batch_step_us = 0;              ///< the step graph of `batch` rows (0 when batch is 1)
  double tensor_core_batch_step_us = 0;  ///< the same with DecoderConfig::tensor_cores
  std::string logits0;                   ///< the file of the first step's logits
  double split_step_graph_us = 0;        ///< fused, attention split over positions (attention_blocks 0: by context)
  double unfused_step_graph_us = 0;      ///< the step graph with DecoderConfig::fused off (the kernels of before)
  double unfused_tokens_per_s = 0;       ///< likewise, forward per token
  double unfused_all_us = 0;             ///< the unfused step graph, its branches written with all() (DecoderOrdering)
  double unfused_serial_us = 0;          ///< the unfused step graph, one kernel after another
  bool orderings_equal = false;          ///< the three orderings chose the same tokens
  std::string ordering_edges;            ///< full+programmatic edges of the three graphs
  bool unfused_tokens_equal = false;     ///< the unfused decoder chose the same tokens
  std::vector<int> unfused_tokens;
  std::vector<lg::KernelTiming> profile;          ///< one step, kernel by kernel (--profile)
  std::vector<lg::KernelTiming> unfused_profile;  ///< likewise, unfused
};

/// The bytes a decoder kernel moves, from what its span arguments view (KernelTiming::span_bytes), corrected where
/// a span is far larger than what one step touches: the embedding table (a step reads `rows` rows of it), the layer's
/// KV caches (a step appends `rows` rows and attends over positions 0..position) and attention_split's partials
/// (allocated for every row the decoder may step).
double decoder_traffic(const lazygraph::nn::DecoderConfig& c, const lg::KernelTiming& t, int rows, int position) {
  const double elem = sizeof(half);
  const double kv = c.kv_dim();
  const double layer_caches = 2.0 * c.max_batch * c.context * kv * elem;  // k and v
  double bytes = static_cast<double>(t.span_bytes);
  if (t.name == "embedding") bytes += (static_cast<double>(rows) - c.vocab) * c.d * elem;
  if (t.name == "qkv_rope_append" || t.name == "kv_append") bytes += 2.0 * rows * kv * elem - layer_caches;
  if (t.name == "attention" || t.name == "attention_split")
    bytes += 2.0 * rows * (position + 1) * kv * elem - layer_caches;
  if (t.name == "attention_split") {
    const double per_row = static_cast<double>(c.heads) * c.attention_splits() * (c.head_dim() + 2) * 4.0;
    bytes += (2.0 * rows - lazygraph::nn::kMaxRows) * per_row + (rows - lazygraph::nn::kMaxRows) * c.heads * 4.0;
  }
  return bytes;
}

/// The profile of one forward (profile_kernels) grouped by kernel, in order of first launch: launches, time, share,
/// bytes, bandwidth and its fraction of the copy ceiling; then the sum against the graph replay.
void print_profile(const std::string& title, const std::vector<lg::KernelTiming>& launches, double ceiling,
                   double graph_us, const std::function<double(const lg::KernelTiming&)>& traffic) {
  struct Kind {
    std::string name;
    int count = 0;
    double us = 0;
    double bytes = 0;
  };
  std::vector<Kind> kinds;
  double total_us = 0;
  double total_bytes = 0;
  for (const lg::KernelTiming& t : launches) {
    auto it = std::find_if(kinds.begin(), kinds.end(), [&](const Kind& k) { return k.name == t.name; });
    if (it == kinds.end()) it = kinds.insert(kinds.end(), Kind{t.name});
    ++it->count;
    it->us += t.microseconds;
    it->bytes += traffic(t);
    total_us += t.microseconds;
    total_bytes += traffic(t);
  }
  std::printf(
      "\nprofile: %s (kernels launched one by one, each timed alone; medians)\n"
      "| kernel | launches | us | share | MB moved | TB/s | of ceiling |\n|---|---|---|---|---|---|---|\n",
      title.c_str());
  for (const Kind& k : kinds) {
    std::printf("| %s | %d | %.1f | %.1f%% | %.2f | %.2f | %.3f |\n", k.name.c_str(), k.count, k.us,
                100.0 * k.us / total_us, k.bytes / 1e6, k.bytes / (k.us * 1e-6) * 1e-12,
                k.bytes / (k.us * 1e-6) / ceiling);
  }
  std::printf("| all | %zu | %.1f | 100%% | %.2f | %.2f | %.3f |\n", launches.size(), total_us, total_bytes / 1e6,
              total_bytes / (total_us * 1e-6) * 1e-12, total_bytes / (total_us * 1e-6) / ceiling);
  std::printf(
      "graph replay of the same work: %.1f us (the kernels alone sum to %.1f us; a graph overlaps their "
      "starts and ends)\n",
      graph_us, total_us);
}

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
                            int batch, bool profile, const std::string& dir, const std::string& name) {
  DecoderResult r;
  r.logits0 = name + "_logits0.f16";
  {
    lazygraph::nn::DecoderConfig unfused_config = config;
    unfused_config.fused = false;
    lazygraph::nn::Decoder unfused(s, kernels, unfused_config);
    std::vector<int> tokens;
    r.unfused_tokens_per_s = tokens_per_second(unfused, first_token, steps, tokens);
    r.unfused_step_graph_us = 1e30;
    if (profile) r.unfused_profile = lg::profile_kernels(s, unfused.step_op());
    // The same kernels with the branches written by hand, and serially: dataflow's graph against both, measured in
    // turns (five rounds, the best median of each) so that clock drift favours none.
    r.orderings_equal = true;
    std::vector<std::unique_ptr<lazygraph::nn::Decoder>> others;
    for (const auto ordering : {lazygraph::nn::DecoderOrdering::hand_written, lazygraph::nn::DecoderOrdering::serial}) {
      unfused_config.ordering = ordering;
      others.push_back(std::make_unique<lazygraph::nn::Decoder>(s, kernels, unfused_config));
      std::vector<int> other_tokens;
      (void)tokens_per_second(*others.back(), first_token, steps, other_tokens);
      r.orderings_equal = r.orderings_equal && other_tokens == tokens;
    }
    r.unfused_all_us = r.unfused_serial_us = 1e30;
    for (int round = 0; round < 5; ++round) {
      r.unfused_step_graph_us =
          std::min(r.unfused_step_graph_us, median_us(s, forwards, [&] { unfused.graph().launch_on(s); }));
      r.unfused_all_us = std::min(r.unfused_all_us, median_us(s, forwards, [&] { others[0]->graph().launch_on(s); }));
      r.unfused_serial_us =
          std::min(r.unfused_serial_us, median_us(s, forwards, [&] { others[1]->graph().launch_on(s); }));
    }
    const auto edges = [](lazygraph::nn::Decoder& dec) {
      const lg::EdgeCounts e = dec.graph().edge_counts();
      return std::to_string(e.full) + "+" + std::to_string(e.programmatic);
    };
    r.ordering_edges = edges(unfused) + " / " + edges(*others[0]) + " / " + edges(*others[1]);
    r.unfused_tokens = std::move(tokens);
  }
  {
    lazygraph::nn::DecoderConfig split_config = config;
    split_config.attention_blocks = 0;  // by context: attention_split
    lazygraph::nn::Decoder split_decoder(s, kernels, split_config);
    std::vector<int> tokens;
    (void)tokens_per_second(split_decoder, first_token, steps, tokens);
    r.split_step_graph_us = median_us(s, forwards, [&] { split_decoder.graph().launch_on(s); });
  }
  {
    lazygraph::nn::DecoderConfig plain_config = config;
    plain_config.early_launch = false;
    lazygraph::nn::Decoder plain(s, kernels, plain_config);
    std::vector<int> tokens;
    r.tokens_per_s_plain = tokens_per_second(plain, first_token, steps, tokens);
  }
  lazygraph::nn::Decoder decoder(s, kernels, config);
  decoder.forward({first_token, 0});
  write_halves(dir + "/" + r.logits0, decoder.logits());
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
  r.unfused_tokens_equal = r.unfused_tokens == r.tokens;
  if (profile) r.profile = lg::profile_kernels(s, decoder.step_op());
  if (batch > 1) {  // every row its own sequence, at position 100
    std::vector<lazygraph::nn::TokenAt> rows(static_cast<std::size_t>(batch), {7, std::min(100, config.context - 1)});
    (void)decoder.forward_batch(rows);
    r.batch_step_us = median_us(s, forwards, [&] { decoder.graph(batch).launch_on(s); });
    lazygraph::nn::DecoderConfig tc_config = config;
    tc_config.tensor_cores = true;
    lazygraph::nn::Decoder tc(s, kernels, tc_config);
    (void)tc.forward_batch(rows);
    r.tensor_core_batch_step_us = median_us(s, forwards, [&] { tc.graph(batch).launch_on(s); });
  }
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

  // A prompt of 40 tokens through prefill (on tensor cores: one chunk in the graph of the 64-row bucket; 5 steps of 8
  // rows where prefill_fallback_reason() says why not) into sequence 0.
  decoder.reset();
  std::vector<int> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back(static_cast<int>(lazygraph::nn::mix(1000U + i) % c.vocab));
  const int next = decoder.prefill(prompt);
  write_halves(dir + "/prefill_logits.f16", decoder.logits());  // the prompt's last token's
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

/// What the command line asks for.
struct Options {
  std::string out = ".";
  int forwards = 300;
  int batch = 1;
  std::vector<lazygraph::nn::MlpConfig> mlps;
  std::vector<lazygraph::nn::DecoderConfig> decoders;
  bool defaults = true;  ///< no --mlp or --decoder: today's default run
  bool profile = false;  ///< --profile: each model's forward kernel by kernel
};

lazygraph::nn::MlpConfig parse_mlp(const std::string& text) {
  const std::vector<int> v = example::integers(text, "--mlp " + text);
  if (v.size() != 3) throw lg::UsageError("--mlp takes D,FFN,LAYERS; got '" + text + "'");
  lazygraph::nn::MlpConfig c;
  c.d = v[0];
  c.ffn = v[1];
  c.layers = v[2];
  c.validate();
  return c;
}

lazygraph::nn::DecoderConfig parse_decoder(const std::string& text) {
  lazygraph::nn::DecoderConfig c;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const std::size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    if (eq == std::string::npos) throw lg::UsageError("--decoder: '" + item + "' is not KEY=VALUE");
    const int value = example::integers(item.substr(eq + 1), "--decoder " + key).at(0);
    if (key == "d")
      c.d = value;
    else if (key == "heads")
      c.heads = value;
    else if (key == "kv_heads")
      c.kv_heads = value;
    else if (key == "layers")
      c.layers = value;
    else if (key == "ffn")
      c.ffn = value;
    else if (key == "vocab")
      c.vocab = value;
    else if (key == "context")
      c.context = value;
    else
      throw lg::UsageError("--decoder: unknown key '" + key + "' (d, heads, kv_heads, layers, ffn, vocab, context)");
  }
  c.validate();
  return c;
}

/// The options, or the exit code to stop with (0 after --help).
std::variant<Options, int> parse(int argc, char** argv, const char* usage) {
  Options o;
  int positional = 0;
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
    if (arg == "--mlp") {
      o.mlps.push_back(parse_mlp(value()));
    } else if (arg == "--decoder") {
      o.decoders.push_back(parse_decoder(value()));
    } else if (arg == "--batch") {
      o.batch = example::integers(value(), "--batch").at(0);
      if (o.batch < 1 || o.batch > 8) throw lg::UsageError("--batch " + std::to_string(o.batch) + " is outside 1..8");
    } else if (arg == "--forwards") {
      o.forwards = std::max(1, example::integers(value(), "--forwards").at(0));
    } else if (arg == "--out") {
      o.out = value();
    } else if (arg == "--profile") {
      o.profile = true;
    } else if (arg.starts_with("-")) {
      throw lg::UsageError("unknown option " + arg);
    } else if (positional == 0) {  // the older form: OUTDIR [FORWARDS]
      o.out = arg;
      ++positional;
    } else if (positional == 1) {
      o.forwards = std::max(1, example::integers(arg, "FORWARDS").at(0));
      ++positional;
    } else {
      throw lg::UsageError("too many arguments");
    }
  }
  o.defaults = o.mlps.empty() && o.decoders.empty();
  if (o.defaults) {
    for (const auto& [d, ffn, layers] :
         {std::tuple{512, 1536, 16}, std::tuple{1024, 4096, 8}, std::tuple{4096, 11008, 4}}) {
      lazygraph::nn::MlpConfig c;
      c.d = d;
      c.ffn = ffn;
      c.layers = layers;
      o.mlps.push_back(c);
    }
    o.decoders.emplace_back();
  }
  for (auto& c : o.decoders) c.max_batch = std::max(c.max_batch, o.batch);
  return o;
}

std::string decoder_json(const lazygraph::nn::DecoderConfig& dc, const DecoderResult& dr, int first_token, int steps) {
  std::ostringstream json;
  json << "{\"config\": {\"d\": " << dc.d << ", \"heads\": " << dc.heads << ", \"kv_heads\": " << dc.kv_heads
       << ", \"layers\": " << dc.layers << ", \"ffn\": " << dc.ffn << ", \"vocab\": " << dc.vocab
       << ", \"context\": " << dc.context << ", \"theta\": " << dc.theta << ", \"eps\": " << dc.eps
       << ", \"seed\": " << dc.seed << "},\n    \"start_token\": " << first_token << ", \"steps\": " << steps
       << ", \"weight_bytes\": " << dc.weight_bytes() << ", \"tokens_per_s\": " << dr.tokens_per_s
       << ", \"tokens_per_s_plain\": " << dr.tokens_per_s_plain << ", \"step_graph_us\": " << dr.step_graph_us
       << ", \"step_eager_us\": " << dr.step_eager_us << ", \"generate_tokens_per_s\": " << dr.generate_tokens_per_s
       << ", \"generate_equal\": " << (dr.generate_equal ? "true" : "false") << ", \"logits0\": \"" << dr.logits0
       << "\",\n    \"tokens\": [";
  for (std::size_t i = 0; i < dr.tokens.size(); ++i) json << (i > 0 ? ", " : "") << dr.tokens[i];
  json << "]}";
  return json.str();
}

int run(const Options& o) {
  if (example::skip_without_gpu("bench_models")) return example::exit_skipped;
  std::filesystem::create_directories(o.out);
  lg::Device gpu = lg::Device::first();
  lg::Stream s = gpu.create_stream();
  lg::KernelLibrary kernels = lg::nn::kernel_library(gpu);  // the core and the nn kernel sets
  const double ceiling = bench::copy_ceiling(s);
  const double ceiling_tbs = ceiling * 1e-12;

  std::printf(
      "lazygraph models on %s; medians of %d forwards, CUDA events; batch %d; copy ceiling %.2f TB/s "
      "(1 GiB device-to-device copy, read + written bytes, this run)\n\n",
      gpu.name().c_str(), o.forwards, o.batch, ceiling_tbs);
  std::printf(
      "| MLP (d, ffn, layers) | weights MB | graph us | of ceiling | no early launch us | eager us | persistent "
      "kernel graph us | of ceiling | persistent / graph | rel err f64 (graph, persistent) |%s\n"
      "|---|---|---|---|---|---|---|---|---|---|%s\n",
      o.batch > 1 ? " tensor cores graph us | tensor cores / fp32 | rel err f64 |" : "",
      o.batch > 1 ? "---|---|---|" : "");
  std::vector<MlpResult> mlps;
  for (const lazygraph::nn::MlpConfig& config : o.mlps) {
    const MlpResult& r = mlps.emplace_back(bench_mlp(s, kernels, config, o.batch, o.forwards, o.profile, o.out));
    const double bytes = static_cast<double>(config.weight_bytes());
    const auto fraction = [&](double us) { return bytes / (us * 1e-6) / ceiling; };
    std::printf("| (%d, %d, %d) | %.1f | %.1f | %.3f | %.1f | %.3f | %.1f | %.1f | %.3f | %.1e, %.1e |", config.d,
                config.ffn, config.layers, bytes / 1e6, r.kernels_us, fraction(r.kernels_us), r.kernels_plain_us,
                r.eager_us, r.persistent_us, fraction(r.persistent_us), r.persistent_us / r.kernels_us, r.rel_err,
                r.persistent_rel_err);
    if (o.batch > 1) {
      std::printf(" %.1f | %.3f | %.1e |", r.tensor_core_us, r.tensor_core_us / r.kernels_us, r.tensor_core_rel_err);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  if (o.batch == 1) {
    std::printf(
        "\n| MLP (d, ffn, layers) | bare graph us | bare graph, launched and waited us | module graph (staging copies) "
        "us | forward() us | forward_resident() us | forward - bare us | forward - bare waited us |\n"
        "|---|---|---|---|---|---|---|---|\n");
    for (const MlpResult& r : mlps) {
      std::printf("| (%d, %d, %d) | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", r.config.d, r.config.ffn,
                  r.config.layers, r.kernels_us, r.bare_waited_us, r.staged_graph_us, r.forward_us, r.resident_us,
                  r.forward_us - r.kernels_us, r.forward_us - r.bare_waited_us);
    }
  }

  const int first_token = 1;
  const int steps = 256;
  std::vector<DecoderResult> decoders;
  std::printf(
      "\n| decoder (d, heads, kv_heads, layers, ffn, vocab) | weights MB | step graph us | of ceiling | before: "
      "unfused step graph us | before / now | attention split by context us | tokens/s (forward per token) | before "
      "tokens/s | no early launch | "
      "generate() tokens/s | generate / step bound | step eager us |%s\n|---|---|---|---|---|---|---|---|---|---|---|"
      "---|---|%s\n",
      o.batch > 1 ? " step graph, batch rows us | batch / 1 row | tensor cores: batch rows us | batch / 1 row |" : "",
      o.batch > 1 ? "---|---|---|---|" : "");
  for (std::size_t i = 0; i < o.decoders.size(); ++i) {
    const lazygraph::nn::DecoderConfig& dc = o.decoders[i];
    const DecoderResult& dr = decoders.emplace_back(
        bench_decoder(s, kernels, dc, first_token, std::min(steps, dc.context), o.forwards, o.batch, o.profile, o.out,
                      i == 0 ? std::string("decoder") : "decoder" + std::to_string(i)));
    const double bytes = static_cast<double>(dc.weight_bytes());
    std::printf(
        "| (%d, %d, %d, %d, %d, %d) | %.1f | %.1f | %.3f | %.1f | %.2f | %.1f | %.0f | %.0f | %.0f | %.0f | "
        "%.3f | %.1f |",
        dc.d, dc.heads, dc.kv_head_count(), dc.layers, dc.ffn, dc.vocab, bytes / 1e6, dr.step_graph_us,
        bytes / (dr.step_graph_us * 1e-6) / ceiling, dr.unfused_step_graph_us,
        dr.unfused_step_graph_us / dr.step_graph_us, dr.split_step_graph_us, dr.tokens_per_s, dr.unfused_tokens_per_s,
        dr.tokens_per_s_plain, dr.generate_tokens_per_s, dr.generate_tokens_per_s * dr.step_graph_us * 1e-6,
        dr.step_eager_us);
    if (o.batch > 1) {
      std::printf(" %.1f | %.2f | %.1f | %.2f |", dr.batch_step_us, dr.batch_step_us / dr.step_graph_us,
                  dr.tensor_core_batch_step_us, dr.tensor_core_batch_step_us / dr.step_graph_us);
    }
    std::printf("%s%s\n", dr.generate_equal ? "" : " generate() tokens DIFFER from forward()'s",
                dr.unfused_tokens_equal ? "" : " (the unfused decoder's greedy tokens differ: rounding near a tie)");
    std::fflush(stdout);
  }
  std::printf(
      "\n| decoder, unfused kernels (d, layers) | dataflow() step graph us | hand-written all() us | serial us | "
      "dataflow / all | dataflow / serial | same tokens | edges full+early: dataflow / all / serial |\n"
      "|---|---|---|---|---|---|---|---|\n");
  for (std::size_t i = 0; i < decoders.size(); ++i) {
    const DecoderResult& dr = decoders[i];
    std::printf("| (%d, %d) | %.1f | %.1f | %.1f | %.3f | %.3f | %s | %s |\n", o.decoders[i].d, o.decoders[i].layers,
                dr.unfused_step_graph_us, dr.unfused_all_us, dr.unfused_serial_us,
                dr.unfused_step_graph_us / dr.unfused_all_us, dr.unfused_step_graph_us / dr.unfused_serial_us,
                dr.orderings_equal ? "yes" : "NO", dr.ordering_edges.c_str());
  }
  if (o.profile) {
    for (const MlpResult& r : mlps) {
      print_profile("MLP (" + std::to_string(r.config.d) + ", " + std::to_string(r.config.ffn) + ", " +
                        std::to_string(r.config.layers) + "), batch " + std::to_string(r.batch),
                    r.profile, ceiling, r.kernels_us, [](const lg::KernelTiming& t) { return double(t.span_bytes); });
    }
    for (std::size_t i = 0; i < decoders.size(); ++i) {
      const lazygraph::nn::DecoderConfig& dc = o.decoders[i];
      const int position = std::min(steps, dc.context) - 1;  // where the forward loop left the io buffer
      const auto traffic = [&](const lg::KernelTiming& t) { return decoder_traffic(dc, t, 1, position); };
      const std::string shape = "decoder (d " + std::to_string(dc.d) + ", " + std::to_string(dc.layers) +
                                " layers, vocab " + std::to_string(dc.vocab) + "), one step at position " +
                                std::to_string(position);
      print_profile(shape + ", before: unfused", decoders[i].unfused_profile, ceiling,
                    decoders[i].unfused_step_graph_us, traffic);
      print_profile(shape + ", now", decoders[i].profile, ceiling, decoders[i].step_graph_us, traffic);
    }
  }
  std::printf("\n");
  const std::string features = o.defaults ? bench_features(s, kernels, o.forwards, o.out) : "";
  const std::string bf16 = o.defaults ? bench_bf16(s, kernels, o.forwards, o.out) : "";

  std::ostringstream json;
  json << "{\n  \"device\": \"" << gpu.name() << "\",\n  \"forwards\": " << o.forwards << ",\n  \"batch\": " << o.batch
       << ",\n  \"copy_ceiling_bytes_per_s\": " << ceiling << ",\n  \"mlp\": [\n";
  for (std::size_t i = 0; i < mlps.size(); ++i) {
    const MlpResult& r = mlps[i];
    json << "    {\"d\": " << r.config.d << ", \"ffn\": " << r.config.ffn << ", \"layers\": " << r.config.layers
         << ", \"batch\": " << r.batch << ", \"seed\": " << r.config.seed << ", \"graph_us\": " << r.kernels_us
         << ", \"persistent_graph_us\": " << r.persistent_us << ", \"graph_plain_us\": " << r.kernels_plain_us
         << ", \"forward_us\": " << (r.batch == 1 ? r.forward_us : 0) << ", \"eager_us\": " << r.eager_us
         << ", \"weight_bytes\": " << r.config.weight_bytes() << ", \"rel_err_f64\": " << r.rel_err
         << ", \"output\": \"" << r.output << "\"}" << (i + 1 < mlps.size() ? ",\n" : "\n");
  }
  json << "  ],\n  \"decoders\": [\n";
  for (std::size_t i = 0; i < decoders.size(); ++i) {
    json << "    " << decoder_json(o.decoders[i], decoders[i], first_token, std::min(steps, o.decoders[i].context))
         << (i + 1 < decoders.size() ? ",\n" : "\n");
  }
  json << "  ]";
  if (o.defaults) json << ",\n  \"features\": " << features << ",\n  \"bf16\": " << bf16;
  json << "\n}\n";
  std::ofstream(o.out + "/lazygraph.json") << json.str();
  if (o.defaults) bucketed_mlp_memory(s, kernels);
  return 0;
}

constexpr const char* usage =
    "usage: bench_models [--mlp D,FFN,LAYERS]... [--decoder KEY=VALUE,...]... [--batch B] [--forwards N]\n"
    "                    [--out DIR]\n"
    "       bench_models [OUTDIR [FORWARDS]]\n"
    "Times SwiGLU MLP stacks and Llama-style decoders (medians of N forwards, default 300, CUDA events), checks\n"
    "them against float64 and writes DIR/lazygraph.json (default .) with the raw outputs, for\n"
    "examples/bench/torch_models.py to compare with PyTorch. Every row gives the weight bytes and the fraction of\n"
    "the copy ceiling (a 1 GiB device-to-device copy measured in the same run) that reading them once reached.\n"
    "Without --mlp or --decoder: the MLPs (512, 1536, 16), (1024, 4096, 8), (4096, 11008, 4), the default\n"
    "decoder, the GQA, batch, prefill and bf16 checks and the BucketedModule memory table.\n"
    "  --mlp D,FFN,LAYERS    an MLP stack (d and ffn multiples of 8); repeat for several\n"
    "  --decoder K=V,...     a decoder: keys d, heads, kv_heads, layers, ffn, vocab, context (others default:\n"
    "                        d=512,heads=8,layers=8,ffn=1536,vocab=4096,context=1024); repeat for several\n"
    "  --batch B             rows per step, 1 to 8 (MLP graphs and an extra decoder step column)\n"
    "  --forwards N          timed forwards per median (default 300)\n"
    "  --out DIR             where lazygraph.json and the outputs go (default .)\n"
    "  --profile             also break one forward of each model into its kernels: time, bytes moved and\n"
    "                        fraction of the ceiling per kernel (eager launches, each timed alone); for the\n"
    "                        decoders before (DecoderConfig::fused off) and now\n"
    "Example: bench_models --mlp 2048,5632,6 --decoder d=2048,heads=16,kv_heads=4,layers=16,ffn=5632,vocab=32000\n"
    "Exit status: 0 done, 1 failed, 2 usage error, 77 skipped (no GPU; the reason is printed).\n";

}  // namespace

int main(int argc, char** argv) {
  return example::main_of_options<Options>(
      argc, argv, "bench_models", usage, false, [](int c, char** v) { return parse(c, v, usage); }, run);
}
