#pragma once
/// \file
/// A Llama-style decoder (docs/nn.md gives the exact math): token embedding, layers of grouped-query attention
/// with RoPE and a KV cache plus a SwiGLU MLP, final norm, LM head and greedy or sampled choice. One decode step is an
/// op expression, captured once into a CUDA graph; the token and the position reach it through device memory, so every
/// step replays the same graph. Weights come from a seed (DecoderWeights::generate) or from a checkpoint
/// (checkpoint.hpp). Weights and activations are fp16 (`Decoder`) or bf16 (`BasicDecoder<bfloat16>`), element.hpp; the
/// matrices may be weight-only quantized instead (int8 or int4 with scales of the element type:
/// decoder_quantization.hpp), each run on its own kind of kernels.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "lazygraph/driver/peer_exchange.hpp"
#include "lazygraph/module.hpp"
#include "lazygraph/nn/detail/one_of_op.hpp"
#include "lazygraph/nn/kernels.hpp"
#include "lazygraph/nn/prefill_attention.hpp"
#include "lazygraph/nn/projection.hpp"
#include "lazygraph/nn/rope.hpp"
#include "lazygraph/nn/sampling.hpp"
#include "lazygraph/nn/swiglu.hpp"
#include "lazygraph/nn/tensor_parallel_options.hpp"

namespace lazygraph::nn {

/// Rows one step processes at most: sequences of a batch, or tokens of a prompt chunk (prefill).
inline constexpr int kMaxRows = 8;
/// The most positions a decoder's KV cache holds (DecoderConfig::context): attention keeps a row's scores in shared
/// memory.
inline constexpr int kMaxContext = 8192;
/// Chunks of the vocabulary the persistent backend's greedy choice splits each row's logits into, at most.
inline constexpr int kArgmaxChunks = 64;

/// The decoder's io layout, in ints: the one place its offsets are written down.
///
/// In: the device io buffer (BasicDecoderState::io) and the pinned input staging that each replay copies to it whole
/// hold [tokens | positions | slots | control]; row r of a step is index r of the first three. The control is
/// generate's [n, stop_token, count], which its loop kernel (generate_advance) reads and counts in. The input staging
/// holds a prefill chunk's io (PrefillIo) after that, at `prefill`, which prefill's chunk graphs copy to their own
/// device buffer (BasicPrefillBuffers::io); the step graphs copy only the first input_size ints.
///
/// Out: the pinned output staging that every graph of a decoder copies its results to holds
/// [next | control | generated]. A step's graph (forward, forward_batch, prefill) writes its rows' next tokens to
/// `next`; generate's loop graph writes its control as the loop left it to `control` (count: the tokens appended)
/// and the tokens it appended to `generated` (context ints, the first count of them meaningful).
struct DecoderIo {
  // In: BasicDecoderState::io and the input staging.
  static constexpr std::size_t tokens = 0;                           ///< the rows' tokens [kMaxRows]
  static constexpr std::size_t positions = tokens + kMaxRows;        ///< the rows' positions [kMaxRows]
  static constexpr std::size_t slots = positions + kMaxRows;         ///< the rows' sequence slots [kMaxRows]
  static constexpr std::size_t control = slots + kMaxRows;           ///< generate's control [n, stop_token, count]
  static constexpr std::size_t control_size = 3;                     ///< ints of a control
  static constexpr std::size_t input_size = control + control_size;  ///< ints in (the step's: BasicDecoderState::io)
  static constexpr std::size_t prefill = input_size;  ///< where the input staging holds a prefill chunk's PrefillIo

  // A control's fields, from its start.
  static constexpr std::size_t n = 0;      ///< tokens generate may append
  static constexpr std::size_t stop = 1;   ///< the stop token, -1 for none
  static constexpr std::size_t count = 2;  ///< tokens appended so far

  // Out: the output staging.
  static constexpr std::size_t next = 0;                                     ///< a step's next tokens [kMaxRows]
  static constexpr std::size_t generate_control = next + kMaxRows;           ///< generate's control after its loop
  static constexpr std::size_t generated = generate_control + control_size;  ///< generate's tokens [context]
  /// Ints out for a decoder of `context` positions.
  [[nodiscard]] static constexpr std::size_t output_size(int context) noexcept {
    return generated + static_cast<std::size_t>(context);
  }
};

/// The io of a prefill chunk on tensor cores (nn/prefill.hpp), in ints: [start | rows | slot | last_position | tokens],
/// the first three as flash attention and the prefill kernels read them (PrefillChunkLayout), last_position (start +
/// rows - 1) as the sampler reads the last row's position, then the chunk's tokens (token 0 in the bucket's padding).
/// The decoder's input staging holds it at DecoderIo::prefill; each chunk graph copies it, up to its bucket's tokens,
/// to BasicPrefillBuffers::io, and the head graph writes the next token to DecoderIo::next of the output staging.
struct PrefillIo {
  static constexpr std::size_t start = PrefillChunkLayout::start;         ///< the chunk's first position
  static constexpr std::size_t rows = PrefillChunkLayout::rows;           ///< its rows (tokens)
  static constexpr std::size_t slot = PrefillChunkLayout::slot;           ///< its sequence slot
  static constexpr std::size_t last_position = PrefillChunkLayout::size;  ///< start + rows - 1
  static constexpr std::size_t tokens = last_position + 1;                ///< the tokens [rows of the bucket]
  /// Ints of the io of a chunk of up to `rows` rows.
  [[nodiscard]] static constexpr std::size_t input_size(int rows) noexcept {
    return tokens + static_cast<std::size_t>(rows > 0 ? rows : 0);
  }
};

/// Ints of the io buffer: DecoderIo::input_size (tokens, positions and slots, kMaxRows each, then generate's control).
inline constexpr int kIoSize = static_cast<int>(DecoderIo::input_size);

/// How the unfused attention block (DecoderConfig::fused false) orders its three projections, RoPE, the cache append
/// and attention. The results are the same; the graphs differ.
enum class DecoderOrdering {
  inferred,      ///< dataflow(...): the graph's branches follow from what the kernels read and write
  hand_written,  ///< all(q, k, v) >> rope >> kv_append >> attention, the branches written by hand
  serial,        ///< one kernel after another
};

/// What runs a decode step (DecoderConfig::backend).
enum class DecoderBackend {
  /// A CUDA graph of the step's kernels (decoder_step), launched early one after another: the default.
  graph,
  /// ONE persistent kernel per step (kernels/persistent_program.hpp), the same kernels' code run as tiles that wait on
  /// counters instead of kernel boundaries (decoder_tiles.hpp). Dense weights, the fused attention block, one
  /// attention block per head, an sm_80 or newer GPU; its results equal the graph backend's within rounding
  /// (decoder_tiles.hpp says where they differ). docs/persistent.md has its measurements.
  persistent,
};

/// The decoder's shape. The defaults are the small model of docs/nn.md.
struct DecoderConfig {
  int d = 512;                ///< model width (the residual stream)
  int heads = 8;              ///< query heads
  int head_width = 0;         ///< per-head width (Hugging Face's head_dim); 0 means d / heads
  int kv_heads = 0;           ///< key/value heads (grouped-query attention); 0 means `heads`
  int layers = 8;             ///< decoder layers
  int ffn = 1536;             ///< MLP width
  int vocab = 4096;           ///< vocabulary size
  int context = 1024;         ///< positions the KV cache holds per sequence
  int max_batch = 1;          ///< sequences decoded at once (1 to 8); the KV cache holds this many
  float theta = 10000.0F;     ///< RoPE base
  RopeScaling rope_scaling;   ///< RoPE frequency rule (rope.hpp): the plain one by default, or linear or llama3
  float eps = 1e-5F;          ///< RMSNorm epsilon
  std::uint32_t seed = 1234;  ///< seed of the generated weights (DecoderWeights::generate)
  bool early_launch = true;   ///< launch the kernels early (Kernels::step_config); false to compare
  /// Run the projections of steps of 2 to 8 rows on tensor cores (KernelOptions::tensor_cores): faster batches and
  /// prefill, but a row's logits then differ from what it gets alone within rounding (its token may too, at a
  /// near tie). Off: every row gets exactly the bits of one row at a time.
  bool tensor_cores = false;
  /// The q, k and v projections add biases (Qwen2's): BasicAttentionWeights::bias holds them. Needs `fused` (the
  /// unfused kernels have none).
  bool qkv_bias = false;
  /// Each head of q and of k is RMS-normed with a gain of its own ([head_dim], shared by the heads) before RoPE
  /// (Qwen3's q_norm and k_norm): BasicAttentionWeights::q_norm and k_norm hold the gains. The step then projects the
  /// stacked q, k and v (norm_project) and norms, rotates and appends them in a second kernel (qk_norm_rope_append),
  /// whatever `fused` says; the persistent backend does not run it.
  bool qk_norm = false;
  /// The MLP's gate: silu (SwiGLU) or gelu_tanh (GeGLU, Gemma 3's).
  GateActivation activation = GateActivation::silu;
  /// Gemma 3's four norms a layer: the attention block's and the MLP's outputs are RMS-normed again (their gains:
  /// BasicAttentionWeights::post_gain, BasicSwigluWeights::post_gain) before their residual adds.
  bool post_norms = false;
  /// The embedded rows are multiplied by this, rounded to the element type first (Gemma 3: sqrt(d)); 1: not.
  float embedding_scale = 1;
  /// The attention scores' scale; 0: 1 / sqrt(head_dim) (Gemma 3: query_pre_attn_scalar^-1/2).
  float attention_scale = 0;
  /// The attention window of the sliding layers: a row attends the `window` positions up to its own; 0: none.
  int window = 0;
  /// Per layer, whether it is a sliding layer (the window; local_theta's RoPE); empty: every layer.
  std::vector<bool> sliding;
  /// The RoPE base of the sliding layers (the plain rule, unscaled); 0: theta and rope_scaling, as the other layers.
  float local_theta = 0;
  /// Final logit soft-capping, logits = tanh(logits / cap) * cap; 0: none.
  float logit_softcap = 0;
  /// The offset a checkpoint's norm weights are stored with: they mean gain_offset + w (Gemma 3: 1). Only loading and
  /// saving use it; the decoder's gains are the sums.
  float gain_offset =
      0;  /// The attention block's input side as one kernel (norm, Q/K/V projections, RoPE and the cache append:
  /// qkv_rope_append) and attention split over positions (attention_split). False: the kernels these replaced
  /// (three rms_norm_gemv in parallel, rope, kv_append, attention with one block per head), to compare.
  bool fused = true;
  /// How the unfused path orders its kernels (DecoderOrdering; the fused path is one chain).
  DecoderOrdering ordering = DecoderOrdering::inferred;
  /// The most prompt rows prefill runs through the layers at once on tensor cores (cuBLASLt GEMMs and flash attention,
  /// nn/prefill.hpp): a power of two from 16 to 8192, or 0 to run prompts through the decode step's graphs, kMaxRows
  /// rows at a time (bit for bit what feeding the prompt one token at a time gives). A prompt is cut into chunks of
  /// at most this many rows (nn::prefill_chunk_rows); a chunk of 16 rows or more runs in the graph of the smallest
  /// bucket (16, 32, 64, ...) that holds it, a rest below 16 through the decode step's graphs. Buffers for the largest
  /// bucket (it or the context, whichever is less) are allocated at the first prefill, not before: about 80 MiB for
  /// 2048 rows of a TinyLlama shape in fp16 (nn/prefill.hpp). Larger chunks run faster (their GEMMs and attention
  /// fill the GPU better: on an H100 a 2048-token prompt of the TinyLlama shape ran about 1.4x faster in one chunk
  /// than in four of 512). Used only where head_dim is 64 or 128, the GPU is sm_80 or newer and cuBLASLt loads
  /// (prefill_on_tensor_cores); elsewhere prefill takes the decode step's graphs.
  int prefill_chunk = 2048;
  /// Blocks per (row, head) of the fused path's attention, at most 64; 0 picks by context (attention_splits). The
  /// default is one: on the H100 at position 255 of a 1024 context, spreading the 8 heads of the default decoder
  /// over 32 blocks each made the step slower (192 vs 170 us), the combine of the partials costing more than the
  /// positions it shares out.
  int attention_blocks = 1;
  /// What runs a step: a CUDA graph of kernels, or one persistent kernel (DecoderBackend). Prefill on tensor cores
  /// (prefill_chunk) is the same for both; the rest of a prompt runs on the step's backend.
  DecoderBackend backend = DecoderBackend::graph;
  /// How the persistent backend's kernel runs (PersistentOptions): threads 32 to 256 (the attention and gemv tiles
  /// take at most 8 warps), the wait timeout after which a step throws TimeoutError instead of hanging, profiling.
  /// Two blocks per multiprocessor by default: on the H100 the TinyLlama and Llama-3.2-1B shapes' steps took 6-9 %
  /// less time than with one, the default decoder's 17 % (more weight loads in flight; docs/persistent.md).
  PersistentOptions persistent{.min_blocks_per_sm = 2};
  /// Weight rows per tile of the persistent backend's projections: 0 spreads each projection over the kernel's blocks,
  /// one tile per block (a tile then prefetches all of its rows into L2 before its wait, as an early-launched
  /// kernel's blocks do, and waits once per projection); a positive multiple of 8, that many rows per tile.
  int persistent_tile_rows = 0;

  /// Whether layer `layer` is a sliding layer (see `sliding`).
  [[nodiscard]] bool sliding_layer(int layer) const noexcept {
    return sliding.empty() ? true : sliding[static_cast<std::size_t>(layer)];
  }
  /// The attention window of layer `layer`: `window` on a sliding layer, else 0 (none).
  [[nodiscard]] int layer_window(int layer) const noexcept { return sliding_layer(layer) ? window : 0; }
  /// Whether layer `layer` takes local_theta's RoPE table.
  [[nodiscard]] bool local_rope(int layer) const noexcept { return local_theta > 0 && sliding_layer(layer); }
  /// The scores' scale: attention_scale, or 1 / sqrt(head_dim) when that is 0.
  [[nodiscard]] float score_scale() const noexcept {
    return attention_scale > 0 ? attention_scale : 1.0F / std::sqrt(static_cast<float>(head_dim()));
  }
  /// head_width, or d / heads when that is 0.
  [[nodiscard]] int head_dim() const noexcept { return head_width > 0 ? head_width : (heads > 0 ? d / heads : 0); }
  /// Width of q and of the attention output: heads * head_dim() (d unless head_width says otherwise).
  [[nodiscard]] int q_dim() const noexcept { return heads * head_dim(); }
  /// The key/value head count: kv_heads, or heads when kv_heads is 0.
  [[nodiscard]] int kv_head_count() const noexcept { return kv_heads > 0 ? kv_heads : heads; }
  /// Width of k and v: kv_head_count() * head_dim().
  [[nodiscard]] int kv_dim() const noexcept { return kv_head_count() * head_dim(); }
  /// \throws UsageError for shapes the kernels cannot run: d and ffn multiples of 8, d divisible by
  /// heads when head_width is 0, head_dim a multiple of 8 and at most 256, heads a multiple of kv_heads, context at
  /// most 8192 (kMaxContext), max_batch at most 8 (kMaxRows), every count positive, a finite positive theta, an invalid
  /// rope_scaling, a prefill_chunk that is neither 0 nor a power of two from 16 to 8192; with the persistent backend,
  /// an unfused attention block, attention over more than one block per head, persistent.threads outside 32..256, or a
  /// persistent_tile_rows that is neither 0 nor a positive multiple of 8.
  void validate() const;
  /// Bytes of weights one step reads (all matrices and gains, plus one embedding row).
  [[nodiscard]] std::size_t weight_bytes() const;
  /// Blocks each (row, head) of attention is spread over: attention_blocks, or when that is 0 one per 32 positions of
  /// the context, 1 to 64. 1 runs the kernel of one block per head (attention), more attention_split.
  [[nodiscard]] int attention_splits() const noexcept {
    return attention_blocks > 0 ? attention_blocks : std::clamp((context + 31) / 32, 1, 64);
  }
};

/// The RoPE table the decoder's kernels read: rope_frequencies(theta, rope_scaling, head_dim()) rounded to float.
/// \throws UsageError as rope_frequencies does.
[[nodiscard]] std::vector<float> rope_table(const DecoderConfig& config);

/// One layer's attention weights: norm gain [d]; Wq [q_dim x d], Wk and Wv [kv_dim x d] as ONE stacked matrix `qkv`
/// (rows q, then k, then v: one stream of weight rows for the kernel that projects all three, one GEMM for prompts), in
/// any format (weight.hpp); Wo [d x q_dim]; with DecoderConfig::qkv_bias the biases of q, k and v stacked the same way.
/// The rows of q and k (and their biases) are in the decoder's interleaved RoPE order (decoder_tensors.hpp).
template <Element T>
struct BasicAttentionWeights {
  DeviceBuffer<T> gain;       ///< input norm gain [d]
  Weight<T> qkv;              ///< [q_dim + 2 kv_dim x d]: Wq, Wk, Wv stacked; wq(), wk() and wv() view the parts
  Weight<T> wo;               ///< [d x q_dim]
  DeviceBuffer<T> bias;       ///< [q_dim + 2 kv_dim]: bq, bk, bv stacked with qkv_bias, else empty
  DeviceBuffer<T> q_norm;     ///< q's per-head RMSNorm gain [head_dim] with DecoderConfig::qk_norm, else empty
  DeviceBuffer<T> k_norm;     ///< k's per-head RMSNorm gain [head_dim] with DecoderConfig::qk_norm, else empty
  DeviceBuffer<T> post_gain;  ///< the output's RMSNorm gain [d] with DecoderConfig::post_norms, else empty

  /// Wq [q_dim x d]: the first q_dim rows of qkv. \throws UsageError as Weight::rows_view.
  [[nodiscard]] Weight<T> wq(const DecoderConfig& c) const { return qkv.rows_view(0, c.q_dim()); }
  /// Wk [kv_dim x d]: qkv's rows from q_dim on. \throws UsageError as Weight::rows_view.
  [[nodiscard]] Weight<T> wk(const DecoderConfig& c) const { return qkv.rows_view(c.q_dim(), c.kv_dim()); }
  /// Wv [kv_dim x d]: qkv's last kv_dim rows. \throws UsageError as Weight::rows_view.
  [[nodiscard]] Weight<T> wv(const DecoderConfig& c) const { return qkv.rows_view(c.q_dim() + c.kv_dim(), c.kv_dim()); }
  /// Part `part` (0 q, 1 k, 2 v) of the stacked biases; empty without biases.
  [[nodiscard]] DeviceSpan<const T> bias_part(const DecoderConfig& c, int part) const {
    if (bias.empty()) return {};
    const auto q = static_cast<std::size_t>(c.q_dim());
    const auto kv = static_cast<std::size_t>(c.kv_dim());
    return part == 0 ? bias.cview().subspan(0, q) : bias.cview().subspan(q + (part - 1) * kv, kv);
  }

  /// Whether any projection is quantized.
  [[nodiscard]] bool quantized() const noexcept { return !qkv.is_dense() || !wo.is_dense(); }
};

/// One layer's fp16 attention weights.
using AttentionWeights = BasicAttentionWeights<half>;

/// Every weight of a decoder, on the device. The matrices of attention, mlp and the LM head are each in any format
/// the projections read (weight.hpp; decoder_quantization.hpp makes quantized ones); the embedding and the norm gains
/// are always in T. A tied LM head shares the embedding's memory.
template <Element T>
struct BasicDecoderWeights {
  DeviceBuffer<T> embedding;                        ///< [vocab x d]
  std::vector<BasicAttentionWeights<T>> attention;  ///< per layer
  std::vector<BasicSwigluWeights<T>> mlp;           ///< per layer
  DeviceBuffer<T> final_gain;                       ///< [d]
  Weight<T> lm_head;                                ///< [vocab x d]

  /// Generates every tensor on the GPU from config.seed (docs/nn.md's tensor ids), dense.
  static BasicDecoderWeights generate(const Stream& stream, const BasicKernels<T>& kernels,
                                      const DecoderConfig& config);

  /// Every weight matrix, in the order the decoder holds them: per layer qkv, wo, w1, w3, w2; then the LM head.
  [[nodiscard]] std::vector<const Weight<T>*> matrices() const {
    std::vector<const Weight<T>*> out;
    out.reserve(attention.size() * 5 + 1);
    for (std::size_t l = 0; l < attention.size() && l < mlp.size(); ++l) {
      out.insert(out.end(), {&attention[l].qkv, &attention[l].wo, &mlp[l].w1, &mlp[l].w3, &mlp[l].w2});
    }
    out.push_back(&lm_head);
    return out;
  }

  /// Whether any matrix is quantized (the decoder then needs the quantized kernels: BasicQuantizedKernels).
  [[nodiscard]] bool quantized() const {
    const std::vector<const Weight<T>*> all = matrices();
    return std::any_of(all.begin(), all.end(), [](const Weight<T>* w) { return !w->is_dense(); });
  }
};

/// Every weight of an fp16 decoder.
using DecoderWeights = BasicDecoderWeights<half>;

/// The device memory one step reads and writes besides the weights. A step processes `rows` rows (1 to kMaxRows):
/// row r is token tokens[r] of sequence slots[r] at position positions[r]. Activations hold kMaxRows rows.
template <Element T>
struct BasicDecoderState {
  /// Allocates every buffer for `config`, uninitialised but for rope_frequencies (rope_frequencies() of the config)
  /// and attention_counters (zero), which it writes and waits for.
  BasicDecoderState(const Device& device, const DecoderConfig& config);

  DeviceBuffer<int> io;         ///< [tokens | positions | slots | control] (DecoderIo): copied in before each replay
  DeviceBuffer<int> generated;  ///< the tokens Decoder::generate's loop appends [context]
  DeviceBuffer<int> next;       ///< the chosen next token of each row [kMaxRows]
  DeviceBuffer<T> x;            ///< residual streams [kMaxRows][d]
  DeviceBuffer<T> q;            ///< [kMaxRows][q_dim]
  DeviceBuffer<T> k;            ///< [kMaxRows][kv_dim] (the unfused path only)
  DeviceBuffer<T> v;            ///< [kMaxRows][kv_dim] (likewise)
  DeviceBuffer<T> qkv;          ///< the stacked q, k and v projections [kMaxRows][q_dim + 2 kv_dim] (qk_norm only)
  DeviceBuffer<T> block_out;    ///< a block's output before its post-norm [kMaxRows][d] (post_norms only)
  DeviceBuffer<T> attn;         ///< attention outputs [kMaxRows][q_dim]
  DeviceBuffer<T> act;          ///< MLP activations [kMaxRows][ffn]
  DeviceBuffer<T> logits;       ///< [kMaxRows][vocab]
  DeviceBuffer<T> k_cache;      ///< [layers][max_batch][kv_heads][context][head_dim]
  DeviceBuffer<T> v_cache;      ///< like k_cache
  DeviceBuffer<float> attention_partials;      ///< attention_split's [kMaxRows][heads][splits][head_dim + 2]
  DeviceBuffer<unsigned> attention_counters;   ///< attention_split's [kMaxRows][heads], zero between steps
  DeviceBuffer<float> rope_frequencies;        ///< RoPE's inverse frequency per pair of a head [head_dim / 2]
  DeviceBuffer<float> local_rope_frequencies;  ///< the sliding layers' (DecoderConfig::local_theta), else empty
  /// The persistent backend's greedy choice: each row's best logit and its index per chunk of the vocabulary
  /// [kMaxRows][kArgmaxChunks] (decoder_tiles.hpp).
  DeviceBuffer<float> argmax_values;
  DeviceBuffer<int> argmax_indices;  ///< see argmax_values

  /// The rows' tokens, as the graph reads them.
  [[nodiscard]] DeviceSpan<const int> tokens() const { return io.cview().subspan(DecoderIo::tokens, kMaxRows); }
  /// The rows' positions.
  [[nodiscard]] DeviceSpan<const int> positions() const { return io.cview().subspan(DecoderIo::positions, kMaxRows); }
  /// The rows' sequence slots (which KV cache each row reads and appends to).
  [[nodiscard]] DeviceSpan<const int> slots() const { return io.cview().subspan(DecoderIo::slots, kMaxRows); }
  /// generate's control: [n, stop_token, count].
  [[nodiscard]] DeviceSpan<int> control() { return io.view().subspan(DecoderIo::control, DecoderIo::control_size); }
};

/// The step memory of an fp16 decoder.
using DecoderState = BasicDecoderState<half>;

/// attention_block up to its output projection: the norm, the q, k and v projections, RoPE, the cache append and
/// attention, into s.attn ([rows][q_dim]); x is read, not written. Fused (DecoderConfig::fused, the default): the norm,
/// the three projections of the stacked weight, RoPE and the cache append in one kernel (norm_project_qkv_rope_append),
/// then attention, each head spread over attention_splits() blocks of positions. With q/k norms
/// (DecoderConfig::qk_norm, whatever `fused` says): the norm and the stacked projection into s.qkv (norm_project), then
/// the heads' norms, RoPE and the cache append (qk_norm_rope_append), then attention as the fused path runs it.
/// Unfused: three norm_project of the stacked weight's parts, rope, kv_append, attention with one block per head,
/// ordered as DecoderConfig::ordering says. Only the chosen path is built. A tensor-parallel rank follows it with an
/// output projection of its own (decoder_rank.hpp). Layer `layer`'s window and RoPE table (DecoderConfig::sliding)
/// and the config's score scale. \throws UsageError as the projections (projection.hpp).
template <Element T>
auto attention_heads(const Projector<T>& p, const BasicAttentionWeights<T>& w, BasicDecoderState<T>& s,
                     DeviceSpan<T> k_cache, DeviceSpan<T> v_cache, const DecoderConfig& c, int rows, int layer = 0) {
  const BasicKernels<T>& k = p.dense;
  const int d = c.d;
  const float scale = c.score_scale();
  const int window = c.layer_window(layer);
  const LaunchConfig per_head = k.attention_config(c.heads, rows, c.context);
  const int q_dim = c.q_dim();
  const DeviceSpan<const float> frequencies =
      c.local_rope(layer) ? s.local_rope_frequencies.cview() : s.rope_frequencies.cview();
  // Attention over the cache, each head over attention_splits() blocks of positions (the fused paths').
  const auto attend = [&] {
    const LaunchConfig per_split =
        k.attention_split_config(c.heads, rows, c.context, c.attention_splits(), c.head_dim());
    return choose(
        c.attention_splits() > 1,
        k.attention_split(per_split, s.q.cview(), k_cache.as_const(), v_cache.as_const(), s.attn.view(),
                          s.attention_partials.view(), s.attention_counters.view(), s.positions(), s.slots(), c.heads,
                          c.kv_head_count(), c.head_dim(), c.context, c.max_batch, scale, window),
        k.attention(per_head, s.q.cview(), k_cache.as_const(), v_cache.as_const(), s.attn.view(), s.positions(),
                    s.slots(), c.heads, c.kv_head_count(), c.head_dim(), c.context, c.max_batch, scale, window));
  };
  const auto normed = [&] {
    const int qkv_rows = q_dim + 2 * c.kv_dim();
    const auto count = static_cast<std::size_t>(rows);
    return norm_project(p, w.qkv, s.x.cview(), w.gain.cview(),
                        s.qkv.view().subspan(0, count * static_cast<std::size_t>(qkv_rows)), qkv_rows, d, c.eps,
                        rows) >>
           k.qk_norm_rope_append(k.qk_norm_config(c.heads, c.kv_head_count(), c.head_dim(), rows), s.qkv.cview(),
                                 w.bias.cview(), w.q_norm.cview(), w.k_norm.cview(), s.q.view(), k_cache, v_cache,
                                 s.positions(), s.slots(), c.heads, c.kv_head_count(), c.head_dim(), c.context,
                                 c.max_batch, frequencies, c.eps, rows) >>
           attend();
  };
  const auto fused = [&] {
    const QkvRopeAppend<T> args{.x = s.x.cview(),
                                .gain = w.gain.cview(),
                                .bias = w.bias.cview(),
                                .q = s.q.view(),
                                .k_cache = k_cache,
                                .v_cache = v_cache,
                                .positions = s.positions(),
                                .slots = s.slots(),
                                .frequencies = frequencies,
                                .d = d,
                                .q_rows = q_dim,
                                .kv_heads = c.kv_head_count(),
                                .head_dim = c.head_dim(),
                                .context = c.context,
                                .slot_count = c.max_batch,
                                .eps = c.eps,
                                .batch = rows};
    return norm_project_qkv_rope_append(p, w.qkv, args) >> attend();
  };
  const auto unfused = [&] {
    const auto project = [&](const Weight<T>& weight, DeviceBuffer<T>& out, int out_rows) {
      return norm_project(p, weight, s.x.cview(), w.gain.cview(), out.view(), out_rows, d, c.eps, rows);
    };
    const auto count = static_cast<std::size_t>(rows);
    auto q = project(w.wq(c), s.q, q_dim);
    auto kp = project(w.wk(c), s.k, c.kv_dim());
    auto v = project(w.wv(c), s.v, c.kv_dim());
    auto rope = k.rope(k.step_config(grid_for(count * static_cast<std::size_t>(q_dim), 256)), s.q.view(), s.k.view(),
                       s.positions(), c.heads, c.kv_head_count(), c.head_dim(), frequencies, rows);
    auto append = k.kv_append(k.step_config(grid_for(count * static_cast<std::size_t>(c.kv_dim()), 256)), s.k.cview(),
                              s.v.cview(), k_cache, v_cache, s.positions(), s.slots(), c.kv_head_count(), c.head_dim(),
                              c.context, c.max_batch, rows);
    auto attend =
        k.attention(per_head, s.q.cview(), k_cache.as_const(), v_cache.as_const(), s.attn.view(), s.positions(),
                    s.slots(), c.heads, c.kv_head_count(), c.head_dim(), c.context, c.max_batch, scale, window);
    // The same kernels three ways (DecoderOrdering): ordered by their accesses, by a hand-written all, serially.
    return choose(c.ordering == DecoderOrdering::inferred, dataflow(q, kp, v, rope, append, attend),
                  choose(c.ordering == DecoderOrdering::hand_written, all(q, kp, v) >> rope >> append >> attend,
                         q >> kp >> v >> rope >> append >> attend));
  };
  return detail::either(c.qk_norm, normed, [&] { return detail::either(c.fused, fused, unfused); });
}

/// A block's output into the residual stream, for `rows` rows of `d`: without post-norms (DecoderConfig::post_norms)
/// `project` writes it there itself (x += W a); with them it writes into s.block_out, and rms_norm_add adds its
/// RMSNorm with `post_gain` to x (Gemma 3's post-attention and post-feedforward norms). `project(out, add)` makes the
/// projection into `out`, adding to it when `add`.
template <Element T, class Project>
auto block_output(const BasicKernels<T>& k, BasicDecoderState<T>& s, const DecoderConfig& c,
                  const DeviceBuffer<T>& post_gain, int rows, Project project) {
  const auto n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(c.d);
  return detail::either(
      c.post_norms,
      [&] {
        return project(s.block_out.view().subspan(0, n), false) >>
               k.rms_norm_add(k.step_config({{static_cast<unsigned>(rows), 1, 1}, {256, 1, 1}, 0}), s.block_out.cview(),
                              post_gain.cview(), s.x.view(), c.d, c.eps);
      },
      [&] { return project(s.x.view(), true); });
}

/// x += Wo attention(rope(Wq h), rope(Wk h), Wv h), h = rmsnorm(x) * gain, for `rows` rows, appending each row's
/// k and v to its sequence's cache in this layer: attention_heads, then the output projection with the residual add
/// (with post-norms, block_output's). Every projection reads its weights once for all rows, on the kernels of its
/// format (projection.hpp). `residual` false (a tensor-parallel rank other than 0, whose partial sum an all-reduce adds
/// to rank 0's): the output projection overwrites x instead of adding to it. \throws UsageError as attention_heads and
/// project().
template <Element T>
auto attention_block(const Projector<T>& p, const BasicAttentionWeights<T>& w, BasicDecoderState<T>& s,
                     DeviceSpan<T> k_cache, DeviceSpan<T> v_cache, const DecoderConfig& c, int rows,
                     bool residual = true, int layer = 0) {
  return attention_heads(p, w, s, k_cache, v_cache, c, rows, layer) >>
         block_output(p.dense, s, c, w.post_gain, rows, [&](DeviceSpan<T> out, bool add) {
           return project(p, w.wo, s.attn.cview(), out, c.d, c.q_dim(), rows, add && residual);
         });
}

/// The MLP block of a decoder layer: swiglu_gate_up with the config's gate (SwiGLU or GeGLU), then the down
/// projection into the residual stream (with post-norms, block_output's). \throws UsageError as swiglu_gate_up and
/// project().
template <Element T>
auto mlp_block(const Projector<T>& p, const BasicSwigluWeights<T>& w, BasicDecoderState<T>& s, const DecoderConfig& c,
               int rows) {
  return swiglu_gate_up(p, w, s.x.cview(), s.act.view(), c.d, c.ffn, c.eps, rows, c.activation) >>
         block_output(p.dense, s, c, w.post_gain, rows, [&](DeviceSpan<T> out, bool add) {
           return project(p, w.w2, s.act.cview(), out, c.d, c.ffn, rows, add);
         });
}

/// One decoder layer for `rows` rows: attention block, then the MLP block. \throws UsageError as attention_block and
/// mlp_block.
template <Element T>
auto decoder_layer(const Projector<T>& p, const BasicDecoderWeights<T>& w, BasicDecoderState<T>& s, int layer,
                   const DecoderConfig& c, int rows) {
  const std::size_t cache_size = static_cast<std::size_t>(c.max_batch) * static_cast<std::size_t>(c.context) *
                                 static_cast<std::size_t>(c.kv_dim());
  const std::size_t offset = static_cast<std::size_t>(layer) * cache_size;
  const auto l = static_cast<std::size_t>(layer);
  const std::string name = "layer " + std::to_string(layer);
  return named(name + " attention",
               attention_block(p, w.attention[l], s, s.k_cache.view().subspan(offset, cache_size),
                               s.v_cache.view().subspan(offset, cache_size), c, rows, true, layer)) >>
         named(name + " mlp", mlp_block(p, w.mlp[l], s, c, rows));
}

/// The op type of one decoder layer (decoder_layer), for holding layers in a vector.
template <Element T>
using BasicDecoderLayerOp =
    decltype(decoder_layer(std::declval<const Projector<T>&>(), std::declval<const BasicDecoderWeights<T>&>(),
                           std::declval<BasicDecoderState<T>&>(), 0, std::declval<const DecoderConfig&>(), 1));
/// The op type of one fp16 decoder layer.
using DecoderLayerOp = BasicDecoderLayerOp<half>;

/// The LM head's logits of `rows` rows, [rows][vocab], into `logits`: the final norm and the head in one kernel
/// (norm_project); reads x and the final gain. With `softcap` (DecoderConfig::logit_softcap) above 0, each logit is
/// then soft-capped, tanh(logit / softcap) * softcap. \throws UsageError as norm_project.
template <Element T>
auto lm_head_logits(const Projector<T>& p, const BasicDecoderWeights<T>& w, DeviceSpan<const T> x, DeviceSpan<T> logits,
                    int vocab, int d, float eps, int rows, float softcap = 0) {
  const auto n = static_cast<long long>(rows) * vocab;
  const BasicKernels<T>& k = p.dense;
  std::vector<decltype(k.softcap(LaunchConfig{}, logits, n, softcap))> capped;
  if (softcap > 0)
    capped.push_back(k.softcap(k.step_config(grid_for(static_cast<std::size_t>(n), 256)), logits, n, softcap));
  return norm_project(p, w.lm_head, x, w.final_gain.cview(), logits, vocab, d, eps, rows) >> chain(std::move(capped));
}

/// The embedding of a step's `rows` rows into x (s.tokens' rows of the table), scaled by DecoderConfig::
/// embedding_scale (rounded to T first) where it is not 1.
template <Element T>
auto embed(const BasicKernels<T>& k, const BasicDecoderWeights<T>& w, BasicDecoderState<T>& s, const DecoderConfig& c,
           int rows) {
  const auto n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(c.d);
  std::vector<decltype(k.scale(LaunchConfig{}, s.x.view(), 0LL, 0.0F))> scaled;
  if (c.embedding_scale != 1.0F) {
    scaled.push_back(k.scale(k.step_config(grid_for(n, 256)), s.x.view(), static_cast<long long>(n),
                             T::from_float(c.embedding_scale).to_float()));
  }
  return k.embedding(k.step_config(grid_for(n, 256)), w.embedding.cview(), s.tokens(), s.x.view(), c.d, rows) >>
         chain(std::move(scaled));
}

/// One decode step of `rows` rows: reads tokens, positions and slots from s.io, writes each row's logits and next
/// token (greedy, or drawn as `sampling` says). \throws UsageError as decoder_layer and lm_head_logits.
template <Element T>
auto decoder_step(const Projector<T>& p, const BasicDecoderWeights<T>& w, BasicDecoderState<T>& s,
                  const DecoderConfig& c, int rows = 1, const Sampling& sampling = {}) {
  const BasicKernels<T>& k = p.dense;
  std::vector<BasicDecoderLayerOp<T>> layers;
  layers.reserve(static_cast<std::size_t>(c.layers));
  for (int l = 0; l < c.layers; ++l) layers.push_back(decoder_layer(p, w, s, l, c, rows));
  auto head = lm_head_logits(p, w, s.x.cview(), s.logits.view(), c.vocab, c.d, c.eps, rows, c.logit_softcap);
  return named("embedding", embed(k, w, s, c, rows)) >> chain(std::move(layers)) >>
         named("lm head",
               std::move(head) >> k.sample(k.step_config({{static_cast<unsigned>(rows), 1, 1}, {1024, 1, 1}, 0}),
                                           s.logits.cview(), s.next.view(), s.positions(), s.slots(), c.vocab,
                                           sampling.top_k, sampling.temperature, static_cast<unsigned>(sampling.seed),
                                           sampling.top_p));
}

/// Where a step starts: the current token and its position in the sequence.
struct TokenAt {
  int token = 0;     ///< in [0, vocab)
  int position = 0;  ///< in [0, context)
};

/// What Decoder::forward checks before any GPU work. \throws UsageError for a token outside [0, vocab) or a
/// position outside [0, context), naming the value.
void check_step(const DecoderConfig& config, TokenAt step);
/// What Decoder::forward_batch checks: 1 to max_batch steps, each as check_step (naming the sequence).
void check_batch(const DecoderConfig& config, std::span<const TokenAt> steps);
/// What Decoder::generate checks: n from 1 to the positions left in the context after `start`, a token in the
/// vocabulary, a stop token in it or -1 (none), a start position in the context. \throws UsageError naming the value.
void check_generate(const DecoderConfig& config, int token, int n, int stop_token, int start);
/// What Decoder::prefill checks: a non-empty prompt of tokens in the vocabulary that fits the context from
/// `start`, and a slot in [0, max_batch). \throws UsageError naming the value.
void check_prompt(const DecoderConfig& config, std::span<const int> prompt, int start, int slot);

template <Element T>
class BasicPrefill;  // nn/prefill.hpp
template <Element T>
struct BasicDecoderTiles;  // nn/decoder_tiles.hpp
template <Element T>
struct BasicRankState;  // nn/decoder_rank.hpp

/// The decoder as a Module: `forward({token, position})` returns the next token of sequence 0 (greedy unless
/// set_sampling says otherwise). Steps of a
/// sequence must come at positions 0, 1, 2, ... (each attends over the k and v of the earlier ones), or a prompt
/// first through `prefill`; `forward_batch` steps up to max_batch sequences at once, reading the weights once for
/// all of them. Each row count has its own graph, captured on first use. Thread safety: every member function may
/// be called from several threads; an execution lock runs one call at a time (a sequence's steps must still come
/// in order, which only the caller can ensure).
template <Element T>
class BasicDecoder {
 public:
  using Input = TokenAt;  ///< the token and its position
  using Output = int;     ///< the next token

  /// A decoder with weights generated from config.seed. \throws UsageError for an invalid config.
  BasicDecoder(const Stream& stream, const KernelLibrary& library, const DecoderConfig& config = {});
  /// A decoder with the given weights (e.g. DecoderCheckpoint::upload), dense or quantized in part
  /// (decoder_quantization.hpp): quantized weights load the quantized kernels (BasicQuantizedKernels) and run on them.
  /// \throws UsageError for an invalid config; a weight whose size differs from what `config` needs (naming its
  /// checkpoint tensor name), or that is both dense and quantized, or neither; for quantized weights on a GPU without
  /// tensor cores.
  BasicDecoder(const Stream& stream, const KernelLibrary& library, const DecoderConfig& config,
               BasicDecoderWeights<T> weights);
  /// Rank comm.rank() of the decoder `config` split over comm.size() GPUs (tensor parallelism, nn/decoder_rank.hpp):
  /// `weights` are this rank's share (shapes of shard_config(config, comm.size()): shard_decoder_weights, or
  /// DecoderCheckpoint::upload_shard), on comm's device. Every rank must make its decoder and then make the same calls
  /// with the same arguments, each from its own thread or process (their graphs' collectives meet): steps, prompts,
  /// generate and sampling then run as on one GPU, with every rank returning the same tokens; prompts on tensor cores
  /// where the config and GPU allow (prefill_layer's collectives between the blocks). The first graph of each kind is
  /// captured at the first call that needs it, on every rank at once (the constructor captures the one-row step).
  /// Quantized weights are the rank's shares of matrices quantized whole (shard_quantized) and run on the quantized
  /// kernels. \throws UsageError for a config that does not split (check_tensor_split), the persistent backend, a
  /// weight whose size is not its share's (naming its checkpoint tensor name), a stream of another device than comm's;
  /// NcclError.
  /// `options`: the residual stream and the logits in NCCL symmetric memory or not (TensorParallelOptions); every rank
  /// must give the same. `peer`: this rank's share of a PeerExchange over every rank's GPU (PeerExchange::create_all
  /// for ranks of one process, PeerExchange::create for ranks in processes of one machine): the step's all-reduces of
  /// the residual stream then go through it (peer_all_reduce) instead of NCCL; every rank must give one, or none.
  /// \throws UsageError when `peer` is another communicator's.
  BasicDecoder(const Stream& stream, const KernelLibrary& library, const DecoderConfig& config,
               BasicDecoderWeights<T> weights, const Communicator& comm, const TensorParallelOptions& options = {},
               const PeerExchange* peer = nullptr);
  /// Moves the decoder (its graphs keep pointing at the same device memory).
  BasicDecoder(BasicDecoder&&);
  /// Moves the decoder.
  BasicDecoder& operator=(BasicDecoder&&);
  BasicDecoder(const BasicDecoder&) = delete;
  BasicDecoder& operator=(const BasicDecoder&) = delete;
  /// Waits for nothing: every call already waited for its replay.
  ~BasicDecoder();

  /// Runs one step of sequence 0. \throws UsageError for a token outside [0, vocab) or a position outside
  /// [0, context).
  Output forward(Input in);

  /// One step of sequences 0 .. steps.size() - 1 at once (sequence r takes steps[r]): returns each one's
  /// next token. \throws UsageError for no step or more than max_batch, or a token or position out of range
  /// (naming the row).
  std::vector<int> forward_batch(std::span<const TokenAt> steps);

  /// Runs a prompt through sequence `slot`, filling its KV cache at positions start .. start + prompt.size() - 1, and
  /// returns the token that follows the prompt (greedy, or drawn as set_sampling says, at position start +
  /// prompt.size() - 1). Afterwards `logits()` holds the prompt's last token's logits (one row).
  /// On tensor cores (DecoderConfig::prefill_chunk, where prefill_on_tensor_cores holds): chunks of up to
  /// prefill_chunk rows, each through every layer at once (cuBLASLt GEMMs, flash attention writing the cache; one
  /// graph per bucket of rows, captured on first use; nn/prefill.hpp), the LM head for the last row only; a prompt or
  /// a rest of one below 16 rows, and every prompt elsewhere, through the decode step's graphs, kMaxRows rows per step.
  /// The step path gives exactly the cache, logits and token of forwarding the prompt one token at a time; the
  /// tensor-core path the same within rounding (its products sum in another order and round q, k, v, and the MLP's
  /// gate and up once more), so its token may differ where the top two logits nearly tie.
  /// Quantized weights take the same paths: on tensor cores each quantized matrix is dequantized into a scratch buffer
  /// for its GEMMs (nn/prefill.hpp's prefill_layer), one matrix at a time.
  /// \throws UsageError, before any GPU work and with the cache unchanged, for an empty prompt, a token outside the
  /// vocabulary (naming its index), a prompt that does not fit the context from `start`, or a slot outside
  /// [0, max_batch); as Gemm's constructor and CudaGraph's capture when a bucket is first used.
  int prefill(std::span<const int> prompt, int start = 0, int slot = 0);

  /// Generates up to `n` tokens of sequence 0 from `token` at position `start` in ONE graph replay: a WHILE loop on
  /// the device runs the decode step, appends its token, advances the position and stops after n tokens or after
  /// `stop_token` (which is returned too; -1: none). The same tokens as n calls of forward (greedy or sampled), with
  /// no host round trip between them. The loop graph is captured on first use, its loop bounded by the context.
  /// On a tensor-parallel rank the loop's body holds the step's collectives; every rank draws the same tokens, so
  /// every rank's loop runs as many times.
  /// \throws UsageError (check_generate) before any GPU work; UsageError saying why when the kernel library lacks
  /// the loop's kernels (BasicKernels::loop).
  std::vector<int> generate(int token, int n, int stop_token = -1, int start = 0);

  /// Clears the KV caches (not needed to start over at position 0; it makes stale entries impossible to read).
  void reset();

  /// Row `row`'s logits (vocab values) from the last call: row r of forward_batch's steps (0 for forward and
  /// generate's last step); after prefill a single row, the prompt's last token's. \throws UsageError for a row the
  /// last call did not have.
  [[nodiscard]] std::vector<T> logits(int row = 0) const;

  /// The key cache, [layers][max_batch][kv_heads][context][head_dim] (BasicDecoderState::k_cache): to inspect it, or
  /// to fill it (a saved prefix). Not guarded by the execution lock: use it while no other thread runs the decoder.
  [[nodiscard]] DeviceSpan<T> k_cache() noexcept { return state_.k_cache.view(); }
  /// The value cache, laid out as k_cache.
  [[nodiscard]] DeviceSpan<T> v_cache() noexcept { return state_.v_cache.view(); }

  /// Why prefill runs every prompt through the decode step's graphs (prefill_on_tensor_cores said no), or empty when it
  /// runs chunks of 16 rows or more on tensor cores. Asking may load cuBLASLt.
  [[nodiscard]] std::string prefill_fallback_reason() const;

  /// The step of `rows` rows as an op, for running it without the graph (the benchmark's eager variant); reads
  /// the rows from the device io buffer, which the last forward, forward_batch, prefill on the step graphs or generate
  /// wrote (generate's loop leaves row 0 at its last token and position; prefill on tensor cores has its own io).
  /// \throws UsageError on a tensor-parallel rank (its step's collectives run in its graphs only).
  [[nodiscard]] auto step_op(int rows = 1) {
    if (rank_) throw UsageError("Decoder::step_op: a tensor-parallel rank's step runs in its graphs only");
    return decoder_step(projector(), weights_, state_, config_, rows, sampling_);
  }

  /// How later steps pick their tokens: greedy (the default) or drawn (sampling.hpp). A sequence's draws depend on
  /// (seed, position, sequence), so the same calls give the same tokens. Re-captures the step graphs on next use.
  /// \throws UsageError for an invalid Sampling.
  void set_sampling(const Sampling& sampling);
  /// The sampling rule in use.
  [[nodiscard]] const Sampling& sampling() const noexcept { return sampling_; }

  /// The config it was built with.
  [[nodiscard]] const DecoderConfig& config() const noexcept { return config_; }
  /// The communicator of a tensor-parallel rank (the rank constructor's), or null for a decoder on one GPU.
  [[nodiscard]] const Communicator* communicator() const noexcept;
  /// Whether this tensor-parallel rank's residual stream and logits live in NCCL symmetric memory
  /// (TensorParallelOptions::symmetric_memory, where NCCL has it); false for a decoder on one GPU.
  [[nodiscard]] bool symmetric_memory() const noexcept;
  /// Whether this tensor-parallel rank all-reduces its residual stream through a PeerExchange (the rank constructor's
  /// `peer`); false for a decoder on one GPU.
  [[nodiscard]] bool peer_all_reduce() const noexcept;
  /// The graph of a step of `rows` rows (captured now if it was not yet): replay it directly to time the device
  /// work alone (forward replays the same nodes between the staging copies, in a graph of its own). \throws UsageError
  /// for rows outside [1, kMaxRows].
  [[nodiscard]] CudaGraph<>& graph(int rows = 1);

  /// The persistent backend's program for steps of `rows` rows (made now if it was not yet), for its schedule and
  /// its profile (DecoderConfig::persistent.profile); valid until set_sampling, which makes the programs anew.
  /// \throws UsageError for the graph backend, or rows outside [1, kMaxRows].
  [[nodiscard]] const PersistentProgram& persistent_program(int rows = 1);

 private:
  /// The kernels the projections run on: the dense ones, and the quantized ones where some weight is quantized.
  [[nodiscard]] Projector<T> projector() const noexcept {
    return {kernels_, quantized_kernels_ ? &*quantized_kernels_ : nullptr};
  }
  /// graph() without the lock (the caller holds it).
  CudaGraph<>& step_graph(int rows);
  /// The graph a step of `rows` rows replays: the io staging copied in, the step's nodes, the next tokens copied
  /// out (captured on first use, after the step graph).
  CudaGraph<>& io_graph(int rows);
  /// Sets row `row` of the io staging (no allocation per step).
  void set_row(int row, int token, int position, int slot);
  /// Replays the io graph of `rows` rows (one replay, one wait) and returns the rows' next tokens.
  std::span<const int> run(int rows);
  /// Runs prompt[first..] through the step graphs, kMaxRows rows per step; returns the last row's next token.
  int prefill_steps(std::span<const int> prompt, std::size_t first, int start, int slot);
  /// persistent_program without the lock.
  PersistentProgram& program(int rows);
  /// make(step), step the op of a step of `rows` rows on the config's backend (step_op, or the program's op()).
  template <class Make>
  CudaGraph<> with_step(int rows, Make make);
  /// On the persistent backend, throws the error the last run of the program of `rows` rows stopped with
  /// (PersistentProgram::check); on the graph backend nothing.
  void check_run(int rows);

  /// The constructors' common part: `comm` null for one GPU.
  BasicDecoder(const Stream& stream, const KernelLibrary& library, const DecoderConfig& config,
               BasicDecoderWeights<T> weights, const Communicator* comm, const TensorParallelOptions& options,
               const PeerExchange* peer);

  DecoderConfig config_;
  /// The shapes the step runs: config_, or on a tensor-parallel rank its shard's (shard_config: its heads, kv heads,
  /// ffn and vocabulary rows).
  DecoderConfig shard_;
  BasicKernels<T> kernels_;
  BasicDecoderWeights<T> weights_;
  /// The quantized kernels, loaded only when some weight is quantized (a dense decoder runs on any GPU, as before).
  std::optional<BasicQuantizedKernels<T>> quantized_kernels_;
  BasicDecoderState<T> state_;
  HostIo<int, int> io_;  ///< the staging of every graph: in and out as DecoderIo lays them out
  Stream stream_;
  Sampling sampling_;
  GraphCache<int> graphs_;          ///< by rows, captured on first use (room for every row count: none is dropped)
  GraphCache<int> io_graphs_;       ///< by rows, what forward replays (io_graph)
  std::optional<LoopBound> bound_;  ///< generate's loop bound (the context), made on first use
  std::optional<CudaGraph<>> generate_graph_;                           ///< generate's loop, captured on first use
  std::unique_ptr<std::mutex> mutex_ = std::make_unique<std::mutex>();  ///< the execution lock (movable decoder)
  std::unique_ptr<BasicPrefill<T>> prefill_;  ///< prefill's tensor-core path, made at the first prefill that takes it
  std::optional<bool> prefill_gemm_;          ///< whether chunks run on tensor cores, decided at the first prefill
  std::unique_ptr<BasicRankState<T>> rank_;   ///< a tensor-parallel rank's communicator and logits shares, else null
  std::unique_ptr<const BasicDecoderTiles<T>> tiles_;       ///< the persistent backend's tile functions, else null
  std::vector<std::optional<PersistentProgram>> programs_;  ///< the persistent backend's, by rows, made on first use
  int last_rows_ = 1;                                       ///< rows logits() may read
  int logits_first_ = 0;                                    ///< the state's logits row that logits(0) reads
};

/// The fp16 decoder.
using Decoder = BasicDecoder<half>;
/// The bf16 decoder: bf16 weights, activations, KV cache and logits.
using DecoderBf16 = BasicDecoder<bfloat16>;

extern template class BasicDecoder<half>;
extern template class BasicDecoder<bfloat16>;

static_assert(Module<Decoder>);
static_assert(Module<DecoderBf16>);

}  // namespace lazygraph::nn
