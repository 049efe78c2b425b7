#pragma once
/// \file
/// Decoder::prefill on tensor cores: a prompt chunk of 16 to DecoderConfig::prefill_chunk rows goes through every layer
/// at once, its projections as cuBLASLt GEMMs (kernels/gemm.hpp) and its attention as flash attention
/// (prefill_attention.hpp), which writes the chunk's keys and values into the KV cache. Per layer, over the chunk's
/// M rows:
///
///   h = rmsnorm(x) * g_attn                      prefill_rms_norm, one block per row
///   qkv = h Wqkv^T                               one GEMM over Wq, Wk and Wv stacked (BasicAttentionWeights::wqkv)
///   q, k, v = qkv + biases; rotate q and k       prefill_qkv_rope, at positions start .. start + M - 1 (with q/k
///                                                norms, prefill_qk_norm_rope: each q and k head, or the whole q
///                                                and k, normed first)
///   q = attention(q, cache, k, v); cache <- k, v  flash attention, in place on q (paged: through the table)
///   x += q Wo^T                                  GEMM, the residual added by cuBLASLt (C = D = x)
///   h = rmsnorm(x) * g_mlp
///   gate = h W1^T, up = h W3^T                   one GEMM over W1 and W3 stacked where they are (a dense pair as
///                                                loaded: stacked_rows), each row's gate and up side by side in b.up;
///                                                else two GEMMs
///   gate = silu(gate) * up                       prefill_silu_mul
///   x += gate W2^T                               GEMM with the residual
///   (a mixture of experts, DecoderConfig::moe: the router's GEMM, then grouped products over the experts the rows
///   chose, prefill_moe.hpp, in place of the three MLP lines)
///
/// and then, for the prompt's last chunk only, its last row through the final norm, the LM head and the sampler (the
/// decode step's kernels for one row: prefill_last_row copies that row to the step's x).
///
/// One graph per bucket of rows (prefill_buckets: 16, 32, 64, ... up to the largest chunk), captured on first use; the
/// host writes the chunk (PrefillIo: start, rows, slot, tokens) to the decoder's input staging, and the graph copies it
/// to device memory first, so one graph serves every chunk that fits its bucket, at any start and slot. With a paged
/// KV cache (DecoderConfig::kv_block_size) the graph also copies the sequence's block table (staged at
/// BasicPrefillContext::table_at) to row 0 of the state's tables, and flash attention reads and writes the pool
/// through it (paged_prefill_attention): one graph serves every table too. Rows past the
/// chunk (the bucket's padding: token 0) run through the row-wise kernels and the GEMMs like any row, but flash
/// attention neither reads nor writes them, so they never touch the KV cache nor any real row.
///
/// Memory (allocated at the first prefill that uses it, never for decode-only use): for R = the largest bucket
/// (prefill_chunk, or the smallest bucket that holds the context when that is less), R * (2 d + 2 q_dim + 4 kv_dim +
/// 3 ffn) elements of T (BasicPrefillBuffers::bytes; 2048 rows of a TinyLlama shape, d 2048, ffn 5632, 4 kv heads of
/// 64: 102 MiB in fp16) plus each bucket's GEMM plans' workspaces (at most kPrefillGemmWorkspace each; cuBLASLt's
/// algorithm decides, often none), made when the bucket is first used; with quantized weights, also the largest
/// quantized matrix in T (dequantized_elements: 32 MiB for a Llama-3.2-1B gate_proj in fp16), which each quantized
/// matrix of a layer is dequantized into for its GEMMs. A mixture of experts has no 3 ffn there, and instead the
/// buffers of its grouped products (BasicPrefillMoeBuffers::bytes: R * top k rows of the experts' activations in T
/// and of their down products in fp32, the biggest part); with quantized experts, the scratch of two expert stacks in
/// T they are dequantized into (prefill_expert_scratch: 806 MB for Qwen3-30B-A3B's, 1.9 GB for Mixtral-8x7B's).
/// DecoderConfig::prefill_chunk 0 keeps every prompt on the decode step's graphs and allocates none of it.

#include <array>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "lazygraph/kernels/gemm.hpp"
#include "lazygraph/module.hpp"
#include "lazygraph/nn/decoder_rank.hpp"
#include "lazygraph/nn/decoder_step.hpp"
#include "lazygraph/nn/detail/one_of_op.hpp"
#include "lazygraph/nn/prefill_attention.hpp"
#include "lazygraph/nn/prefill_moe.hpp"

namespace lazygraph::nn {

/// The fewest prompt rows a chunk on tensor cores takes: a shorter prompt, or the rest of one below this, runs
/// through the decode step's graphs, kMaxRows rows at a time.
inline constexpr int kPrefillMinRows = 16;

/// The fewest prompt rows a chunk on tensor cores takes when a mixture of experts' experts are quantized: each chunk
/// dequantizes every expert stack of every layer first (prefill_moe.hpp), which up to 32 rows costs more than the
/// decode step's graphs (H200, bench_moe --prefill, 12 layers of Qwen3-30B-A3B with int8 experts, tensor cores against
/// the step's graphs: 16 tokens 10.1 against 5.2 ms, 32 tokens 11.0 against 10.5, 64 tokens 11.7 against 21.0, 512
/// tokens 13.9 against 171.6).
inline constexpr int kPrefillQuantizedExpertRows = 33;

/// The fewest rows of a chunk on tensor cores for `weights`: kPrefillQuantizedExpertRows with quantized experts, else
/// kPrefillMinRows.
template <Element T>
[[nodiscard]] int prefill_min_rows(const BasicDecoderWeights<T>& weights) {
  return prefill_expert_scratch(weights) > 0 ? kPrefillQuantizedExpertRows : kPrefillMinRows;
}

/// The most workspace each of prefill's GEMM plans may have (GemmOptions::max_workspace_bytes): 8 MiB. A plan owns
/// only what the algorithm cuBLASLt chose needs.
inline constexpr std::size_t kPrefillGemmWorkspace = std::size_t{8} << 20U;
/// The algorithms of cuBLASLt's heuristic a prefill or wide-step GEMM plan times, keeping the fastest
/// (GemmOptions::candidates): 1, its first untimed. Timing 8 (H200, bench_serving, Llama-3.2-1B shape) made the
/// 64-row step 1% faster and the 256-row one no faster, and added about 140 ms to the first prompt of the process.
inline constexpr int kPrefillGemmCandidates = 1;

/// The row counts prefill captures a graph for: kPrefillMinRows, twice that, ... up to the smallest that holds
/// min(prefill_chunk, context). Empty when prefill_chunk is 0 (prefill runs on the decode step's graphs).
/// \throws UsageError for an invalid config.
[[nodiscard]] std::vector<int> prefill_buckets(const DecoderConfig& config);

/// A rest of a prompt smaller than the largest bucket is cut at the largest bucket below it when that bucket has at
/// least this many rows, and padded up to the smallest bucket that holds it otherwise (prefill_chunk_rows).
inline constexpr int kPrefillSplitRows = 256;

/// How Decoder::prefill cuts `prompt_rows` rows into chunks on tensor cores, given `buckets` (prefill_buckets,
/// ascending): the rows of each chunk in order; the rows after the last (fewer than kPrefillMinRows) go through the
/// decode step's graphs. A chunk takes the largest bucket while as many rows remain; a smaller rest takes the largest
/// bucket below it when that has kPrefillSplitRows rows or more (a chunk's cost grows with its padded rows once they
/// are many: 1100 rows run as 1024 + 76, not as 2048), else all of it, padded up to its bucket (below that a chunk
/// costs about one read of the weights whatever its rows). Empty when `buckets` is.
[[nodiscard]] std::vector<int> prefill_chunk_rows(std::size_t prompt_rows, const std::vector<int>& buckets);

/// Whether `config`'s decoder runs prompt chunks on tensor cores on a GPU of capability `cc` with cuBLASLt loadable:
/// prefill_chunk > 0, a mixture of experts' (DecoderConfig::moe) experts a multiple of 8 (the router's GEMM stores its
/// rows 16-byte aligned), head_dim 64 or 128 (the flash-attention kernels), compute
/// capability 8.0 or newer and cuBLASLt available. False with the reason in `why` (when given) otherwise; prefill then
/// runs through the decode step's graphs, as before. Never throws.
[[nodiscard]] bool prefill_on_tensor_cores(const DecoderConfig& config, ComputeCapability cc,
                                           std::string* why = nullptr) noexcept;

/// The device memory a prefill chunk works in, for chunks of up to `rows` rows (all [rows][width], row-major).
template <Element T>
struct BasicPrefillBuffers {
  /// Allocates every buffer on `stream`'s device, `weight_elements` of them for `weights`, and zeroes the activations
  /// (x to up) on `stream`, waiting for it: cuBLASLt's GEMMs store their outputs (qkv, gate, up) in ways
  /// compute-sanitizer's initcheck does not see, so the kernels that read them would be reported on memory the GEMM
  /// wrote; zeroed, what they read is defined either way. \throws CudaError when the device is out of memory.
  BasicPrefillBuffers(const Stream& stream, const DecoderConfig& config, int rows, std::size_t weight_elements = 0);

  int rows = 0;  ///< the most rows of a chunk (the largest bucket)
  /// The chunk's io, PackedPrefillIo::input_size(rows) ints (a PrefillIo or a PackedPrefillIo): copied in first by
  /// each chunk graph.
  DeviceBuffer<int> io;
  DeviceBuffer<T> x;    ///< residual streams [rows][d]
  DeviceBuffer<T> h;    ///< normed rows [rows][d]
  DeviceBuffer<T> qkv;  ///< the stacked projection's output [rows][q_dim + 2 kv_dim]
  DeviceBuffer<T> q;    ///< queries, then the attention output (in place) [rows][q_dim]
  DeviceBuffer<T> k;    ///< the chunk's keys [rows][kv_dim]
  DeviceBuffer<T> v;    ///< the chunk's values [rows][kv_dim]
  /// W1 h, then silu(W1 h) * (W3 h) in place; with W1 and W3 stacked, only the activation, from `up` [rows][ffn]
  /// (empty with experts)
  DeviceBuffer<T> gate;
  /// W3 h [rows][ffn], or the product over W1 and W3 stacked [rows][2 ffn] (each row's gate, then its up; empty
  /// with experts)
  DeviceBuffer<T> up;
  /// One quantized matrix of the layer at a time, dequantized for the GEMMs (q, k and v stacked); empty when no
  /// weight is quantized (dequantized_elements).
  DeviceBuffer<T> weights;
  /// A mixture of experts' buffers (DecoderConfig::moe; all empty without): the MLP's gate and up are then empty.
  BasicPrefillMoeBuffers<T> moe;

  /// The chunk's [start, rows, slot] as the kernels read them (PrefillChunkLayout).
  [[nodiscard]] DeviceSpan<const int> chunk() const {
    return io.cview().subspan(PrefillIo::start, PrefillChunkLayout::size);
  }
  /// The bytes of device memory these buffers take for `config` and `rows` rows.
  [[nodiscard]] static std::size_t bytes(const DecoderConfig& config, int rows);
};

/// The GEMM plans of one bucket of `rows` rows: one per distinct shape among q (q_dim x d), k and v (kv_dim x d), o
/// (d x q_dim), gate and up (ffn x d), the two stacked (2 ffn x d: gemm_layer's product where stacked_rows finds them;
/// planned for every bucket, also one whose weights are quantized or apart, where it goes unused), down (d x ffn);
/// every layer's products of a shape share its plan (they run one after another); with `lm_head`, also the LM head's
/// (vocab x d: the wide decode step's). Made outside any capture.
/// The buckets of one prefill or wide step run one at a time on one stream, so all their plans share one workspace
/// (shared_workspace), of the most any of them needs, instead of one each.
template <Element T>
class BasicPrefillPlans {
 public:
  /// \throws as Gemm's constructor (CublasUnavailable, CublasError, CudaError, CaptureError inside a capture;
  ///         UsageError when `workspace` is smaller than a plan needs).
  BasicPrefillPlans(const Device& device, const DecoderConfig& config, int rows, bool lm_head = false,
                    const std::shared_ptr<const SharedGemmWorkspace>& workspace = nullptr);

  /// A workspace for the plans of every bucket in `buckets`: the most any of their algorithms needs (asking cuBLASLt's
  /// heuristic, which is remembered for the plans), or null when none needs any. \throws as the constructor.
  [[nodiscard]] static std::shared_ptr<const SharedGemmWorkspace> shared_workspace(const Device& device,
                                                                                   const DecoderConfig& config,
                                                                                   std::span<const int> buckets,
                                                                                   bool lm_head);

  /// The plan of D[rows, n] = X[rows, k] W[n, k]^T. \throws UsageError for a shape it has none of.
  [[nodiscard]] const Gemm<T>& plan(std::size_t n, std::size_t k) const;
  /// The bytes of workspace its plans own (0 when they share one).
  [[nodiscard]] std::size_t workspace_bytes() const noexcept;
  /// The most workspace one of its plans needs: what the bucket would take alone.
  [[nodiscard]] std::size_t workspace_needed() const noexcept { return needed_; }

 private:
  /// The distinct shapes of a bucket's products.
  static std::vector<GemmShape> shapes(const DecoderConfig& config, int rows, bool lm_head);

  std::vector<Gemm<T>> plans_;
  std::size_t needed_ = 0;
};

/// A decoder layer on tensor cores over the `rows` rows of a bucket but for its attention core (see the file comment):
/// the norm, the stacked q/k/v GEMM into b.qkv, then `core` (an op that turns b.qkv's rows into the attention output
/// in `attended`, writing the keys and values into the cache its own way), the output projection with the residual,
/// and the MLP as GEMMs with the fused activation (with DecoderConfig::moe, `experts`' block instead:
/// prefill_moe_block); the layer's output is left in b.x. The row-wise kernels read the
/// real rows from `chunk` ([start, rows, slot], PrefillChunkLayout) and leave the rows past them alone. Its two uses:
/// prefill_layer (a prompt chunk, flash attention) and the wide decode step (wide_step.hpp: a row per sequence, paged
/// decode attention). `comm`, quantized weights and post-norms as prefill_layer says.
template <Element T, class Core>
auto gemm_layer(const Projector<T>& p, const BasicPrefillPlans<T>& plans, const BasicAttentionWeights<T>& a,
                const BasicSwigluWeights<T>& m, BasicPrefillBuffers<T>& b, DeviceSpan<const int> chunk,
                const DecoderConfig& c, int rows, Core core, DeviceSpan<const T> attended,
                const Communicator* comm = nullptr, const BasicMoeWeights<T>* experts = nullptr) {
  const BasicKernels<T>& k = p.dense;
  const auto n = [rows](int width) { return static_cast<std::size_t>(rows) * static_cast<std::size_t>(width); };
  const bool residual = comm == nullptr || comm->rank() == 0;
  const DeviceSpan<T> x = b.x.view().subspan(0, n(c.d));
  const DeviceSpan<T> h = b.h.view().subspan(0, n(c.d));
  const DeviceSpan<T> qkv_rows = b.qkv.view().subspan(0, n(c.q_dim() + 2 * c.kv_dim()));
  const std::size_t ffn_rows = c.mixture_of_experts() ? 0 : n(c.ffn);  // no MLP buffers beside experts
  const DeviceSpan<T> gate = b.gate.view().subspan(0, ffn_rows);
  const DeviceSpan<T> up = b.up.view().subspan(0, ffn_rows);
  const LaunchConfig per_row = k.step_config({{static_cast<unsigned>(rows), 1, 1}, {256, 1, 1}, 0});
  const auto norm = [&](const DeviceBuffer<T>& gain) {
    return k.prefill_rms_norm(per_row, x.as_const(), gain.cview(), h, chunk, c.d, c.eps, rows);
  };
  // out = in W^T for a weight in any format: its dense values, or its values dequantized into b.weights first.
  const auto gemm = [&](const Weight<T>& w, DeviceSpan<T> out, DeviceSpan<const T> in) {
    GemmOperand<T> operand = gemm_operand(p, w, b.weights.view());
    auto product =
        plans.plan(static_cast<std::size_t>(w.rows()), static_cast<std::size_t>(w.cols()))(out, in, operand.values);
    return std::move(operand.prepare) >> std::move(product);
  };
  // x += y W^T, or on a rank other than 0, x = y W^T (the all-reduce adds the residual once).
  const auto project_into_x = [&](const Weight<T>& w, DeviceSpan<const T> y) {
    GemmOperand<T> operand = gemm_operand(p, w, b.weights.view());
    const Gemm<T>& plan = plans.plan(static_cast<std::size_t>(w.rows()), static_cast<std::size_t>(w.cols()));
    return std::move(operand.prepare) >>
           (residual ? plan.add(x, y, operand.values, x.as_const()) : plan(x, y, operand.values));
  };
  // The all-reduce of `y` (x after a block, or a post-normed block's output): none without a communicator.
  const auto reduce = [&](DeviceSpan<T> y) {
    std::vector<decltype(all_reduce(*comm, y))> ops;
    if (comm != nullptr) ops.push_back(all_reduce(*comm, y));
    return chain(std::move(ops));
  };
  // A block's output y W^T into x: project_into_x then the all-reduce of x; with post-norms, into h, all-reduced, and
  // its RMSNorm with `post_gain` added to x.
  const auto block_output = [&](const Weight<T>& w, DeviceSpan<const T> y, const DeviceBuffer<T>& post_gain) {
    return detail::either(
        c.post_norms,
        [&] {
          return gemm(w, h, y) >> reduce(h) >>
                 k.prefill_rms_norm_add(per_row, h.as_const(), post_gain.cview(), x, chunk, c.d, c.eps, rows);
        },
        [&] { return project_into_x(w, y) >> reduce(x); });
  };
  auto attention = norm(a.gain) >> gemm(a.qkv, qkv_rows, h.as_const()) >> std::move(core) >>
                   block_output(a.wo, attended, a.post_gain);
  // The MLP, or a mixture of experts (prefill_moe.hpp; no post-norms there, as in the step). On a rank other than 0
  // the experts' sum goes to x cleared once the norm has read it, and the all-reduce adds the residual once.
  auto mlp = norm(m.gain) >>
             detail::either(
                 c.mixture_of_experts(),
                 [&] {
                   if (experts == nullptr)
                     throw UsageError("gemm_layer: a mixture of experts' layer needs its experts");
                   std::vector<FillOp<T>> clear;
                   if (!residual) clear.push_back(fill(x, T::from_float(0.0F)));
                   return chain(std::move(clear)) >>
                          prefill_moe_block(p, plans.plan(c.moe.experts, c.d), *experts, b.moe, h.as_const(), x, chunk,
                                            b.weights.view(), c, rows) >>
                          reduce(x);
                 },
                 [&] {
                   const auto& activation =
                       c.activation == GateActivation::gelu_tanh ? k.prefill_gelu_mul : k.prefill_silu_mul;
                   const LaunchConfig per_eighth = k.step_config(grid_for(n(c.ffn) / 8, 256));
                   // W1 and W3 in one product where they lie stacked (a dense pair as loaded): each row of b.up then
                   // holds its gate and its up, and the activation goes to gate.
                   const Weight<T> gate_up = stacked_rows(m.w1, m.w3, m.w1.describe() + " + " + m.w3.describe());
                   auto products = detail::either(
                       !gate_up.empty() && m.w1.rows() == c.ffn && gate_up.rows() == 2 * c.ffn,
                       [&] {
                         const DeviceSpan<const T> both = b.up.cview().subspan(0, n(2 * c.ffn));
                         return gemm(gate_up, b.up.view().subspan(0, n(2 * c.ffn)), h.as_const()) >>
                                activation(per_eighth, both, both.subspan(c.ffn, both.size() - c.ffn), gate, chunk,
                                           c.ffn, 2 * c.ffn, rows);
                       },
                       [&] {
                         return gemm(m.w1, gate, h.as_const()) >> gemm(m.w3, up, h.as_const()) >>
                                activation(per_eighth, gate.as_const(), up.as_const(), gate, chunk, c.ffn, c.ffn, rows);
                       });
                   return std::move(products) >> block_output(m.w2, gate.as_const(), m.post_gain);
                 });
  return named("attention", std::move(attention)) >> named("mlp", std::move(mlp));
}

/// Where the layers of a packed chunk (BasicPrefill::run_packed: several sequences' prompt parts in one chunk) find
/// its parts, in device memory: each row's position (the RoPE kernels' `positions`), the parts' segments
/// (PrefillSegmentsLayout for kMaxRows) and their block tables (kMaxRows rows of kv_table_width()). All empty for one
/// sequence's chunk.
struct PackedPrefillSpans {
  DeviceSpan<const int> positions;  ///< [rows of the bucket]
  DeviceSpan<const int> segments;   ///< PrefillSegmentsLayout::size(kMaxRows)
  DeviceSpan<const int> tables;     ///< [kMaxRows][kv_table_width()]
  /// Whether these are a packed chunk's.
  [[nodiscard]] bool packed() const noexcept { return !segments.empty(); }
};

/// One decoder layer over the `rows` rows of a bucket (see the file comment), as an op: reads the chunk from
/// `b.chunk()`, appends its keys and values to `k_cache` / `v_cache` (this layer's, [max_batch][kv_heads][context]
/// [head_dim]) and leaves the layer's output in b.x. Captured (the GEMMs are not buildable). With a paged cache
/// (c.paged()) `k_cache` / `v_cache` are this layer's pools ([kv_blocks][kv_heads][kv_block_size][head_dim]) and the
/// keys and values go through `table` (the chunk's sequence's kv_table_width() block ids in device memory) by
/// paged_prefill_attention: the same arithmetic, other addresses.
/// \throws UsageError when a span does not fit (prefill_attention's and Gemm's checks).
///
/// A weight reaches its GEMM as gemm_operand (projection.hpp) hands it over: a dense one as it is, a quantized one
/// first dequantized into b.weights (qdequantize: its values rounded once to T), so that the products differ from the
/// decode step's (which scale fp32 sums) by rounding only.
///
/// With `comm`, the layer is a tensor-parallel rank's (`c` its shard_config, the weights its share): the output and
/// down projections of ranks other than 0 write their partial products without the residual, and an all-reduce of
/// b.x follows each of the two blocks, as in decoder_rank_step. With post-norms (DecoderConfig::post_norms) a block's
/// output goes into b.h (all-reduced on a rank), whose RMSNorm prefill_rms_norm_add adds to b.x. `layer` is the
/// layer's index, for its window (DecoderConfig::sliding); `frequencies` its RoPE table.
///
/// With `packed` (a paged cache only), the bucket's rows are several sequences' parts: each row rotated at its own
/// position and the parts attending through their own tables in one launch (varlen_prefill_attention); `table` is
/// then not read. A mixture of experts' layer (DecoderConfig::moe) takes its `experts` (dense or quantized:
/// prefill_moe.hpp).
template <Element T>
auto prefill_layer(const Projector<T>& p, const BasicPrefillPlans<T>& plans, const BasicAttentionWeights<T>& a,
                   const BasicSwigluWeights<T>& m, BasicPrefillBuffers<T>& b, DeviceSpan<const float> frequencies,
                   DeviceSpan<T> k_cache, DeviceSpan<T> v_cache, const DecoderConfig& c, int rows,
                   const Communicator* comm = nullptr, int layer = 0, DeviceSpan<const int> table = {},
                   const PackedPrefillSpans& packed = {}, const BasicMoeWeights<T>* experts = nullptr) {
  const BasicKernels<T>& k = p.dense;
  const auto n = [rows](int width) { return static_cast<std::size_t>(rows) * static_cast<std::size_t>(width); };
  const auto q_dim = static_cast<std::size_t>(c.q_dim());
  const auto kv_dim = static_cast<std::size_t>(c.kv_dim());
  const DeviceSpan<T> qkv_rows = b.qkv.view().subspan(0, n(c.q_dim() + 2 * c.kv_dim()));
  const DeviceSpan<T> q = b.q.view().subspan(0, n(c.q_dim()));
  const DeviceSpan<T> key = b.k.view().subspan(0, n(c.kv_dim()));
  const DeviceSpan<T> value = b.v.view().subspan(0, n(c.kv_dim()));
  const DeviceSpan<const int> chunk = b.chunk();
  const PrefillAttentionShape shape{.rows = rows,
                                    .heads = c.heads,
                                    .kv_heads = c.kv_head_count(),
                                    .head_dim = c.head_dim(),
                                    .context = c.context,
                                    .slots = c.max_batch,
                                    .scale = c.attention_scale,
                                    .window = c.layer_window(layer)};
  const DeviceSpan<const T> bias = a.bias.cview();
  const auto bias_part = [&](std::size_t at, std::size_t size) { return bias.empty() ? bias : bias.subspan(at, size); };
  // The stacked product split into q, k and v with the biases and RoPE; with q/k norms, each head of q and k (or with
  // qk_norm_whole the whole q and k) normed first (prefill_qk_norm_rope, the step's qk_norm_rope_append for a chunk).
  auto split = detail::either(
      c.qk_norm,
      [&] {
        return k.prefill_qk_norm_rope(k.qk_norm_config(c.heads, c.kv_head_count(), c.head_dim(), rows),
                                      qkv_rows.as_const(), bias, a.q_norm.cview(), a.k_norm.cview(), q, key, value,
                                      chunk, packed.positions, c.heads, c.kv_head_count(), c.head_dim(), frequencies,
                                      c.eps, c.qk_norm_whole ? 1 : 0, rows);
      },
      [&] {
        return k.prefill_qkv_rope(k.step_config(grid_for(qkv_rows.size() / 8, 256)), qkv_rows.as_const(),
                                  bias_part(0, q_dim), bias_part(q_dim, kv_dim), bias_part(q_dim + kv_dim, kv_dim), q,
                                  key, value, chunk, packed.positions, c.heads, c.kv_head_count(), c.head_dim(),
                                  frequencies, rows);
      });
  const PrefillAttentionSpans<T> spans{q.as_const(), key.as_const(), value.as_const(), k_cache, v_cache, q, chunk};
  const PagedPrefillLayout layout{
      .block_size = c.kv_block_size, .blocks = c.kv_blocks, .table_width = c.kv_table_width()};
  auto attend = detail::either(
      packed.packed(),
      [&] {
        PrefillAttentionSpans<T> parts = spans;
        parts.chunk = {};  // the segments replace it
        return varlen_prefill_attention(k, parts, packed.segments, packed.tables, shape, layout, kMaxRows);
      },
      [&] {
        return detail::either(
            c.paged(), [&] { return paged_prefill_attention(k, spans, table, shape, layout); },
            [&] { return prefill_attention(k, spans, shape); });
      });
  return gemm_layer(p, plans, a, m, b, chunk, c, rows, std::move(split) >> std::move(attend), q.as_const(), comm,
                    experts);
}

/// What a decoder's prefill reads and writes besides its own buffers: the decoder's config, kernels, weights and step
/// state (the KV caches, the RoPE table, the LM head's row, logits and next token), its stream, its input and output
/// staging and its sampling rule.
template <Element T>
struct BasicPrefillContext {
  const DecoderConfig& config;            ///< the decoder's config
  const BasicKernels<T>& kernels;         ///< its kernels
  const BasicDecoderWeights<T>& weights;  ///< its weights
  BasicDecoderState<T>& state;            ///< its step state (caches, RoPE table, x, logits, next)
  const Stream& stream;                   ///< the stream its graphs are captured on
  HostIo<int, int>& io;                   ///< its staging: PrefillIo at DecoderIo::prefill in, the next token out
  const Sampling& sampling;               ///< how the next token is chosen
  const BasicQuantizedKernels<T>* quantized = nullptr;  ///< its quantized kernels; null when no weight is quantized
  /// On a tensor-parallel rank (`config` then its shard_config), its communicator and logits buffers; else null.
  BasicRankState<T>* rank = nullptr;
  /// With a paged cache (config.paged()): where the input staging holds the chunk's block table (kv_table_width()
  /// ints), which each chunk graph copies to row 0 of the state's tables before its layers read it there.
  std::size_t table_at = 0;
};

/// Elements of the buffer prefill dequantizes one quantized matrix of a layer into (BasicPrefillBuffers::weights):
/// the largest quantized one (q, k and v stacked), or with quantized experts prefill_expert_scratch if that is more;
/// 0 when none is quantized.
template <Element T>
[[nodiscard]] std::size_t dequantized_elements(const BasicDecoderWeights<T>& weights);

/// Decoder::prefill's tensor-core path: the buffers, the GEMM plans and the graphs of every bucket used so far, and the
/// graph of the LM head for a prompt's last row. Made by the decoder at its first prefill that takes this path.
///
/// Thread safety: none; the decoder's execution lock serialises its calls.
template <Element T>
class BasicPrefill {
 public:
  /// Allocates the buffers for chunks of up to prefill_buckets(config).back() rows on `stream`'s device (zeroing
  /// them on `stream`: BasicPrefillBuffers), and `weight_elements` for the quantized matrices dequantized
  /// (dequantized_elements). \throws UsageError when the config has no buckets; CudaError when the device is out of
  /// memory.
  BasicPrefill(const Stream& stream, const DecoderConfig& config, std::size_t weight_elements = 0);

  /// The most rows of a chunk.
  [[nodiscard]] int max_rows() const noexcept { return buffers_.rows; }

  /// Runs `tokens` (kPrefillMinRows to max_rows() of them) at positions start .. start + tokens.size() - 1 of `slot`
  /// through every layer, writing their keys and values into the cache; with `last`, also the last row's logits
  /// (into the state's row 0) and next token, which it returns (-1 without `last`). The bucket's plans and graph (and
  /// the head's graph) are made on first use, outside any other capture. The caller has checked the values
  /// (check_prompt); they are checked again here before anything is written (check_prefill_chunk).
  /// \throws UsageError for a chunk outside those bounds; as Gemm's constructor and CudaGraph's capture.
  int run(const BasicPrefillContext<T>& ctx, std::span<const int> tokens, int start, int slot, bool last);

  /// One sequence's part of a packed chunk (run_packed): its tokens at positions start .. start + tokens.size() - 1;
  /// `slot` numbers it for sampled draws. Its block table is staged at row i (the part's index) of the forward_batch
  /// tables (BasicPrefillContext::table_at).
  struct PackedPart {
    std::span<const int> tokens;  ///< at least 1
    int start = 0;                ///< the first token's position
    int slot = 0;                 ///< for sampled draws
  };

  /// Runs up to kMaxRows sequences' prompt parts (1 to max_rows() rows in all, each part at least 1) through every
  /// layer in one chunk of a paged cache: the rows packed in part order, each rotated at its own position, attending
  /// through its own table (varlen_prefill_attention) and writing its keys and values there; then each part's last
  /// row through the LM head and the sampler as rows 0 .. parts.size() - 1 of the state (its logits and next token).
  /// Returns each part's next token. A bucket's packed graph is made on first use, as run's (it shares the bucket's
  /// plans), and the head's for each count of parts. The caller has checked the parts (check_packed_prompts) and
  /// staged their tables; segments are checked again here (check_prefill_segments).
  /// \throws UsageError for parts outside those bounds, on a contiguous cache or a tensor-parallel rank; as run.
  std::vector<int> run_packed(const BasicPrefillContext<T>& ctx, std::span<const PackedPart> parts);

  /// Drops the heads' graphs (captured with the sampling rule): the decoder's set_sampling calls it.
  void forget_head() noexcept {
    head_.reset();
    for (auto& h : packed_heads_) h.reset();
  }

  /// Buckets whose graph is captured, from most to least recently used (a bucket with a packed graph too counted
  /// once).
  [[nodiscard]] std::vector<int> captured_buckets() const;
  /// Bytes of device memory the buffers and the plans' workspace (shared by every bucket, made with the first) take.
  [[nodiscard]] std::size_t device_bytes() const noexcept;

 private:
  /// The bucket's graph: one sequence's chunk, or with `packed` a packed chunk's (PackedPrefillIo).
  CudaGraph<>& chunk_graph(const BasicPrefillContext<T>& ctx, int bucket, bool packed = false);
  CudaGraph<>& head_graph(const BasicPrefillContext<T>& ctx);
  /// The LM head and sampler of a packed chunk's `parts` last rows.
  CudaGraph<>& packed_head_graph(const BasicPrefillContext<T>& ctx, int parts);
  /// The plans of a bucket, made on first use.
  const BasicPrefillPlans<T>& bucket_plans(const BasicPrefillContext<T>& ctx, int bucket);

  std::vector<int> buckets_;
  BasicPrefillBuffers<T> buffers_;
  std::shared_ptr<const SharedGemmWorkspace> workspace_;  ///< every bucket's plans', made with the first (null: none)
  std::vector<std::pair<int, std::unique_ptr<BasicPrefillPlans<T>>>> plans_;  ///< by bucket, made on first use
  GraphCache<int> graphs_;           ///< by bucket (packed chunks' by minus the bucket), captured on first use
  std::optional<CudaGraph<>> head_;  ///< the LM head of the last row
  std::array<std::optional<CudaGraph<>>, kMaxRows> packed_heads_;  ///< a packed chunk's, by parts - 1
};

extern template struct BasicPrefillBuffers<half>;
extern template struct BasicPrefillBuffers<bfloat16>;
extern template class BasicPrefillPlans<half>;
extern template class BasicPrefillPlans<bfloat16>;
extern template class BasicPrefill<half>;
extern template class BasicPrefill<bfloat16>;

}  // namespace lazygraph::nn
