// Grouped-query decode attention over a paged KV cache for steps of many rows (the wide decode step,
// nn/wide_step.hpp): one block per (row, kv head, up to kHeads of the query heads that share it, split), so that
// every key and value is read once for all of those heads, with an online softmax (no scores in shared memory: a
// split may be as long as the row's context). fp16 or bf16 storage (the kernels named *_bf16 take bf16), fp32
// arithmetic. Layout as kernels/nn/paged_attention.cu: the pools [n_blocks][n_kv_heads][block_size][head_dim], row b's
// table tables[b][0 .. table_width), q and out [rows][n_heads][head_dim]; query head h reads kv head
// h / (n_heads / n_kv_heads).
//
//   attention_paged_grouped_h4 / _h8(q, k_pool, v_pool, out, partials, counters, positions, tables, count, n_heads,
//                                    n_kv_heads, head_dim, block_size, n_blocks, table_width, scale, window)
//     On CUDA cores, any head_dim. Launch: grid (n_kv_heads * parts, rows, splits), parts = ceil(group / kHeads),
//     kHeads 4 (_h4) or 8 (_h8), group = n_heads / n_kv_heads (block x serves kv head x / parts and its query heads
//     from (x % parts) * kHeads on); 128 threads; dynamic shared memory 4 * min(group, kHeads) * (head_dim + 2) * 4 +
//     4 * 2 * tile * head_dim * 2 bytes: the warps' results, then four stages of a tile of keys and one of values,
//     tile = 256 / lanes positions, lanes the power of two at or above head_dim / 8 (32 positions for head_dim 64).
//     Each lane group of `lanes` lanes takes a position, each lane 8 of its elements, and keeps every head's running
//     maximum, sum and weighted values in registers.
//
//   attention_paged_grouped_mma_d64 / _d128(the same parameters; head_dim 64 or 128, which they trap on otherwise)
//     On tensor cores: kHeads 16 (the rows of an mma tile; past the group's heads they are zero); per tile of 64
//     positions each warp takes 16 (attention_paged_grouped_mma_body). Launch as above with kHeads 16, dynamic shared
//     memory max(4 * min(group, 16) * (head_dim + 2) * 4, stages * 2 * 64 * (head_dim + 8) * 2) bytes (the warps'
//     results reuse the stages once the tiles are done), stages 3 for head_dim 64 and 2 for 128: 54 and 68 KiB, so
//     that 4 and 3 blocks fit a multiprocessor of sm_90 (their launch bounds).
//
//   attention_paged_grouped_mma8_d64 / _d128(the same parameters)
//     The tensor-core kernels with 8 warps a block, each taking 16 positions of every tile of 128: for grids of few
//     blocks (a row or two of a long context split over its positions), which leave a multiprocessor one or two
//     blocks of the 4-warp form and its warps waiting on their loads. 256 threads, dynamic shared memory max(8 *
//     min(group, 16) * (head_dim + 2) * 4, stages * 2 * 128 * (head_dim + 8) * 2) bytes: 108 and 136 KiB, 2 and 1
//     blocks a multiprocessor (their launch bounds). Within rounding of the 4-warp form (the warps' sums merge in
//     another grouping).
//
//   attention_grouped_mma_d64 / _d128 / attention_grouped_mma8_d64 / _d128(q, k_cache, v_cache, out, partials,
//                                    counters, positions, slots, count, n_heads, n_kv_heads, head_dim, max_ctx,
//                                    n_slots, scale, window)
//     The tensor-core kernels above over the contiguous cache instead of a pool (kernels/nn/attention.cu's layout,
//     [n_slots][n_kv_heads][max_ctx][head_dim]; row b in slot slots[b]), for the decode step's batches: the same
//     blocks, grid, shared memory, splits and arithmetic, so the same bits as the paged kernel for the same keys,
//     values, positions and splits. A position outside [0, max_ctx) or a slot outside [0, n_slots) traps. They read
//     the slots before their wait, as the tables.
//
//     All: the cache reaches shared memory tile by tile through cp.async (sm_80 and newer; the kernels trap on older
//     GPUs), the later tiles in flight while the block works on the first. Rows
//     b below count[0] (clamped to [0, rows]) at position p attend positions f..p (f = 0, or max(0, p - window + 1) for
//     window > 0): their n = p - f + 1 positions are cut into ranges of len = max(64, ceil(n / splits)) positions, one
//     per block z; the blocks whose range starts past p return at once. When one range holds them all, its block writes
//     out; otherwise each of the u = ceil(n / len) blocks writes its partial maximum, sum and weighted values to
//     partials [rows][n_heads][splits][head_dim + 2] (floats), and the last of them, found by an atomic count in
//     counters[b * gridDim.x + x] (zero at launch; that block sets it back to zero), combines the u partials in
//     split order. The result's bits depend on n and splits, never on the order blocks run in. Rows from count[0]
//     on (a bucket's padding) read nothing: their out is zeroed (by the blocks of z = 0).
//     Requires head_dim a multiple of 8 and at most 256, n_heads a multiple of n_kv_heads, block_size 16 or 32, q,
//     the pools and out 16-byte aligned, the dynamic shared memory above; traps otherwise, and on a position outside
//     [0, table_width * block_size) or a table entry it uses outside [0, n_blocks).
//     May be launched early (LaunchConfig::early_launch). The CUDA-core kernels read nothing before they wait for the
//     kernel before them. The tensor-core kernels read count, positions and tables before it (so those must have
//     been written by earlier work than the kernel before, as a decode step's input copies are: paged_attention.cu's
//     rule) and ask L2 for their first tiles' keys and values (a hint: the copies after the wait read whatever is
//     there then); q, the cache, out, partials and counters after it.
#include "lazygraph/async_copy.cuh"
#include "lazygraph/element.cuh"
#include "lazygraph/kernel_common.cuh"
#include "lazygraph/mma.cuh"

namespace {

constexpr int kGroupedThreads = 128;
constexpr int kGroupedWarps = kGroupedThreads / 32;
constexpr int kGroupedMaxHeadDim = 256;
constexpr int kGroupedMinSplit = 64;  // the fewest positions a split attends
constexpr int kGroupedInFlight = 2;   // positions a lane group takes from a tile at once (a tile: 2 per lane group)
constexpr int kGroupedStages = 4;     // tiles in flight in shared memory
constexpr int kGroupedMmaHeads = 16;  // query heads a block of the tensor-core kernels serves (the rows of an mma tile)

__device__ __forceinline__ float minus_infinity() { return -__int_as_float(0x7f800000); }

/// e^(m - top), or 0 for an empty set (m = -inf), so that two empty sets merge into an empty one.
__device__ __forceinline__ float rescale(float m, float top) { return m == minus_infinity() ? 0.0f : expf(m - top); }

/// The dynamic shared memory this launch was given, in bytes.
__device__ __forceinline__ unsigned grouped_shared_bytes() {
  unsigned bytes;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
  return bytes;
}

/// What one block of a grouped launch attends: the kv head, its query heads and the row it serves, and its range of
/// the row's positions.
struct GroupedWork {
  int group;         ///< query heads per kv head
  int kv_head;       ///< the block's kv head
  int head0;         ///< its first query head
  int heads;         ///< and how many (at most the kernel's kHeads)
  int row;           ///< the row (sequence) it serves
  long long out_at;  ///< out's offset of (row, head0)
  int begin;         ///< its positions: [begin, end)
  int end;
  int used;    ///< the blocks of the row that attend any position (the splits in use)
  int z;       ///< this block's split
  int splits;  ///< gridDim.z
};

/// The block's work (see the file comment); false when it has none: past the kv heads, a split past the row's
/// positions, or a padding row, whose out the blocks of split 0 zero here (with kZeroPadding: a kernel that calls it
/// before its wait calls it again after the wait to do so). Traps on a position outside [0, capacity): the table's
/// positions, or the contiguous cache's context.
template <int kHeads, class T, bool kZeroPadding = true>
__device__ __forceinline__ bool grouped_work(GroupedWork& w, T* out, const int* positions, const int* count,
                                             int n_heads, int n_kv_heads, int head_dim, long long capacity,
                                             int window) {
  const int group = n_heads / n_kv_heads;
  const int parts = (group + kHeads - 1) / kHeads;
  const int kv_head = static_cast<int>(blockIdx.x) / parts;
  if (kv_head >= n_kv_heads) return false;
  const int head0 = kv_head * group + (static_cast<int>(blockIdx.x) % parts) * kHeads;
  const int heads = min(kHeads, kv_head * group + group - head0);
  const int row = static_cast<int>(blockIdx.y);
  const long long out_at = (static_cast<long long>(row) * n_heads + head0) * head_dim;
  if (row >= min(max(count[0], 0), static_cast<int>(gridDim.y))) {  // padding: zeros, once
    if (kZeroPadding && blockIdx.z == 0) {
      for (int e = threadIdx.x; e < heads * head_dim; e += blockDim.x) out[out_at + e] = lg::from_float<T>(0.0f);
    }
    return false;
  }
  const int p = positions[row];
  if (p < 0 || static_cast<long long>(p) >= capacity) __trap();
  const int first = window > 0 ? max(0, p - window + 1) : 0;
  const int n = p - first + 1;
  const int splits = static_cast<int>(gridDim.z);
  const int len = max(kGroupedMinSplit, (n + splits - 1) / splits);
  const int used = (n + len - 1) / len;
  const int z = static_cast<int>(blockIdx.z);
  if (z >= used) return false;
  const int begin = first + z * len;
  w = {group, kv_head, head0, heads, row, out_at, begin, min(begin + len, p + 1), used, z, splits};
  return true;
}

/// The block's end, once each of its `warps` warps has left in `shared` ([warps][block_heads][head_dim + 2] floats) its
/// maximum m (natural units, -inf for no position), its sum l of e^(s - m) and its weighted values, for each of the
/// block's heads: the warps combined, then out (one split in use) or this split's partial, and the last of the row's
/// splits combines the partials in split order. Every thread of the block calls it.
template <class T>
__device__ __forceinline__ void grouped_finish(const GroupedWork& w, float* shared, int warps, int block_heads,
                                               int head_dim, int n_heads, T* out, float* partials, unsigned* counters) {
  __shared__ bool last_block;
  const int stride = head_dim + 2;
  const int total = w.heads * head_dim;
  const long long pair0 = static_cast<long long>(w.row) * n_heads + w.head0;  // this block's first (row, head)
  for (int e = threadIdx.x; e < total; e += blockDim.x) {
    const int g = e / head_dim;
    const int d = e % head_dim;
    float top = minus_infinity();
    for (int k = 0; k < warps; ++k) top = fmaxf(top, shared[(k * block_heads + g) * stride]);
    float sum = 0.0f;
    float value = 0.0f;
    for (int k = 0; k < warps; ++k) {
      const float* ws = shared + (k * block_heads + g) * stride;
      const float c = rescale(ws[0], top);
      sum += ws[1] * c;
      value += ws[2 + d] * c;
    }
    if (w.used == 1) {
      out[w.out_at + e] = lg::from_float<T>(value / sum);
    } else {
      float* partial = partials + ((pair0 + g) * w.splits + w.z) * stride;
      if (d == 0) {
        partial[0] = top;
        partial[1] = sum;
      }
      partial[2 + d] = value;
    }
  }
  if (w.used == 1) return;

  // The last of the row's used blocks combines their partials in split order.
  __syncthreads();
  const long long counter = static_cast<long long>(w.row) * gridDim.x + blockIdx.x;
  if (threadIdx.x == 0) {
    __threadfence();  // this block's partials are visible before its count
    last_block = atomicAdd(counters + counter, 1u) == static_cast<unsigned>(w.used - 1);
  }
  __syncthreads();
  if (!last_block) return;
  __threadfence();  // the other blocks' partials, counted before ours, are visible from here
  // Each partial's maximum and sum reach shared memory once (free now: the warps' results were read before the
  // barriers above), a thread per head turns them into the partials' factors and the head's sum, and the weighted
  // values are then read with their loads in flight together, rather than every element reading every maximum and sum
  // from L2 one split after another. The same arithmetic in the same order as combining them element by element: the
  // same bits. A launch whose maxima and sums do not fit the shared memory combines element by element.
  const int pairs = w.heads * w.used;  // (head, split) partials
  float* maxima = shared;              // [heads][used], then the factors e^(m - top)
  float* sums = shared + pairs;        // [heads][used], then [heads] the heads' sums
  if (2 * pairs + w.heads > static_cast<int>(grouped_shared_bytes() / 4)) {
    for (int e = threadIdx.x; e < total; e += blockDim.x) {
      const int g = e / head_dim;
      const int d = e % head_dim;
      const float* all = partials + (pair0 + g) * w.splits * stride;
      float top = minus_infinity();
      for (int s = 0; s < w.used; ++s) top = fmaxf(top, __ldcg(all + s * stride));
      float sum = 0.0f;
      float value = 0.0f;
      for (int s = 0; s < w.used; ++s) {
        const float c = expf(__ldcg(all + s * stride) - top);
        sum += __ldcg(all + s * stride + 1) * c;
        value += __ldcg(all + s * stride + 2 + d) * c;
      }
      out[w.out_at + e] = lg::from_float<T>(value / sum);
    }
  } else {
    for (int i = threadIdx.x; i < pairs; i += blockDim.x) {
      const float* partial = partials + ((pair0 + i / w.used) * w.splits + i % w.used) * stride;
      maxima[i] = __ldcg(partial);
      sums[i] = __ldcg(partial + 1);
    }
    __syncthreads();
    if (static_cast<int>(threadIdx.x) < w.heads) {
      float* m = maxima + threadIdx.x * w.used;
      const float* l = sums + threadIdx.x * w.used;
      float top = minus_infinity();
      for (int s = 0; s < w.used; ++s) top = fmaxf(top, m[s]);
      float sum = 0.0f;
      for (int s = 0; s < w.used; ++s) {
        const float c = expf(m[s] - top);
        m[s] = c;
        sum += l[s] * c;
      }
      sums[pairs + threadIdx.x] = sum;
    }
    __syncthreads();
    constexpr int kInFlight = 8;  // loads of the weighted values in flight per thread
    for (int e = threadIdx.x; e < total; e += blockDim.x) {
      const int g = e / head_dim;
      const int d = e % head_dim;
      const float* v = partials + (pair0 + g) * w.splits * stride + 2 + d;  // split s's at v[s * stride]
      const float* c = maxima + g * w.used;
      float value = 0.0f;
      for (int s0 = 0; s0 < w.used; s0 += kInFlight) {
        float got[kInFlight];
#pragma unroll
        for (int u = 0; u < kInFlight; ++u) got[u] = s0 + u < w.used ? __ldcg(v + (s0 + u) * stride) : 0.0f;
#pragma unroll
        for (int u = 0; u < kInFlight; ++u) {
          if (s0 + u < w.used) value += got[u] * c[s0 + u];
        }
      }
      out[w.out_at + e] = lg::from_float<T>(value / sums[pairs + g]);
    }
  }
  if (threadIdx.x == 0) counters[counter] = 0;  // the next launch counts from zero
}

template <int kHeads, class T>
__device__ __forceinline__ void attention_paged_grouped_body(const T* q, const T* k_pool, const T* v_pool, T* out,
                                                             float* partials, unsigned* counters, const int* positions,
                                                             const int* tables, const int* count, int n_heads,
                                                             int n_kv_heads, int head_dim, int block_size, int n_blocks,
                                                             int table_width, float scale, int window) {
#if __CUDA_ARCH__ < 800
  __trap();  // cp.async needs sm_80 (as the wide step does)
#else
  lg::early_launch_prologue();       // may be launched early; reads nothing before its wait
  extern __shared__ float shared[];  // per warp, per head: m, l, then head_dim weighted values
  if (blockDim.x != kGroupedThreads || head_dim % 8 != 0 || head_dim <= 0 || head_dim > kGroupedMaxHeadDim ||
      n_kv_heads <= 0 || n_heads % n_kv_heads != 0 || (block_size != 16 && block_size != 32) || !lg::is_aligned16(q) ||
      !lg::is_aligned16(k_pool) || !lg::is_aligned16(v_pool) || !lg::is_aligned16(out)) {
    __trap();
  }
  GroupedWork w;
  if (!grouped_work<kHeads>(w, out, positions, count, n_heads, n_kv_heads, head_dim,
                            static_cast<long long>(table_width) * block_size, window)) {
    return;
  }
  const int group = w.group;
  const int kv_head = w.kv_head;
  const int heads = w.heads;
  const int row = w.row;
  const long long out_at = w.out_at;
  const int begin = w.begin;
  const int end = w.end;
  const int stride = head_dim + 2;  // floats per (warp, head) in shared memory, and per partial
  const int shift = block_size == 32 ? 5 : 4;

  // Lanes: `lanes` of them (a power of two) share one position, each holding 8 elements of its head_dim.
  const int chunks = head_dim / 8;
  int lanes = 1;
  while (lanes < chunks) lanes <<= 1;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int sub = lane % lanes;
  const bool has_chunk = sub < chunks;
  const int col = 8 * (has_chunk ? sub : 0);
  const int per_warp = 32 / lanes;                  // positions a warp covers at once
  const int mine = warp * per_warp + lane / lanes;  // this lane group's position within a step
  const int across = kGroupedWarps * per_warp;      // positions the block covers at once
  const int tile = across * kGroupedInFlight;       // positions per tile of the cache in shared memory
  if (grouped_shared_bytes() <
      static_cast<unsigned>(kGroupedWarps * min(group, kHeads) * stride * 4 +
                            kGroupedStages * 2 * tile * head_dim * static_cast<int>(sizeof(T)))) {
    __trap();
  }

  float qf[kHeads][8];
  float m[kHeads];
  float l[kHeads];
  float acc[kHeads][8];
#pragma unroll
  for (int g = 0; g < kHeads; ++g) {
    float x[8] = {};
    if (g < heads) lg::load_float8(q + out_at + static_cast<long long>(g) * head_dim + col, x);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      qf[g][i] = has_chunk ? x[i] * scale : 0.0f;
      acc[g][i] = 0.0f;
    }
    m[g] = minus_infinity();
    l[g] = 0.0f;
  }

  // The cache, tile by tile through shared memory: kGroupedStages tiles of `tile` positions (keys, then values) in
  // flight as cp.async copies while the block works on the oldest, so that far more bytes are in flight than
  // registers could hold. Positions past the range are zero-filled and never used.
  const int* table = tables + static_cast<long long>(row) * table_width;
  const long long block_stride = static_cast<long long>(n_kv_heads) * block_size * head_dim;
  const long long head_base = static_cast<long long>(kv_head) * block_size * head_dim;
  const int mask = block_size - 1;
  const int tile_elements = tile * head_dim;
  T* tiles = reinterpret_cast<T*>(shared + kGroupedWarps * min(group, kHeads) * stride);  // [stage][k, v][tile]
  const int count_tiles = (end - begin + tile - 1) / tile;
  const auto fetch = [&](int t) {  // tile t into its stage, then one commit (always: the group count stays uniform)
    if (t < count_tiles) {
      T* k_to = tiles + static_cast<long long>(t % kGroupedStages) * 2 * tile_elements;
      T* v_to = k_to + tile_elements;
      for (int c = threadIdx.x; c < tile * chunks; c += kGroupedThreads) {
        const int r = c / chunks;
        const int j = begin + t * tile + r;
        const bool real = j < end;
        long long from = 0;
        if (real) {
          const int id = table[j >> shift];
          if (id < 0 || id >= n_blocks) __trap();
          from = static_cast<long long>(id) * block_stride + head_base + static_cast<long long>(j & mask) * head_dim +
                 8 * (c % chunks);
        }
        const int to = r * head_dim + 8 * (c % chunks);
        lg::copy16_async(k_to + to, k_pool + from, real);
        lg::copy16_async(v_to + to, v_pool + from, real);
      }
    }
    lg::commit_async();
  };
#pragma unroll
  for (int t = 0; t < kGroupedStages - 1; ++t) fetch(t);
  for (int t = 0; t < count_tiles; ++t) {
    fetch(t + kGroupedStages - 1);
    lg::wait_async<kGroupedStages - 1>();  // this thread's copies of tile t have landed
    __syncthreads();                       // and every thread's
    const T* k_tile = tiles + static_cast<long long>(t % kGroupedStages) * 2 * tile_elements;
    const T* v_tile = k_tile + tile_elements;
    const int held = min(tile, end - begin - t * tile);  // positions of this tile in the range
    // Scores, then each head's new maximum and weights (e), then the weighted values.
    float e[kHeads][kGroupedInFlight];
#pragma unroll
    for (int u = 0; u < kGroupedInFlight; ++u) {
      const int r = u * across + mine;
      float kf[8];
      lg::unpack8(lg::load8(k_tile + r * head_dim + col), kf);
#pragma unroll
      for (int g = 0; g < kHeads; ++g) {
        if (g >= heads) continue;  // uniform over the block
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) dot = fmaf(qf[g][i], kf[i], dot);
        for (int offset = lanes / 2; offset > 0; offset >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
        e[g][u] = r < held ? dot : minus_infinity();
      }
    }
#pragma unroll
    for (int g = 0; g < kHeads; ++g) {
      if (g >= heads) continue;
      float top = m[g];
#pragma unroll
      for (int u = 0; u < kGroupedInFlight; ++u) top = fmaxf(top, e[g][u]);
      if (top == minus_infinity()) {  // no position yet (uniform over the lane group)
#pragma unroll
        for (int u = 0; u < kGroupedInFlight; ++u) e[g][u] = 0.0f;
        continue;
      }
      const float c = rescale(m[g], top);
      l[g] *= c;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[g][i] *= c;
#pragma unroll
      for (int u = 0; u < kGroupedInFlight; ++u) {
        e[g][u] = u * across + mine < held ? expf(e[g][u] - top) : 0.0f;
        l[g] += e[g][u];
      }
      m[g] = top;
    }
#pragma unroll
    for (int u = 0; u < kGroupedInFlight; ++u) {
      float vf[8];
      lg::unpack8(lg::load8(v_tile + (u * across + mine) * head_dim + col), vf);
#pragma unroll
      for (int g = 0; g < kHeads; ++g) {
        if (g >= heads) continue;
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[g][i] = fmaf(e[g][u], vf[i], acc[g][i]);
      }
    }
    __syncthreads();  // every thread is done with this stage before a later fetch overwrites it
  }
  lg::wait_async<0>();  // no copy outlives the block (the last fetches were empty commits)

  // The warp's lane groups merged (each lane with the lanes of its chunk), then the warps in shared memory.
  for (int offset = lanes; offset < 32; offset <<= 1) {
#pragma unroll
    for (int g = 0; g < kHeads; ++g) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m[g], offset);
      const float l2 = __shfl_xor_sync(0xffffffffu, l[g], offset);
      const float top = fmaxf(m[g], m2);
      const float c1 = rescale(m[g], top);
      const float c2 = rescale(m2, top);
      l[g] = l[g] * c1 + l2 * c2;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float a2 = __shfl_xor_sync(0xffffffffu, acc[g][i], offset);
        acc[g][i] = acc[g][i] * c1 + a2 * c2;
      }
      m[g] = top;
    }
  }
  const int block_heads = min(group, kHeads);
  float* warp_state = shared + warp * block_heads * stride;
  if (lane < lanes && has_chunk) {
#pragma unroll
    for (int g = 0; g < kHeads; ++g) {
      if (g >= heads) continue;
      if (sub == 0) {
        warp_state[g * stride] = m[g];
        warp_state[g * stride + 1] = l[g];
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) warp_state[g * stride + 2 + col + i] = acc[g][i];
    }
  }
  __syncthreads();
  grouped_finish(w, shared, kGroupedWarps, block_heads, head_dim, n_heads, out, partials, counters);
#endif
}

/// Where the grouped tensor-core kernels find the positions of one row's kv head in a paged pool: through the row's
/// table, whose entries the copies read a tile ahead (kEntries).
struct TablePlaces {
  static constexpr bool kEntries = true;
  const int* table;        ///< the row's table
  long long block_stride;  ///< elements of a pool block (every kv head's positions)
  long long head_base;     ///< the kv head's offset in a block
  int shift;               ///< log2 of the block size
  int n_blocks;
  __device__ __forceinline__ int entry(int j) const { return table[j >> shift]; }
  __device__ __forceinline__ bool valid(int id) const {
    return static_cast<unsigned>(id) < static_cast<unsigned>(n_blocks);
  }
  /// The element of position j's row, whose table entry is id.
  __device__ __forceinline__ long long at(int id, int j, int head_dim) const {
    return static_cast<long long>(id) * block_stride + head_base +
           static_cast<long long>(j & ((1 << shift) - 1)) * head_dim;
  }
};

/// The same for the contiguous cache ([n_slots][n_kv_heads][max_ctx][head_dim], kernels/nn/attention.cu): the row's
/// slot holds the kv head's positions in one piece, so there are no entries to read.
struct SlotPlaces {
  static constexpr bool kEntries = false;
  long long base;  ///< the element of position 0 of the row's slot and kv head
  __device__ __forceinline__ int entry(int /*j*/) const { return 0; }
  __device__ __forceinline__ bool valid(int /*id*/) const { return true; }
  __device__ __forceinline__ long long at(int /*id*/, int j, int head_dim) const {
    return base + static_cast<long long>(j) * head_dim;
  }
};

/// attention_paged_grouped_mma_dD and attention_grouped_mma_dD: the grouped attention on tensor cores, head_dim D (64
/// or 128) and up to 16 query heads a block (kGroupedMmaHeads), over a paged pool or the contiguous cache as
/// `make_places(w)` (TablePlaces, SlotPlaces) finds the block's positions. The block's query heads are the 16 rows of mma
/// tiles (rows past them zero); each of its kWarps warps (4, or 8 for few blocks: PagedAttention::grouped_warps)
/// takes 16 positions of every tile of 16 kWarps positions: its scores S = Q K^T (16 x 16, fp32, K through ldmatrix
/// from the staged tile), their online softmax per head in base 2 (scale * log2(e) folded into the exponent), then O
/// += P V (P rounded to T straight from the score registers as the A fragment, V through ldmatrix.trans). Rows of
/// shared memory are padded to D + 8 elements, so that an ldmatrix's 8 row addresses fall on distinct banks. The warps'
/// maxima leave in natural units for grouped_finish. The positions a row may reach are [0, capacity).
template <int D, int kWarps, class T, class MakePlaces>
__device__ __forceinline__ void grouped_mma_core(const T* q, const T* k_cache, const T* v_cache, T* out,
                                                 float* partials, unsigned* counters, const int* positions,
                                                 const int* count, int n_heads, int n_kv_heads, int head_dim,
                                                 long long capacity, float scale, int window,
                                                 MakePlaces make_places) {
#if __CUDA_ARCH__ < 800
  __trap();  // mma.sync, ldmatrix and cp.async need sm_80 (as the wide step does)
#else
  constexpr int kThreads = 32 * kWarps;
  constexpr int kTile = 16 * kWarps;        // positions per tile, 16 per warp
  constexpr int kStages = D == 64 ? 3 : 2;  // tiles in flight (a stage 18 KiB at D = 64, 34 at 128, for 4 warps)
  constexpr int kRow = D + 8;               // a position's padded row in shared memory, in elements
  constexpr int kChunks = D / 8;            // 16-byte chunks of a position's row
  constexpr int kLines = D * static_cast<int>(sizeof(T)) / 128;  // 128-byte lines of a position's row
  // May be launched early. Before its wait it reads only the io (count, positions, and the tables or slots: copied in
  // before the step's first kernel) and asks L2 for its first tiles of the cache; q, the cache, out, partials and
  // counters after it.
  lg::allow_dependent_launch();
  extern __shared__ float shared[];  // [stage][k, v][kTile][kRow] of T; after the loop [warps][heads][D + 2]
  if (blockDim.x != kThreads || head_dim != D || n_kv_heads <= 0 || n_heads % n_kv_heads != 0 || !lg::is_aligned16(q) ||
      !lg::is_aligned16(k_cache) || !lg::is_aligned16(v_cache) || !lg::is_aligned16(out)) {
    __trap();
  }
  GroupedWork w;
  if (!grouped_work<kGroupedMmaHeads, T, false>(w, out, positions, count, n_heads, n_kv_heads, D, capacity, window)) {
    lg::wait_for_prior_grids();
    (void)grouped_work<kGroupedMmaHeads>(w, out, positions, count, n_heads, n_kv_heads, D, capacity,
                                         window);  // a padding row's zeros, after the wait
    return;
  }
  using Places = decltype(make_places(w));
  const Places where = make_places(w);
  const int block_heads = min(w.group, kGroupedMmaHeads);
  const int stride = D + 2;
  // The warps' results alias the stages: they are written after the tile loop, whose last barrier every warp has
  // passed once done with its last tile, and whose copies have all landed by then (the fetches past the last tile are
  // empty commits). So the block needs the larger of the two, not their sum: 4 blocks a SM fit at D = 64, 3 at 128
  // (2 and 1 with 8 warps).
  if (grouped_shared_bytes() < static_cast<unsigned>(max(kWarps * block_heads * stride * 4,
                                                         kStages * 2 * kTile * kRow * static_cast<int>(sizeof(T))))) {
    __trap();
  }
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4;  // the mma fragments' row group and thread in group
  const int t = lane % 4;

  const float scale_log2 = scale * 1.4426950408889634f;
  float o[D / 8][4];  // O's fragments: rows g, g + 8; dims 8 j + 2 t, + 1
#pragma unroll
  for (int j = 0; j < D / 8; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) o[j][i] = 0.0f;
  }
  float m[2] = {minus_infinity(), minus_infinity()};  // rows g, g + 8: maxima of the scaled scores, base 2
  float l[2] = {0.0f, 0.0f};                          // this lane's share of their sums

  T* tiles = reinterpret_cast<T*>(shared);  // [stage][k, v][kTile][kRow], under the results (above)
  const int count_tiles = (w.end - w.begin + kTile - 1) / kTile;
  // Each thread copies the same 16-byte chunk of kTile / kPassRows positions of every tile, kPassRows apart.
  constexpr int kPassRows = kThreads / kChunks;
  static_assert(kThreads % kChunks == 0 && kTile % kPassRows == 0, "a pass covers whole rows of the tile");
  const int chunk_row = static_cast<int>(threadIdx.x) / kChunks;
  const int chunk_to = chunk_row * kRow + 8 * (static_cast<int>(threadIdx.x) % kChunks);
  const int chunk_from = 8 * (static_cast<int>(threadIdx.x) % kChunks);
  // The table entries of the positions of a tile this thread copies (0 past the range). At D = 64 (4 of them) they
  // are read a tile ahead of their copies, so that a copy's address does not wait for its entry; at 128 (8) as the
  // copies are issued, since 8 more registers would spill.
  constexpr bool kIdsAhead = kTile / kPassRows <= 4;
  int ids[kTile / kPassRows];
  const auto read_ids = [&](int tile) {
    const int j0 = w.begin + tile * kTile + chunk_row;
#pragma unroll
    for (int u = 0; u < kTile / kPassRows; ++u) {
      const int j = j0 + u * kPassRows;
      ids[u] = Places::kEntries && tile < count_tiles && j < w.end ? where.entry(j) : 0;
    }
  };
  const auto fetch = [&](int tile) {  // tile into its stage, then one commit (always: the group count stays uniform)
    if (!kIdsAhead) read_ids(tile);
    if (tile < count_tiles) {
      T* k_to = tiles + (tile % kStages) * 2 * kTile * kRow + chunk_to;
      T* v_to = k_to + kTile * kRow;
      const int j0 = w.begin + tile * kTile + chunk_row;  // this thread's first position of the tile
#pragma unroll
      for (int u = 0; u < kTile / kPassRows; ++u) {       // its chunk of positions j0 + kPassRows u
        const int j = j0 + u * kPassRows;
        const bool real = j < w.end;
        if (!where.valid(ids[u])) __trap();
        const long long from = real ? where.at(ids[u], j, D) : 0;
        lg::copy16_async(k_to + u * kPassRows * kRow, k_cache + chunk_from + from, real);
        lg::copy16_async(v_to + u * kPassRows * kRow, v_cache + chunk_from + from, real);
      }
    }
    lg::commit_async();
    if (kIdsAhead) read_ids(tile + 1);
  };
  // Before the wait, L2 is asked for the first tiles (a hint: whatever the step writes before the wait, the copies
  // after it read the lines as they are then); the copies, q and the rest after it.
  for (int c = threadIdx.x; c < kStages * kTile * 2 * kLines; c += kThreads) {
    const int r = c / (2 * kLines);
    const int j = w.begin + r;
    if (j >= w.end) continue;
    const int id = where.entry(j);
    if (!where.valid(id)) continue;  // the copies trap on it
    const long long at = where.at(id, j, D) + (128 / static_cast<int>(sizeof(T))) * (c % kLines);
    lg::prefetch_l2(((c / kLines) % 2 == 0 ? k_cache : v_cache) + at);
  }
  if (kIdsAhead) read_ids(0);
  lg::wait_for_prior_grids();
#pragma unroll
  for (int tile = 0; tile < kStages - 1; ++tile) fetch(tile);
  // Q as A fragments, one per 16 dims: rows g and g + 8 of the block's heads (zero past them).
  unsigned qa[D / 16][4];
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = g + 8 * (i % 2);
      const int d = 16 * ks + 2 * t + 8 * (i / 2);
      qa[ks][i] =
          r < w.heads ? *reinterpret_cast<const unsigned*>(q + w.out_at + static_cast<long long>(r) * D + d) : 0U;
    }
  }
  for (int tile = 0; tile < count_tiles; ++tile) {
    fetch(tile + kStages - 1);
    lg::wait_async<kStages - 1>();  // this thread's copies of the tile have landed
    __syncthreads();                // and every thread's
    const T* k_tile = tiles + (tile % kStages) * 2 * kTile * kRow;
    const T* v_tile = k_tile + kTile * kRow;
    const int held = min(kTile, w.end - w.begin - tile * kTile);  // positions of this tile in the range
    const int p0 = 16 * warp;                                     // this warp's first position of the tile
    if (p0 < held) {                                              // uniform over the warp
      // S = Q K^T over positions p0 .. p0 + 15: two n tiles of 8; an ldmatrix.x4 gives 8 positions x 32 dims.
      float s[2][4] = {};
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int ks = 0; ks < D / 16; ks += 2) {
          unsigned b[4];
          lg::load_matrices(b, k_tile + (p0 + 8 * nt + lane % 8) * kRow + 16 * ks + 8 * (lane / 8));
          lg::mma(s[nt], qa[ks], b[0], b[1], T{});
          lg::mma(s[nt], qa[ks + 1], b[2], b[3], T{});
        }
      }
      // Scaled to base 2, masked past the range; each row's maximum over the warp's 16 positions.
      float top[2] = {m[0], m[1]};
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int position = p0 + 8 * nt + 2 * t + i % 2;
          s[nt][i] = position < held ? s[nt][i] * scale_log2 : minus_infinity();
          top[i / 2] = fmaxf(top[i / 2], s[nt][i]);
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        top[r] = fmaxf(top[r], __shfl_xor_sync(0xffffffffu, top[r], 1));
        top[r] = fmaxf(top[r], __shfl_xor_sync(0xffffffffu, top[r], 2));
      }
      // top is finite: position p0 is in the range. The old maximum's weights shrink by 2^(m - top), which is 1 for
      // every row whose maximum stayed: the warp skips the products when no row's grew (most tiles past the first).
      if (__any_sync(0xffffffffu, top[0] != m[0] || top[1] != m[1])) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float c = m[r] == minus_infinity() ? 0.0f : lg::exp2_approx(m[r] - top[r]);
          l[r] *= c;
#pragma unroll
          for (int j = 0; j < D / 8; ++j) {
            o[j][2 * r] *= c;
            o[j][2 * r + 1] *= c;
          }
        }
      }
      m[0] = top[0];
      m[1] = top[1];
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          s[nt][i] = lg::exp2_approx(s[nt][i] - m[i / 2]);  // 0 past the range
          l[i / 2] += s[nt][i];
        }
      }
      // P as the A fragment of 16 positions (the C layout of two 16 x 8 tiles is the A layout of one 16 x 16).
      const unsigned pa[4] = {lg::pack2(T{}, s[0][0], s[0][1]), lg::pack2(T{}, s[0][2], s[0][3]),
                              lg::pack2(T{}, s[1][0], s[1][1]), lg::pack2(T{}, s[1][2], s[1][3])};
      // O += P V: an ldmatrix.x4.trans gives 16 positions x 16 dims, the B fragments of two n tiles of 8 dims.
#pragma unroll
      for (int nd = 0; nd < D / 16; ++nd) {
        unsigned b[4];
        lg::load_matrices_transposed(
            b, v_tile + (p0 + lane % 8 + 8 * ((lane / 8) % 2)) * kRow + 16 * nd + 8 * (lane / 16));
        lg::mma(o[2 * nd], pa, b[0], b[1], T{});
        lg::mma(o[2 * nd + 1], pa, b[2], b[3], T{});
      }
    }
    __syncthreads();  // every warp is done with this stage before a later fetch overwrites it
  }
  lg::wait_async<0>();  // no copy outlives the block (the last fetches were empty commits)

  // The warp's results per head row into shared memory: m in natural units, l summed over the row's 4 lanes.
  float* warp_state = shared + warp * block_heads * stride;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    const int head = g + 8 * r;
    if (head >= w.heads) continue;
    float* ws = warp_state + head * stride;
    if (t == 0) {
      ws[0] = m[r] == minus_infinity() ? m[r] : m[r] * 0.6931471805599453f;
      ws[1] = l[r];
    }
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      ws[2 + 8 * j + 2 * t] = o[j][2 * r];
      ws[2 + 8 * j + 2 * t + 1] = o[j][2 * r + 1];
    }
  }
  __syncthreads();
  grouped_finish(w, shared, kWarps, block_heads, D, n_heads, out, partials, counters);
#endif
}

/// attention_paged_grouped_mma_dD: grouped_mma_core over a paged pool through the rows' tables.
template <int D, int kWarps, class T>
__device__ __forceinline__ void attention_paged_grouped_mma_body(const T* q, const T* k_pool, const T* v_pool, T* out,
                                                                 float* partials, unsigned* counters,
                                                                 const int* positions, const int* tables,
                                                                 const int* count, int n_heads, int n_kv_heads,
                                                                 int head_dim, int block_size, int n_blocks,
                                                                 int table_width, float scale, int window) {
  if (block_size != 16 && block_size != 32) __trap();
  grouped_mma_core<D, kWarps>(q, k_pool, v_pool, out, partials, counters, positions, count, n_heads, n_kv_heads,
                              head_dim, static_cast<long long>(table_width) * block_size, scale, window,
                              [&](const GroupedWork& w) {
                                return TablePlaces{tables + static_cast<long long>(w.row) * table_width,
                                                   static_cast<long long>(n_kv_heads) * block_size * head_dim,
                                                   static_cast<long long>(w.kv_head) * block_size * head_dim,
                                                   block_size == 32 ? 5 : 4, n_blocks};
                              });
}

/// attention_grouped_mma_dD: grouped_mma_core over the contiguous cache, row b in slot slots[b] (trapping on a slot
/// outside [0, n_slots)).
template <int D, int kWarps, class T>
__device__ __forceinline__ void attention_grouped_mma_body(const T* q, const T* k_cache, const T* v_cache, T* out,
                                                           float* partials, unsigned* counters, const int* positions,
                                                           const int* slots, const int* count, int n_heads,
                                                           int n_kv_heads, int head_dim, int max_ctx, int n_slots,
                                                           float scale, int window) {
  if (max_ctx <= 0 || n_slots <= 0) __trap();
  grouped_mma_core<D, kWarps>(q, k_cache, v_cache, out, partials, counters, positions, count, n_heads, n_kv_heads,
                              head_dim, max_ctx, scale, window, [&](const GroupedWork& w) {
                                const int slot = slots[w.row];
                                if (slot < 0 || slot >= n_slots) __trap();
                                return SlotPlaces{(static_cast<long long>(slot) * n_kv_heads + w.kv_head) * max_ctx *
                                                  head_dim};
                              });
}

}  // namespace

// The entry points: attention_paged_grouped_h4, _h8, attention_paged_grouped_mma_d64, _d128, the 8-warp
// attention_paged_grouped_mma8_d64, _d128, the contiguous cache's attention_grouped_mma_d64, _d128,
// attention_grouped_mma8_d64, _d128, and the _bf16 ones.
/* lazygraph:variants
axis T = lg::half_t | lg::bf16_t _bf16
axis H = 4 _h4 (128, 4) | 8 _h8 (128, 2)
axis M = 64 _d64 (128, 4) | 128 _d128 (128, 3)
axis W = 64 _d64 (256, 2) | 128 _d128 (256, 1)

attention_paged_grouped[T][H] = attention_paged_grouped_body<H>(const T* q, const T* k_pool,
    const T* v_pool, T* out, float* partials, unsigned* counters, const int* positions, const int* tables,
    const int* count, int n_heads, int n_kv_heads, int head_dim, int block_size, int n_blocks, int table_width,
    float scale, int window)
attention_paged_grouped_mma[T][M] = attention_paged_grouped_mma_body<M, 4>(const T* q,
    const T* k_pool, const T* v_pool, T* out, float* partials, unsigned* counters, const int* positions,
    const int* tables, const int* count, int n_heads, int n_kv_heads, int head_dim, int block_size, int n_blocks,
    int table_width, float scale, int window)
attention_paged_grouped_mma8[T][W] = attention_paged_grouped_mma_body<W, 8>(const T* q,
    const T* k_pool, const T* v_pool, T* out, float* partials, unsigned* counters, const int* positions,
    const int* tables, const int* count, int n_heads, int n_kv_heads, int head_dim, int block_size, int n_blocks,
    int table_width, float scale, int window)
attention_grouped_mma[T][M] = attention_grouped_mma_body<M, 4>(const T* q, const T* k_cache,
    const T* v_cache, T* out, float* partials, unsigned* counters, const int* positions, const int* slots,
    const int* count, int n_heads, int n_kv_heads, int head_dim, int max_ctx, int n_slots, float scale, int window)
attention_grouped_mma8[T][W] = attention_grouped_mma_body<W, 8>(const T* q, const T* k_cache,
    const T* v_cache, T* out, float* partials, unsigned* counters, const int* positions, const int* slots,
    const int* count, int n_heads, int n_kv_heads, int head_dim, int max_ctx, int n_slots, float scale, int window)
*/
