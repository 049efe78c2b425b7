#pragma once
/// \file
/// What a decoder is: the model's shape (ModelShape: what a checkpoint's config says, read by its architecture's file,
/// src/nn/architectures/) and how it runs (DecoderOptions: the cache's capacity, the backend, tensor cores, fusion,
/// chunking), together a DecoderConfig; and the checks every call makes on its arguments before any GPU work.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "lazygraph/kernels/persistent_program.hpp"
#include "lazygraph/nn/decoder_io.hpp"
#include "lazygraph/nn/gate_activation.hpp"
#include "lazygraph/nn/moe_shape.hpp"
#include "lazygraph/nn/rope.hpp"

namespace lazygraph::nn {

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
  /// counters instead of kernel boundaries (decoder_tiles.hpp). Weights of any format, the fused attention block, one
  /// attention block per head, an sm_80 or newer GPU; its results equal the graph backend's within rounding
  /// (decoder_tiles.hpp says where they differ). docs/persistent.md has its measurements.
  persistent,
};
/// The model's shape and block: what a checkpoint's config.json says (llama_config.hpp reads it through the
/// architecture's file). The defaults are the small model of docs/nn.md.
struct ModelShape {
  int d = 512;               ///< model width (the residual stream)
  int heads = 8;             ///< query heads
  int head_width = 0;        ///< per-head width (Hugging Face's head_dim); 0 means d / heads
  int kv_heads = 0;          ///< key/value heads (grouped-query attention); 0 means `heads`
  int layers = 8;            ///< decoder layers
  int ffn = 1536;            ///< MLP width
  int vocab = 4096;          ///< vocabulary size
  float theta = 10000.0F;    ///< RoPE base
  RopeScaling rope_scaling;  ///< RoPE frequency rule (rope.hpp): the plain one by default, or linear or llama3
  float eps = 1e-5F;         ///< RMSNorm epsilon
  /// The q, k and v projections add biases (Qwen2's): BasicAttentionWeights::bias holds them. Needs `fused` (the
  /// unfused kernels have none).
  bool qkv_bias = false;
  /// Each head of q and of k is RMS-normed with a gain of its own ([head_dim], shared by the heads) before RoPE
  /// (Qwen3's q_norm and k_norm): BasicAttentionWeights::q_norm and k_norm hold the gains. The step then projects the
  /// stacked q, k and v (norm_project) and norms, rotates and appends them in a second kernel (qk_norm_rope_append),
  /// whatever `fused` says; the persistent backend does not run it.
  bool qk_norm = false;
  /// With qk_norm: q_norm and k_norm RMS-norm the whole q projection and the whole k projection (OLMoE's), not each
  /// head, with gains of [q_dim] and [kv_dim]. The same two kernels run it (qk_norm_rope_append's `whole`); the
  /// persistent backend and tensor parallelism (whose ranks hold only some of the heads) do not.
  bool qk_norm_whole = false;
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
  float gain_offset = 0;
  /// A mixture of experts in every layer in place of the MLP (Qwen3-MoE, OLMoE, Mixtral): `experts` 0 (the default)
  /// for the dense MLP of `ffn`. Each layer then has a router [experts x d] and per expert W1, W3 [expert_width x d]
  /// and W2 [d x expert_width] (BasicMoeWeights), run by kernels/nn/moe.cu; `ffn` is unused. The graph backend runs it
  /// on every path (steps, batches, the wide step, generate, prefill on tensor cores: nn/prefill_moe.hpp), on one GPU
  /// or split over tensor-parallel ranks, dense or quantized (the mlp class; the wide step refuses quantized experts);
  /// the persistent backend does not.
  MoeShape moe;

  /// Whether the layers are mixtures of experts (moe.experts > 0).
  [[nodiscard]] bool mixture_of_experts() const noexcept { return moe.experts > 0; }

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
  /// Bytes of weights in fp16 or bf16 (all matrices and gains, every expert of a mixture, plus one embedding row).
  [[nodiscard]] std::size_t weight_bytes() const;
};

/// How a decoder runs its model: the KV cache's capacity, the backend and the kernels' variants. None of it changes
/// what the model computes beyond rounding (tensor_cores and prefill_chunk say where it may).
struct DecoderOptions {
  int context = 1024;  ///< positions the KV cache holds per sequence
  /// Sequences decoded at once: 1 to 8 (kMaxRows), the contiguous KV cache holding this many; with a paged cache
  /// (kv_block_size) up to 256 (kMaxWideRows), steps of more than 8 rows then running as the wide step on tensor cores
  /// (nn/wide_step.hpp: quantized weights dequantized before each GEMM but quantized experts refused, a mixture of
  /// experts' as grouped products, a GPU of compute capability 8.0 or newer with cuBLASLt; its buffers, for the
  /// smallest bucket of 16, 32, ... 256 rows that holds max_batch, allocated with the decoder).
  int max_batch = 1;
  std::uint32_t seed = 1234;  ///< seed of the generated weights (DecoderWeights::generate)
  bool early_launch = true;   ///< launch the kernels early (Kernels::step_config); false to compare
  /// Run the projections of steps of 2 to 8 rows on tensor cores (KernelOptions::tensor_cores): faster batches and
  /// prefill, but a row's logits then differ from what it gets alone within rounding (its token may too, at a
  /// near tie). Off: every row gets exactly the bits of one row at a time.
  bool tensor_cores = false;
  /// The attention block's input side as one kernel (norm, Q/K/V projections, RoPE and the cache append:
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
  /// bucket (it or the context, whichever is less) are allocated at the first prefill, not before: about 102 MiB for
  /// 2048 rows of a TinyLlama shape in fp16 (nn/prefill.hpp). Larger chunks run faster (their GEMMs and attention
  /// fill the GPU better: on an H100 a 2048-token prompt of the TinyLlama shape ran about 1.4x faster in one chunk
  /// than in four of 512). Used only where head_dim is 64 or 128, the GPU is sm_80 or newer and cuBLASLt loads
  /// (prefill_on_tensor_cores); elsewhere prefill takes the decode step's graphs.
  int prefill_chunk = 2048;
  /// Blocks per (row, head) of the fused path's attention, at most 64; 0 picks by context (attention_splits), or
  /// with a paged cache attends on the grouped kernels (one block per kv head and split, split over the row's own
  /// positions as paged_grouped_wave_splits says: BasicDecoderState::grouped_attention; within rounding of the
  /// contiguous cache, not its bits; on GPUs older than compute capability 8.0 paged_attention_splits). The default is
  /// one: on the H100 at position 255 of a 1024 context, spreading the 8 heads of the default decoder over 32 blocks
  /// each made the step slower (192 vs 170 us), the combine of the partials costing more than the positions it
  /// shares out. With it, batches on tensor cores of head_dim 64 or 128 whose longest row is at kGroupedBatchFrom
  /// or past it attend on the grouped kernels (BasicDecoderState::grouped_batches).
  int attention_blocks = 1;
  /// What runs a step: a CUDA graph of kernels, or one persistent kernel (DecoderBackend). Prefill on tensor cores
  /// (prefill_chunk) is the same for both; the rest of a prompt runs on the step's backend.
  DecoderBackend backend = DecoderBackend::graph;
  /// How the persistent backend's kernel runs (PersistentOptions): threads 64 to 256 (the q/k/v tile stores 8 rows
  /// of up to 8 vectors, one a thread; the attention and gemv tiles take at most 8 warps), the wait timeout after
  /// which a step throws TimeoutError instead of hanging, profiling.
  /// Two blocks per multiprocessor by default: on the H100 the TinyLlama and Llama-3.2-1B shapes' steps took 6-9 %
  /// less time than with one, the default decoder's 17 % (more weight loads in flight; docs/persistent.md).
  PersistentOptions persistent{.min_blocks_per_sm = 2};
  /// Weight rows per tile of the persistent backend's projections: 0 spreads each projection over the kernel's blocks,
  /// one tile per block (a tile then prefetches all of its rows into L2 before its wait when the call's weights are at
  /// most 24 MiB, and waits once per projection); a positive multiple of 8, that many rows per tile (a quantized
  /// projection's rounded up to a multiple of 16, its kernels' tile of rows).
  int persistent_tile_rows = 0;
  /// Keep every layer's routes of a mixture of experts (DecoderConfig::moe): each layer's router writes its experts
  /// and weights to a slice of its own of BasicDecoderState::expert_ids and expert_weights ([layers][kMaxRows][top
  /// k], moe_routes.hpp) instead of the one slice every layer overwrites, so that BasicDecoder::last_routes can read
  /// all of them after a call. The step runs the same kernels (no copy is added); the buffers grow to layers times
  /// their size. Off, last_routes refuses. Needs a mixture of experts.
  bool record_routes = false;
  /// Positions per block of a paged KV cache: 16 or 32, or 0 (the default) for the contiguous cache of max_batch x
  /// context positions. Paged, the cache is one pool of kv_blocks blocks per layer (BasicDecoderState::k_cache), each
  /// row of a step appends and attends through its block table (a device input staged like the tokens: new tables
  /// never recapture), and the memory is bounded by the pool; `context` is then the most positions one sequence's
  /// table reaches (up to kMaxPagedContext). The graph backend on one GPU, the fused attention block (q/k norms, or a
  /// quantized stacked q/k/v weight, projected first and appended by PagedAttention::qk_norm_rope_append or
  /// rope_append); prompts run as on the contiguous cache, on tensor cores (prefill_chunk) where they may, flash
  /// attention reading and writing through the table (docs/serving.md).
  int kv_block_size = 0;
  /// Blocks of the paged cache's pool, per layer (kv_block_size): at least 1; 0 with the contiguous cache.
  int kv_blocks = 0;

  /// Whether the KV cache is paged (kv_block_size above 0).
  [[nodiscard]] bool paged() const noexcept { return kv_block_size > 0; }
  /// Block ids per row's table of a paged cache: ceil(context / kv_block_size); 0 for the contiguous cache.
  [[nodiscard]] int kv_table_width() const noexcept {
    return paged() ? (context + kv_block_size - 1) / kv_block_size : 0;
  }

  /// Blocks each (row, head) of attention is spread over: attention_blocks, or when that is 0 one per 32 positions of
  /// the context, 1 to 64. 1 runs the kernel of one block per head (attention; a batch on tensor cores past
  /// kGroupedBatchFrom the grouped kernels: BasicDecoderState::grouped_batches), more attention_split.
  [[nodiscard]] int attention_splits() const noexcept {
    return attention_blocks > 0 ? attention_blocks : std::clamp((context + 31) / 32, 1, 64);
  }
};

/// A decoder: the model's shape and how it runs it.
struct DecoderConfig : ModelShape, DecoderOptions {
  /// \throws UsageError for shapes the kernels cannot run: d and ffn multiples of 8, d divisible by
  /// heads when head_width is 0, head_dim a multiple of 8 and at most 256, heads a multiple of kv_heads, context at
  /// most 8192 (kMaxContext), max_batch at most 8 (kMaxRows; with a paged cache 256, kMaxWideRows, and above 8 a
  /// mixture of experts' experts a multiple of 8), every count positive, a finite positive theta, an invalid
  /// rope_scaling, a prefill_chunk that is neither 0 nor a power of two from 16 to 8192; with the persistent backend,
  /// an unfused attention block, attention over more than one block per head, persistent.threads outside 64..256, a
  /// persistent_tile_rows that is neither 0 nor a positive multiple of 8, or a block feature it has no tiles for
  /// (naming it); a mixture of experts (moe) with more than 1024 experts, a top k of 0, above 16 or above the experts,
  /// an expert_width that is not a positive multiple of 8, with a GeGLU activation or post-norms, or on the persistent
  /// backend; qk_norm_whole without qk_norm, or on the persistent backend; record_routes without a mixture of
  /// experts. With a paged cache (kv_block_size): a kv_block_size other than 16 or 32, kv_blocks below 1, a context
  /// above kMaxPagedContext (above kMaxContext otherwise), attention_blocks 1 with a context whose scores do not fit
  /// the unsplit kernel's shared memory, and what it does not run, named: the persistent backend, the unfused
  /// attention block (fused false). kv_blocks without kv_block_size is refused too.
  void validate() const;
};

/// The RoPE table the decoder's kernels read: rope_frequencies(theta, rope_scaling, head_dim()) rounded to float.
/// \throws UsageError as rope_frequencies does.
[[nodiscard]] std::vector<float> rope_table(const ModelShape& shape);

/// Where a step starts: the current token and its position in the sequence.
struct TokenAt {
  int token = 0;     ///< in [0, vocab)
  int position = 0;  ///< in [0, context)
};

/// What Decoder::forward_batch with block tables checks on a paged decoder, before any GPU work: check_batch's
/// refusals, `tables` of steps.size() * kv_table_width() ints, each row's block ids up to its position's in
/// [0, kv_blocks) (the rest is padding, not read), and no block a row writes (its position's) in another row's table at
/// another index up to that row's position (two sequences sharing a block may read it, never write it).
/// \throws UsageError naming the row, the table index and the value; for a contiguous decoder.
void check_paged_batch(const DecoderConfig& config, std::span<const TokenAt> steps, std::span<const int> tables);

/// The entries of a block table a row at `position` reads: those up to its position's block, position / kv_block_size
/// + 1 (the rest is padding). What a step stages and copies of each row's table, so that its host work grows with the
/// rows' positions, not with the table's width (kv_table_width: 8192 entries at a context of 131072). For a position
/// check_batch accepted (in [0, context)), at most kv_table_width.
[[nodiscard]] inline std::size_t used_entries(const DecoderConfig& config, int position) noexcept {
  return static_cast<std::size_t>(position / config.kv_block_size) + 1;
}

/// One sequence's prompt part of a packed prefill (Decoder::prefill_packed): `tokens` at the positions from `start`
/// on, of a sequence of a paged cache whose block table is `table` (kv_table_width() ints); `slot` numbers the
/// sequence for sampled draws only.
struct PromptPart {
  std::span<const int> tokens;  ///< at least one, each in [0, vocab)
  int start = 0;                ///< the first token's position
  std::span<const int> table;   ///< the sequence's block table
  int slot = 0;                 ///< in [0, max_batch)
};

/// What Decoder::prefill_packed checks on a paged decoder, before any GPU work: 1 to kMaxRows parts of at most
/// `max_rows` tokens in all, each part as check_paged_prompt checks a prompt, and no block a part writes (those of its
/// positions) in another part's table up to that part's last position (sequences may share blocks they read, as
/// KvBlockPool's copy-on-write does, never one a part writes). \throws UsageError naming the part, the table
/// index and the value; for a contiguous decoder.
void check_packed_prompts(const DecoderConfig& config, std::span<const PromptPart> parts, int max_rows);

/// What Decoder::prefill with a block table checks on a paged decoder, before any GPU work: check_prompt's refusals,
/// a table of kv_table_width() ints whose entries up to the last position's block (start + prompt.size() - 1) lie in
/// [0, kv_blocks) and are distinct (a prompt's chunks read a sequence's earlier blocks while they write its later
/// ones). \throws UsageError naming the table index and the value (both indices of a repeated block); for a
/// contiguous decoder.
void check_paged_prompt(const DecoderConfig& config, std::span<const int> prompt, int start, std::span<const int> table,
                        int slot);

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

}  // namespace lazygraph::nn
