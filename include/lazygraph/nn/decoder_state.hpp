#pragma once
/// \file
/// The device memory a decoder's step reads and writes besides its weights: the io, the activations of up to
/// kMaxRows rows, the KV caches and the RoPE tables.

#include <cstddef>

#include "lazygraph/driver/device_buffer.hpp"
#include "lazygraph/nn/decoder_config.hpp"
#include "lazygraph/nn/element.hpp"

namespace lazygraph::nn {

/// The device memory one step reads and writes besides the weights. A step processes `rows` rows (1 to kMaxRows):
/// row r is token tokens[r] of sequence slots[r] at position positions[r]. Activations hold kMaxRows rows.
template <Element T>
struct BasicDecoderState {
  /// Allocates every buffer for `config`, uninitialised but for rope_frequencies (rope_frequencies() of the config)
  /// and attention_counters, generated and a paged cache's tables (zero), which it writes and waits for.
  BasicDecoderState(const Device& device, const DecoderConfig& config);

  DeviceBuffer<int> io;         ///< [tokens | positions | slots | control] (DecoderIo): copied in before each replay
  DeviceBuffer<int> generated;  ///< the tokens Decoder::generate's loop appends [context]
  DeviceBuffer<int> next;       ///< the chosen next token of each row [kMaxRows]
  DeviceBuffer<T> x;            ///< residual streams [kMaxRows][d]
  DeviceBuffer<T> q;            ///< [kMaxRows][q_dim]
  DeviceBuffer<T> k;            ///< [kMaxRows][kv_dim] (the unfused path only)
  DeviceBuffer<T> v;            ///< [kMaxRows][kv_dim] (likewise)
  /// The stacked q, k and v projections [kMaxRows][q_dim + 2 kv_dim] (qk_norm, or a paged cache: its quantized q/k/v
  /// path); empty otherwise.
  DeviceBuffer<T> qkv;
  DeviceBuffer<T> block_out;  ///< a block's output before its post-norm [kMaxRows][d] (post_norms only)
  DeviceBuffer<T> attn;       ///< attention outputs [kMaxRows][q_dim]
  DeviceBuffer<T> act;        ///< MLP activations [kMaxRows][ffn] (empty with DecoderConfig::moe)
  /// A mixture of experts' (DecoderConfig::moe; else all empty): the normed rows [kMaxRows][d], the router's logits
  /// [kMaxRows][experts], each row's chosen experts [kMaxRows][top k] and their weights (with
  /// DecoderConfig::record_routes every layer's, [layers][kMaxRows][top k]: moe_routes.hpp), the step's plan for the
  /// expert kernels [kMoePlanInts] (kernels/nn/moe.cu), the chosen experts' activations [kMaxRows][top k][width],
  /// their down projections in fp32 [kMaxRows][top k][d] and moe_down's counts of finished blocks per grid column [d]
  /// (zero between steps).
  DeviceBuffer<T> moe_h;
  DeviceBuffer<T> moe_logits;           ///< see moe_h
  DeviceBuffer<int> expert_ids;         ///< see moe_h
  DeviceBuffer<float> expert_weights;   ///< see moe_h
  DeviceBuffer<int> moe_plan;           ///< see moe_h
  DeviceBuffer<T> moe_act;              ///< see moe_h
  DeviceBuffer<float> moe_partial;      ///< see moe_h
  DeviceBuffer<unsigned> moe_counters;  ///< see moe_h
  /// With DecoderConfig::tensor_cores, for steps of 2 to 8 rows (moe_block's grouped products, prefill_moe.hpp's
  /// kernels): the (row, slot) pairs grouped by expert [kMaxRows * top k], each pair's place among them, and the tiles
  /// [1 + 4 moe_prefill_tiles(kMaxRows * top k, experts)]. Else empty.
  DeviceBuffer<int> moe_order;
  DeviceBuffer<int> moe_slot_of;  ///< see moe_order
  DeviceBuffer<int> moe_tiles;    ///< see moe_order
  DeviceBuffer<T> logits;         ///< [kMaxRows][vocab]
  /// [layers][max_batch][kv_heads][context][head_dim]; with a paged cache (DecoderConfig::kv_block_size) the pools,
  /// [layers][kv_blocks][kv_heads][kv_block_size][head_dim] (PagedAttention's layout per layer).
  DeviceBuffer<T> k_cache;
  DeviceBuffer<T> v_cache;  ///< like k_cache
  /// A paged cache's block tables [kMaxRows][kv_table_width] (row r's of a step at r), copied in before each replay
  /// like the io; empty for the contiguous cache.
  DeviceBuffer<int> tables;
  /// attention_split's [kMaxRows][heads][splits][head_dim + 2] (paged or grouped_batches: of the most splits
  /// paged_attention_splits and paged_grouped_wave_splits give)
  DeviceBuffer<float> attention_partials;
  DeviceBuffer<unsigned> attention_counters;   ///< attention_split's [kMaxRows][heads], zero between steps
  DeviceBuffer<float> rope_frequencies;        ///< RoPE's inverse frequency per pair of a head [head_dim / 2]
  DeviceBuffer<float> local_rope_frequencies;  ///< the sliding layers' (DecoderConfig::local_theta), else empty
  /// The persistent backend's greedy choice: each row's best logit and its index per chunk of the vocabulary
  /// [kMaxRows][kArgmaxChunks] (decoder_tiles.hpp).
  DeviceBuffer<float> argmax_values;
  DeviceBuffer<int> argmax_indices;  ///< see argmax_values
  /// The integers 0 to kMaxRows, [kMaxRows + 1]: a step of r rows passes the grouped attention kernels (which read
  /// their row count on the device) row_counts[r], and so do a paged cache's append from s.qkv (q/k norms, quantized
  /// q/k/v) and a mixture of experts' grouped products. Empty unless grouped_attention, grouped_batches, a paged
  /// cache, or moe_order is not.
  DeviceBuffer<int> row_counts;
  int multiprocessors = 0;  ///< the device's, for paged_splits
  /// Whether a paged cache's step attends with PagedAttention::attend_grouped (one block per kv head and split, on
  /// tensor cores at head_dim 64 and 128): paged, attention_blocks 0 (the library picks), and a GPU of compute
  /// capability 8.0 or newer (cp.async). Otherwise attend or attend_split, with the contiguous cache's bits.
  bool grouped_attention = false;
  /// Whether the contiguous cache's steps of 2 to 8 rows may attend with PagedAttention::attend_grouped_slots: batches
  /// on tensor cores (DecoderConfig::tensor_cores, max_batch 2 or more) of the graph backend, attention_blocks 1 (the
  /// default), head_dim 64 or 128, the fused path or q/k norms (which attend as it does), and a GPU of compute
  /// capability 8.0 or newer. They do where the batch's longest row is at kGroupedBatchFrom or past it (a graph of its
  /// own, captured at the first such batch); one row keeps `attention`. A tensor-parallel rank's state may hold it,
  /// but the rank's step attends through its own chain (Decoder::grouped_batches is false there).
  bool grouped_batches = false;

  /// A paged cache's attention splits for steps of `rows` rows: attention_blocks, or when that is 0 what
  /// paged_grouped_wave_splits gives on this device for `resident` (grouped_attention:
  /// PagedAttention::grouped_resident of the step's shape), or paged_attention_splits for the tables' capacity (1: the
  /// unsplit kernel) on a GPU older than compute capability 8.0.
  [[nodiscard]] int paged_splits(const DecoderConfig& config, int rows, int resident = 0) const;

  /// The rows' tokens, as the graph reads them.
  [[nodiscard]] DeviceSpan<const int> tokens() const { return io.cview().subspan(DecoderIo::tokens, kMaxRows); }
  /// The rows' positions.
  [[nodiscard]] DeviceSpan<const int> positions() const { return io.cview().subspan(DecoderIo::positions, kMaxRows); }
  /// The rows' sequence slots (which KV cache each row reads and appends to).
  [[nodiscard]] DeviceSpan<const int> slots() const { return io.cview().subspan(DecoderIo::slots, kMaxRows); }
  /// generate's control: [n, stop_token, count].
  [[nodiscard]] DeviceSpan<int> control() { return io.view().subspan(DecoderIo::control, DecoderIo::control_size); }
};

/// The position from which the contiguous cache's batches attend on the grouped kernels (grouped_batches): the
/// longest row's. A row's bits are the same in a batch of any size on one side of it, not across it (the longest row
/// picks the kernels for all). Below it one block a (row, head) was mostly faster: H200, 2026-12-02, 8 rows on tensor
/// cores, the two alternated in one run (fp16 us, one block a head -> grouped): TinyLlama shape at 128 998 -> 1015, 256
/// 1028 -> 1113, 512 1095 -> 1136, 768 1173 -> 1154, 4000 2002 -> 1327; Llama-3.2-1B shape at 128 987 -> 1002, 256 1007
/// -> 1009, 512 1056 -> 1022, 1000 1159 -> 1062; Qwen3-30B-A3B's 12 layers at 128 2636 -> 2696, 512 2752 -> 2804, 1000
/// 2914 -> 2819, 2000 3302 -> 2890 (docs/decode_performance.md).
inline constexpr int kGroupedBatchFrom = 768;

/// The step memory of an fp16 decoder.
using DecoderState = BasicDecoderState<half>;

}  // namespace lazygraph::nn
