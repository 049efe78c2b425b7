// Attention of a batch of query vectors over KV caches, fp16 or bf16 storage (the kernels named *_bf16 take bf16),
// fp32 arithmetic, with grouped-query
// attention: n_heads query heads share n_kv_heads key/value heads, query head h reading kv head
// h / (n_heads / n_kv_heads) (n_kv_heads == n_heads is ordinary multi-head attention, 1 is multi-query).
//
// Cache layout: k_cache and v_cache are [n_slots][n_kv_heads][max_ctx][head_dim], one slot per sequence. Row b of
// the batch belongs to sequence slots[b] at position positions[b]: q and out are [batch][n_heads][head_dim], k and
// v [batch][n_kv_heads][head_dim]. Decoding several sequences gives each row its own slot; a prompt's tokens
// (prefill) are rows of one slot at consecutive positions, each attending up to its own position. Slots and
// positions are read from device memory, so a captured graph replays with whatever was last copied there; a
// position outside [0, max_ctx) or a slot outside [0, n_slots) traps rather than write or read outside the cache.
//
//   kv_append(k, v, k_cache, v_cache, positions, slots, n_kv_heads, head_dim, max_ctx, n_slots, batch)
//     writes row b's k and v at position positions[b] of slot slots[b], every kv head.
//     Launch: 1-D over batch * n_kv_heads * head_dim, any grid and block (grid-stride).
//
//   attention(q, k_cache, v_cache, out, positions, slots, n_heads, n_kv_heads, head_dim, max_ctx, n_slots, scale,
//             window)
//     per row b and head h, with g = h / (n_heads / n_kv_heads), p = positions[b], c = slot slots[b]:
//     s_j = scale * q_bh . k_cg[j] for j = f..p, w = softmax(s) (max subtracted), out_bh = sum_j w_j v_cg[j], where
//     f = 0, or with a window of `window` positions (window > 0: a sliding-window layer, the row's own position
//     included), max(0, p - window + 1).
//     n_heads must be a multiple of n_kv_heads. Rows must be appended (kv_append) before any row attends.
//     Launch: grid (n_heads, batch), block 32 * k threads (k = 1..32; the more, the more of the cache in flight,
//     since there are only n_heads blocks per row: nn::attention_block_threads), dynamic shared memory
//     max_ctx * sizeof(float) (the scores). Requires head_dim a multiple of 8 and at most 256, and q, the caches and
//     out 16-byte aligned (traps else).
//     Launched early (LaunchConfig::early_launch), it reads positions, slots and the cache at the positions below
//     every position this launch's rows append to their slot before it waits for the kernel before it (its first
//     keys into registers, the rest of its keys and values into L2), so those must have been written by earlier
//     work than that kernel -- as a decode step's are (by the copy of its inputs and by earlier steps); q and the
//     newly appended positions are read after the wait.
//
//   attention_split(q, k_cache, v_cache, out, partials, counters, positions, slots, n_heads, n_kv_heads, head_dim,
//                   max_ctx, n_slots, scale, window)
//     the same result, with each (row, head) spread over gridDim.z blocks (split-K over positions, as in
//     flash-decoding): block z attends positions [z * len, (z + 1) * len) of f..p, len = ceil(max_ctx / gridDim.z),
//     writes its partial maximum, sum and weighted values to partials [batch][n_heads][gridDim.z][head_dim + 2]
//     (floats), and the last block of the (row, head), found by an atomic count in counters [batch][n_heads] (zero at
//     launch; that block sets it back to zero), combines the partials in split order (deterministic). A decode step
//     has only n_heads blocks per row for `attention`; this fills the GPU. Launch: grid (n_heads, batch, splits),
//     block 32 * k threads (k = 1..8), dynamic shared memory max(len, splits * (head_dim + 2)) * sizeof(float) (the
//     scores, then the last block's copy of the partials). Two launches sharing `counters` must not run at once.
//     Launched early, it reads positions, slots and the settled cache before waiting, as attention does; partials and
//     counters after.
//
// Mapping: a position's head_dim halves are read as 16-byte chunks by a group of G lanes (G the power of two
// >= head_dim / 8: 8 lanes for head_dim 64, 16 for 128), so a warp covers 32 / G positions per load and each
// thread keeps 4 loads in flight.
#include "lazygraph/block_reduce.cuh"
#include "lazygraph/element.cuh"
#include "lazygraph/kernel_common.cuh"
#include "lazygraph/tile.cuh"

namespace {

constexpr int kMaxHeadDim = 256;
constexpr int kAttentionWarps = 32;  // attention's most warps per block
constexpr int kSplitWarps = 8;       // attention_split's: its blocks are small, and shared memory stays small with them
constexpr int kPositionsInFlight = 4;  // independent cache loads per thread per step (attend_range's scores: 4)
static_assert(kPositionsInFlight == 4, "attend_range's scores halve four positions twice");

template <class T>
__device__ __forceinline__ void kv_append_body(const T* k, const T* v, T* k_cache, T* v_cache, const int* positions,
                                               const int* slots, int n_kv_heads, int head_dim, int max_ctx, int n_slots,
                                               int batch) {
  lg::early_launch_prologue();  // may be launched early (LaunchConfig::early_launch)
  const long long row = static_cast<long long>(n_kv_heads) * head_dim;
  for (long long e = lg::global_index(); e < batch * row; e += lg::grid_stride()) {
    const long long b = e / row;
    const int p = positions[b];
    const int slot = slots[b];
    if (p < 0 || p >= max_ctx || slot < 0 || slot >= n_slots) __trap();
    const long long h = (e - b * row) / head_dim;
    const long long d = (e - b * row) % head_dim;
    const long long at = ((static_cast<long long>(slot) * n_kv_heads + h) * max_ctx + p) * head_dim + d;
    k_cache[at] = k[e];
    v_cache[at] = v[e];
  }
}

/// Where one (row, head) block reads: its query, its kv head's cache, its position and slot. Traps on a position,
/// slot or shape the kernels cannot serve.
template <class T>
struct HeadView {
  const T* q;        ///< this head's query
  const T* k_head;   ///< this kv head's keys, at this thread's chunk
  const T* v_head;   ///< values likewise
  int p;             ///< the row's position: positions 0..p are attended
  int sequence;      ///< the row's slot
  long long out_at;  ///< this head's offset in out
};

template <class T>
__device__ __forceinline__ HeadView<T> head_view(const T* q, const T* k_cache, const T* v_cache, const T* out,
                                                 const int* positions, const int* slots, int n_heads, int n_kv_heads,
                                                 int head_dim, int max_ctx, int n_slots, int head, int row) {
  const int p = positions[row];
  const int sequence = slots[row];
  if (p < 0 || p >= max_ctx || sequence < 0 || sequence >= n_slots || head_dim % 8 != 0 || head_dim > kMaxHeadDim ||
      n_kv_heads <= 0 || n_heads % n_kv_heads != 0 || !lg::is_aligned16(q) || !lg::is_aligned16(k_cache) ||
      !lg::is_aligned16(v_cache) || !lg::is_aligned16(out)) {
    __trap();
  }
  // This thread's 16-byte chunk of a position: lanes are grouped by the power of two >= head_dim / 8 (attend_range);
  // the lanes past the last chunk read it too, and their sums are dropped.
  const int chunks = head_dim / 8;
  int group = 1;
  while (group < chunks) group <<= 1;
  const int chunk = min(static_cast<int>(threadIdx.x % 32) % group, chunks - 1);
  const int kv_head = head / (n_heads / n_kv_heads);
  const long long head_base = (static_cast<long long>(sequence) * n_kv_heads + kv_head) * max_ctx * head_dim;
  const long long out_at = (static_cast<long long>(row) * n_heads + head) * head_dim;
  return {q + out_at, k_cache + head_base + 8 * chunk, v_cache + head_base + 8 * chunk, p, sequence, out_at};
}

/// The positions of a row's sequence that no row of this launch (its `rows` rows) appends: those below the lowest
/// position a row of the same slot appends (prefill rows of one sequence attend each other's new keys).
__device__ __forceinline__ int settled_positions(const int* positions, const int* slots, int rows, int sequence,
                                                 int p) {
  int settled = p;
  for (int b = 0; b < rows; ++b) {
    if (slots[b] == sequence) settled = min(settled, positions[b]);
  }
  return settled;
}

/// The block's share of one head's attention: positions [begin, end) (possibly none). Leaves in `o` (shared,
/// head_dim floats) sum_j e^(s_j - m) v_j and returns m (the largest score, -inf for no position) and
/// l = sum_j e^(s_j - m), every thread the same. `scores` holds end - begin floats.
/// Positions below `settled` were written by work before the kernel launched ahead of this one: their first keys
/// are loaded, and their other keys and values prefetched into L2, before place.wait() (the kernel's wait for the one
/// before it, or a tile's: lg::GridPlace, lg::TilePlace), so that the cache's memory latency overlaps the previous
/// kernel's tail instead of following it.
template <int kMaxWarps, class T, class Place = lg::GridPlace>
__device__ __forceinline__ void attend_range(const HeadView<T>& h, int head_dim, float scale, int begin, int end,
                                             int settled, float* scores, float* o, float& m, float& l,
                                             Place place = {}) {
  __shared__ float warp_out[kMaxWarps][kMaxHeadDim];  // per-warp partial outputs
  if (blockDim.x > 32 * kMaxWarps) __trap();
  const int chunks = head_dim / 8;
  int group = 1;  // lanes per position
  while (group < chunks) group <<= 1;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  const int sub = lane % group;               // this lane's chunk of a position
  const int slot = lane / group;              // which of the warp's positions
  const int per_load = warps * (32 / group);  // positions the block covers per load
  const int my_slot = warp * (32 / group) + slot;
  const bool has_chunk = sub < chunks;
  const int last = end - 1;

  // 0. Before the wait: the first step's keys at settled positions into registers, every later settled key and
  // value line into L2 (one lane per 128-byte line).
  lg::Pack8<T> early[kPositionsInFlight] = {};
#pragma unroll
  for (int u = 0; u < kPositionsInFlight; ++u) {
    const int j = min(begin + u * per_load + my_slot, last);
    if (j < settled) early[u] = lg::load8(h.k_head + static_cast<long long>(j) * head_dim);
  }
  if ((8 * sub * static_cast<int>(sizeof(T))) % 128 == 0) {
    const int stop = min(settled, end);
    for (int j = begin + my_slot; j < stop; j += per_load) {
      if (j >= begin + per_load * kPositionsInFlight) lg::prefetch_l2(h.k_head + static_cast<long long>(j) * head_dim);
      lg::prefetch_l2(h.v_head + static_cast<long long>(j) * head_dim);
    }
  }
  place.wait();

  float qf[8];
  lg::load_float8(h.q + 8 * (has_chunk ? sub : 0), qf);
#pragma unroll
  for (int i = 0; i < 8; ++i) qf[i] *= scale;

  // 1. Scores. Loads past the range re-read its last position (no branch around a load) and are not stored.
  const auto score = [&](int j0, const lg::Pack8<T>(&kv)[kPositionsInFlight]) {
    float dots[kPositionsInFlight];  // this lane's part of each position's dot product
#pragma unroll
    for (int u = 0; u < kPositionsInFlight; ++u) {
      float kf[8];
      lg::unpack8(kv[u], kf);
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) dot = fmaf(qf[i], kf[i], dot);
      dots[u] = has_chunk ? dot : 0.0f;
    }
    if (group >= 4) {
      // Summed over the lane group by halving: the first two levels leave each lane half of the positions it held
      // (it sends its partner the half it gives up), so that the four positions take log2(group) + 1 shuffles, not
      // 4 log2(group). Each level adds a lane's value to its partner's, as the plain butterfly does, so every sum is
      // the same bits; the lanes of (hi1, hi2) end with position 2 hi1 + hi2's.
      const bool hi1 = (sub & (group / 2)) != 0;
      float pair[2];
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const float send = hi1 ? dots[k] : dots[k + 2];
        pair[k] = (hi1 ? dots[k + 2] : dots[k]) + __shfl_xor_sync(0xffffffffu, send, group / 2);
      }
      const bool hi2 = (sub & (group / 4)) != 0;
      float dot = (hi2 ? pair[1] : pair[0]) + __shfl_xor_sync(0xffffffffu, hi2 ? pair[0] : pair[1], group / 4);
      for (int offset = group / 8; offset > 0; offset >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
      const int j = j0 + (2 * static_cast<int>(hi1) + static_cast<int>(hi2)) * per_load + my_slot;
      if ((sub & (group / 4 - 1)) == 0 && j < end) scores[j - begin] = dot;
    } else {
#pragma unroll
      for (int u = 0; u < kPositionsInFlight; ++u) {
        float dot = dots[u];
        for (int offset = group / 2; offset > 0; offset >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
        const int j = j0 + u * per_load + my_slot;
        if (sub == 0 && j < end) scores[j - begin] = dot;
      }
    }
  };
  if (begin < end) {
#pragma unroll
    for (int u = 0; u < kPositionsInFlight; ++u) {  // the first step's keys that were not settled
      const int j = min(begin + u * per_load + my_slot, last);
      if (j >= settled) early[u] = lg::load8(h.k_head + static_cast<long long>(j) * head_dim);
    }
    score(begin, early);
  }
  for (int j0 = begin + per_load * kPositionsInFlight; j0 < end; j0 += per_load * kPositionsInFlight) {
    lg::Pack8<T> kv[kPositionsInFlight];  // uniform over the block
#pragma unroll
    for (int u = 0; u < kPositionsInFlight; ++u) {
      const int j = min(j0 + u * per_load + my_slot, last);
      kv[u] = lg::load8(h.k_head + static_cast<long long>(j) * head_dim);
    }
    score(j0, kv);
  }
  __syncthreads();

  // 2. Softmax weights, unnormalised: scores[j] = exp(s_j - max), and their sum.
  m = -__int_as_float(0x7f800000);
  for (int j = threadIdx.x; j < end - begin; j += blockDim.x) m = fmaxf(m, scores[j]);
  m = lg::block_max(m);
  float sum = 0.0f;
  for (int j = threadIdx.x; j < end - begin; j += blockDim.x) {
    const float e = expf(scores[j] - m);
    scores[j] = e;
    sum += e;
  }
  l = lg::block_sum(sum);  // synchronises, so every weight is visible below

  // 3. sum_j w_j v_j: each thread accumulates its chunk over its positions.
  float acc[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) acc[i] = 0.0f;
  for (int j0 = begin; j0 < end; j0 += per_load * kPositionsInFlight) {
    lg::Pack8<T> vv[kPositionsInFlight];
#pragma unroll
    for (int u = 0; u < kPositionsInFlight; ++u) {
      const int j = min(j0 + u * per_load + my_slot, last);
      vv[u] = lg::load8(h.v_head + static_cast<long long>(j) * head_dim);
    }
#pragma unroll
    for (int u = 0; u < kPositionsInFlight; ++u) {
      const int j = j0 + u * per_load + my_slot;
      const float w = j < end ? scores[min(j, last) - begin] : 0.0f;
      float vf[8];
      lg::unpack8(vv[u], vf);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] = fmaf(w, vf[i], acc[i]);
    }
  }
  // Sum over the warp's slots (lanes with the same chunk), then over warps.
  for (int offset = group; offset < 32; offset <<= 1) {
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], offset);
  }
  if (slot == 0 && has_chunk) {
#pragma unroll
    for (int i = 0; i < 8; ++i) warp_out[warp][8 * sub + i] = acc[i];
  }
  __syncthreads();
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float total = 0.0f;
    for (int w = 0; w < warps; ++w) total += warp_out[w][d];
    o[d] = total;
  }
  __syncthreads();
}

/// The first position a row at position p attends: 0, or with a window of `window` positions (the row's own
/// included; 0: none), p - window + 1 when that is more.
__device__ __forceinline__ int window_start(int p, int window) { return window > 0 ? max(0, p - window + 1) : 0; }

template <class T>
__device__ __forceinline__ void attention_body(const T* q, const T* k_cache, const T* v_cache, T* out,
                                               const int* positions, const int* slots, int n_heads, int n_kv_heads,
                                               int head_dim, int max_ctx, int n_slots, float scale, int window) {
  lg::allow_dependent_launch();      // may be launched early: attend_range waits once the settled cache is in flight
  extern __shared__ float scores[];  // [max_ctx]
  __shared__ float o[kMaxHeadDim];
  if (blockIdx.x >= n_heads) return;
  const HeadView<T> h = head_view(q, k_cache, v_cache, out, positions, slots, n_heads, n_kv_heads, head_dim, max_ctx,
                                  n_slots, static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y));
  float m;
  float l;
  attend_range<kAttentionWarps>(h, head_dim, scale, window_start(h.p, window), h.p + 1,
                                settled_positions(positions, slots, static_cast<int>(gridDim.y), h.sequence, h.p),
                                scores, o, m, l);
  const float inv_sum = 1.0f / l;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) out[h.out_at + d] = lg::from_float<T>(o[d] * inv_sum);
}

/// attention_split: block (head, row, z) attends positions [z * len, (z + 1) * len) of 0..p, len =
/// ceil(max_ctx / gridDim.z), writes its (m, l, o) to partials, and the last of the row's gridDim.z blocks for the
/// head (an atomic count, set back to zero by that block) combines them in split order, so the result does not
/// depend on which block finished last.
template <class T>
__device__ __forceinline__ void attention_split_body(const T* q, const T* k_cache, const T* v_cache, T* out,
                                                     float* partials, unsigned* counters, const int* positions,
                                                     const int* slots, int n_heads, int n_kv_heads, int head_dim,
                                                     int max_ctx, int n_slots, float scale, int window) {
  lg::allow_dependent_launch();      // may be launched early: attend_range waits once the settled cache is in flight
  extern __shared__ float scores[];  // [max(len, splits * (head_dim + 2))]: scores, then the staged partials
  __shared__ float o[kMaxHeadDim];
  __shared__ bool last_block;
  if (blockIdx.x >= n_heads) return;
  const HeadView<T> h = head_view(q, k_cache, v_cache, out, positions, slots, n_heads, n_kv_heads, head_dim, max_ctx,
                                  n_slots, static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y));
  const int splits = gridDim.z;
  const int len = (max_ctx + splits - 1) / splits;
  const int first = window_start(h.p, window);  // the window's first position: blocks before it attend none
  const int begin = min(max(static_cast<int>(blockIdx.z) * len, first), h.p + 1);
  const int end = min(max((static_cast<int>(blockIdx.z) + 1) * len, begin), h.p + 1);
  float m;
  float l;
  attend_range<kSplitWarps>(h, head_dim, scale, begin, end,
                            settled_positions(positions, slots, static_cast<int>(gridDim.y), h.sequence, h.p), scores,
                            o, m, l);

  const long long pair = static_cast<long long>(blockIdx.y) * n_heads + blockIdx.x;  // (row, head)
  const int stride = head_dim + 2;                                                   // floats per partial
  float* mine = partials + (pair * splits + blockIdx.z) * stride;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) mine[2 + d] = o[d];
  if (threadIdx.x == 0) {
    mine[0] = m;
    mine[1] = l;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();  // this block's partial is visible before its count
    last_block = atomicAdd(counters + pair, 1u) == static_cast<unsigned>(splits - 1);
  }
  __syncthreads();
  if (!last_block) return;
  __threadfence();  // the other blocks' partials, counted before ours, are visible from here
  // Every partial into shared memory in one coalesced pass (loads in flight together, from L2), then combined there.
  float* staged = scores;  // splits * stride floats: the launch gives max(len, splits * stride)
  const float* all = partials + pair * splits * stride;
  constexpr int kInFlight = 8;  // loads per thread issued before any is stored: one L2 round trip, not eight
  for (int i0 = threadIdx.x; i0 < splits * stride; i0 += kInFlight * blockDim.x) {
    float v[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int i = i0 + u * blockDim.x;
      v[u] = i < splits * stride ? __ldcg(all + i) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int i = i0 + u * blockDim.x;
      if (i < splits * stride) staged[i] = v[u];
    }
  }
  __syncthreads();
  const float none = -__int_as_float(0x7f800000);
  float top = none;
  for (int z = 0; z < splits; ++z) top = fmaxf(top, staged[z * stride]);
  float denominator = 0.0f;
  for (int z = 0; z < splits; ++z) {
    const float mz = staged[z * stride];
    if (mz != none) denominator += expf(mz - top) * staged[z * stride + 1];
  }
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float numerator = 0.0f;
    for (int z = 0; z < splits; ++z) {
      const float mz = staged[z * stride];
      if (mz != none) numerator += expf(mz - top) * staged[z * stride + 2 + d];
    }
    out[h.out_at + d] = lg::from_float<T>(numerator / denominator);
  }
  if (threadIdx.x == 0) counters[pair] = 0;  // the next launch counts from zero
}

}  // namespace

// The entry points, written out as in gemv.cu: kv_append, kv_append_bf16, attention, attention_bf16, ...
/* lazygraph:variants
axis T = lg::half_t | lg::bf16_t _bf16

kv_append[T] = kv_append_body(const T* k, const T* v, T* k_cache, T* v_cache, const int* positions, const int* slots,
                              int n_kv_heads, int head_dim, int max_ctx, int n_slots, int batch)
attention[T] __launch_bounds__(1024) =
    attention_body(const T* q, const T* k_cache, const T* v_cache, T* out, const int* positions, const int* slots,
                   int n_heads, int n_kv_heads, int head_dim, int max_ctx, int n_slots, float scale, int window)
attention_split[T] = attention_split_body(const T* q, const T* k_cache, const T* v_cache, T* out, float* partials,
                                          unsigned* counters, const int* positions, const int* slots, int n_heads,
                                          int n_kv_heads, int head_dim, int max_ctx, int n_slots, float scale,
                                          int window)
*/

// Tile functions (kernels/include/lazygraph/tile.cuh) for persistent programs: attention_tile(_bf16) is attention with
// the parameters above, tile (head, row) of a call of tiles (n_heads, batch) taking the place of block (head, row),
// on blocks of at most 256 threads (a trap otherwise), each tile with max_ctx * sizeof(float) bytes of shared memory
// (TileConfig::shared_bytes: the scores). Its results equal the kernel's on blocks of as many threads (a block's warps
// share the positions, so their count changes the order of the sums). Before its wait it reads the positions, the
// slots and the cache below every position the call's rows append, as the kernel does before its early launch's wait:
// in a program those must be written before the program runs.
namespace {

template <class T>
__device__ __forceinline__ void attention_tile_body(const lg::Tile& tile, const T* q, const T* k_cache,
                                                    const T* v_cache, T* out, const int* positions, const int* slots,
                                                    int n_heads, int n_kv_heads, int head_dim, int max_ctx, int n_slots,
                                                    float scale) {
  __shared__ float o[kMaxHeadDim];
  float* scores = reinterpret_cast<float*>(tile.shared());  // [max_ctx]
  const uint3 at = tile.block();
  if (static_cast<int>(at.x) >= n_heads) {
    tile.wait();
    return;
  }
  const HeadView<T> h = head_view(q, k_cache, v_cache, out, positions, slots, n_heads, n_kv_heads, head_dim, max_ctx,
                                  n_slots, static_cast<int>(at.x), static_cast<int>(at.y));
  float m;
  float l;
  attend_range<kSplitWarps>(h, head_dim, scale, 0, h.p + 1,
                            settled_positions(positions, slots, static_cast<int>(tile.grid().y), h.sequence, h.p),
                            scores, o, m, l, lg::TilePlace{tile});
  const float inv_sum = 1.0f / l;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) out[h.out_at + d] = lg::from_float<T>(o[d] * inv_sum);
}

}  // namespace

extern "C" __device__ void attention_tile(lg::Tile tile, const lg::half_t* q, const lg::half_t* k_cache,
                                          const lg::half_t* v_cache, lg::half_t* out, const int* positions,
                                          const int* slots, int n_heads, int n_kv_heads, int head_dim, int max_ctx,
                                          int n_slots, float scale) {
  attention_tile_body(tile, q, k_cache, v_cache, out, positions, slots, n_heads, n_kv_heads, head_dim, max_ctx, n_slots,
                      scale);
}

extern "C" __device__ void attention_tile_bf16(lg::Tile tile, const lg::bf16_t* q, const lg::bf16_t* k_cache,
                                               const lg::bf16_t* v_cache, lg::bf16_t* out, const int* positions,
                                               const int* slots, int n_heads, int n_kv_heads, int head_dim, int max_ctx,
                                               int n_slots, float scale) {
  attention_tile_body(tile, q, k_cache, v_cache, out, positions, slots, n_heads, n_kv_heads, head_dim, max_ctx, n_slots,
                      scale);
}
