#pragma once
/// \file
/// Decode attention over a paged KV cache (kernels/nn/paged_attention.cu), the device side of nn::KvBlockPool:
/// appending a row's key and value through its block table, and attention through the table, in one block per
/// (row, head) or split over positions (flash-decoding). Every launch is a lazy op whose arguments are checked on
/// the host when it is built, before any GPU work. The positions and block tables are device inputs: a captured
/// graph replays with whatever was last copied there, so new tables never need a new capture.
///
/// The pool is [blocks][kv_heads][block_size][head_dim] for K and for V; row b's table is `table_width` int32 block
/// ids (KvBlockPool::table's layout, padded with anything: only the entries up to the row's position are read), and
/// its position p lives in block tables[b][p / block_size] at offset p % block_size. Defined for T = half and
/// bfloat16 in src/nn/paged_attention.cpp.

#include <array>
#include <cstddef>

#include "lazygraph/nn/kernels.hpp"

namespace lazygraph::nn {

/// The shape of a paged attention launch: the batch, the heads and the pool.
struct PagedAttentionShape {
  int rows = 0;         ///< rows of the batch (one per sequence when decoding), at least 1
  int heads = 0;        ///< query heads
  int kv_heads = 0;     ///< key/value heads; heads must be a multiple of them (grouped-query attention)
  int head_dim = 0;     ///< a multiple of 8, at most 256
  int block_size = 16;  ///< positions per block: 16 or 32
  int blocks = 0;       ///< blocks in the pool
  int table_width = 0;  ///< block ids per row's table: a row reaches positions below table_width * block_size
  /// The scores' scale: 0 means 1 / sqrt(head_dim).
  float scale = 0;
  /// The attention window: a row attends the `window` positions up to its own (a sliding-window layer); 0 none.
  int window = 0;

  /// The positions a row's table reaches: table_width * block_size.
  [[nodiscard]] long long capacity() const noexcept { return static_cast<long long>(table_width) * block_size; }
};

/// The cache and the per-row inputs every paged launch reads.
template <Element T>
struct PagedKvCache {
  DeviceSpan<T> k_pool;             ///< keys [blocks][kv_heads][block_size][head_dim], 16-byte aligned
  DeviceSpan<T> v_pool;             ///< values, like k_pool
  DeviceSpan<const int> positions;  ///< [rows]: each row's position (the one appended, the last attended)
  DeviceSpan<const int> tables;     ///< [rows][table_width] block ids
};

/// The contiguous KV cache (kernels/nn/attention.cu's layout, one slot per sequence) as
/// PagedAttention::attend_grouped_slots reads it.
template <Element T>
struct SlotKvCache {
  DeviceSpan<const T> k_cache;      ///< keys [slot_count][kv_heads][context][head_dim], 16-byte aligned
  DeviceSpan<const T> v_cache;      ///< values, like k_cache
  DeviceSpan<const int> positions;  ///< [rows]: each row's position (the one appended, the last attended)
  DeviceSpan<const int> slots;      ///< [rows]: each row's slot
  int context = 0;                  ///< positions a slot holds
  int slot_count = 0;               ///< slots of the cache
};

/// Checks a shape without a GPU. \throws UsageError naming the field and its value: rows, heads, kv_heads or blocks
/// below 1, heads not a multiple of kv_heads, head_dim not a positive multiple of 8 or above 256, block_size not 16
/// or 32, table_width below 1 or capacity() beyond 2^30, a negative window, a negative or non-finite scale.
void check_paged_attention_shape(const PagedAttentionShape& shape);

/// The splits of attention_paged_split for rows whose positions reach up to `capacity` (the longest position the
/// launch will serve, plus one; usually the tables' capacity), over `pairs` (row, head) pairs, on a GPU of
/// `multiprocessors` SMs: enough that the grid has about four blocks per SM, and that no split holds more than
/// paged_max_split_positions positions (a split's scores live in shared memory: long ones leave room for one block
/// per SM); but each split at least paged_min_split_positions positions, and at most paged_max_splits splits.
/// \throws UsageError for a capacity, pairs or multiprocessors below 1.
[[nodiscard]] int paged_attention_splits(long long capacity, int pairs, int multiprocessors);

/// The fewest positions a split of attention_paged_split attends (paged_attention_splits).
inline constexpr int paged_min_split_positions = 256;
/// The most positions paged_attention_splits gives a split while it may choose more splits (16 KiB of scores).
inline constexpr int paged_max_split_positions = 4096;
/// The most splits paged_attention_splits chooses (the combining block stages splits * (head_dim + 2) floats).
inline constexpr int paged_max_splits = 64;
/// The most dynamic shared memory attention_paged may ask for: sm_90's opt-in limit per block (227 KiB) less
/// the kernel's static shared memory (33.25 KiB), rounded down to a KiB.
inline constexpr long long paged_unsplit_shared_limit = 232448 - 34 * 1024;

/// Checks an append (PagedAttention::append) without a GPU. \throws UsageError naming the span or field that does
/// not fit `shape`: check_paged_attention_shape's refusals; k or v not of rows * kv_heads * head_dim elements; a pool
/// not of blocks * kv_heads * block_size * head_dim elements or not 16-byte aligned; positions not of rows ints;
/// tables not of rows * table_width ints; a pool overlapping another span.
template <Element T>
void check_paged_append(const PagedAttentionShape& shape, DeviceSpan<const T> k, DeviceSpan<const T> v,
                        const PagedKvCache<T>& cache);

/// Checks a split of the stacked projection (PagedAttention::rope_append) without a GPU. \throws UsageError as
/// check_paged_append for the cache; qkv not of rows * (heads + 2 kv_heads) * head_dim elements or not 16-byte aligned;
/// q not of rows * heads * head_dim elements or not 16-byte aligned; a bias neither empty nor of (heads + 2 kv_heads) *
/// head_dim elements, 16-byte aligned; count not of one int; frequencies not of head_dim / 2 floats; q or a pool
/// overlapping qkv, or q overlapping a pool.
template <Element T>
void check_paged_rope_append(const PagedAttentionShape& shape, DeviceSpan<const T> qkv, DeviceSpan<const T> bias,
                             DeviceSpan<T> q, const PagedKvCache<T>& cache, DeviceSpan<const int> count,
                             DeviceSpan<const float> frequencies);

/// Checks a split of the stacked projection with q/k norms (PagedAttention::qk_norm_rope_append) without a GPU.
/// \throws UsageError as check_paged_rope_append; q_gain and k_gain not of head_dim elements each, or with `whole` of
/// heads x head_dim and kv_heads x head_dim; head_dim odd or above 256; block_size neither 16 nor 32.
template <Element T>
void check_paged_qk_norm_rope_append(const PagedAttentionShape& shape, DeviceSpan<const T> qkv,
                                     DeviceSpan<const T> bias, DeviceSpan<const T> q_gain, DeviceSpan<const T> k_gain,
                                     DeviceSpan<T> q, const PagedKvCache<T>& cache, DeviceSpan<const int> count,
                                     DeviceSpan<const float> frequencies, bool whole);

/// Checks an attention launch (PagedAttention::attend) without a GPU. \throws UsageError as check_paged_append for
/// the cache; q or out not of rows * heads * head_dim elements or not 16-byte aligned; out overlapping q, a pool,
/// positions or tables; the scores of capacity() positions and the table needing more than
/// paged_unsplit_shared_limit bytes of shared memory (use the split kernel).
template <Element T>
void check_paged_attend(const PagedAttentionShape& shape, DeviceSpan<const T> q, DeviceSpan<T> out,
                        const PagedKvCache<T>& cache);

/// Checks a split attention launch (PagedAttention::attend_split) without a GPU. \throws UsageError as
/// check_paged_attend but for the unsplit shared memory; splits outside 1 .. min(65535, capacity()); partials not of
/// split_partials floats, counters not of rows * heads; out, partials and counters overlapping; a block's shared
/// memory beyond sm_90's limit.
template <Element T>
void check_paged_attend_split(const PagedAttentionShape& shape, DeviceSpan<const T> q, DeviceSpan<T> out,
                              DeviceSpan<float> partials, DeviceSpan<unsigned> counters, const PagedKvCache<T>& cache,
                              int splits);

/// Checks a grouped attention launch (PagedAttention::attend_grouped) without a GPU. \throws UsageError as
/// check_paged_attend but for the shared memory; splits outside 1 .. 65535; partials not of split_partials floats,
/// counters not of rows * heads; count not of one int; out, partials and counters overlapping.
template <Element T>
void check_paged_attend_grouped(const PagedAttentionShape& shape, DeviceSpan<const T> q, DeviceSpan<T> out,
                                DeviceSpan<float> partials, DeviceSpan<unsigned> counters, const PagedKvCache<T>& cache,
                                DeviceSpan<const int> count, int splits);
/// Checks a grouped attention launch over the contiguous cache (PagedAttention::attend_grouped_slots) without a GPU:
/// the shape's rows, heads, kv_heads, head_dim, scale and window as check_paged_attention_shape checks them (its block
/// fields are not read), and the spans as check_paged_attend_grouped checks them. \throws UsageError naming the field
/// or span: head_dim neither 64 nor 128 (the tensor-core kernels only); context or slot_count below 1; a cache not of
/// slot_count * kv_heads * context * head_dim elements or not 16-byte aligned; positions or slots not of rows ints;
/// q or out not of rows * heads * head_dim elements or not 16-byte aligned; splits outside 1 .. 65535; partials not of
/// split_partials floats, counters not of rows * heads; count not of one int; out overlapping q, a cache, positions,
/// slots, partials, counters or count, or partials overlapping counters.
template <Element T>
void check_slot_attend_grouped(const PagedAttentionShape& shape, DeviceSpan<const T> q, DeviceSpan<T> out,
                               DeviceSpan<float> partials, DeviceSpan<unsigned> counters, const SlotKvCache<T>& cache,
                               DeviceSpan<const int> count, int splits);

/// The splits of attend_grouped for `rows` rows of `heads` query heads over `kv_heads` of `head_dim`, on a GPU of
/// `multiprocessors` SMs: enough that the grid has about eight blocks per SM (a block serves up to 16 query heads of
/// one kv head on tensor cores, head_dim 64 or 128, else up to 4 or 8), at most paged_max_splits. The kernels cut each
/// row's own positions, not the table's capacity, so every split works whatever the row's length (but none attends
/// fewer than 64 positions). \throws UsageError for rows, heads, kv_heads or multiprocessors below 1, or heads not a
/// multiple of kv_heads.
[[nodiscard]] int paged_grouped_splits(int rows, int heads, int kv_heads, int head_dim, int multiprocessors);
/// The most splits paged_grouped_wave_splits gives: 32. More made one row at position 32768 slower on an H200 (49 or
/// 64 splits: 36.5-38.2 us against 33.7-34.2 at 32, bench_paged_attention --sweep).
inline constexpr int paged_wave_max_splits = 32;
/// The splits of attend_grouped for `rows` rows given `resident`, the kernel's blocks one SM holds at once
/// (PagedAttention::grouped_resident): the split count whose blocks (rows x kv_heads x the parts of a group, each
/// split) come nearest half a wave of resident x multiprocessors (a tie to the fewer), at least 1 and at most
/// paged_wave_max_splits; with `resident` 0, paged_grouped_splits. Half, not a whole wave: a split's partials and the
/// last block's combine cost more than the second half of a wave gains once about two blocks a SM stream the cache.
/// On an H200 (bench_paged_attention --sweep, 2026-11-30): at head_dim 64 (4 resident; 1 to 256 rows of the
/// Llama-3.2-1B and TinyLlama shapes, positions 512 to 16384, the warps PagedAttention::grouped_warps gives) half a
/// wave took 0.65-1.01x a whole wave's time from 2 to 64 rows at positions up to 4096 (TinyLlama, 64 rows at 512: 16.6
/// against 21.6 us), 0.81-1.03x at 16384, and is the same split count at one row and from 128 rows; the best of 1 to
/// 64 splits and 4 or 8 warps was up to 1.4x faster in some cases of 1 to 32 rows at 512-4096 positions (most of them
/// one or two rows, whose count did not change), which one count per row count cannot give at every position.
/// At head_dim 128 (3 resident; Llama-3.1-8B shape, 1 to 64 rows, positions 512
/// to 32768) rounding down would leave 16 rows one split, 1.2x slower than a whole wave's 3 at 4096 and 32768
/// positions; the nearest count gives them 2 (79.3 and 555.6 us, within 0.1 % of the best measured; 20.2 against one
/// split's 18.0 at 512). There, from 32 rows, one split (either rule's) streams long rows slowly: 64 rows at 32768 took
/// 2556 us against 2152 with 4 splits. The decode step (BasicDecoderState::paged_splits) and the wide step use it.
/// \throws UsageError as paged_grouped_splits, and for a negative resident.
[[nodiscard]] int paged_grouped_wave_splits(int rows, int heads, int kv_heads, int head_dim, int multiprocessors,
                                            int resident);
/// Typed handles to the paged kernels over elements of T (kv_append_paged, rope_append_paged, attention_paged,
/// attention_paged_split, attention_paged_grouped_h4, _h8, attention_paged_grouped_mma_d64 and _d128, and their
/// 8-warp attention_paged_grouped_mma8_d64 and _d128; _bf16 for bfloat16), with launch ops that check their arguments.
///
/// Thread safety: const members may be called from any thread. Exception safety: a refused call throws before
/// anything runs and changes nothing.
template <Element T>
class PagedAttention {
 public:
  /// kv_append_paged(k, v, k_pool, v_pool, positions, tables, kv_heads, head_dim, block_size, blocks, table_width,
  /// rows).
  using AppendKernel = Kernel<void(const T*, const T*, T*, T*, const int*, const int*, int, int, int, int, int, int)>;
  /// rope_append_paged(qkv, bq, bk, bv, q, k_pool, v_pool, positions, tables, count, heads, kv_heads, head_dim,
  /// block_size, blocks, table_width, frequencies, max_rows).
  using RopeAppendKernel = Kernel<void(const T*, const T*, const T*, const T*, T*, T*, T*, const int*, const int*,
                                       const int*, int, int, int, int, int, int, const float*, int)>;
  /// attention_paged(q, k_pool, v_pool, out, positions, tables, heads, kv_heads, head_dim, block_size, blocks,
  /// table_width, scale, window).
  using AttentionKernel =
      Kernel<void(const T*, const T*, const T*, T*, const int*, const int*, int, int, int, int, int, int, float, int)>;
  /// attention_paged_split(q, k_pool, v_pool, out, partials, counters, positions, tables, heads, kv_heads, head_dim,
  /// block_size, blocks, table_width, scale, window).
  using SplitKernel = Kernel<void(const T*, const T*, const T*, T*, float*, unsigned*, const int*, const int*, int, int,
                                  int, int, int, int, float, int)>;
  /// The ops the calls return (GraphNodes: kernel launches).
  using AppendOp = LaunchOp<const T*, const T*, T*, T*, const int*, const int*, int, int, int, int, int, int>;
  /// See AppendOp.
  using RopeAppendOp = LaunchOp<const T*, const T*, const T*, const T*, T*, T*, T*, const int*, const int*, const int*,
                                int, int, int, int, int, int, const float*, int>;
  /// qk_norm_rope_append_paged(qkv, bias, q_gain, k_gain, q, k_pool, v_pool, positions, tables, count, heads,
  /// kv_heads, head_dim, block_size, blocks, table_width, frequencies, eps, whole, rows) (kernels/nn/qk_norm.cu).
  using QkNormAppendKernel = Kernel<void(const T*, const T*, const T*, const T*, T*, T*, T*, const int*, const int*,
                                         const int*, int, int, int, int, int, int, const float*, float, int, int)>;
  /// See AppendOp.
  using QkNormAppendOp = LaunchOp<const T*, const T*, const T*, const T*, T*, T*, T*, const int*, const int*,
                                  const int*, int, int, int, int, int, int, const float*, float, int, int>;
  /// See AppendOp.
  using AttentionOp =
      LaunchOp<const T*, const T*, const T*, T*, const int*, const int*, int, int, int, int, int, int, float, int>;
  /// See AppendOp.
  using SplitOp = LaunchOp<const T*, const T*, const T*, T*, float*, unsigned*, const int*, const int*, int, int, int,
                           int, int, int, float, int>;
  /// attention_paged_grouped_h4 / _h8 and attention_paged_grouped_mma_d64 / _d128(q, k_pool, v_pool, out, partials,
  /// counters, positions, tables, count, heads, kv_heads, head_dim, block_size, blocks, table_width, scale, window).
  using GroupedKernel = Kernel<void(const T*, const T*, const T*, T*, float*, unsigned*, const int*, const int*,
                                    const int*, int, int, int, int, int, int, float, int)>;
  /// See AppendOp.
  using GroupedOp = LaunchOp<const T*, const T*, const T*, T*, float*, unsigned*, const int*, const int*, const int*,
                             int, int, int, int, int, int, float, int>;

  /// attention_grouped_mma_d64 / _d128 and attention_grouped_mma8_d64 / _d128(q, k_cache, v_cache, out, partials,
  /// counters, positions, slots, count, heads, kv_heads, head_dim, context, slot_count, scale, window): the
  /// tensor-core grouped kernels over the contiguous cache.
  using GroupedSlotsKernel = Kernel<void(const T*, const T*, const T*, T*, float*, unsigned*, const int*, const int*,
                                         const int*, int, int, int, int, int, float, int)>;
  /// See AppendOp.
  using GroupedSlotsOp = LaunchOp<const T*, const T*, const T*, T*, float*, unsigned*, const int*, const int*,
                                  const int*, int, int, int, int, int, float, int>;

  /// Looks the kernels up in `library` (which must hold nn::kernel_set()). `early_launch`: the ops launch early
  /// (LaunchConfig::early_launch; see kernels/nn/paged_attention.cu for what is read before the wait).
  /// `tensor_cores`: the decoder's batches run on tensor cores (KernelOptions::tensor_cores), so the unsplit kernel
  /// takes the contiguous cache's block size for them (nn::attention_block_threads) and its bits.
  /// \throws UsageError as KernelLibrary::get does.
  explicit PagedAttention(const KernelLibrary& library, bool early_launch = true, bool tensor_cores = false);

  /// Writes each row's k and v ([rows][kv_heads][head_dim]) at its position through its table, as a lazy op. A
  /// position outside the table's capacity or a block id outside the pool traps the launch (a sticky error). Every
  /// row writes: a row that only pads a batch must point at a block no sequence reads; and a block a row writes may be
  /// read by the launch's other rows only at the same table index (rows of its own sequence), as the attention
  /// kernels' early reads assume (KvBlockPool's copy-on-write never writes a shared block).
  /// \throws UsageError naming the span or field that does not fit `shape` (check_paged_attention_shape; k and v of
  /// rows * kv_heads * head_dim elements; the pools of blocks * kv_heads * block_size * head_dim, 16-byte aligned;
  /// positions of rows ints; tables of rows * table_width ints).
  [[nodiscard]] AppendOp append(const PagedAttentionShape& shape, DeviceSpan<const T> k, DeviceSpan<const T> v,
                                const PagedKvCache<T>& cache) const;

  /// The stacked q/k/v projection of up to shape.rows rows (qkv, [rows][(heads + 2 kv_heads) * head_dim], as one GEMM
  /// writes it) split as a lazy op: each row b below count[0] (read on the device, clamped to [0, rows]) gets the
  /// biases (`bias`: q's, k's and v's stacked, or empty), RoPE at its position (`frequencies`: the RoPE table, head_dim
  /// / 2 floats) on its q and k heads, its q into q ([rows][heads][head_dim]) and its k and v into the pools at its
  /// position through its table. The rows from count[0] on (a bucket's padding) write nothing, so their positions
  /// and tables need only be valid for attend. A position outside the table's capacity or a block id outside the
  /// pool traps the launch. \throws UsageError (check_paged_rope_append) naming the span or field that does not fit.
  [[nodiscard]] RopeAppendOp rope_append(const PagedAttentionShape& shape, DeviceSpan<const T> qkv,
                                         DeviceSpan<const T> bias, DeviceSpan<T> q, const PagedKvCache<T>& cache,
                                         DeviceSpan<const int> count, DeviceSpan<const float> frequencies) const;

  /// rope_append for a block with q/k norms (Qwen3's per head, or with `whole` OLMoE's over the whole q and k): each
  /// row b below count[0] gets the biases, each q and k head normed (q_gain and k_gain: head_dim each, or with `whole`
  /// heads x head_dim and kv_heads x head_dim, the mean then over the row's whole q or k), rounded and rotated as the
  /// contiguous step's qk_norm_rope_append (the same arithmetic: kernels/nn/qk_norm.cu), its q into q and its k and v
  /// into the pools through its table; one block per (head of q, k and v, row). \throws UsageError
  /// (check_paged_qk_norm_rope_append) naming the span or field that does not fit.
  [[nodiscard]] QkNormAppendOp qk_norm_rope_append(const PagedAttentionShape& shape, DeviceSpan<const T> qkv,
                                                   DeviceSpan<const T> bias, DeviceSpan<const T> q_gain,
                                                   DeviceSpan<const T> k_gain, DeviceSpan<T> q,
                                                   const PagedKvCache<T>& cache, DeviceSpan<const int> count,
                                                   DeviceSpan<const float> frequencies, float eps, bool whole) const;

  /// Attention of q ([rows][heads][head_dim]) through the tables into out, one block of nn::attention_block_threads
  /// (512 for heads of 64 or fewer, else 1024; 256 or 1024 for batches on tensor cores) per (row, head), as a lazy op:
  /// row b attends its positions f..p (f = 0, or p - window + 1) with softmax(scale q . k) v, fp32. Gives the bits
  /// nn::Kernels::attention gives at the same block size (its attention_config's, for the same tensor_cores) for the
  /// same keys and values. Rows must be appended before they attend. \throws UsageError as append (q and out of rows *
  /// heads * head_dim, 16-byte aligned; out overlapping a pool), and when the scores of capacity() positions and the
  /// table would need more than paged_unsplit_shared_limit bytes of shared memory (use attend_split).
  [[nodiscard]] AttentionOp attend(const PagedAttentionShape& shape, DeviceSpan<const T> q, DeviceSpan<T> out,
                                   const PagedKvCache<T>& cache) const;

  /// attend over `splits` blocks per (row, head), each of ceil(capacity() / splits) positions, combined in split
  /// order by the last of them (deterministic; the same bits for the same splits whatever order blocks finish in).
  /// partials: split_partials(shape, splits) floats of scratch; counters: rows * heads unsigned, zero before the
  /// first launch (each launch leaves them zero). Launches sharing counters must not run at once.
  /// \throws UsageError as attend, for splits outside 1..capacity(), for partials or counters of another size, and
  /// when a block's shared memory would exceed paged_unsplit_shared_limit.
  [[nodiscard]] SplitOp attend_split(const PagedAttentionShape& shape, DeviceSpan<const T> q, DeviceSpan<T> out,
                                     DeviceSpan<float> partials, DeviceSpan<unsigned> counters,
                                     const PagedKvCache<T>& cache, int splits) const;

  /// Attention of the first count[0] rows of q (count read on the device, clamped to [0, rows]) through the tables
  /// into out, for steps of many rows (the wide decode step): one block per (row, kv head, its query heads or up to 16
  /// of them, split), so each key and value is read once for the query heads that share it, with an online softmax;
  /// each row's own positions f..p cut into `splits` ranges of at least 64, the cache staged through shared memory
  /// by cp.async (kernels/nn/paged_attention_grouped.cu). head_dim 64 or 128 runs on tensor cores (the heads the rows
  /// of mma tiles, scores in fp32, the probabilities rounded to T for P V as flash attention rounds them), any other
  /// on CUDA cores. sm_80 or newer, as the wide step; the kernels trap on older GPUs. Within rounding of attend (fp32
  /// sums in another order), deterministic for the same positions and splits. The rows from count[0] on get zeros.
  /// partials: split_partials(shape, splits) floats of scratch; counters: rows * heads unsigned, zero before the first
  /// launch (each launch leaves them zero); launches sharing counters must not run at once. Blocks of `warps` warps
  /// on tensor cores (4 or 8; 0, the default: grouped_warps's choice; the CUDA-core kernels have 4 whatever it says):
  /// within rounding of each other (the warps' sums merge in another grouping).
  /// \throws UsageError as check_paged_attend_grouped, for `warps` other than 0, 4 and 8, and for blocks whose shared
  /// memory this GPU does not give (grouped_fits).
  [[nodiscard]] GroupedOp attend_grouped(const PagedAttentionShape& shape, DeviceSpan<const T> q, DeviceSpan<T> out,
                                         DeviceSpan<float> partials, DeviceSpan<unsigned> counters,
                                         const PagedKvCache<T>& cache, DeviceSpan<const int> count, int splits,
                                         int warps = 0) const;
  /// attend_grouped over the contiguous cache instead of a pool (row b reads slot cache.slots[b] up to its position;
  /// head_dim 64 or 128, on tensor cores): the same blocks, launch, splits, partials and arithmetic as attend_grouped,
  /// so the same bits as attend_grouped for the same keys, values, positions, splits and warps. The decode step's
  /// batches on tensor cores attend with it (BasicDecoderState::grouped_batches). A position outside [0, context) or a
  /// slot outside [0, slot_count) traps the launch. \throws UsageError as check_slot_attend_grouped and as
  /// attend_grouped for `warps`.
  [[nodiscard]] GroupedSlotsOp attend_grouped_slots(const PagedAttentionShape& shape, DeviceSpan<const T> q,
                                                    DeviceSpan<T> out, DeviceSpan<float> partials,
                                                    DeviceSpan<unsigned> counters, const SlotKvCache<T>& cache,
                                                    DeviceSpan<const int> count, int splits, int warps = 0) const;
  /// Floats of attend_split's partials: rows * heads * splits * (head_dim + 2).
  [[nodiscard]] static std::size_t split_partials(const PagedAttentionShape& shape, int splits) noexcept;
  /// attend's launch: grid (heads, rows), attention_block_threads threads, (capacity() + table_width) * 4 bytes of
  /// shared memory.
  [[nodiscard]] LaunchConfig attention_config(const PagedAttentionShape& shape) const;
  /// attend_split's launch: grid (heads, rows, splits), 128 threads, (max(len, splits * (head_dim + 2)) +
  /// len / block_size + 2) * 4 bytes of shared memory, len = ceil(capacity() / splits).
  [[nodiscard]] LaunchConfig split_config(const PagedAttentionShape& shape, int splits) const;
  /// attend_grouped's launch: grid (kv_heads * ceil(group / h), rows, splits), h the kernel's heads a block (16 on
  /// tensor cores; 4 up to a group of 4, else 8 on CUDA cores), 32 `warps` threads (4, or 8 for the tensor-core
  /// kernels' attention_paged_grouped_mma8 form: grouped_warps), the kernel's shared memory (the warps' results, which
  /// on tensor cores reuse the cache's stages: 54 KiB at head_dim 64 and 68 KiB at 128 with 4 warps, twice that with
  /// 8), multiprocessors split half for shared memory (LaunchConfig::shared_carveout 50: the decode step's kernels
  /// after it ran faster, paged_attention.cpp says by how much). `tensor_cores` false: the CUDA-core kernel whatever
  /// head_dim (for benchmarks).
  [[nodiscard]] LaunchConfig grouped_config(const PagedAttentionShape& shape, int splits, bool tensor_cores = true,
                                            int warps = 4) const;
  /// The blocks of attend_grouped's kernel for `shape` with `warps` warps (grouped_kernel, grouped_config) one
  /// multiprocessor holds at once: the driver's occupancy count (expected 4 at head_dim 64 and 3 at 128 on an H200
  /// with 4 warps, 2 and 1 with 8: their launch bounds). \throws CudaError naming the kernel when the driver refuses
  /// the query.
  [[nodiscard]] int grouped_resident(const PagedAttentionShape& shape, int warps = 4) const;
  /// The warps a block of attend_grouped's kernel has for `shape` and `splits` on this GPU: 8 at head_dim 64 on tensor
  /// cores where a row's positions are cut into 8 splits or more and the grid (kv_heads * ceil(group / 16) * rows *
  /// splits blocks) fits one wave of the 8-warp kernel's resident blocks, else 4. Few blocks (a row of a long context,
  /// split over its positions) leave each multiprocessor one or two blocks of the 4-warp kernel, whose warps wait on
  /// their loads' latency; 8 warps a block take tiles of 128 positions, twice the loads in flight, with the same splits
  /// and partials. On an H200 (Llama-3.2-1B shape, one row, 32 splits) the kernel alone took 8.0 against 8.4 us at
  /// position 512, 12.6 against 14.7 at 4096, 30.7 against 31.6 at 32768, and a decode step at position 32768 1412-1423
  /// against 1576-1588 us; at 2 and 8 rows the 4-warp kernel was as fast or faster. With fewer splits (2026-11-30,
  /// H200, bench_paged_attention --sweep, the splits of paged_grouped_wave_splits) the blocks are long and 4 warps were
  /// as fast or up to 8 % faster (TinyLlama shape, 64 rows in one split at position 512: 16.6 against 17.9 us), with 8
  /// splits or more 8 warps as fast or up to 12 % faster (TinyLlama shape, 4 rows in 16 splits at 1024: 12.1
  /// against 13.5 us). Head_dim 128 keeps 4 warps: its 8-warp kernel (one block a multiprocessor) was not measured.
  [[nodiscard]] int grouped_warps(const PagedAttentionShape& shape, int splits) const;
  /// Whether a block of attend_grouped's kernel for `shape` with `warps` warps gets the shared memory it needs on this
  /// GPU (the 8-warp tensor-core kernels' 108 and 136 KiB exceed the 99 KiB of sm_86, sm_89 and sm_120).
  [[nodiscard]] bool grouped_fits(const PagedAttentionShape& shape, int warps) const noexcept;
  /// append's launch: 256 threads per block over rows * kv_heads * head_dim elements.
  [[nodiscard]] LaunchConfig append_config(const PagedAttentionShape& shape) const;
  /// rope_append's launch: 256 threads per block over rows * (heads + 2 kv_heads) * head_dim / 8 eighths.
  [[nodiscard]] LaunchConfig rope_append_config(const PagedAttentionShape& shape) const;

  /// The raw kernel handles (for tests and benchmarks; the calls above check what these do not).
  [[nodiscard]] const AppendKernel& append_kernel() const noexcept { return append_; }
  /// See append_kernel.
  [[nodiscard]] const RopeAppendKernel& rope_append_kernel() const noexcept { return rope_append_; }
  /// See append_kernel.
  [[nodiscard]] const AttentionKernel& attention_kernel() const noexcept { return attention_; }
  /// See append_kernel.
  [[nodiscard]] const QkNormAppendKernel& qk_norm_append_kernel() const noexcept { return qk_norm_append_; }
  /// See append_kernel.
  [[nodiscard]] const SplitKernel& split_kernel() const noexcept { return split_; }
  /// See append_kernel: the grouped kernel attend_grouped launches for `shape` given `warps` (attend_grouped passes
  /// grouped_warps(shape, splits)): attention_paged_grouped_mma_d64 or _d128 for those head_dims
  /// (attention_paged_grouped_mma8_d64 / _d128 with `warps` 8), else
  /// attention_paged_grouped_h4 for a group of up to 4 query heads per kv head, else _h8. `tensor_cores` false: the
  /// CUDA-core kernel whatever head_dim (for benchmarks; launch it with grouped_config(shape, splits, false)).
  [[nodiscard]] const GroupedKernel& grouped_kernel(const PagedAttentionShape& shape, bool tensor_cores = true,
                                                    int warps = 4) const noexcept;

 private:
  /// The warps of a grouped launch by `call`: `warps`, or grouped_warps's choice for 0. \throws UsageError naming
  /// `call` for warps other than 0, 4 and 8, and for blocks whose shared memory this GPU does not give.
  [[nodiscard]] int checked_warps(const char* call, const PagedAttentionShape& shape, int splits, int warps) const;

  AppendKernel append_;
  RopeAppendKernel rope_append_;
  QkNormAppendKernel qk_norm_append_;
  AttentionKernel attention_;
  SplitKernel split_;
  /// The grouped kernels: _h4, _h8, _mma_d64, _mma_d128, _mma8_d64, _mma8_d128.
  static std::array<GroupedKernel, 6> grouped_kernels(const KernelLibrary& library);
  std::array<GroupedKernel, 6> grouped_;
  /// The contiguous cache's: _mma_d64, _mma_d128, _mma8_d64, _mma8_d128.
  static std::array<GroupedSlotsKernel, 4> grouped_slots_kernels(const KernelLibrary& library);
  std::array<GroupedSlotsKernel, 4> grouped_slots_;
  bool early_launch_;
  bool tensor_cores_;    ///< see the constructor
  int multiprocessors_;  ///< the library's device's, for grouped_warps and attention_block_threads
  int max_shared_;       ///< the most shared memory a block may opt into there, for grouped_fits
};

extern template class PagedAttention<half>;
extern template class PagedAttention<bfloat16>;

}  // namespace lazygraph::nn
