#pragma once
/// \file
/// Causal attention of a prompt chunk over a sequence's KV cache (prefill) as one lazy launch op: the
/// flash-attention kernels of kernels/nn/flash_attention.cu (tensor cores, an fp32 online softmax over tiles of 64
/// keys, grouped-query attention), which also write the chunk's keys and values into the cache. Every argument is
/// checked on the host when the op is built, before any GPU work.
///
/// Not yet used by Decoder::prefill, which still runs prompts through the decode step's kernels 8 rows at a time.
/// The functions are defined for T = half and bfloat16 in src/nn/prefill_attention.cpp.

#include "lazygraph/nn/kernels.hpp"

namespace lazygraph::nn {

/// The shape of one prefill attention launch: `rows` query rows of sequence slot `slot` at positions
/// start .. start + rows - 1, attending to cache positions 0 .. their own.
struct PrefillAttentionShape {
  int rows = 0;      ///< query rows of the chunk (prompt tokens), at least 1
  int start = 0;     ///< the position of the chunk's first row (0 for a prompt's first chunk)
  int slot = 0;      ///< the sequence slot whose cache is read and written
  int heads = 0;     ///< query heads
  int kv_heads = 0;  ///< key/value heads; heads must be a multiple of them (grouped-query attention)
  int head_dim = 0;  ///< 64 or 128 (the kernels are compiled for these)
  int context = 0;   ///< positions the cache holds per slot; start + rows must not exceed it
  int slots = 1;     ///< slots the cache holds
};

/// The memory of one prefill attention launch, in the layouts of kernels/nn/flash_attention.cu. Every span must be
/// 16-byte aligned (as DeviceBuffer's are).
template <Element T>
struct PrefillAttentionSpans {
  DeviceSpan<const T> q;  ///< the chunk's queries, RoPE applied: [rows][heads][head_dim]
  DeviceSpan<const T> k;  ///< the chunk's keys, RoPE applied: [rows][kv_heads][head_dim]
  DeviceSpan<const T> v;  ///< the chunk's values: [rows][kv_heads][head_dim]
  DeviceSpan<T> k_cache;  ///< keys [slots][kv_heads][context][head_dim], as the decoder's cache of one layer
  DeviceSpan<T> v_cache;  ///< values, like k_cache
  DeviceSpan<T> out;      ///< the attention output: [rows][heads][head_dim]; may be q itself, no other overlap
};

/// The launch op prefill_attention returns: a GraphNode (a kernel launch).
template <Element T>
using PrefillAttentionOp = LaunchOp<const T*, const T*, const T*, T*, T*, T*, int, int, int, int, int, int, int, float>;

/// Checks a prefill attention launch without a GPU: the shape, then every span's size, alignment and overlaps.
/// \throws UsageError naming the first thing wrong and the values involved: a head_dim other than 64 or 128, rows
/// below 1, a negative start, start + rows beyond the context, a slot outside the cache, heads not a positive
/// multiple of kv_heads, a span whose size is not the one the shape gives, a span not 16-byte aligned, spans that
/// overlap (out may equal q exactly).
template <Element T>
void check_prefill_attention(const PrefillAttentionSpans<T>& spans, const PrefillAttentionShape& shape);

/// Causal grouped-query attention of a prompt chunk, as a lazy launch op (nothing runs until it is executed):
/// row r (position p = start + r) of head h, with g = h / (heads / kv_heads), gets
///   out[r][h] = sum_{j <= p} softmax_j(q[r][h] . K_g[j] / sqrt(head_dim)) V_g[j],
/// K_g[j], V_g[j] being the cache's entries for j < start and the chunk's k, v for j >= start; and k, v are written
/// into the caches at positions start .. start + rows - 1 of the slot (every kv head), no other cache entry
/// changing. fp32 scores, softmax and sums; the probabilities are rounded to T before they multiply V (tensor cores).
/// The op is launched as `kernels.flash_attention_config` gives (early when `kernels` launch early).
/// \throws UsageError as check_prefill_attention, before any GPU work.
/// \post The op keeps every span's buffer alive while it, or a graph that recorded it, lives.
template <Element T>
[[nodiscard]] PrefillAttentionOp<T> prefill_attention(const BasicKernels<T>& kernels,
                                                      const PrefillAttentionSpans<T>& spans,
                                                      const PrefillAttentionShape& shape);

}  // namespace lazygraph::nn
