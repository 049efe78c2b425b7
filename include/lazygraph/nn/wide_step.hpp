#pragma once
/// \file
/// The wide decode step of a paged decoder (DecoderConfig::max_batch above kMaxRows): 9 to kMaxWideRows rows of one
/// token each, each its own sequence at its own position with its own block table, on tensor cores. Per layer, over the
/// N rows of a bucket (gemm_layer, prefill's layer body, with paged decode attention as its core):
///
///   h = rmsnorm(x) * g_attn                       prefill_rms_norm, one block per row
///   qkv = h Wqkv^T                                one cuBLASLt GEMM over the stacked weight
///   q, k, v = qkv + biases; rotate q and k;       PagedAttention::rope_append: each row at its own position, its k
///   cache <- k, v                                 and v into the pool through its own table
///   a = attention(q, cache)                       PagedAttention::attend_grouped: each key and value read once for
///                                                 the query heads that share it, each row's positions split
///                                                 (paged_grouped_wave_splits, or DecoderConfig::attention_blocks)
///   x += a Wo^T                                   GEMM with the residual (cuBLASLt: C = D = x)
///   h = rmsnorm(x) * g_mlp; gate, up = GEMMs; gate = act(gate) * up; x += gate W2^T
///                                                 (a mixture of experts: its router and grouped products,
///                                                 prefill_moe.hpp)
///
/// then the final norm, the LM head as a GEMM over the N rows, soft-capping where the model has it, and each row's
/// next token by the step's sampler (greedy, or drawn from (seed, position, row) as forward_batch's). With q/k norms
/// (Qwen3, Gemma 3, OLMoE) the split is PagedAttention::qk_norm_rope_append: each q and k head normed first.
///
/// Buckets of 16, 32, 64, 128 and 256 rows (wide_buckets: up to the smallest that holds max_batch): N rows run in the
/// graph of the smallest bucket that holds them. The rows past N (the bucket's padding) take row 0's token at position
/// 0 through row 0's first block: rope_append writes nothing for them (it reads N from the device io), and the row-wise
/// kernels leave them alone; the GEMMs compute them (each row on its own: nothing of theirs reaches a real row), and
/// attention gives them zeros without reading the cache. The tokens, positions and tables are staged on the host and
/// copied in by the graph's first nodes: new values never recapture. Graphs are captured on first use (or all at once,
/// capture_all) into one GraphPool; the buffers for the largest bucket are allocated once, when the step is made.
///
/// Quantized weights are dequantized into the layer buffers' scratch before each GEMM that reads them, every step
/// (gemm_operand, as prefill does; each value rounded once to T): the step then reads each quantized matrix in its
/// format, writes and reads it in T. A quantized LM head is dequantized whole (its vocab x d elements of scratch;
/// wide_dequantized_elements). What it does not run (DecoderConfig::validate and the decoder refuse them, naming them):
/// quantized experts (every stack would be dequantized at every step, about 0.8 ms a layer of Qwen3-30B-A3B's, however
/// few experts the rows chose), and what the paged cache does not run (the unfused block, the persistent backend,
/// tensor-parallel ranks).

#include <algorithm>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lazygraph/graph/graph_cache.hpp"
#include "lazygraph/graph/graph_pool.hpp"
#include "lazygraph/module/host_io.hpp"
#include "lazygraph/nn/decoder_config.hpp"
#include "lazygraph/nn/paged_attention.hpp"
#include "lazygraph/nn/prefill.hpp"
#include "lazygraph/nn/wide_step_report.hpp"

namespace lazygraph::nn {

/// The fewest rows of a wide step's smallest bucket.
inline constexpr int kWideMinRows = 16;

/// The rows of each wide step's graph: 16, 32, ... up to the smallest that holds config.max_batch; empty when
/// max_batch is at most kMaxRows (the decoder steps every batch on its narrow graphs). \throws UsageError for an
/// invalid config.
[[nodiscard]] std::vector<int> wide_buckets(const DecoderConfig& config);

/// Whether a decoder of `config` with max_batch above kMaxRows can run its wide step on a GPU of capability `cc`:
/// compute capability 8.0 or newer and cuBLASLt loadable (the GEMMs). False with the reason in `why` (when given)
/// otherwise. Never throws.
[[nodiscard]] bool wide_step_available(ComputeCapability cc, std::string* why = nullptr) noexcept;

/// The wide step's io in ints, for buckets of up to `rows` rows and tables of `width` block ids: [chunk | tokens |
/// positions | slots | tables], the chunk as PrefillChunkLayout ([0, n, 0]: n the real rows, which the row-wise kernels
/// and rope_append read), then `rows` of each per-row value and `rows` tables. The host stages it whole but for the
/// tables, of which a bucket's graph copies in its own rows only.
struct WideIo {
  static constexpr std::size_t chunk = 0;                          ///< [0, n, 0] (PrefillChunkLayout)
  static constexpr std::size_t count = PrefillChunkLayout::rows;   ///< n, the real rows
  static constexpr std::size_t tokens = PrefillChunkLayout::size;  ///< the rows' tokens [rows]
  /// Where the rows' positions start.
  [[nodiscard]] static constexpr std::size_t positions(int rows) noexcept { return tokens + size_of(rows); }
  /// Where the rows' slots start (row r's is r: its sampled draws depend on it).
  [[nodiscard]] static constexpr std::size_t slots(int rows) noexcept { return tokens + 2 * size_of(rows); }
  /// Where the tables start: the part every replay copies in whole ends here.
  [[nodiscard]] static constexpr std::size_t tables(int rows) noexcept { return tokens + 3 * size_of(rows); }
  /// All of it.
  [[nodiscard]] static constexpr std::size_t size(int rows, int width) noexcept {
    return tables(rows) + size_of(rows) * size_of(width);
  }

 private:
  [[nodiscard]] static constexpr std::size_t size_of(int n) noexcept { return static_cast<std::size_t>(n > 0 ? n : 0); }
};

/// What the wide step reads and writes besides its own buffers: the decoder's config, kernels, weights, step state
/// (the pools, the RoPE tables, the multiprocessors for the attention splits), its paged attention kernels, stream and
/// sampling rule.
template <Element T>
struct BasicWideContext {
  const DecoderConfig& config;            ///< the decoder's config (paged, max_batch above kMaxRows)
  const BasicKernels<T>& kernels;         ///< its kernels
  const BasicDecoderWeights<T>& weights;  ///< its weights, in any format
  BasicDecoderState<T>& state;            ///< its state: k_cache and v_cache are the pools
  const PagedAttention<T>& paged;         ///< its paged attention kernels
  const Stream& stream;                   ///< the stream its graphs are captured on
  const Sampling& sampling;               ///< how the next token is chosen
  /// Its quantized kernels; null when no weight is quantized.
  const BasicQuantizedKernels<T>* quantized = nullptr;
};

/// Elements of the scratch a wide step dequantizes `weights`' quantized matrices into: dequantized_elements (the
/// largest quantized matrix of a layer; the decoder refuses quantized experts here), or a quantized LM head's vocab x d
/// if more; 0 when every weight is dense.
template <Element T>
[[nodiscard]] std::size_t wide_dequantized_elements(const BasicDecoderWeights<T>& weights) {
  const std::size_t head = weights.lm_head.is_dense() ? 0
                                                      : static_cast<std::size_t>(weights.lm_head.rows()) *
                                                            static_cast<std::size_t>(weights.lm_head.cols());
  return std::max(dequantized_elements(weights), head);
}

/// A paged decoder's wide step: its buffers, the GEMM plans and the graph of every bucket used so far (see the file
/// comment). Made by the decoder at its first wide call. Thread safety: none; the decoder's execution lock serialises
/// its calls.
template <Element T>
class BasicWideStep {
 public:
  /// Allocates the buffers for the largest bucket (wide_buckets(config).back() rows) on `stream`'s device, zeroing them
  /// on `stream`, with `weight_elements` of scratch for quantized weights (wide_dequantized_elements), and the pinned
  /// staging. \throws UsageError when the config has no wide buckets; CudaError when the device is out of memory.
  BasicWideStep(const Stream& stream, const KernelLibrary& library, const DecoderConfig& config,
                std::size_t weight_elements = 0);

  /// Steps steps.size() rows (kMaxRows + 1 to the largest bucket's) in the graph of the smallest bucket that holds
  /// them: row r takes steps[r] through tables[r * kv_table_width() ..], and its next token is element r of the
  /// returned span (valid until the next call). The caller has checked the values (check_paged_batch).
  /// \throws UsageError for a row count outside those bounds; as Gemm's constructor and CudaGraph's capture when a
  /// bucket is first used.
  std::span<const int> run(const BasicWideContext<T>& ctx, std::span<const TokenAt> steps, std::span<const int> tables);

  /// The graph of bucket `rows` (one of buckets()), captured now if it was not yet. \throws UsageError for another row
  /// count; as run.
  CudaGraph<>& graph(const BasicWideContext<T>& ctx, int rows);
  /// Captures every bucket's graph not yet captured. \throws as graph.
  void capture_all(const BasicWideContext<T>& ctx);

  /// The rows of each bucket, ascending.
  [[nodiscard]] const std::vector<int>& buckets() const noexcept { return buckets_; }
  /// Each bucket captured since the step was made or last forgot its graphs: capture time and memory, in the order
  /// they were captured.
  [[nodiscard]] const std::vector<WideBucketReport>& report() const noexcept { return report_; }
  /// Bytes of device memory the buffers take (without the graphs and the plans: report()).
  [[nodiscard]] std::size_t buffer_bytes() const noexcept;
  /// Row `row`'s logits of the last run (vocab values on the device).
  [[nodiscard]] DeviceSpan<const T> logits(int row) const;
  /// Drops every graph (captured with the sampling rule) and the report of their captures: the decoder's set_sampling
  /// calls it. The plans stay.
  void forget_graphs() noexcept;

 private:
  /// The device memory of the largest bucket: prefill's layer buffers (x, h, qkv, q, gate, up; k and v unused), the
  /// attention output, the logits, the next tokens, the io, and the grouped attention's partials and counters.
  struct Buffers {
    Buffers(const Stream& stream, const DecoderConfig& config, int rows, std::size_t partials,
            std::size_t weight_elements);
    BasicPrefillBuffers<T> layer;
    DeviceBuffer<T> attn;             ///< [rows][q_dim]
    DeviceBuffer<T> logits;           ///< [rows][vocab]
    DeviceBuffer<int> next;           ///< [rows]
    DeviceBuffer<int> io;             ///< WideIo's layout
    DeviceBuffer<float> partials;     ///< attend_grouped's, for the bucket that needs the most
    DeviceBuffer<unsigned> counters;  ///< attend_grouped's [rows][heads], zero between launches
  };

  /// The op of a step of bucket `rows` (everything between the io copies).
  [[nodiscard]] CudaGraph<> capture(const BasicWideContext<T>& ctx, int rows, const BasicPrefillPlans<T>& plans);

  std::vector<int> buckets_;
  int max_rows_ = 0;
  int width_ = 0;
  std::size_t vocab_ = 0;
  Buffers buffers_;
  HostIo<int, int> io_;
  GraphPool pool_;
  std::shared_ptr<const SharedGemmWorkspace> workspace_;  ///< every bucket's plans', made with the first (null: none)
  std::vector<std::pair<int, std::unique_ptr<BasicPrefillPlans<T>>>> plans_;  ///< by bucket, made on first use
  GraphCache<int> graphs_;                                                    ///< by bucket, captured on first use
  std::vector<WideBucketReport> report_;
};

extern template class BasicWideStep<half>;
extern template class BasicWideStep<bfloat16>;

}  // namespace lazygraph::nn
