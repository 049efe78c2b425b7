#include "lazygraph/nn/prefill_attention.hpp"

#include <cmath>
#include <span>
#include <string>

namespace lazygraph::nn {

namespace {

[[noreturn]] void refuse(const std::string& what) { throw UsageError("prefill_attention: " + what); }

std::string str(long long v) { return std::to_string(v); }

/// Where a span lies, in bytes, for the overlap checks.
struct Extent {
  const char* name;
  CUdeviceptr begin;
  CUdeviceptr end;
};

template <class U>
Extent extent(const char* name, const DeviceSpan<U>& s) {
  return {name, s.address(), s.address() + s.size_bytes()};
}

bool overlap(const Extent& a, const Extent& b) { return a.begin < b.end && b.begin < a.end; }

void check_shape(const PrefillAttentionShape& s) {
  if (s.head_dim != 64 && s.head_dim != 128) {
    refuse("head_dim " + str(s.head_dim) +
           " is not supported: the flash-attention kernels are compiled for 64 and 128");
  }
  if (s.rows < 1) refuse("rows is " + str(s.rows) + "; a chunk has at least one row");
  if (s.context < 1) refuse("context is " + str(s.context) + "; the cache holds at least one position");
  if (s.slots < 1) refuse("slots is " + str(s.slots) + "; the cache holds at least one slot");
  if (s.heads < 1 || s.kv_heads < 1) {
    refuse("heads " + str(s.heads) + " and kv_heads " + str(s.kv_heads) + " must both be at least 1");
  }
  if (s.heads % s.kv_heads != 0) {
    refuse("heads " + str(s.heads) + " is not a multiple of kv_heads " + str(s.kv_heads) +
           " (grouped-query attention shares each kv head among heads / kv_heads query heads)");
  }
  if (s.window < 0) refuse("window is " + str(s.window) + "; 0 (none) or the positions a row attends");
  if (!std::isfinite(s.scale) || s.scale < 0) refuse("scale must be 0 (1 / sqrt(head_dim)) or positive and finite");
}

template <class U>
void check_span(const char* name, const DeviceSpan<U>& span, long long expected, const char* layout,
                bool aligned = true) {
  if (static_cast<long long>(span.size()) != expected) {
    refuse(std::string(name) + " has " + str(static_cast<long long>(span.size())) + " elements; " + layout + " = " +
           str(expected) + " are expected");
  }
  if (aligned && span.address() % 16 != 0) {
    refuse(std::string(name) + " is not 16-byte aligned (its address ends in " + str(span.address() % 16) +
           "); the kernels copy 16 bytes at a time");
  }
}

}  // namespace

void check_prefill_chunk(const PrefillAttentionShape& shape, const PrefillChunk& c) {
  if (c.rows < 1) refuse("rows is " + str(c.rows) + "; a chunk has at least one row");
  if (c.rows > shape.rows) {
    refuse("rows " + str(c.rows) + " exceed the " + str(shape.rows) + " rows the launch's spans hold");
  }
  if (c.start < 0) refuse("start is " + str(c.start) + "; positions start at 0");
  if (static_cast<long long>(c.start) + c.rows > shape.context) {
    refuse("positions start .. start + rows - 1 = " + str(c.start) + " .. " +
           str(static_cast<long long>(c.start) + c.rows - 1) + " leave the context of " + str(shape.context) +
           " positions");
  }
  if (c.slot < 0 || c.slot >= shape.slots) {
    refuse("slot " + str(c.slot) + " is outside the cache's slots 0 .. " + str(shape.slots - 1));
  }
}

namespace {

/// The checks every launch shares, the caches being of `cache_size` elements (`cache_layout` says how many); `chunk`:
/// whether the launch reads spans.chunk (else it must be empty).
template <Element T>
void check_spans(const PrefillAttentionSpans<T>& spans, const PrefillAttentionShape& shape, long long cache_size,
                 const char* cache_layout, bool chunk_read = true) {
  const long long rows = shape.rows;
  const long long q_size = rows * shape.heads * shape.head_dim;
  const long long kv_size = rows * shape.kv_heads * shape.head_dim;
  check_span("q", spans.q, q_size, "rows x heads x head_dim");
  check_span("k", spans.k, kv_size, "rows x kv_heads x head_dim");
  check_span("v", spans.v, kv_size, "rows x kv_heads x head_dim");
  check_span("k_cache", spans.k_cache, cache_size, cache_layout);
  check_span("v_cache", spans.v_cache, cache_size, cache_layout);
  check_span("out", spans.out, q_size, "rows x heads x head_dim");
  if (chunk_read) {
    check_span("chunk", spans.chunk, static_cast<long long>(PrefillChunkLayout::size), "[start, rows, slot]", false);
  } else if (!spans.chunk.empty()) {
    refuse("chunk has " + str(static_cast<long long>(spans.chunk.size())) +
           " elements; a varlen launch reads its segments instead, so it must be empty");
  }

  // What the kernel writes (out, the caches) must not overlap anything else it reads or writes; out may be q itself,
  // since each block reads its part of q before it writes the same part of out.
  const Extent q = extent("q", spans.q);
  const Extent k = extent("k", spans.k);
  const Extent v = extent("v", spans.v);
  const Extent k_cache = extent("k_cache", spans.k_cache);
  const Extent v_cache = extent("v_cache", spans.v_cache);
  const Extent out = extent("out", spans.out);
  const Extent chunk = extent("chunk", spans.chunk);
  const Extent pairs[][2] = {{out, k},           {out, v},     {out, k_cache}, {out, v_cache},  {out, chunk},
                             {k_cache, v_cache}, {k_cache, q}, {k_cache, k},   {k_cache, v},    {k_cache, chunk},
                             {v_cache, q},       {v_cache, k}, {v_cache, v},   {v_cache, chunk}};
  for (const auto& [a, b] : pairs) {
    if (overlap(a, b)) refuse(std::string(a.name) + " overlaps " + b.name + "; the kernel writes " + a.name);
  }
  if (overlap(out, q) && out.begin != q.begin) {
    refuse("out overlaps q without being q itself; the kernel writes out (in place, out == q, is allowed)");
  }
}

}  // namespace

template <Element T>
void check_prefill_attention(const PrefillAttentionSpans<T>& spans, const PrefillAttentionShape& shape) {
  check_shape(shape);
  check_spans(spans, shape, static_cast<long long>(shape.slots) * shape.kv_heads * shape.context * shape.head_dim,
              "slots x kv_heads x context x head_dim");
}

namespace {

/// The shape, the pool's layout and the spans of a paged launch (the tables aside).
template <Element T>
void check_paged(const PrefillAttentionSpans<T>& spans, const PrefillAttentionShape& shape,
                 const PagedPrefillLayout& layout, bool chunk_read) {
  check_shape(shape);
  if (layout.block_size != 16 && layout.block_size != 32) {
    refuse("block_size " + str(layout.block_size) + " is not 16 or 32 (the pool's blocks hold 16 or 32 positions)");
  }
  if (layout.blocks < 1) refuse("blocks is " + str(layout.blocks) + "; the pool holds at least one block");
  const long long capacity = static_cast<long long>(layout.table_width) * layout.block_size;
  if (layout.table_width < 1 || capacity < shape.context) {
    refuse("table_width " + str(layout.table_width) + " x block_size " + str(layout.block_size) + " = " +
           str(capacity) + " positions do not reach the context of " + str(shape.context));
  }
  check_spans(spans, shape, static_cast<long long>(layout.blocks) * shape.kv_heads * layout.block_size * shape.head_dim,
              "blocks x kv_heads x block_size x head_dim", chunk_read);
}

/// Refuses out or a pool overlapping `read` (a span the kernel reads, named `name`).
template <Element T>
void check_written_apart(const PrefillAttentionSpans<T>& spans, const char* name, const DeviceSpan<const int>& read) {
  const Extent r = extent(name, read);
  for (const Extent& written :
       {extent("out", spans.out), extent("k_cache", spans.k_cache), extent("v_cache", spans.v_cache)}) {
    if (overlap(written, r))
      refuse(std::string(written.name) + " overlaps " + name + "; the kernel writes " + written.name);
  }
}

}  // namespace

template <Element T>
void check_paged_prefill_attention(const PrefillAttentionSpans<T>& spans, const DeviceSpan<const int>& table,
                                   const PrefillAttentionShape& shape, const PagedPrefillLayout& layout) {
  check_paged(spans, shape, layout, true);
  check_span("table", table, layout.table_width, "table_width", false);
  check_written_apart(spans, "table", table);
}

void check_prefill_segments(const PrefillAttentionShape& shape, std::span<const PrefillChunk> segments,
                            int max_segments) {
  if (segments.empty() || static_cast<long long>(segments.size()) > max_segments) {
    refuse(str(static_cast<long long>(segments.size())) + " segments; a launch takes 1 to " + str(max_segments));
  }
  long long rows = 0;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const PrefillChunk& s = segments[i];
    const std::string which = "segment " + str(static_cast<long long>(i)) + ": ";
    if (s.rows < 1) refuse(which + "rows is " + str(s.rows) + "; a segment has at least one row");
    if (s.start < 0) refuse(which + "start is " + str(s.start) + "; positions start at 0");
    if (static_cast<long long>(s.start) + s.rows > shape.context) {
      refuse(which + "positions " + str(s.start) + " .. " + str(static_cast<long long>(s.start) + s.rows - 1) +
             " leave the context of " + str(shape.context) + " positions");
    }
    rows += s.rows;
  }
  if (rows > shape.rows) {
    refuse("the segments hold " + str(rows) + " rows in all, more than the " + str(shape.rows) +
           " the launch's spans hold");
  }
}

template <Element T>
void check_varlen_prefill_attention(const PrefillAttentionSpans<T>& spans, DeviceSpan<const int> segments,
                                    DeviceSpan<const int> tables, const PrefillAttentionShape& shape,
                                    const PagedPrefillLayout& layout, int max_segments) {
  check_paged(spans, shape, layout, false);
  if (max_segments < 1 || max_segments > kMaxPrefillSegments) {
    refuse("max_segments is " + str(max_segments) + "; a launch takes 1 to " + str(kMaxPrefillSegments));
  }
  check_span("segments", segments, static_cast<long long>(PrefillSegmentsLayout::size(max_segments)),
             "1 + 2 x max_segments", false);
  check_span("tables", tables, static_cast<long long>(max_segments) * layout.table_width, "max_segments x table_width",
             false);
  check_written_apart(spans, "segments", segments);
  check_written_apart(spans, "tables", tables);
}

template <Element T>
PrefillAttentionOp<T> prefill_attention(const BasicKernels<T>& kernels, const PrefillAttentionSpans<T>& spans,
                                        const PrefillAttentionShape& shape) {
  check_prefill_attention(spans, shape);
  const auto& kernel = kernels.flash_attention(shape.rows, shape.head_dim);
  const auto scale =
      shape.scale > 0 ? shape.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(shape.head_dim)));
  return kernel(kernels.flash_attention_config(shape.rows, shape.heads, shape.head_dim), spans.q, spans.k, spans.v,
                spans.k_cache, spans.v_cache, spans.out, spans.chunk, shape.rows, shape.heads, shape.kv_heads,
                shape.context, shape.slots, scale, shape.window);
}

template <Element T>
PagedPrefillAttentionOp<T> paged_prefill_attention(const BasicKernels<T>& kernels,
                                                   const PrefillAttentionSpans<T>& spans, DeviceSpan<const int> table,
                                                   const PrefillAttentionShape& shape,
                                                   const PagedPrefillLayout& layout) {
  check_paged_prefill_attention(spans, table, shape, layout);
  const auto& kernel = kernels.flash_attention_paged(shape.rows, shape.head_dim);
  const auto scale =
      shape.scale > 0 ? shape.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(shape.head_dim)));
  return kernel(kernels.flash_attention_config(shape.rows, shape.heads, shape.head_dim), spans.q, spans.k, spans.v,
                spans.k_cache, spans.v_cache, spans.out, spans.chunk, table, shape.rows, shape.heads, shape.kv_heads,
                shape.context, layout.block_size, layout.blocks, layout.table_width, scale, shape.window);
}

template <Element T>
VarlenPrefillAttentionOp<T> varlen_prefill_attention(const BasicKernels<T>& kernels,
                                                     const PrefillAttentionSpans<T>& spans,
                                                     DeviceSpan<const int> segments, DeviceSpan<const int> tables,
                                                     const PrefillAttentionShape& shape,
                                                     const PagedPrefillLayout& layout, int max_segments) {
  check_varlen_prefill_attention(spans, segments, tables, shape, layout, max_segments);
  const auto& kernel =
      shape.head_dim > 64 ? kernels.flash_attention_paged_varlen_d128 : kernels.flash_attention_paged_varlen_d64;
  const auto scale =
      shape.scale > 0 ? shape.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(shape.head_dim)));
  return kernel(kernels.flash_attention_varlen_config(shape.rows, max_segments, shape.heads, shape.head_dim), spans.q,
                spans.k, spans.v, spans.k_cache, spans.v_cache, spans.out, segments, tables, shape.rows, max_segments,
                shape.heads, shape.kv_heads, shape.context, layout.block_size, layout.blocks, layout.table_width, scale,
                shape.window);
}

template void check_prefill_attention<half>(const PrefillAttentionSpans<half>&, const PrefillAttentionShape&);
template void check_prefill_attention<bfloat16>(const PrefillAttentionSpans<bfloat16>&, const PrefillAttentionShape&);
template PrefillAttentionOp<half> prefill_attention<half>(const BasicKernels<half>&, const PrefillAttentionSpans<half>&,
                                                          const PrefillAttentionShape&);
template PrefillAttentionOp<bfloat16> prefill_attention<bfloat16>(const BasicKernels<bfloat16>&,
                                                                  const PrefillAttentionSpans<bfloat16>&,
                                                                  const PrefillAttentionShape&);

template void check_paged_prefill_attention<half>(const PrefillAttentionSpans<half>&, const DeviceSpan<const int>&,
                                                  const PrefillAttentionShape&, const PagedPrefillLayout&);
template void check_paged_prefill_attention<bfloat16>(const PrefillAttentionSpans<bfloat16>&,
                                                      const DeviceSpan<const int>&, const PrefillAttentionShape&,
                                                      const PagedPrefillLayout&);
template PagedPrefillAttentionOp<half> paged_prefill_attention<half>(const BasicKernels<half>&,
                                                                     const PrefillAttentionSpans<half>&,
                                                                     DeviceSpan<const int>,
                                                                     const PrefillAttentionShape&,
                                                                     const PagedPrefillLayout&);
template PagedPrefillAttentionOp<bfloat16> paged_prefill_attention<bfloat16>(const BasicKernels<bfloat16>&,
                                                                             const PrefillAttentionSpans<bfloat16>&,
                                                                             DeviceSpan<const int>,
                                                                             const PrefillAttentionShape&,
                                                                             const PagedPrefillLayout&);

#define LAZYGRAPH_VARLEN(T)                                                                                  \
  template void check_varlen_prefill_attention<T>(const PrefillAttentionSpans<T>&, DeviceSpan<const int>,    \
                                                  DeviceSpan<const int>, const PrefillAttentionShape&,       \
                                                  const PagedPrefillLayout&, int);                           \
  template VarlenPrefillAttentionOp<T> varlen_prefill_attention<T>(                                          \
      const BasicKernels<T>&, const PrefillAttentionSpans<T>&, DeviceSpan<const int>, DeviceSpan<const int>, \
      const PrefillAttentionShape&, const PagedPrefillLayout&, int);
LAZYGRAPH_VARLEN(half)
LAZYGRAPH_VARLEN(bfloat16)
#undef LAZYGRAPH_VARLEN

}  // namespace lazygraph::nn
