#include "lazygraph/nn/paged_attention.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

namespace lazygraph::nn {

namespace {

[[noreturn]] void refuse_paged(const std::string& what) { throw UsageError("paged attention: " + what); }

std::string paged_str(long long v) { return std::to_string(v); }

/// attend_split's most dynamic shared memory: sm_90's opt-in limit less its static 9.3 KiB, rounded down to a KiB.
constexpr long long split_shared_limit = 232448 - 10 * 1024;

template <class U>
void check_paged_span(const char* name, const DeviceSpan<U>& span, long long expected, const char* layout,
                      bool aligned) {
  if (static_cast<long long>(span.size()) != expected) {
    refuse_paged(std::string(name) + " has " + paged_str(static_cast<long long>(span.size())) + " elements; " + layout +
                 " = " + paged_str(expected) + " are expected");
  }
  if (aligned && span.address() % 16 != 0) {
    refuse_paged(std::string(name) + " is not 16-byte aligned (its address ends in " + paged_str(span.address() % 16) +
                 "); the kernels read 16 bytes at a time");
  }
}

template <class A, class B>
void check_apart(const char* a_name, const DeviceSpan<A>& a, const char* b_name, const DeviceSpan<B>& b) {
  if (a.size() == 0 || b.size() == 0) return;
  if (a.address() < b.address() + b.size_bytes() && b.address() < a.address() + a.size_bytes()) {
    refuse_paged(std::string(a_name) + " overlaps " + b_name + "; the kernel writes " + a_name);
  }
}

template <Element T>
void check_cache(const PagedAttentionShape& s, const PagedKvCache<T>& c) {
  check_paged_attention_shape(s);
  const long long pool = static_cast<long long>(s.blocks) * s.kv_heads * s.block_size * s.head_dim;
  check_paged_span("k_pool", c.k_pool, pool, "blocks x kv_heads x block_size x head_dim", true);
  check_paged_span("v_pool", c.v_pool, pool, "blocks x kv_heads x block_size x head_dim", true);
  check_paged_span("positions", c.positions, s.rows, "rows", false);
  check_paged_span("tables", c.tables, static_cast<long long>(s.rows) * s.table_width, "rows x table_width", false);
  check_apart("k_pool", c.k_pool, "v_pool", c.v_pool);
  check_apart("k_pool", c.k_pool, "tables", c.tables);
  check_apart("k_pool", c.k_pool, "positions", c.positions);
  check_apart("v_pool", c.v_pool, "tables", c.tables);
  check_apart("v_pool", c.v_pool, "positions", c.positions);
}

template <Element T>
void check_query(const PagedAttentionShape& s, const PagedKvCache<T>& c, const DeviceSpan<const T>& q,
                 const DeviceSpan<T>& out) {
  check_cache(s, c);
  const long long size = static_cast<long long>(s.rows) * s.heads * s.head_dim;
  check_paged_span("q", q, size, "rows x heads x head_dim", true);
  check_paged_span("out", out, size, "rows x heads x head_dim", true);
  check_apart("out", out, "q", q);
  check_apart("out", out, "k_pool", c.k_pool);
  check_apart("out", out, "v_pool", c.v_pool);
  check_apart("out", out, "tables", c.tables);
  check_apart("out", out, "positions", c.positions);
}

float scale_of(const PagedAttentionShape& s) {
  return s.scale > 0 ? s.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)));
}

long long split_len(const PagedAttentionShape& s, int splits) { return (s.capacity() + splits - 1) / splits; }

long long split_shared_bytes(const PagedAttentionShape& s, int splits) {
  const long long len = split_len(s, splits);
  return (std::max(len, static_cast<long long>(splits) * (s.head_dim + 2)) + len / s.block_size + 2) * 4;
}

long long unsplit_shared_bytes(const PagedAttentionShape& s) { return (s.capacity() + s.table_width) * 4; }

/// Whether attend_grouped runs on tensor cores for `s` (attention_paged_grouped_mma_d64 / _d128) when allowed.
bool grouped_mma(const PagedAttentionShape& s, bool tensor_cores) {
  return tensor_cores && (s.head_dim == 64 || s.head_dim == 128);
}

/// The grouped kernel's query heads per block: 16 on tensor cores; on CUDA cores the _h4 kernel's 4 up to a group of
/// 4, else the _h8 kernel's 8.
int grouped_heads(const PagedAttentionShape& s, bool mma) {
  if (mma) return 16;
  return s.heads / s.kv_heads <= 4 ? 4 : 8;
}

/// The grouped kernel's shared memory (kernels/nn/paged_attention_grouped.cu): its warps' results per head and the
/// stages of the cache's tiles. On CUDA cores (4 warps) the results, then 4 stages of 256 / lanes positions (lanes: the
/// power of two at or above head_dim / 8); on tensor cores the larger of the results and 3 (head_dim 64) or 2 stages
/// of 16 positions a warp in rows padded to head_dim + 8, which the results reuse after the last tile.
long long grouped_shared_bytes(const PagedAttentionShape& s, bool mma, int warps = 4) {
  const long long results =
      static_cast<long long>(warps) * std::min(s.heads / s.kv_heads, grouped_heads(s, mma)) * (s.head_dim + 2) * 4;
  if (mma) return std::max(results, (s.head_dim == 64 ? 3 : 2) * 2 * 16LL * warps * (s.head_dim + 8) * 2);
  int lanes = 1;
  while (lanes < s.head_dim / 8) lanes <<= 1;
  const long long tile = 256 / lanes;
  return results + 4 * 2 * tile * s.head_dim * 2;
}

}  // namespace

void check_paged_attention_shape(const PagedAttentionShape& s) {
  if (s.rows < 1) refuse_paged("rows is " + paged_str(s.rows) + "; a launch has at least one row");
  if (s.heads < 1 || s.kv_heads < 1) {
    refuse_paged("heads " + paged_str(s.heads) + " and kv_heads " + paged_str(s.kv_heads) + " must both be at least 1");
  }
  if (s.heads % s.kv_heads != 0) {
    refuse_paged("heads " + paged_str(s.heads) + " is not a multiple of kv_heads " + paged_str(s.kv_heads) +
                 " (grouped-query attention shares each kv head among heads / kv_heads query heads)");
  }
  if (s.head_dim < 8 || s.head_dim % 8 != 0 || s.head_dim > 256) {
    refuse_paged("head_dim " + paged_str(s.head_dim) +
                 " is not a multiple of 8 from 8 to 256 (the kernels read 16 bytes at a time)");
  }
  if (s.block_size != 16 && s.block_size != 32) {
    refuse_paged("block_size " + paged_str(s.block_size) +
                 " is not 16 or 32 (the pool's blocks hold 16 or 32 positions)");
  }
  if (s.blocks < 1) refuse_paged("blocks is " + paged_str(s.blocks) + "; the pool holds at least one block");
  if (s.table_width < 1)
    refuse_paged("table_width is " + paged_str(s.table_width) + "; a row's table holds at least one block");
  if (s.capacity() > (1LL << 30)) {
    refuse_paged("table_width " + paged_str(s.table_width) + " x block_size " + paged_str(s.block_size) + " = " +
                 paged_str(s.capacity()) + " positions is beyond 2^30");
  }
  if (s.window < 0) refuse_paged("window is " + paged_str(s.window) + "; 0 (none) or the positions a row attends");
  if (!std::isfinite(s.scale) || s.scale < 0)
    refuse_paged("scale must be 0 (1 / sqrt(head_dim)) or positive and finite");
}

int paged_attention_splits(long long capacity, int pairs, int multiprocessors) {
  if (capacity < 1 || pairs < 1 || multiprocessors < 1) {
    refuse_paged("paged_attention_splits: capacity " + paged_str(capacity) + ", pairs " + paged_str(pairs) +
                 " and multiprocessors " + paged_str(multiprocessors) + " must all be at least 1");
  }
  const long long fill = (4LL * multiprocessors + pairs - 1) / pairs;  // about four blocks per SM
  const long long wanted = std::max(fill, (capacity + paged_max_split_positions - 1) / paged_max_split_positions);
  const long long most = std::max(1LL, capacity / paged_min_split_positions);
  return static_cast<int>(std::clamp(wanted, 1LL, std::min<long long>(most, paged_max_splits)));
}

template <Element T>
void check_paged_append(const PagedAttentionShape& s, DeviceSpan<const T> k, DeviceSpan<const T> v,
                        const PagedKvCache<T>& c) {
  check_cache(s, c);
  const long long size = static_cast<long long>(s.rows) * s.kv_heads * s.head_dim;
  check_paged_span("k", k, size, "rows x kv_heads x head_dim", false);
  check_paged_span("v", v, size, "rows x kv_heads x head_dim", false);
  check_apart("k_pool", c.k_pool, "k", k);
  check_apart("k_pool", c.k_pool, "v", v);
  check_apart("v_pool", c.v_pool, "k", k);
  check_apart("v_pool", c.v_pool, "v", v);
}

template <Element T>
void check_paged_rope_append(const PagedAttentionShape& s, DeviceSpan<const T> qkv, DeviceSpan<const T> bias,
                             DeviceSpan<T> q, const PagedKvCache<T>& c, DeviceSpan<const int> count,
                             DeviceSpan<const float> frequencies) {
  check_cache(s, c);
  const long long width = static_cast<long long>(s.heads + 2 * s.kv_heads) * s.head_dim;
  check_paged_span("qkv", qkv, s.rows * width, "rows x (heads + 2 kv_heads) x head_dim", true);
  check_paged_span("q", q, static_cast<long long>(s.rows) * s.heads * s.head_dim, "rows x heads x head_dim", true);
  if (!bias.empty()) check_paged_span("bias", bias, width, "(heads + 2 kv_heads) x head_dim", true);
  check_paged_span("count", count, 1, "one int", false);
  check_paged_span("frequencies", frequencies, s.head_dim / 2, "head_dim / 2", false);
  check_apart("q", q, "qkv", qkv);
  check_apart("q", q, "k_pool", c.k_pool);
  check_apart("q", q, "v_pool", c.v_pool);
  check_apart("k_pool", c.k_pool, "qkv", qkv);
  check_apart("v_pool", c.v_pool, "qkv", qkv);
}

template <Element T>
void check_paged_qk_norm_rope_append(const PagedAttentionShape& s, DeviceSpan<const T> qkv, DeviceSpan<const T> bias,
                                     DeviceSpan<const T> q_gain, DeviceSpan<const T> k_gain, DeviceSpan<T> q,
                                     const PagedKvCache<T>& c, DeviceSpan<const int> count,
                                     DeviceSpan<const float> frequencies, bool whole) {
  check_paged_rope_append(s, qkv, bias, q, c, count, frequencies);
  if (s.head_dim % 2 != 0 || s.head_dim > 256) {
    refuse_paged("head_dim " + paged_str(s.head_dim) + " must be even and at most 256 for q/k norms");
  }
  if (s.block_size != 16 && s.block_size != 32) {
    refuse_paged("block_size " + paged_str(s.block_size) + " must be 16 or 32");
  }
  check_paged_span("q_gain", q_gain, whole ? static_cast<long long>(s.heads) * s.head_dim : s.head_dim,
                   whole ? "heads x head_dim" : "head_dim", false);
  check_paged_span("k_gain", k_gain, whole ? static_cast<long long>(s.kv_heads) * s.head_dim : s.head_dim,
                   whole ? "kv_heads x head_dim" : "head_dim", false);
}

template <Element T>
void check_paged_attend(const PagedAttentionShape& s, DeviceSpan<const T> q, DeviceSpan<T> out,
                        const PagedKvCache<T>& c) {
  check_query(s, c, q, out);
  if (unsplit_shared_bytes(s) > paged_unsplit_shared_limit) {
    refuse_paged("the scores of table_width x block_size = " + paged_str(s.capacity()) + " positions need " +
                 paged_str(unsplit_shared_bytes(s)) + " bytes of shared memory, beyond " +
                 paged_str(paged_unsplit_shared_limit) + "; use attend_split");
  }
}

template <Element T>
void check_paged_attend_split(const PagedAttentionShape& s, DeviceSpan<const T> q, DeviceSpan<T> out,
                              DeviceSpan<float> partials, DeviceSpan<unsigned> counters, const PagedKvCache<T>& c,
                              int splits) {
  check_query(s, c, q, out);
  if (splits < 1 || splits > s.capacity() || splits > 65535) {
    refuse_paged("splits " + paged_str(splits) +
                 " is outside 1 .. min(65535, table_width x block_size = " + paged_str(s.capacity()) + ")");
  }
  check_paged_span("partials", partials, static_cast<long long>(PagedAttention<T>::split_partials(s, splits)),
                   "rows x heads x splits x (head_dim + 2)", false);
  check_paged_span("counters", counters, static_cast<long long>(s.rows) * s.heads, "rows x heads", false);
  check_apart("partials", partials, "counters", counters);
  check_apart("out", out, "partials", partials);
  check_apart("out", out, "counters", counters);
  if (split_shared_bytes(s, splits) > split_shared_limit) {
    refuse_paged("splits " + paged_str(splits) + " over " + paged_str(s.capacity()) + " positions need " +
                 paged_str(split_shared_bytes(s, splits)) + " bytes of shared memory per block, beyond " +
                 paged_str(split_shared_limit) + "; choose more splits (or fewer, for the partials' share)");
  }
}

namespace {
/// The grouped launches' splits and scratch: splits 1 .. 65535, partials of split_partials floats, counters of rows x
/// heads, count of one int, none overlapping out or each other.
template <Element T>
void check_grouped_scratch(const PagedAttentionShape& s, const DeviceSpan<T>& out, const DeviceSpan<float>& partials,
                           const DeviceSpan<unsigned>& counters, const DeviceSpan<const int>& count, int splits) {
  if (splits < 1 || splits > 65535) refuse_paged("splits " + paged_str(splits) + " is outside 1 .. 65535");
  check_paged_span("partials", partials, static_cast<long long>(PagedAttention<T>::split_partials(s, splits)),
                   "rows x heads x splits x (head_dim + 2)", false);
  check_paged_span("counters", counters, static_cast<long long>(s.rows) * s.heads, "rows x heads", false);
  check_paged_span("count", count, 1, "one int", false);
  check_apart("partials", partials, "counters", counters);
  check_apart("out", out, "partials", partials);
  check_apart("out", out, "counters", counters);
  check_apart("out", out, "count", count);
}
}  // namespace

template <Element T>
void check_paged_attend_grouped(const PagedAttentionShape& s, DeviceSpan<const T> q, DeviceSpan<T> out,
                                DeviceSpan<float> partials, DeviceSpan<unsigned> counters, const PagedKvCache<T>& c,
                                DeviceSpan<const int> count, int splits) {
  check_query(s, c, q, out);
  check_grouped_scratch(s, out, partials, counters, count, splits);
}

template <Element T>
void check_slot_attend_grouped(const PagedAttentionShape& s, DeviceSpan<const T> q, DeviceSpan<T> out,
                               DeviceSpan<float> partials, DeviceSpan<unsigned> counters, const SlotKvCache<T>& c,
                               DeviceSpan<const int> count, int splits) {
  PagedAttentionShape fields = s;  // the block fields are not read: any valid ones
  fields.block_size = 16;
  fields.blocks = 1;
  fields.table_width = 1;
  check_paged_attention_shape(fields);
  if (s.head_dim != 64 && s.head_dim != 128) {
    refuse_paged("head_dim " + paged_str(s.head_dim) +
                 " is not 64 or 128 (the contiguous cache's grouped kernels run on tensor cores)");
  }
  if (c.context < 1 || c.slot_count < 1) {
    refuse_paged("context " + paged_str(c.context) + " and slot_count " + paged_str(c.slot_count) +
                 " must both be at least 1");
  }
  const long long cache = static_cast<long long>(c.slot_count) * s.kv_heads * c.context * s.head_dim;
  check_paged_span("k_cache", c.k_cache, cache, "slot_count x kv_heads x context x head_dim", true);
  check_paged_span("v_cache", c.v_cache, cache, "slot_count x kv_heads x context x head_dim", true);
  check_paged_span("positions", c.positions, s.rows, "rows", false);
  check_paged_span("slots", c.slots, s.rows, "rows", false);
  const long long size = static_cast<long long>(s.rows) * s.heads * s.head_dim;
  check_paged_span("q", q, size, "rows x heads x head_dim", true);
  check_paged_span("out", out, size, "rows x heads x head_dim", true);
  check_apart("out", out, "q", q);
  check_apart("out", out, "k_cache", c.k_cache);
  check_apart("out", out, "v_cache", c.v_cache);
  check_apart("out", out, "positions", c.positions);
  check_apart("out", out, "slots", c.slots);
  check_grouped_scratch(s, out, partials, counters, count, splits);
}

int paged_grouped_splits(int rows, int heads, int kv_heads, int head_dim, int multiprocessors) {
  if (rows < 1 || heads < 1 || kv_heads < 1 || multiprocessors < 1 || heads % kv_heads != 0) {
    refuse_paged("paged_grouped_splits: rows " + paged_str(rows) + ", heads " + paged_str(heads) + ", kv_heads " +
                 paged_str(kv_heads) + " and multiprocessors " + paged_str(multiprocessors) +
                 " must all be at least 1, heads a multiple of kv_heads");
  }
  const PagedAttentionShape shape{.rows = rows, .heads = heads, .kv_heads = kv_heads, .head_dim = head_dim};
  const int group = heads / kv_heads;
  const int per_block = grouped_heads(shape, grouped_mma(shape, true));
  const long long blocks = static_cast<long long>(rows) * kv_heads * ((group + per_block - 1) / per_block);
  const long long wanted = (8LL * multiprocessors + blocks - 1) / blocks;  // about eight blocks per SM
  return static_cast<int>(std::clamp(wanted, 1LL, static_cast<long long>(paged_max_splits)));
}

int paged_grouped_wave_splits(int rows, int heads, int kv_heads, int head_dim, int multiprocessors, int resident) {
  const int fallback = paged_grouped_splits(rows, heads, kv_heads, head_dim, multiprocessors);
  if (resident < 0) refuse_paged("paged_grouped_wave_splits: resident " + paged_str(resident) + " is negative");
  const PagedAttentionShape shape{.rows = rows, .heads = heads, .kv_heads = kv_heads, .head_dim = head_dim};
  const int group = heads / kv_heads;
  const int per_block = grouped_heads(shape, grouped_mma(shape, true));
  const long long blocks = static_cast<long long>(rows) * kv_heads * ((group + per_block - 1) / per_block);
  if (resident == 0) return fallback;
  // The split count whose blocks come nearest half a wave (wave / 2 / blocks rounded, halves down).
  const long long wave = static_cast<long long>(resident) * multiprocessors;
  const long long nearest = (wave + blocks - 1) / (2 * blocks);
  return static_cast<int>(std::clamp(nearest, 1LL, static_cast<long long>(paged_wave_max_splits)));
}

#define LAZYGRAPH_PAGED_CHECKS(T)                                                                                     \
  template void check_paged_append<T>(const PagedAttentionShape&, DeviceSpan<const T>, DeviceSpan<const T>,           \
                                      const PagedKvCache<T>&);                                                        \
  template void check_paged_attend<T>(const PagedAttentionShape&, DeviceSpan<const T>, DeviceSpan<T>,                 \
                                      const PagedKvCache<T>&);                                                        \
  template void check_paged_rope_append<T>(const PagedAttentionShape&, DeviceSpan<const T>, DeviceSpan<const T>,      \
                                           DeviceSpan<T>, const PagedKvCache<T>&, DeviceSpan<const int>,              \
                                           DeviceSpan<const float>);                                                  \
  template void check_paged_qk_norm_rope_append<T>(                                                                   \
      const PagedAttentionShape&, DeviceSpan<const T>, DeviceSpan<const T>, DeviceSpan<const T>, DeviceSpan<const T>, \
      DeviceSpan<T>, const PagedKvCache<T>&, DeviceSpan<const int>, DeviceSpan<const float>, bool);                   \
  template void check_paged_attend_split<T>(const PagedAttentionShape&, DeviceSpan<const T>, DeviceSpan<T>,           \
                                            DeviceSpan<float>, DeviceSpan<unsigned>, const PagedKvCache<T>&, int);    \
  template void check_paged_attend_grouped<T>(const PagedAttentionShape&, DeviceSpan<const T>, DeviceSpan<T>,         \
                                              DeviceSpan<float>, DeviceSpan<unsigned>, const PagedKvCache<T>&,        \
                                              DeviceSpan<const int>, int);                                            \
  template void check_slot_attend_grouped<T>(const PagedAttentionShape&, DeviceSpan<const T>, DeviceSpan<T>,          \
                                             DeviceSpan<float>, DeviceSpan<unsigned>, const SlotKvCache<T>&,          \
                                             DeviceSpan<const int>, int);
LAZYGRAPH_PAGED_CHECKS(half)
LAZYGRAPH_PAGED_CHECKS(bfloat16)
#undef LAZYGRAPH_PAGED_CHECKS

template <Element T>
PagedAttention<T>::PagedAttention(const KernelLibrary& library, bool early_launch, bool tensor_cores)
    : append_(library.get<void(const T*, const T*, T*, T*, const int*, const int*, int, int, int, int, int, int)>(
          "kv_append_paged" + std::string(kernel_suffix<T>))),
      rope_append_(library.get<void(const T*, const T*, const T*, const T*, T*, T*, T*, const int*, const int*,
                                    const int*, int, int, int, int, int, int, const float*, int)>(
          "rope_append_paged" + std::string(kernel_suffix<T>))),
      qk_norm_append_(library.get<void(const T*, const T*, const T*, const T*, T*, T*, T*, const int*, const int*,
                                       const int*, int, int, int, int, int, int, const float*, float, int, int)>(
          "qk_norm_rope_append_paged" + std::string(kernel_suffix<T>))),
      attention_(library.get<void(const T*, const T*, const T*, T*, const int*, const int*, int, int, int, int, int,
                                  int, float, int)>("attention_paged" + std::string(kernel_suffix<T>))),
      split_(
          library.get<void(const T*, const T*, const T*, T*, float*, unsigned*, const int*, const int*, int, int, int,
                           int, int, int, float, int)>("attention_paged_split" + std::string(kernel_suffix<T>))),
      grouped_(grouped_kernels(library)),
      grouped_slots_(grouped_slots_kernels(library)),
      early_launch_(early_launch),
      tensor_cores_(tensor_cores),
      multiprocessors_(library.device().sm_count()),
      max_shared_(library.device().limits().max_shared_per_block_optin) {}

template <Element T>
std::array<typename PagedAttention<T>::GroupedKernel, 6> PagedAttention<T>::grouped_kernels(
    const KernelLibrary& library) {
  const auto get = [&](const std::string& name) {
    return library.get<void(const T*, const T*, const T*, T*, float*, unsigned*, const int*, const int*, const int*,
                            int, int, int, int, int, int, float, int)>(name);
  };
  const std::string suffix(kernel_suffix<T>);
  return {
      get("attention_paged_grouped" + suffix + "_h4"),       get("attention_paged_grouped" + suffix + "_h8"),
      get("attention_paged_grouped_mma" + suffix + "_d64"),  get("attention_paged_grouped_mma" + suffix + "_d128"),
      get("attention_paged_grouped_mma8" + suffix + "_d64"), get("attention_paged_grouped_mma8" + suffix + "_d128")};
}

template <Element T>
std::array<typename PagedAttention<T>::GroupedSlotsKernel, 4> PagedAttention<T>::grouped_slots_kernels(
    const KernelLibrary& library) {
  const auto get = [&](const std::string& name) {
    return library.get<void(const T*, const T*, const T*, T*, float*, unsigned*, const int*, const int*, const int*,
                            int, int, int, int, int, float, int)>(name);
  };
  const std::string suffix(kernel_suffix<T>);
  return {get("attention_grouped_mma" + suffix + "_d64"), get("attention_grouped_mma" + suffix + "_d128"),
          get("attention_grouped_mma8" + suffix + "_d64"), get("attention_grouped_mma8" + suffix + "_d128")};
}

template <Element T>
const typename PagedAttention<T>::GroupedKernel& PagedAttention<T>::grouped_kernel(const PagedAttentionShape& s,
                                                                                   bool tensor_cores,
                                                                                   int warps) const noexcept {
  if (grouped_mma(s, tensor_cores)) return grouped_[(warps == 8 ? 4 : 2) + (s.head_dim == 64 ? 0 : 1)];
  return grouped_[grouped_heads(s, false) == 8 ? 1 : 0];
}

template <Element T>
std::size_t PagedAttention<T>::split_partials(const PagedAttentionShape& s, int splits) noexcept {
  return static_cast<std::size_t>(s.rows) * static_cast<std::size_t>(s.heads) * static_cast<std::size_t>(splits) *
         static_cast<std::size_t>(s.head_dim + 2);
}

template <Element T>
LaunchConfig PagedAttention<T>::attention_config(const PagedAttentionShape& s) const {
  return {{static_cast<unsigned>(s.heads), static_cast<unsigned>(s.rows), 1},
          {attention_block_threads(s.heads, s.rows, s.head_dim, tensor_cores_, multiprocessors_), 1, 1},
          static_cast<unsigned>(unsplit_shared_bytes(s)),
          early_launch_};
}

template <Element T>
LaunchConfig PagedAttention<T>::split_config(const PagedAttentionShape& s, int splits) const {
  return {{static_cast<unsigned>(s.heads), static_cast<unsigned>(s.rows), static_cast<unsigned>(splits)},
          {128, 1, 1},
          static_cast<unsigned>(split_shared_bytes(s, splits)),
          early_launch_};
}

namespace {
// The grouped kernels' blocks take 54-136 KiB of shared memory, so left to itself the driver splits their
// multiprocessors for the most shared memory, and the decode step's kernels after them, which fit in that split, then
// run with the least L1. Half (a hint: the driver rounds it up to a split it has, and to one a block fits in) left the
// steps faster on an H200, 2026-12-01, alternated twice in one run (`bench_quantized_decoder --no-accuracy
// --kv-block-size 16 --attention-blocks 0`, fp16 us, none -> 50): TinyLlama shape at position 128 one row 857.7-857.9
// -> 801.5-801.6, 8 rows 1436.6-1439.0 -> 1016.3; Llama-3.2-1B shape at 1000 904.7-906.7 -> 857.8-860.8 and
// 1531.8 -> 1053.1-1053.3; every quantized format as fast or faster. 0 and 25 were as fast at one row, slower at 8
// rows (1124.5-1126.2 at 1000); 100 was no carveout's. grouped_resident counts blocks under the driver's own split:
// counted under this carveout (2026-12-02) the 8-row grids lost half their splits and their steps up to 23 % of their
// speed, since paged_grouped_wave_splits's half wave was measured with the driver's count (docs/decode_performance.md).
constexpr int kGroupedCarveout = 50;
}  // namespace

template <Element T>
LaunchConfig PagedAttention<T>::grouped_config(const PagedAttentionShape& s, int splits, bool tensor_cores,
                                               int warps) const {
  const bool mma = grouped_mma(s, tensor_cores);
  const int group = s.heads / s.kv_heads;
  const int per_block = grouped_heads(s, mma);
  const int block_warps = mma && warps == 8 ? 8 : 4;
  return {{static_cast<unsigned>(s.kv_heads * ((group + per_block - 1) / per_block)), static_cast<unsigned>(s.rows),
           static_cast<unsigned>(splits)},
          {32U * static_cast<unsigned>(block_warps), 1, 1},
          static_cast<unsigned>(grouped_shared_bytes(s, mma, block_warps)),
          early_launch_,
          {},
          kGroupedCarveout};
}

template <Element T>
int PagedAttention<T>::grouped_resident(const PagedAttentionShape& s, int warps) const {
  const LaunchConfig config = grouped_config(s, 1, true, warps);
  return grouped_kernel(s, true, warps).max_active_blocks_per_sm(config.block.x, config.shared_bytes);
}

template <Element T>
bool PagedAttention<T>::grouped_fits(const PagedAttentionShape& s, int warps) const noexcept {
  // The kernels' static shared memory (grouped_finish's flag) is a few bytes: 1 KiB of room for it.
  return grouped_shared_bytes(s, grouped_mma(s, true), grouped_mma(s, true) && warps == 8 ? 8 : 4) + 1024 <=
         max_shared_;
}

template <Element T>
int PagedAttention<T>::grouped_warps(const PagedAttentionShape& s, int splits) const {
  // Measured at head_dim 64 only (the 8-warp kernel at 128 holds a whole multiprocessor's shared memory a block), and
  // only where a block may have its 108 KiB (not sm_86, sm_89 or sm_120: 99 KiB).
  if (!grouped_mma(s, true) || s.head_dim != 64 || splits < 8 || !grouped_fits(s, 8)) return 4;
  const LaunchConfig config = grouped_config(s, splits, true, 8);
  const long long blocks = static_cast<long long>(config.grid.x) * config.grid.y * config.grid.z;
  return blocks <= static_cast<long long>(grouped_resident(s, 8)) * multiprocessors_ ? 8 : 4;
}

template <Element T>
LaunchConfig PagedAttention<T>::append_config(const PagedAttentionShape& s) const {
  const long long elements = static_cast<long long>(s.rows) * s.kv_heads * s.head_dim;
  return {{static_cast<unsigned>((elements + 255) / 256), 1, 1}, {256, 1, 1}, 0, early_launch_};
}

template <Element T>
typename PagedAttention<T>::AppendOp PagedAttention<T>::append(const PagedAttentionShape& s, DeviceSpan<const T> k,
                                                               DeviceSpan<const T> v, const PagedKvCache<T>& c) const {
  check_paged_append(s, k, v, c);
  return append_(append_config(s), k, v, c.k_pool, c.v_pool, c.positions, c.tables, s.kv_heads, s.head_dim,
                 s.block_size, s.blocks, s.table_width, s.rows);
}

template <Element T>
LaunchConfig PagedAttention<T>::rope_append_config(const PagedAttentionShape& s) const {
  const long long eighths = static_cast<long long>(s.rows) * (s.heads + 2 * s.kv_heads) * s.head_dim / 8;
  return {{static_cast<unsigned>((eighths + 255) / 256), 1, 1}, {256, 1, 1}, 0, early_launch_};
}

template <Element T>
typename PagedAttention<T>::RopeAppendOp PagedAttention<T>::rope_append(
    const PagedAttentionShape& s, DeviceSpan<const T> qkv, DeviceSpan<const T> bias, DeviceSpan<T> q,
    const PagedKvCache<T>& c, DeviceSpan<const int> count, DeviceSpan<const float> frequencies) const {
  check_paged_rope_append(s, qkv, bias, q, c, count, frequencies);
  const auto q_size = static_cast<std::size_t>(s.heads) * static_cast<std::size_t>(s.head_dim);
  const auto kv_size = static_cast<std::size_t>(s.kv_heads) * static_cast<std::size_t>(s.head_dim);
  const auto part = [&](std::size_t at, std::size_t size) {
    return bias.empty() ? DeviceSpan<const T>{} : bias.subspan(at, size);
  };
  return rope_append_(rope_append_config(s), qkv, part(0, q_size), part(q_size, kv_size),
                      part(q_size + kv_size, kv_size), q, c.k_pool, c.v_pool, c.positions, c.tables, count, s.heads,
                      s.kv_heads, s.head_dim, s.block_size, s.blocks, s.table_width, frequencies, s.rows);
}

template <Element T>
typename PagedAttention<T>::QkNormAppendOp PagedAttention<T>::qk_norm_rope_append(
    const PagedAttentionShape& s, DeviceSpan<const T> qkv, DeviceSpan<const T> bias, DeviceSpan<const T> q_gain,
    DeviceSpan<const T> k_gain, DeviceSpan<T> q, const PagedKvCache<T>& c, DeviceSpan<const int> count,
    DeviceSpan<const float> frequencies, float eps, bool whole) const {
  check_paged_qk_norm_rope_append(s, qkv, bias, q_gain, k_gain, q, c, count, frequencies, whole);
  // A block per (head of q, k and v, row), a thread per pair (BasicKernels::qk_norm_config's shape).
  const LaunchConfig config{{static_cast<unsigned>(s.heads + 2 * s.kv_heads), static_cast<unsigned>(s.rows), 1},
                            {32U * ((static_cast<unsigned>(s.head_dim) + 63U) / 64U), 1, 1},
                            0,
                            early_launch_};
  return qk_norm_append_(config, qkv, bias, q_gain, k_gain, q, c.k_pool, c.v_pool, c.positions, c.tables, count,
                         s.heads, s.kv_heads, s.head_dim, s.block_size, s.blocks, s.table_width, frequencies, eps,
                         whole ? 1 : 0, s.rows);
}

template <Element T>
typename PagedAttention<T>::AttentionOp PagedAttention<T>::attend(const PagedAttentionShape& s, DeviceSpan<const T> q,
                                                                  DeviceSpan<T> out, const PagedKvCache<T>& c) const {
  check_paged_attend(s, q, out, c);
  return attention_(attention_config(s), q, c.k_pool.as_const(), c.v_pool.as_const(), out, c.positions, c.tables,
                    s.heads, s.kv_heads, s.head_dim, s.block_size, s.blocks, s.table_width, scale_of(s), s.window);
}

template <Element T>
typename PagedAttention<T>::SplitOp PagedAttention<T>::attend_split(const PagedAttentionShape& s, DeviceSpan<const T> q,
                                                                    DeviceSpan<T> out, DeviceSpan<float> partials,
                                                                    DeviceSpan<unsigned> counters,
                                                                    const PagedKvCache<T>& c, int splits) const {
  check_paged_attend_split(s, q, out, partials, counters, c, splits);
  return split_(split_config(s, splits), q, c.k_pool.as_const(), c.v_pool.as_const(), out, partials, counters,
                c.positions, c.tables, s.heads, s.kv_heads, s.head_dim, s.block_size, s.blocks, s.table_width,
                scale_of(s), s.window);
}

template <Element T>
int PagedAttention<T>::checked_warps(const char* call, const PagedAttentionShape& s, int splits, int warps) const {
  if (warps != 0 && warps != 4 && warps != 8) {
    refuse_paged(std::string(call) + ": warps " + paged_str(warps) + " is not 4, 8 or 0 (grouped_warps's choice)");
  }
  if (warps == 0) warps = grouped_warps(s, splits);
  if (!grouped_fits(s, warps)) {
    refuse_paged(std::string(call) + ": blocks of " + paged_str(warps) +
                 " warps need more shared memory than this GPU gives a block (" + paged_str(max_shared_) + " bytes)");
  }
  return warps;
}

template <Element T>
typename PagedAttention<T>::GroupedOp PagedAttention<T>::attend_grouped(
    const PagedAttentionShape& s, DeviceSpan<const T> q, DeviceSpan<T> out, DeviceSpan<float> partials,
    DeviceSpan<unsigned> counters, const PagedKvCache<T>& c, DeviceSpan<const int> count, int splits, int warps) const {
  check_paged_attend_grouped(s, q, out, partials, counters, c, count, splits);
  warps = checked_warps("attend_grouped", s, splits, warps);
  return grouped_kernel(s, true, warps)(grouped_config(s, splits, true, warps), q, c.k_pool.as_const(),
                                        c.v_pool.as_const(), out, partials, counters, c.positions, c.tables, count,
                                        s.heads, s.kv_heads, s.head_dim, s.block_size, s.blocks, s.table_width,
                                        scale_of(s), s.window);
}

template <Element T>
typename PagedAttention<T>::GroupedSlotsOp PagedAttention<T>::attend_grouped_slots(
    const PagedAttentionShape& s, DeviceSpan<const T> q, DeviceSpan<T> out, DeviceSpan<float> partials,
    DeviceSpan<unsigned> counters, const SlotKvCache<T>& c, DeviceSpan<const int> count, int splits, int warps) const {
  check_slot_attend_grouped(s, q, out, partials, counters, c, count, splits);
  warps = checked_warps("attend_grouped_slots", s, splits, warps);
  const GroupedSlotsKernel& kernel = grouped_slots_[(warps == 8 ? 2 : 0) + (s.head_dim == 64 ? 0 : 1)];
  return kernel(grouped_config(s, splits, true, warps), q, c.k_cache, c.v_cache, out, partials, counters, c.positions,
                c.slots, count, s.heads, s.kv_heads, s.head_dim, c.context, c.slot_count, scale_of(s), s.window);
}

template class PagedAttention<half>;
template class PagedAttention<bfloat16>;

}  // namespace lazygraph::nn
