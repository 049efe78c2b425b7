#pragma once
/// \file
/// Causal attention of a prompt chunk over a sequence's KV cache (prefill) as one lazy launch op: the
/// flash-attention kernels of kernels/nn/flash_attention.cu (tensor cores, an fp32 online softmax over tiles of 64
/// keys, grouped-query attention), which also write the chunk's keys and values into the cache: a contiguous cache
/// (prefill_attention) or a paged one, through the sequence's block table (paged_prefill_attention). Every argument
/// is checked on the host when the op is built, before any GPU work.
///
/// The chunk's start, rows and slot are read from device memory when the kernel runs, so that Decoder::prefill
/// (nn/prefill.hpp) captures one graph per chunk-size bucket and replays it for every chunk; check_prefill_chunk checks
/// those values where the host knows them. The functions are defined for T = half and bfloat16 in
/// src/nn/prefill_attention.cpp.

#include <cstddef>
#include <span>

#include "lazygraph/nn/kernels.hpp"

namespace lazygraph::nn {

/// Where a prefill attention launch finds its chunk: three ints in device memory, [start, rows, slot], read when the
/// kernel runs (after the work before it), so that one captured graph serves every chunk that fits its spans.
struct PrefillChunkLayout {
  static constexpr std::size_t start = 0;  ///< the position of the chunk's first row (0 for a prompt's first chunk)
  static constexpr std::size_t rows = 1;   ///< the chunk's rows (prompt tokens), 1 to PrefillAttentionShape::rows
  static constexpr std::size_t slot = 2;   ///< the sequence slot whose cache is read and written
  static constexpr std::size_t size = 3;   ///< ints of a chunk
};

/// The values of a chunk, as the host knows them before it writes them (check_prefill_chunk).
struct PrefillChunk {
  int start = 0;  ///< the position of the chunk's first row
  int rows = 0;   ///< query rows (prompt tokens), at least 1
  int slot = 0;   ///< the sequence slot
};

/// The shape of a prefill attention launch: the spans' sizes. A launch attends the chunk its device memory holds
/// (PrefillChunkLayout): up to `rows` query rows of one slot at positions start .. start + rows - 1, attending to cache
/// positions 0 .. their own.
struct PrefillAttentionShape {
  int rows = 0;      ///< the query rows q, k, v and out hold (a bucket): the most a chunk may have, at least 1
  int heads = 0;     ///< query heads
  int kv_heads = 0;  ///< key/value heads; heads must be a multiple of them (grouped-query attention)
  int head_dim = 0;  ///< 64 or 128 (the kernels are compiled for these)
  int context = 0;   ///< positions the cache holds per slot; start + rows must not exceed it
  int slots = 1;     ///< slots the cache holds
  /// The scores' scale: 0 means 1 / sqrt(head_dim); a model may set its own (Gemma 3: query_pre_attn_scalar^-1/2).
  float scale = 0;
  /// The attention window: a row attends the `window` positions up to its own (a sliding-window layer); 0 none.
  int window = 0;
};

/// The memory of one prefill attention launch, in the layouts of kernels/nn/flash_attention.cu. Every span must be
/// 16-byte aligned (as DeviceBuffer's are).
template <Element T>
struct PrefillAttentionSpans {
  DeviceSpan<const T> q;  ///< the chunk's queries, RoPE applied: [shape.rows][heads][head_dim]
  DeviceSpan<const T> k;  ///< the chunk's keys, RoPE applied: [shape.rows][kv_heads][head_dim]
  DeviceSpan<const T> v;  ///< the chunk's values: [shape.rows][kv_heads][head_dim]
  DeviceSpan<T> k_cache;  ///< keys [slots][kv_heads][context][head_dim], as the decoder's cache of one layer
  DeviceSpan<T> v_cache;  ///< values, like k_cache
  DeviceSpan<T> out;      ///< the attention output: [shape.rows][heads][head_dim]; may be q itself, no other overlap
  DeviceSpan<const int> chunk;  ///< the chunk, [start, rows, slot] (PrefillChunkLayout): PrefillChunkLayout::size ints
};

/// The launch op prefill_attention returns: a GraphNode (a kernel launch).
template <Element T>
using PrefillAttentionOp =
    LaunchOp<const T*, const T*, const T*, T*, T*, T*, const int*, int, int, int, int, int, float, int>;

/// Checks a prefill attention launch without a GPU: the shape, then every span's size, alignment and overlaps.
/// \throws UsageError naming the first thing wrong and the values involved: a head_dim other than 64 or 128, rows
/// below 1 or beyond the context, heads not a positive multiple of kv_heads, a span whose size is not the one the
/// shape gives (chunk: 3 ints), a span not 16-byte aligned (but chunk), spans that overlap (out may equal q exactly;
/// chunk must not overlap what the kernel writes).
template <Element T>
void check_prefill_attention(const PrefillAttentionSpans<T>& spans, const PrefillAttentionShape& shape);

/// Checks the values a chunk will hold in device memory, where the host knows them (before writing them there): the
/// kernel traps on the same conditions, writing nothing. \throws UsageError naming the value: rows below 1 or beyond
/// shape.rows, a negative start, start + rows beyond the context, a slot outside the cache.
void check_prefill_chunk(const PrefillAttentionShape& shape, const PrefillChunk& chunk);

/// Causal grouped-query attention of a prompt chunk, as a lazy launch op (nothing runs until it is executed). When it
/// runs, it reads [start, rows, slot] from spans.chunk; row r < rows (position p = start + r) of head h, with
/// g = h / (heads / kv_heads), gets
///   out[r][h] = sum_{j <= p} softmax_j(q[r][h] . K_g[j] / sqrt(head_dim)) V_g[j],
/// K_g[j], V_g[j] being the cache's entries for j < start and the chunk's k, v for j >= start; and k, v are written
/// into the caches at positions start .. start + rows - 1 of the slot (every kv head), no other cache entry
/// changing; rows from `rows` to shape.rows of q, k, v and out are not touched. fp32 scores, softmax and sums; the
/// probabilities are rounded to T before they multiply V (tensor cores). A chunk whose values check_prefill_chunk
/// would refuse traps the launch (a sticky error of the context) before anything is written.
/// The op is launched as `kernels.flash_attention_config` gives (early when `kernels` launch early).
/// \throws UsageError as check_prefill_attention, before any GPU work.
/// \post The op keeps every span's buffer alive while it, or a graph that recorded it, lives.
template <Element T>
[[nodiscard]] PrefillAttentionOp<T> prefill_attention(const BasicKernels<T>& kernels,
                                                      const PrefillAttentionSpans<T>& spans,
                                                      const PrefillAttentionShape& shape);

/// The pool of a paged prefill attention launch (paged_prefill_attention): PrefillAttentionSpans' k_cache and v_cache
/// then hold the pools [blocks][kv_heads][block_size][head_dim] (nn::PagedAttention's layout, one layer's), and the
/// chunk's sequence's position p lives in block table[p / block_size] at offset p % block_size.
struct PagedPrefillLayout {
  int block_size = 16;  ///< positions per block: 16 or 32
  int blocks = 0;       ///< blocks in the pool, at least 1
  int table_width = 0;  ///< block ids in the table: table_width * block_size must reach PrefillAttentionShape::context
};

/// The launch op paged_prefill_attention returns: a GraphNode (a kernel launch).
template <Element T>
using PagedPrefillAttentionOp = LaunchOp<const T*, const T*, const T*, T*, T*, T*, const int*, const int*, int, int,
                                         int, int, int, int, int, float, int>;

/// Checks a paged prefill attention launch without a GPU: check_prefill_attention's refusals with the caches of
/// blocks * kv_heads * block_size * head_dim elements (`shape.slots` is not used), a block_size other than 16 or 32,
/// blocks below 1, a table whose width times block_size does not reach shape.context, `table` not of table_width
/// ints, out or a pool overlapping `table`. \throws UsageError naming the first thing wrong and the values involved.
template <Element T>
void check_paged_prefill_attention(const PrefillAttentionSpans<T>& spans, const DeviceSpan<const int>& table,
                                   const PrefillAttentionShape& shape, const PagedPrefillLayout& layout);

/// prefill_attention over a paged KV cache, as a lazy launch op: the same attention, arithmetic and bits (the kernels
/// share one body), with the cache's entries for j < start read from, and the chunk's k and v written to, the pools'
/// blocks that `table` (layout.table_width block ids in device memory, read when the kernel runs, like the chunk)
/// names. The chunk's slot is not read. The table's entries 0 .. (start + rows - 1) / block_size must lie in
/// [0, blocks) (the kernel traps on one outside before anything is written: check_paged_prompt checks them where the
/// host knows them) and be distinct (a block the chunk writes read at another index would be a race); the entries
/// past them are not read. The op is launched as `kernels.flash_attention_config` gives.
/// \throws UsageError as check_paged_prefill_attention, before any GPU work.
/// \post The op keeps every span's buffer alive while it, or a graph that recorded it, lives.
template <Element T>
[[nodiscard]] PagedPrefillAttentionOp<T> paged_prefill_attention(const BasicKernels<T>& kernels,
                                                                 const PrefillAttentionSpans<T>& spans,
                                                                 DeviceSpan<const int> table,
                                                                 const PrefillAttentionShape& shape,
                                                                 const PagedPrefillLayout& layout);

/// Where a varlen prefill launch (varlen_prefill_attention) finds its segments: ints in device memory, [count, then
/// start and rows of each of up to max_segments segments], read when the kernel runs. Segment i's rows are the chunk's
/// rows after segment i - 1's (packed from row 0), at positions start .. start + rows - 1 of its own sequence, whose
/// block table is row i of the launch's tables.
struct PrefillSegmentsLayout {
  static constexpr std::size_t count = 0;  ///< the segments, 1 to max_segments
  /// The start of segment i.
  [[nodiscard]] static constexpr std::size_t start(int i) { return 1 + 2 * static_cast<std::size_t>(i); }
  /// The rows of segment i.
  [[nodiscard]] static constexpr std::size_t rows(int i) { return 2 + 2 * static_cast<std::size_t>(i); }
  /// Ints of the segments of a launch of up to `max_segments`.
  [[nodiscard]] static constexpr std::size_t size(int max_segments) {
    return 1 + 2 * static_cast<std::size_t>(max_segments);
  }
};

/// The most segments one varlen prefill launch takes.
inline constexpr int kMaxPrefillSegments = 64;

/// Checks the segments a varlen launch will find in device memory, where the host knows them (PrefillChunk's slot is
/// not used): the kernel traps on the same conditions, writing nothing. \throws UsageError naming the value: no
/// segment or more than max_segments, a segment's rows below 1, a negative start, start + rows beyond the context,
/// more rows in all than shape.rows.
void check_prefill_segments(const PrefillAttentionShape& shape, std::span<const PrefillChunk> segments,
                            int max_segments);

/// The launch op varlen_prefill_attention returns: a GraphNode (a kernel launch).
template <Element T>
using VarlenPrefillAttentionOp = LaunchOp<const T*, const T*, const T*, T*, T*, T*, const int*, const int*, int, int,
                                          int, int, int, int, int, int, float, int>;

/// Checks a varlen prefill attention launch without a GPU: check_paged_prefill_attention's refusals (spans.chunk
/// must be empty: the segments replace it), max_segments outside 1 .. kMaxPrefillSegments, `segments` not of
/// PrefillSegmentsLayout::size(max_segments) ints, `tables` not of max_segments * table_width ints, out or a pool
/// overlapping them. \throws UsageError naming the first thing wrong and the values involved.
template <Element T>
void check_varlen_prefill_attention(const PrefillAttentionSpans<T>& spans, DeviceSpan<const int> segments,
                                    DeviceSpan<const int> tables, const PrefillAttentionShape& shape,
                                    const PagedPrefillLayout& layout, int max_segments);

/// paged_prefill_attention over several sequences' chunks at once (variable lengths, one launch), as a lazy launch op:
/// segment i's rows of q, k, v and out (PrefillSegmentsLayout, read when the kernel runs) attend as
/// paged_prefill_attention attends a chunk of those rows at that start through row i of `tables`, with the same
/// arithmetic (flash_attention_paged_varlen_d64 / _d128: head_dim 64 in tiles of 128 rows, 128 in tiles of 64), and
/// write their keys and values through that table. The segments' tables must not share a block that a segment
/// writes (KvBlockPool's copy-on-write never writes a shared block), and every segment's entries up to its last
/// position must lie in [0, blocks): the kernel checks every segment and entry before anything is written and traps
/// on a bad one. Rows past the segments' are not touched.
/// \throws UsageError as check_varlen_prefill_attention, before any GPU work.
/// \post The op keeps every span's buffer alive while it, or a graph that recorded it, lives.
template <Element T>
[[nodiscard]] VarlenPrefillAttentionOp<T> varlen_prefill_attention(const BasicKernels<T>& kernels,
                                                                   const PrefillAttentionSpans<T>& spans,
                                                                   DeviceSpan<const int> segments,
                                                                   DeviceSpan<const int> tables,
                                                                   const PrefillAttentionShape& shape,
                                                                   const PagedPrefillLayout& layout, int max_segments);

}  // namespace lazygraph::nn
