#include "lazygraph/nn/decoder.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "lazygraph/nn/prefill.hpp"
#include "lazygraph/nn/wide_step.hpp"

namespace lazygraph::nn {

namespace {
const DecoderConfig& validated(const DecoderConfig& c) {
  c.validate();
  return c;
}

/// Ints of a decoder's input staging: the step's io, then a prefill chunk's (packed or not) of the largest bucket.
std::size_t staging_input_size(const DecoderConfig& c) {
  const std::vector<int> buckets = prefill_buckets(c);
  return DecoderIo::prefill + (buckets.empty() ? 0 : PackedPrefillIo::input_size(buckets.back()));
}

/// Ints of the input staging with a paged cache's tables after it ([kMaxRows][kv_table_width]).
std::size_t staging_with_tables(const DecoderConfig& c) {
  return staging_input_size(c) + static_cast<std::size_t>(kMaxRows) * static_cast<std::size_t>(c.kv_table_width());
}

/// Refuses a call that a paged decoder takes with block tables only.
void refuse_paged(const DecoderConfig& c, const std::string& what, const std::string& instead) {
  if (c.paged()) {
    throw UsageError(what + ": the decoder's KV cache is paged (DecoderConfig::kv_block_size); " + instead);
  }
}
}  // namespace

template <Element T>
BasicDecoder<T>::BasicDecoder(const Stream& stream, const KernelLibrary& library, const DecoderConfig& config)
    : BasicDecoder(stream, library, validated(config),
                   BasicDecoderWeights<T>::generate(stream, BasicKernels<T>(library, config.early_launch), config)) {}

namespace {
/// `w`, after checking that every buffer and matrix has the shape `c` gives its tensor.
template <Element T>
BasicDecoderWeights<T> checked(BasicDecoderWeights<T> w, const DecoderConfig& c) {
  const auto fail = [](const std::string& why) { throw UsageError("Decoder: " + why); };
  if (w.attention.size() != static_cast<std::size_t>(c.layers) || w.mlp.size() != w.attention.size()) {
    fail("the weights have " + std::to_string(w.attention.size()) + " attention and " + std::to_string(w.mlp.size()) +
         " MLP layers, the config " + std::to_string(c.layers));
  }
  const auto vector = [&](const DeviceBuffer<T>& b, std::size_t size, const std::string& name) {
    if (!b.valid() || b.size() != size) {
      fail("tensor " + name + " has " + std::to_string(b.valid() ? b.size() : 0) + " elements, the config needs " +
           std::to_string(size));
    }
  };
  const auto matrix = [&](const Weight<T>& m, int rows, int cols, const std::string& name) {
    if (m.rows() != rows || m.cols() != cols) {
      fail("weight " + (m.name().empty() ? name : m.name()) + " is " + std::to_string(m.rows()) + " x " +
           std::to_string(m.cols()) + ", the config needs " + std::to_string(rows) + " x " + std::to_string(cols));
    }
  };
  if (c.max_batch > kMaxRows) {  // the wide step would dequantize every expert stack at every step
    for (const BasicMoeWeights<T>& e : w.moe) {
      if (e.quantized()) {
        fail("the experts are quantized (" + e.w1.describe() + "); steps of more than " + std::to_string(kMaxRows) +
             " rows (max_batch " + std::to_string(c.max_batch) +
             ") run the wide step, whose grouped products read dense experts: it would dequantize every expert stack "
             "at every step");
      }
    }
  }
  const auto d = static_cast<std::size_t>(c.d);
  const int qkv_rows = c.q_dim() + 2 * c.kv_dim();
  vector(w.embedding, static_cast<std::size_t>(c.vocab) * d, "model.embed_tokens.weight");
  for (std::size_t l = 0; l < w.attention.size(); ++l) {
    const std::string layer = "model.layers." + std::to_string(l) + ".";
    const BasicAttentionWeights<T>& a = w.attention[l];
    const BasicSwigluWeights<T>& m = w.mlp[l];
    vector(a.gain, d, layer + "input_layernorm.weight");
    matrix(a.qkv, qkv_rows, c.d, layer + "self_attn.qkv_proj.weight");
    matrix(a.wo, c.d, c.q_dim(), layer + "self_attn.o_proj.weight");
    if (c.qkv_bias) {
      vector(a.bias, static_cast<std::size_t>(qkv_rows), layer + "self_attn.{q,k,v}_proj.bias (stacked)");
    } else if (!a.bias.empty()) {
      fail("layer " + std::to_string(l) +
           " has q, k and v biases, but the config's qkv_bias is false (they would be "
           "added to nothing)");
    }
    // q/k norms' gains: a head's, or (qk_norm_whole) the whole q's and k's.
    const auto norm_size = [&](int whole) {
      return static_cast<std::size_t>(!c.qk_norm ? 0 : (c.qk_norm_whole ? whole : c.head_dim()));
    };
    vector(a.q_norm, norm_size(c.q_dim()), layer + "self_attn.q_norm.weight");
    vector(a.k_norm, norm_size(c.kv_dim()), layer + "self_attn.k_norm.weight");
    const std::size_t post = c.post_norms ? d : 0;
    vector(a.post_gain, post, layer + "post_attention_layernorm.weight (post-norm)");
    vector(m.post_gain, post, layer + "post_feedforward_layernorm.weight");
    vector(m.gain, d, layer + (c.post_norms ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight"));
    if (c.mixture_of_experts()) {  // the router and the experts' stacked matrices (decoder_tensors' names)
      if (w.moe.size() != w.attention.size()) {
        fail("the weights have " + std::to_string(w.moe.size()) + " mixtures of experts, the config " +
             std::to_string(c.layers) + " layers of them");
      }
      const BasicMoeWeights<T>& e = w.moe[l];
      const auto experts = static_cast<std::size_t>(c.moe.experts);
      const int stacked = c.moe.experts * c.moe.expert_width;
      vector(e.router, experts * d, layer + "mlp.gate.weight");
      matrix(e.w1, stacked, c.d, layer + "mlp.experts.*.gate_proj.weight");
      matrix(e.w3, stacked, c.d, layer + "mlp.experts.*.up_proj.weight");
      matrix(e.w2, c.moe.experts * c.d, c.moe.expert_width, layer + "mlp.experts.*.down_proj.weight");
      continue;
    }
    matrix(m.w1, c.ffn, c.d, layer + "mlp.gate_proj.weight");
    matrix(m.w3, c.ffn, c.d, layer + "mlp.up_proj.weight");
    matrix(m.w2, c.d, c.ffn, layer + "mlp.down_proj.weight");
  }
  if (!c.mixture_of_experts() && !w.moe.empty()) {
    fail("the weights hold mixtures of experts, but the config has none (DecoderConfig::moe)");
  }
  vector(w.final_gain, d, "model.norm.weight");
  matrix(w.lm_head, c.vocab, c.d, "lm_head.weight");
  return w;
}
}  // namespace

namespace {
/// The shapes a decoder's step runs: `c`'s, or with `comm` its rank's share (shard_config), checked first.
DecoderConfig step_shape(const DecoderConfig& c, const Communicator* comm, const Stream& stream) {
  if (comm == nullptr) return c;
  if (c.paged()) {
    throw UsageError("Decoder: the paged KV cache (kv_block_size) does not run on a tensor-parallel rank");
  }
  if (comm->device().ordinal() != stream.device().ordinal()) {
    throw UsageError("Decoder: the stream is on device " + std::to_string(stream.device().ordinal()) +
                     ", the communicator's rank on device " + std::to_string(comm->device().ordinal()));
  }
  return shard_config(c, comm->size());
}

/// The state's shapes: the step's, with the whole vocabulary's logits (a rank gathers every rank's into them).
DecoderConfig state_shape(DecoderConfig shard, const DecoderConfig& c) {
  shard.vocab = c.vocab;
  return shard;
}
}  // namespace

template <Element T>
BasicDecoder<T>::BasicDecoder(const Stream& stream, const KernelLibrary& library, const DecoderConfig& config,
                              BasicDecoderWeights<T> weights)
    : BasicDecoder(stream, library, config, std::move(weights), static_cast<const Communicator*>(nullptr), {},
                   nullptr) {}

template <Element T>
BasicDecoder<T>::BasicDecoder(const Stream& stream, const KernelLibrary& library, const DecoderConfig& config,
                              BasicDecoderWeights<T> weights, const Communicator& comm,
                              const TensorParallelOptions& options, const PeerExchange* peer)
    : BasicDecoder(stream, library, config, std::move(weights), &comm, options, peer) {}

template <Element T>
BasicDecoder<T>::BasicDecoder(const Stream& stream, const KernelLibrary& library, const DecoderConfig& config,
                              BasicDecoderWeights<T> weights, const Communicator* comm,
                              const TensorParallelOptions& options, const PeerExchange* peer)
    : config_(validated(config)),
      shard_(step_shape(config_, comm, stream)),
      kernels_(library, {.early_launch = config_.early_launch, .tensor_cores = config_.tensor_cores}),
      weights_(checked(std::move(weights), shard_)),
      quantized_kernels_(weights_.quantized() ? std::optional<BasicQuantizedKernels<T>>(std::in_place, library)
                                              : std::nullopt),
      state_(stream.device(), state_shape(shard_, config_)),
      paged_(config_.paged() || state_.grouped_batches
                 ? std::optional<PagedAttention<T>>(std::in_place, library, config_.early_launch, config_.tensor_cores)
                 : std::nullopt),
      io_(library, staging_with_tables(config_), DecoderIo::output_size(config_.context)),
      tables_at_(staging_input_size(config_)),
      stream_(stream.device()),
      graphs_(2 * kMaxRows),
      io_graphs_(2 * kMaxRows) {
  if (quantized_kernels_) quantized_kernels_->early_launch = config_.early_launch;
  if (comm != nullptr) {
    backend_ = make_rank_backend<T>(*comm, state_, options, peer);
  } else if (config_.backend == DecoderBackend::persistent) {
    backend_ = make_persistent_backend<T>(library, stream.device());
  } else {
    backend_ = make_graph_backend<T>();
  }
  if (config_.max_batch > kMaxRows) {
    std::string why;
    if (!wide_step_available(stream.device().compute_capability(), &why)) {
      throw UsageError("Decoder: max_batch " + std::to_string(config_.max_batch) + " runs steps of more than " +
                       std::to_string(kMaxRows) + " rows as the wide step, which does not run here: " + why);
    }
    wide_ = std::make_unique<BasicWideStep<T>>(stream_, library, config_, wide_dequantized_elements(weights_));
  }
  (void)io_graph(1);  // a decoder that cannot capture its step fails here, not at the first forward
  reset();
}

template <Element T>
const Communicator* BasicDecoder<T>::communicator() const noexcept {
  const BasicRankState<T>* rank = backend_->rank();
  return rank != nullptr ? &rank->comm : nullptr;
}

template <Element T>
bool BasicDecoder<T>::symmetric_memory() const noexcept {
  const BasicRankState<T>* rank = backend_->rank();
  return rank != nullptr && rank->symmetric_memory;
}

template <Element T>
bool BasicDecoder<T>::peer_all_reduce() const noexcept {
  const BasicRankState<T>* rank = backend_->rank();
  return rank != nullptr && rank->peer;
}

template <Element T>
BasicDecoder<T>::BasicDecoder(BasicDecoder&&) = default;
template <Element T>
BasicDecoder<T>& BasicDecoder<T>::operator=(BasicDecoder&&) = default;
template <Element T>
BasicDecoder<T>::~BasicDecoder() = default;

template <Element T>
void BasicDecoder<T>::set_sampling(const Sampling& sampling) {
  sampling.validate();
  const std::lock_guard<std::mutex> lock(*mutex_);
  sampling_ = sampling;
  io_graphs_.clear();  // a finished replay is all they may still run: run() waits for each
  graphs_.clear();
  generate_graph_.reset();
  if (wide_) wide_->forget_graphs();
  backend_->forget_sampling();
  if (prefill_) prefill_->forget_head();
}

template <Element T>
CudaGraph<>& BasicDecoder<T>::graph(int rows) {
  const std::lock_guard<std::mutex> lock(*mutex_);
  return step_graph(rows);
}

namespace {
void check_rows(int rows, int max_rows) {
  if (rows < 1 || rows > max_rows) {
    throw UsageError("Decoder::graph: rows (" + std::to_string(rows) + ") must be 1 to " + std::to_string(max_rows));
  }
}
}  // namespace

template <Element T>
const PersistentProgram& BasicDecoder<T>::persistent_program(int rows) {
  const std::lock_guard<std::mutex> lock(*mutex_);
  check_rows(rows, kMaxRows);
  return backend_->program(step_context(), rows);
}

template <Element T>
bool BasicDecoder<T>::grouped_batch(int rows) const {
  // A tensor-parallel rank's step attends through its own chain (decoder_rank.hpp), without the grouped kernels.
  if (!grouped_batches() || rows < 2 || rows > kMaxRows) return false;
  const std::span<const int> positions = io_.input().subspan(DecoderIo::positions, static_cast<std::size_t>(rows));
  return *std::max_element(positions.begin(), positions.end()) >= kGroupedBatchFrom;
}

template <Element T>
CudaGraph<>& BasicDecoder<T>::step_graph(int rows) {
  check_rows(rows, kMaxRows);
  const bool grouped = grouped_batch(rows);
  return graphs_.get(rows + (grouped ? kMaxRows : 0), [this, rows, grouped](int /*key*/) {
    return backend_->capture(step_context(grouped), rows,
                             [&](AnyOp step) { return CudaGraph<>::capture(stream_, std::move(step)); });
  });
}

template <Element T>
CudaGraph<>& BasicDecoder<T>::io_graph(int rows) {
  check_rows(rows, kMaxRows);
  const bool grouped = grouped_batch(rows);
  // The step's own nodes between the copies (not the step graph as a child: its kernels keep their early-launch
  // edges to each other exactly as captured).
  return io_graphs_.get(rows + (grouped ? kMaxRows : 0), [this, rows, grouped](int /*key*/) {
    const int r = rows;
    return backend_->capture(step_context(grouped), r, [&](AnyOp step) {
      // A paged cache's tables of the r rows, copied in with the io (the step reads them).
      std::vector<StagedUploadOp<int>> tables;
      if (config_.paged()) {
        const std::size_t n = static_cast<std::size_t>(r) * static_cast<std::size_t>(config_.kv_table_width());
        tables.push_back(io_.copy_in(state_.tables.view().subspan(0, n), tables_at_));
      }
      return CudaGraph<>::capture(
          stream_, io_.copy_in(state_.io.view()) >> chain(std::move(tables)) >> std::move(step) >>
                       io_.copy_out(state_.next.cview().subspan(0, static_cast<std::size_t>(r)), DecoderIo::next));
    });
  });
}

template <Element T>
void BasicDecoder<T>::reset() {
  const std::lock_guard<std::mutex> lock(*mutex_);
  (fill(state_.k_cache.view(), T{}) >> fill(state_.v_cache.view(), T{})).sync_on(stream_);
}

template <Element T>
void BasicDecoder<T>::set_row(int row, int token, int position, int slot) {
  const std::span<int> in = io_.input();
  const auto r = static_cast<std::size_t>(row);
  in[DecoderIo::tokens + r] = token;
  in[DecoderIo::positions + r] = position;
  in[DecoderIo::slots + r] = slot;
}

template <Element T>
void BasicDecoder<T>::set_table(int row, std::span<const int> table) {
  const auto width = static_cast<std::size_t>(config_.kv_table_width());
  const std::span<int> in = io_.input().subspan(tables_at_ + static_cast<std::size_t>(row) * width, table.size());
  std::copy(table.begin(), table.end(), in.begin());
}

template <Element T>
std::span<const int> BasicDecoder<T>::run(int rows) {
  HostIo<int, int>::run(io_graph(rows));
  backend_->check(step_context(), rows);
  last_rows_ = rows;
  logits_first_ = 0;
  route_rows_ = rows;
  wide_last_ = false;
  return io_.output().subspan(DecoderIo::next, static_cast<std::size_t>(rows));
}

template <Element T>
typename BasicDecoder<T>::Output BasicDecoder<T>::forward(Input in) {
  check_step(config_, in);
  refuse_paged(config_, "Decoder::forward", "give each row's block table to forward_batch");
  const std::lock_guard<std::mutex> lock(*mutex_);
  set_row(0, in.token, in.position, 0);
  return run(1)[0];
}

template <Element T>
std::vector<int> BasicDecoder<T>::forward_batch(std::span<const TokenAt> steps) {
  check_batch(config_, steps);
  refuse_paged(config_, "Decoder::forward_batch", "give each row's block table (forward_batch(steps, tables))");
  const std::lock_guard<std::mutex> lock(*mutex_);
  for (std::size_t r = 0; r < steps.size(); ++r) {
    set_row(static_cast<int>(r), steps[r].token, steps[r].position, static_cast<int>(r));
  }
  const std::span<const int> next = run(static_cast<int>(steps.size()));
  return {next.begin(), next.end()};
}

template <Element T>
std::vector<int> BasicDecoder<T>::forward_batch(std::span<const TokenAt> steps, std::span<const int> tables) {
  check_paged_batch(config_, steps, tables);
  const std::lock_guard<std::mutex> lock(*mutex_);
  if (steps.size() > static_cast<std::size_t>(kMaxRows)) {
    const std::span<const int> next = wide_->run(wide_context(), steps, tables);
    last_rows_ = static_cast<int>(steps.size());
    logits_first_ = 0;
    route_rows_ = 0;
    wide_last_ = true;
    return {next.begin(), next.end()};
  }
  const auto width = static_cast<std::size_t>(config_.kv_table_width());
  for (std::size_t r = 0; r < steps.size(); ++r) {
    set_row(static_cast<int>(r), steps[r].token, steps[r].position, static_cast<int>(r));
    // Only the entries up to the row's position's block: the rest is padding, never read.
    set_table(static_cast<int>(r), tables.subspan(r * width, used_entries(config_, steps[r].position)));
  }
  const std::span<const int> next = run(static_cast<int>(steps.size()));
  return {next.begin(), next.end()};
}

template <Element T>
int BasicDecoder<T>::prefill_steps(std::span<const int> prompt, std::size_t first, int start, int slot,
                                   std::span<const int> table) {
  int next = -1;
  if (!table.empty()) {  // every row of a chunk is the prompt's sequence: the same table (set once)
    for (int r = 0; r < kMaxRows; ++r) set_table(r, table);
  }
  for (; first < prompt.size(); first += kMaxRows) {
    const int rows = static_cast<int>(std::min<std::size_t>(kMaxRows, prompt.size() - first));
    for (int r = 0; r < rows; ++r) {
      const std::size_t i = first + static_cast<std::size_t>(r);
      set_row(r, prompt[i], start + static_cast<int>(i), slot);
    }
    next = run(rows)[static_cast<std::size_t>(rows - 1)];
    logits_first_ = rows - 1;  // logits() reads the last row: the prompt's last token after the last step
    last_rows_ = 1;
  }
  return next;
}

template <Element T>
std::string BasicDecoder<T>::prefill_fallback_reason() const {
  std::string why;
  (void)prefill_on_tensor_cores(config_, stream_.device().compute_capability(), &why);
  return why;
}

template <Element T>
int BasicDecoder<T>::prefill(std::span<const int> prompt, int start, int slot) {
  check_prompt(config_, prompt, start, slot);
  refuse_paged(config_, "Decoder::prefill", "give the sequence's block table (prefill(prompt, start, table))");
  const std::lock_guard<std::mutex> lock(*mutex_);
  return prefill_chunks(prompt, start, slot, {});
}

template <Element T>
int BasicDecoder<T>::prefill_chunks(std::span<const int> prompt, int start, int slot, std::span<const int> table) {
  const auto min_rows = static_cast<std::size_t>(prefill_min_rows(weights_));
  std::size_t first = 0;
  if (prompt.size() >= min_rows) {
    if (!prefill_gemm_) {
      prefill_gemm_ = prefill_fallback_reason().empty();
    }
    // The chunks on tensor cores: none when the first is below min_rows (then nothing is allocated for them).
    std::vector<int> chunks;
    if (*prefill_gemm_) chunks = prefill_chunk_rows(prompt.size(), prefill_buckets(config_));
    if (!chunks.empty() && static_cast<std::size_t>(chunks.front()) >= min_rows) {
      if (!prefill_) {
        prefill_ = std::make_unique<BasicPrefill<T>>(stream_, shard_, dequantized_elements(weights_));
      }
      // A rank's chunks run its share (shard_: config_ itself on one GPU) with the collectives between the blocks.
      const BasicPrefillContext<T> ctx{
          shard_,           kernels_,  weights_,  state_,
          stream_,          io_,       sampling_, quantized_kernels_ ? &*quantized_kernels_ : nullptr,
          backend_->rank(), tables_at_};
      if (!table.empty()) set_table(0, table);  // the chunk graphs copy row 0's table in with the chunk
      int next = -1;
      for (const int chunk : chunks) {
        const auto rows = static_cast<std::size_t>(chunk);
        if (rows < min_rows) break;  // a short rest of quantized experts: through the step's graphs
        const bool last = first + rows == prompt.size();
        next = prefill_->run(ctx, prompt.subspan(first, rows), start + static_cast<int>(first), slot, last);
        first += rows;
      }
      if (first == prompt.size()) {
        logits_first_ = 0;  // the head wrote the last row's logits to row 0
        last_rows_ = 1;
        wide_last_ = false;
        return next;
      }
    }
  }
  return prefill_steps(prompt, first, start, slot, table);
}

template <Element T>
int BasicDecoder<T>::prefill(std::span<const int> prompt, int start, std::span<const int> table, int slot) {
  check_paged_prompt(config_, prompt, start, table, slot);
  const std::lock_guard<std::mutex> lock(*mutex_);
  return prefill_chunks(prompt, start, slot, table);
}

template <Element T>
int BasicDecoder<T>::packed_prefill_rows() const {
  if (!config_.paged() || backend_->rank() != nullptr) return 0;
  if (!prefill_fallback_reason().empty()) return 0;
  return prefill_buckets(config_).back();
}

template <Element T>
int BasicDecoder<T>::packed_min_tokens() const {
  return prefill_expert_scratch(weights_) > 0 ? prefill_min_rows(weights_) : 0;
}

template <Element T>
std::vector<int> BasicDecoder<T>::prefill_packed(std::span<const PromptPart> parts) {
  const int most = packed_prefill_rows();
  if (most == 0) {
    std::string why = prefill_fallback_reason();
    if (!config_.paged()) why = "the KV cache is not paged (DecoderConfig::kv_block_size)";
    if (backend_->rank() != nullptr) why = "a tensor-parallel rank prefills one sequence at a time";
    throw UsageError("Decoder::prefill_packed: no packed chunks here: " + why);
  }
  check_packed_prompts(config_, parts, most);
  const std::lock_guard<std::mutex> lock(*mutex_);
  if (!prefill_) prefill_ = std::make_unique<BasicPrefill<T>>(stream_, shard_, dequantized_elements(weights_));
  const BasicPrefillContext<T> ctx{shard_,  kernels_,  weights_,  state_,
                                   stream_, io_,       sampling_, quantized_kernels_ ? &*quantized_kernels_ : nullptr,
                                   nullptr, tables_at_};
  std::vector<typename BasicPrefill<T>::PackedPart> packed;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    set_table(static_cast<int>(i), parts[i].table);  // the packed graph copies rows 0 .. kMaxRows - 1 in
    packed.push_back({.tokens = parts[i].tokens, .start = parts[i].start, .slot = parts[i].slot});
  }
  std::vector<int> next = prefill_->run_packed(ctx, packed);
  logits_first_ = 0;  // the head wrote part i's logits to row i
  last_rows_ = static_cast<int>(parts.size());
  wide_last_ = false;
  return next;
}

template <Element T>
std::vector<int> BasicDecoder<T>::generate(int token, int n, int stop_token, int start) {
  check_generate(config_, token, n, stop_token, start);
  refuse_paged(config_, "Decoder::generate", "step the sequence with forward_batch and its block table");
  const std::lock_guard<std::mutex> lock(*mutex_);
  if (!kernels_.loop) throw UsageError("Decoder::generate: " + kernels_.loop_unavailable);
  if (!bound_) bound_.emplace(kernels_.loop->while_guard, stream_.device(), static_cast<unsigned>(config_.context));
  if (!generate_graph_) {
    generate_graph_.emplace(backend_->capture(step_context(), 1, [&](AnyOp step) {
      return CudaGraph<>::scope(stream_, [&](Scope& sc) {
        const Condition more = sc.condition(1);
        const DeviceSpan<int> io = state_.io.view();
        // Feeds the step's token back as row 0's, one position on, and appends it to `generated` (generate.cu).
        auto advance = kernels_.loop->generate_advance(
            {{1, 1, 1}, {1, 1, 1}, 0}, more, state_.next.cview(), io.subspan(DecoderIo::tokens, kMaxRows),
            io.subspan(DecoderIo::positions, kMaxRows), state_.control(), state_.generated.view());
        sc.record(io_.copy_in(io) >> while_(more, std::move(step) >> std::move(advance), *bound_) >>
                  io_.copy_out(state_.generated.cview(), DecoderIo::generated) >>
                  io_.copy_out(state_.control().as_const(), DecoderIo::generate_control));
      });
    }));
  }
  set_row(0, token, start, 0);
  const std::span<int> control = io_.input().subspan(DecoderIo::control, DecoderIo::control_size);
  control[DecoderIo::n] = n;
  control[DecoderIo::stop] = stop_token;
  control[DecoderIo::count] = 0;
  HostIo<int, int>::run(*generate_graph_);
  backend_->check(step_context(), 1);
  last_rows_ = 1;
  logits_first_ = 0;
  route_rows_ = 1;
  wide_last_ = false;
  const std::span<const int> out = io_.output();
  const auto count = static_cast<std::size_t>(std::clamp(out[DecoderIo::generate_control + DecoderIo::count], 0, n));
  const std::span<const int> generated = out.subspan(DecoderIo::generated, count);
  return {generated.begin(), generated.end()};
}

template <Element T>
std::vector<T> BasicDecoder<T>::logits(int row) const {
  const std::lock_guard<std::mutex> lock(*mutex_);
  if (row < 0 || row >= last_rows_) {
    throw UsageError("Decoder::logits: row " + std::to_string(row) + " is outside the last step's " +
                     std::to_string(last_rows_) + " rows");
  }
  const auto n = static_cast<std::size_t>(config_.vocab);
  const auto at = static_cast<std::size_t>(logits_first_ + row);
  std::vector<T> out(n);
  copy_async(stream_, std::span<T>(out), wide_last_ ? wide_->logits(row) : state_.logits.cview().subspan(at * n, n));
  stream_.synchronize();
  return out;
}

template <Element T>
BasicWideContext<T> BasicDecoder<T>::wide_context() noexcept {
  return {config_, kernels_, weights_,  state_,
          *paged_, stream_,  sampling_, quantized_kernels_ ? &*quantized_kernels_ : nullptr};
}

template <Element T>
void BasicDecoder<T>::capture_wide_steps() {
  const std::lock_guard<std::mutex> lock(*mutex_);
  if (!wide_) {
    throw UsageError("Decoder::capture_wide_steps: max_batch (" + std::to_string(config_.max_batch) + ") is at most " +
                     std::to_string(kMaxRows) + ": every step runs on the narrow graphs");
  }
  wide_->capture_all(wide_context());
}

template <Element T>
std::vector<WideBucketReport> BasicDecoder<T>::wide_step_report() const {
  const std::lock_guard<std::mutex> lock(*mutex_);
  return wide_ ? wide_->report() : std::vector<WideBucketReport>{};
}

template <Element T>
MoeRoutes BasicDecoder<T>::last_routes() const {
  const std::lock_guard<std::mutex> lock(*mutex_);
  check_last_routes(config_, route_rows_);
  std::vector<int> ids(state_.expert_ids.size());
  std::vector<float> weights(state_.expert_weights.size());
  // Only the rows the last step routed, layer by layer: the others were never written (gather_routes reads these).
  const std::size_t routed =
      static_cast<std::size_t>(route_rows_) * static_cast<std::size_t>(config_.moe.experts_per_token);
  for (int l = 0; l < config_.layers; ++l) {
    const std::size_t at = route_offset(config_, l);
    copy_async(stream_, std::span<int>(ids).subspan(at, routed), state_.expert_ids.cview().subspan(at, routed));
    copy_async(stream_, std::span<float>(weights).subspan(at, routed),
               state_.expert_weights.cview().subspan(at, routed));
  }
  stream_.synchronize();
  return gather_routes(config_, route_rows_, ids, weights);
}

template class BasicDecoder<half>;
template class BasicDecoder<bfloat16>;

}  // namespace lazygraph::nn
