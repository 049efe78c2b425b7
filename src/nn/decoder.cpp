#include "lazygraph/nn/decoder.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "lazygraph/nn/decoder_rank.hpp"
#include "lazygraph/nn/decoder_tensors.hpp"
#include "lazygraph/nn/decoder_tiles.hpp"
#include "lazygraph/nn/prefill.hpp"
#include "lazygraph/nn/random_weights.hpp"

namespace lazygraph::nn {

void DecoderConfig::validate() const {
  const auto fail = [](const std::string& why) { throw UsageError("DecoderConfig: " + why); };
  if (d <= 0 || heads <= 0 || layers <= 0 || ffn <= 0 || vocab <= 0 || context <= 0)
    fail("every size must be positive");
  if (d % 8 != 0 || ffn % 8 != 0) fail("d and ffn must be multiples of 8 (the gemv kernels load 8 halves at a time)");
  if (head_width < 0) fail("head_width (" + std::to_string(head_width) + ") must be 0 (d / heads) or positive");
  if (head_width == 0 && d % heads != 0) {
    fail("d (" + std::to_string(d) + ") must be divisible by heads (" + std::to_string(heads) +
         ") when head_width is 0");
  }
  if (kv_heads < 0 || heads % kv_head_count() != 0) {
    fail("heads (" + std::to_string(heads) + ") must be a multiple of kv_heads (" + std::to_string(kv_heads) + ")");
  }
  if (head_dim() % 8 != 0 || head_dim() > 256) {
    fail("head_dim (" + std::to_string(head_dim()) +
         ") must be a multiple of 8 and at most 256 (the attention kernel)");
  }
  if (!std::isfinite(theta) || !(theta > 0)) fail("theta (" + std::to_string(theta) + ") must be finite and positive");
  if (!std::isfinite(eps) || !(eps > 0)) fail("eps (" + std::to_string(eps) + ") must be finite and positive");
  try {
    rope_scaling.validate();
  } catch (const UsageError& e) {
    fail(e.what());
  }
  if (qkv_bias && !fused && !qk_norm) fail("qkv_bias needs fused (the unfused kernels add no biases)");
  if (window < 0) fail("window (" + std::to_string(window) + ") must be 0 (none) or positive");
  if (!sliding.empty() && sliding.size() != static_cast<std::size_t>(layers)) {
    fail("sliding lists " + std::to_string(sliding.size()) + " layers, not layers (" + std::to_string(layers) +
         "); empty for every layer");
  }
  const auto finite_at_least = [&](float v, float least, const char* name) {
    if (!std::isfinite(v) || v < least) fail(std::string(name) + " (" + std::to_string(v) + ") is out of its range");
  };
  finite_at_least(attention_scale, 0, "attention_scale");
  finite_at_least(local_theta, 0, "local_theta");
  finite_at_least(logit_softcap, 0, "logit_softcap");
  finite_at_least(gain_offset, -1e30F, "gain_offset");
  if (!std::isfinite(embedding_scale) || !(embedding_scale > 0)) {
    fail("embedding_scale (" + std::to_string(embedding_scale) + ") must be finite and positive");
  }
  if (backend == DecoderBackend::persistent) {
    if (!fused) fail("the persistent backend runs the fused attention block (set fused)");
    if (qk_norm) fail("the persistent backend has no tiles for q/k norms (qk_norm: Qwen3); use DecoderBackend::graph");
    const auto refuse = [&](bool uses, const char* what) {
      if (uses) fail(std::string("the persistent backend has no tiles for ") + what + "; use DecoderBackend::graph");
    };
    refuse(activation != GateActivation::silu, "a GeGLU MLP (activation gelu_tanh: Gemma 3)");
    refuse(post_norms, "post-norms (Gemma 3)");
    refuse(embedding_scale != 1.0F, "a scaled embedding (Gemma 3)");
    refuse(window > 0, "sliding-window attention (window)");
    refuse(local_theta > 0, "a sliding layers' RoPE (local_theta)");
    refuse(logit_softcap > 0, "logit soft-capping (logit_softcap)");
    if (attention_splits() != 1) {
      fail("the persistent backend runs attention as one tile per head (set attention_blocks to 1, not " +
           std::to_string(attention_blocks) + ")");
    }
    if (persistent.threads < 32 || persistent.threads > 256 || persistent.threads % 32 != 0) {
      fail("persistent.threads (" + std::to_string(persistent.threads) +
           ") must be a multiple of 32 from 32 to 256 (the attention and gemv tiles take at most 8 warps)");
    }
    if (persistent_tile_rows < 0 || persistent_tile_rows % 8 != 0) {
      fail("persistent_tile_rows (" + std::to_string(persistent_tile_rows) +
           ") must be 0 (one tile per block) or a positive multiple of 8 (the gemv tiles' rows)");
    }
  }
  if (context > kMaxContext) {
    fail("context (" + std::to_string(context) + ") must be at most " + std::to_string(kMaxContext) +
         " (scores live in shared memory)");
  }
  if (max_batch < 1 || max_batch > kMaxRows) {
    fail("max_batch (" + std::to_string(max_batch) + ") must be 1 to " + std::to_string(kMaxRows));
  }
  if (attention_blocks < 0 || attention_blocks > 64) {
    fail("attention_blocks (" + std::to_string(attention_blocks) + ") must be 0 (by context) to 64");
  }
  if (prefill_chunk != 0 &&
      (prefill_chunk < 16 || prefill_chunk > 8192 || (prefill_chunk & (prefill_chunk - 1)) != 0)) {
    fail("prefill_chunk (" + std::to_string(prefill_chunk) +
         ") must be 0 (prefill on the decode step's graphs) or a power of two from 16 to 8192");
  }
}

std::vector<float> rope_table(const DecoderConfig& config) {
  const std::vector<double> f = rope_frequencies(config.theta, config.rope_scaling, config.head_dim());
  return {f.begin(), f.end()};
}

std::size_t DecoderConfig::weight_bytes() const {
  const auto dd = static_cast<std::size_t>(d);
  const auto kv = static_cast<std::size_t>(kv_dim());
  const auto qd = static_cast<std::size_t>(q_dim());
  const std::size_t per_layer = 2 * qd * dd + 2 * kv * dd + 3 * dd * static_cast<std::size_t>(ffn) + 2 * dd +
                                (qkv_bias ? qd + 2 * kv : 0) +
                                (qk_norm ? 2 * static_cast<std::size_t>(head_dim()) : 0) + (post_norms ? 2 * dd : 0);
  return (per_layer * static_cast<std::size_t>(layers) + static_cast<std::size_t>(vocab) * dd + 2 * dd) * sizeof(half);
}

template <Element T>
BasicDecoderWeights<T> BasicDecoderWeights<T>::generate(const Stream& stream, const BasicKernels<T>& kernels,
                                                        const DecoderConfig& c) {
  return assemble_decoder_weights<T>(stream.device(), c, [&](const DecoderTensor& t, DeviceSpan<T> into) {
    fill_tensor(stream, kernels.fill_uniform, c.seed, t.seeded, into);
  });
}

template <Element T>
BasicDecoderState<T>::BasicDecoderState(const Device& device, const DecoderConfig& c)
    : io(device, DecoderIo::input_size),
      generated(device, static_cast<std::size_t>(c.context)),
      next(device, kMaxRows),
      x(DeviceBuffer<T>(device, kMaxRows * static_cast<std::size_t>(c.d))),
      q(DeviceBuffer<T>(device, kMaxRows * static_cast<std::size_t>(c.q_dim()))),
      k(DeviceBuffer<T>(device, kMaxRows * static_cast<std::size_t>(c.kv_dim()))),
      v(DeviceBuffer<T>(device, kMaxRows * static_cast<std::size_t>(c.kv_dim()))),
      qkv(DeviceBuffer<T>(device, c.qk_norm ? kMaxRows * static_cast<std::size_t>(c.q_dim() + 2 * c.kv_dim()) : 0)),
      block_out(DeviceBuffer<T>(device, c.post_norms ? kMaxRows * static_cast<std::size_t>(c.d) : 0)),
      attn(DeviceBuffer<T>(device, kMaxRows * static_cast<std::size_t>(c.q_dim()))),
      act(DeviceBuffer<T>(device, kMaxRows * static_cast<std::size_t>(c.ffn))),
      logits(DeviceBuffer<T>(device, kMaxRows * static_cast<std::size_t>(c.vocab))),
      k_cache(DeviceBuffer<T>(device, static_cast<std::size_t>(c.layers) * static_cast<std::size_t>(c.max_batch) *
                                          static_cast<std::size_t>(c.context) * static_cast<std::size_t>(c.kv_dim()))),
      v_cache(DeviceBuffer<T>(device, k_cache.size())),
      attention_partials(device, static_cast<std::size_t>(kMaxRows) * static_cast<std::size_t>(c.heads) *
                                     static_cast<std::size_t>(c.attention_splits()) *
                                     static_cast<std::size_t>(c.head_dim() + 2)),
      attention_counters(device, static_cast<std::size_t>(kMaxRows) * static_cast<std::size_t>(c.heads)),
      rope_frequencies(device, static_cast<std::size_t>(c.head_dim() / 2)),
      local_rope_frequencies(device, c.local_theta > 0 ? static_cast<std::size_t>(c.head_dim() / 2) : 0),
      argmax_values(device, static_cast<std::size_t>(kMaxRows) * kArgmaxChunks),
      argmax_indices(device, static_cast<std::size_t>(kMaxRows) * kArgmaxChunks) {
  const Stream stream(device);
  // attention_split counts each (row, head)'s blocks here and leaves the counts at zero; they start there.
  fill(attention_counters.view(), 0U).sync_on(stream);
  // generate copies all of `generated` out and the host reads only the first count: zeros keep that copy from
  // reading memory nothing wrote (which compute-sanitizer's initcheck reports).
  fill(generated.view(), 0).sync_on(stream);
  const std::vector<float> table = rope_table(c);
  copy(rope_frequencies.view(), std::span<const float>(table)).sync_on(stream);
  if (c.local_theta > 0) {
    const std::vector<double> local = nn::rope_frequencies(c.local_theta, {}, c.head_dim());
    const std::vector<float> local_table(local.begin(), local.end());
    copy(local_rope_frequencies.view(), std::span<const float>(local_table)).sync_on(stream);
  }
}

namespace {
const DecoderConfig& validated(const DecoderConfig& c) {
  c.validate();
  return c;
}

/// Ints of a decoder's input staging: the step's io, then a prefill chunk's of the largest bucket.
std::size_t staging_input_size(const DecoderConfig& c) {
  const std::vector<int> buckets = prefill_buckets(c);
  return DecoderIo::prefill + (buckets.empty() ? 0 : PrefillIo::input_size(buckets.back()));
}
}  // namespace

namespace {
void check_token_at(const DecoderConfig& c, int token, int position, const std::string& what) {
  if (token < 0 || token >= c.vocab) {
    throw UsageError(what + ": token " + std::to_string(token) + " is outside the vocabulary [0, " +
                     std::to_string(c.vocab) + ")");
  }
  if (position < 0 || position >= c.context) {
    throw UsageError(what + ": position " + std::to_string(position) + " is outside the context [0, " +
                     std::to_string(c.context) + ")");
  }
}
}  // namespace

void check_step(const DecoderConfig& c, TokenAt step) {
  check_token_at(c, step.token, step.position, "Decoder::forward");
}

void check_batch(const DecoderConfig& c, std::span<const TokenAt> steps) {
  if (steps.empty() || steps.size() > static_cast<std::size_t>(c.max_batch)) {
    throw UsageError("Decoder::forward_batch: " + std::to_string(steps.size()) + " steps; give 1 to max_batch (" +
                     std::to_string(c.max_batch) + ")");
  }
  for (std::size_t r = 0; r < steps.size(); ++r) {
    check_token_at(c, steps[r].token, steps[r].position, "Decoder::forward_batch: sequence " + std::to_string(r));
  }
}

void check_generate(const DecoderConfig& c, int token, int n, int stop_token, int start) {
  const std::string what = "Decoder::generate";
  check_token_at(c, token, start, what);
  if (n < 1 || n > c.context - start) {
    throw UsageError(what + ": n (" + std::to_string(n) + ") must be 1 to the " + std::to_string(c.context - start) +
                     " positions the context has left from position " + std::to_string(start));
  }
  if (stop_token < -1 || stop_token >= c.vocab) {
    throw UsageError(what + ": stop token " + std::to_string(stop_token) + " is outside the vocabulary [0, " +
                     std::to_string(c.vocab) + ") (-1: none)");
  }
}

void check_prompt(const DecoderConfig& c, std::span<const int> prompt, int start, int slot) {
  const std::string what = "Decoder::prefill";
  if (prompt.empty()) throw UsageError(what + ": the prompt is empty");
  if (slot < 0 || slot >= c.max_batch) {
    throw UsageError(what + ": slot " + std::to_string(slot) +
                     " is outside [0, max_batch = " + std::to_string(c.max_batch) + ")");
  }
  if (start < 0 || static_cast<std::size_t>(c.context - std::min(start, c.context)) < prompt.size()) {
    throw UsageError(what + ": a prompt of " + std::to_string(prompt.size()) + " tokens from position " +
                     std::to_string(start) + " does not fit the context of " + std::to_string(c.context));
  }
  for (std::size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= c.vocab) {
      throw UsageError(what + ": prompt token " + std::to_string(i) + " (" + std::to_string(prompt[i]) +
                       ") is outside the vocabulary [0, " + std::to_string(c.vocab) + ")");
    }
  }
}

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
    const auto head_dim = static_cast<std::size_t>(c.qk_norm ? c.head_dim() : 0);
    vector(a.q_norm, head_dim, layer + "self_attn.q_norm.weight");
    vector(a.k_norm, head_dim, layer + "self_attn.k_norm.weight");
    const std::size_t post = c.post_norms ? d : 0;
    vector(a.post_gain, post, layer + "post_attention_layernorm.weight (post-norm)");
    vector(m.post_gain, post, layer + "post_feedforward_layernorm.weight");
    vector(m.gain, d, layer + (c.post_norms ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight"));
    matrix(m.w1, c.ffn, c.d, layer + "mlp.gate_proj.weight");
    matrix(m.w3, c.ffn, c.d, layer + "mlp.up_proj.weight");
    matrix(m.w2, c.d, c.ffn, layer + "mlp.down_proj.weight");
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
      io_(library, staging_input_size(config_), DecoderIo::output_size(config_.context)),
      stream_(stream.device()),
      graphs_(kMaxRows),
      io_graphs_(kMaxRows) {
  if (quantized_kernels_) quantized_kernels_->early_launch = config_.early_launch;
  if (comm != nullptr) {
    rank_ = std::make_unique<BasicRankState<T>>(*comm, state_, options);
    if (peer != nullptr) {
      if (peer->communicator() != *comm) {
        throw UsageError("Decoder: the PeerExchange given is " + peer->communicator().describe() +
                         "'s, not this rank's (" + comm->describe() + ")");
      }
      rank_->peer = *peer;
    }
  }
  if (config_.backend == DecoderBackend::persistent) {
    for (const Weight<T>* w : weights_.matrices()) {
      if (!format_traits(w->format()).persistent_tiles) {
        throw UsageError("Decoder: weight " + w->describe() + " is " + std::string(format_traits(w->format()).name) +
                         ", which the persistent backend has no tiles for; use DecoderBackend::graph");
      }
    }
    check_tensor_cores(stream.device().compute_capability());  // its projections are the tensor-core kernels'
    tiles_ = std::make_unique<const BasicDecoderTiles<T>>(library);
    programs_.resize(kMaxRows + 1);
  }
  (void)io_graph(1);  // a decoder that cannot capture its step fails here, not at the first forward
  reset();
}

template <Element T>
const Communicator* BasicDecoder<T>::communicator() const noexcept {
  return rank_ ? &rank_->comm : nullptr;
}

template <Element T>
bool BasicDecoder<T>::symmetric_memory() const noexcept {
  return rank_ && rank_->symmetric_memory;
}

template <Element T>
bool BasicDecoder<T>::peer_all_reduce() const noexcept {
  return rank_ && rank_->peer;
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
  for (auto& p : programs_) p.reset();  // their sample calls hold the old rule
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
  return program(rows);
}

template <Element T>
PersistentProgram& BasicDecoder<T>::program(int rows) {
  if (!tiles_) throw UsageError("Decoder::persistent_program: the decoder runs on DecoderBackend::graph");
  check_rows(rows, kMaxRows);
  std::optional<PersistentProgram>& p = programs_[static_cast<std::size_t>(rows)];
  if (!p) {
    const PersistentOptions& o = config_.persistent;
    const unsigned blocks =
        o.blocks != 0 ? o.blocks : static_cast<unsigned>(stream_.device().sm_count()) * o.min_blocks_per_sm;
    p.emplace(stream_, decoder_step_tiles(*tiles_, weights_, state_, config_, rows, sampling_, blocks), o);
  }
  return *p;
}

template <Element T>
template <class Make>
CudaGraph<> BasicDecoder<T>::with_step(int rows, Make make) {
  if (tiles_) return make(program(rows).op());
  if (rank_) {
    // Ranks in other processes made their graph too: compare the collectives before anything replays them.
    CollectiveLog log(rank_->comm);
    CudaGraph<> graph = make(decoder_rank_step(projector(), weights_, state_, *rank_, shard_, rows, sampling_));
    check_same_collectives(rank_->comm, stream_, log, "a graph of steps of " + std::to_string(rows) + " rows");
    return graph;
  }
  return make(step_op(rows));
}

template <Element T>
void BasicDecoder<T>::check_run(int rows) {
  if (tiles_) program(rows).check(stream_);
}

template <Element T>
CudaGraph<>& BasicDecoder<T>::step_graph(int rows) {
  check_rows(rows, kMaxRows);
  return graphs_.get(rows, [this](int r) {
    return with_step(r, [&](auto step) { return CudaGraph<>::capture(stream_, std::move(step)); });
  });
}

template <Element T>
CudaGraph<>& BasicDecoder<T>::io_graph(int rows) {
  check_rows(rows, kMaxRows);
  // The step's own nodes between the copies (not the step graph as a child: its kernels keep their early-launch
  // edges to each other exactly as captured).
  return io_graphs_.get(rows, [this](int r) {
    return with_step(r, [&](auto step) {
      return CudaGraph<>::capture(
          stream_, io_.copy_in(state_.io.view()) >> std::move(step) >>
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
std::span<const int> BasicDecoder<T>::run(int rows) {
  HostIo<int, int>::run(io_graph(rows));
  check_run(rows);
  last_rows_ = rows;
  logits_first_ = 0;
  return io_.output().subspan(DecoderIo::next, static_cast<std::size_t>(rows));
}

template <Element T>
typename BasicDecoder<T>::Output BasicDecoder<T>::forward(Input in) {
  check_step(config_, in);
  const std::lock_guard<std::mutex> lock(*mutex_);
  set_row(0, in.token, in.position, 0);
  return run(1)[0];
}

template <Element T>
std::vector<int> BasicDecoder<T>::forward_batch(std::span<const TokenAt> steps) {
  check_batch(config_, steps);
  const std::lock_guard<std::mutex> lock(*mutex_);
  for (std::size_t r = 0; r < steps.size(); ++r) {
    set_row(static_cast<int>(r), steps[r].token, steps[r].position, static_cast<int>(r));
  }
  const std::span<const int> next = run(static_cast<int>(steps.size()));
  return {next.begin(), next.end()};
}

template <Element T>
int BasicDecoder<T>::prefill_steps(std::span<const int> prompt, std::size_t first, int start, int slot) {
  int next = -1;
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
  return prefill_on_tensor_cores(config_, stream_.device().compute_capability(), &why) ? std::string() : why;
}

template <Element T>
int BasicDecoder<T>::prefill(std::span<const int> prompt, int start, int slot) {
  check_prompt(config_, prompt, start, slot);
  const std::lock_guard<std::mutex> lock(*mutex_);
  const auto min_rows = static_cast<std::size_t>(kPrefillMinRows);
  std::size_t first = 0;
  if (prompt.size() >= min_rows) {
    if (!prefill_gemm_) {
      prefill_gemm_ = prefill_on_tensor_cores(config_, stream_.device().compute_capability());
    }
    if (*prefill_gemm_) {
      if (!prefill_) {
        prefill_ = std::make_unique<BasicPrefill<T>>(stream_.device(), shard_, dequantized_elements(weights_));
      }
      // A rank's chunks run its share (shard_: config_ itself on one GPU) with the collectives between the blocks.
      const BasicPrefillContext<T> ctx{
          shard_,     kernels_, weights_,  state_,
          stream_,    io_,      sampling_, quantized_kernels_ ? &*quantized_kernels_ : nullptr,
          rank_.get()};
      int next = -1;
      for (const int chunk : prefill_chunk_rows(prompt.size(), prefill_buckets(config_))) {
        const auto rows = static_cast<std::size_t>(chunk);
        const bool last = first + rows == prompt.size();
        next = prefill_->run(ctx, prompt.subspan(first, rows), start + static_cast<int>(first), slot, last);
        first += rows;
      }
      if (first == prompt.size()) {
        logits_first_ = 0;  // the head wrote the last row's logits to row 0
        last_rows_ = 1;
        return next;
      }
    }
  }
  return prefill_steps(prompt, first, start, slot);
}

template <Element T>
std::vector<int> BasicDecoder<T>::generate(int token, int n, int stop_token, int start) {
  check_generate(config_, token, n, stop_token, start);
  const std::lock_guard<std::mutex> lock(*mutex_);
  if (!kernels_.loop) throw UsageError("Decoder::generate: " + kernels_.loop_unavailable);
  if (!bound_) bound_.emplace(kernels_.loop->while_guard, stream_.device(), static_cast<unsigned>(config_.context));
  if (!generate_graph_) {
    generate_graph_.emplace(with_step(1, [&](auto step) {
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
  check_run(1);
  last_rows_ = 1;
  logits_first_ = 0;
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
  copy_async(stream_, std::span<T>(out), state_.logits.cview().subspan(at * n, n));
  stream_.synchronize();
  return out;
}

template struct BasicDecoderWeights<half>;
template struct BasicDecoderWeights<bfloat16>;
template struct BasicDecoderState<half>;
template struct BasicDecoderState<bfloat16>;
template class BasicDecoder<half>;
template class BasicDecoder<bfloat16>;

}  // namespace lazygraph::nn
