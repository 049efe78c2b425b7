// Decode attention over a paged KV cache, fp16 or bf16 storage (the kernels named *_bf16 take bf16), fp32
// arithmetic, grouped-query as attention.cu: query head h reads kv head h / (n_heads / n_kv_heads).
//
// Cache layout: k_pool and v_pool are [n_blocks][n_kv_heads][block_size][head_dim], one pool of blocks of
// block_size (16 or 32) positions. Row b's block table is tables[b][0 .. table_width) (int32, row after row, as
// nn::KvBlockPool::table writes it): its position p lives in block tables[b][p / block_size] at offset
// p % block_size. q and out are [batch][n_heads][head_dim], k and v [batch][n_kv_heads][head_dim]. Positions and
// tables are read from device memory, so a captured graph replays with whatever was last copied there. A position
// outside [0, table_width * block_size), a table entry that a launch uses outside [0, n_blocks), a block_size other
// than 16 or 32, or too little dynamic shared memory traps rather than read or write outside the pool.
//
//   kv_append_paged(k, v, k_pool, v_pool, positions, tables, n_kv_heads, head_dim, block_size, n_blocks,
//                   table_width, batch)
//     writes row b's k and v at position positions[b] through its table, every kv head.
//     Launch: 1-D over batch * n_kv_heads * head_dim, any grid and block (grid-stride).
//
//   rope_append_paged(qkv, bq, bk, bv, q, k_pool, v_pool, positions, tables, count, n_heads, n_kv_heads, head_dim,
//                     block_size, n_blocks, table_width, frequencies, max_rows)
//     the wide decode step's (nn/wide_step.hpp) split of the stacked q/k/v GEMM's output: qkv is
//     [max_rows][q_dim + 2 kv_dim] (no bias; q_dim = n_heads * head_dim, kv_dim = n_kv_heads * head_dim). For each row
//     b below count[0] (clamped to [0, max_rows]; the rows past it, a bucket's padding, are neither read nor
//     written) at position p = positions[b]: the biases are added (bq [q_dim], bk and bv [kv_dim]; all three null for
//     none), each pair (2i, 2i+1) of every q and k head is rotated by angle p * frequencies[i] (kernels/nn/rope.cu's
//     rule, prefill_qkv_rope's arithmetic), in fp32 and rounded once; q goes to q [max_rows][q_dim], k and v into the
//     pools at position p through row b's table. head_dim a multiple of 8, qkv, q, the pools and the biases 16-byte
//     aligned (traps otherwise): each thread moves 8 elements with 16-byte loads and stores.
//     Launch: 1-D, any grid and block (grid-stride over eighths of rows), e.g. grid_for(max_rows * (q_dim + 2 kv_dim)
//     / 8, 256).
//
//   attention_paged(q, k_pool, v_pool, out, positions, tables, n_heads, n_kv_heads, head_dim, block_size, n_blocks,
//                   table_width, scale, window)
//     attention.cu's `attention` through the table: per row b and head h, positions f..p (f = 0, or
//     max(0, p - window + 1) for window > 0). Its arithmetic is attention's, step for step: on blocks of as many
//     threads it gives the bits `attention` gives for the same keys and values in a contiguous cache.
//     Launch: grid (n_heads, batch), block 32 * k threads (k = 1..32), dynamic shared memory
//     table_width * (block_size + 1) * 4 bytes (the scores of every position the table holds, then the row's
//     block ids). Requires head_dim a multiple of 8 and at most 256, and q, the pools and out 16-byte aligned.
//
//   attention_paged_split(q, k_pool, v_pool, out, partials, counters, positions, tables, n_heads, n_kv_heads,
//                         head_dim, block_size, n_blocks, table_width, scale, window)
//     the same result, each (row, head) spread over gridDim.z blocks (flash-decoding): block z attends positions
//     [z * len, (z + 1) * len) of f..p, len = ceil(table_width * block_size / gridDim.z). The blocks whose range
//     starts past p return at once; the others (u of them, u = min(gridDim.z, p / len + 1)) write their partial
//     maximum, sum and weighted values to partials [batch][n_heads][gridDim.z][head_dim + 2] (floats), and the last
//     of them, found by an atomic count in counters [batch][n_heads] (zero at launch; that block sets it back to
//     zero), combines the u partials in split order (deterministic). Its arithmetic is attention_split's: with the
//     same splits it gives the bits attention_split gives for a contiguous cache of table_width * block_size
//     positions. Launch: grid (n_heads, batch, splits), block 32 * k threads (k = 1..8), dynamic shared memory
//     (max(len, splits * (head_dim + 2)) + ceil(len / block_size) + 1) * 4 bytes. Two launches sharing `counters`
//     must not run at once.
//
// Early launch (LaunchConfig::early_launch): the attention kernels read the positions, the tables and the cache at
// the positions no row of this launch appends before they wait for the kernel before them (the first keys into
// registers, the other keys and values into L2), as attention.cu's do: a row's settled positions are those below the
// lowest position p_c of a row c whose table holds, at index p_c / block_size, the block the row's own table holds
// there (rows of one sequence; a block that sequences share is never written: nn::KvBlockPool copies it first). So
// positions, tables and those positions of the pool must have been written by earlier work than the kernel before
// -- as a decode step's are (its input copies and block copies, and earlier steps). q, the newly appended positions,
// partials and counters are read after the wait. kv_append_paged and rope_append_paged read nothing before they wait.
#include "lazygraph/block_reduce.cuh"
#include "lazygraph/element.cuh"
#include "lazygraph/kernel_common.cuh"

namespace {

constexpr int kMaxHeadDim = 256;
constexpr int kAttentionWarps = 32;    // attention_paged's most warps per block
constexpr int kSplitWarps = 8;         // attention_paged_split's
constexpr int kPositionsInFlight = 4;  // independent cache loads per thread per step

/// log2 of the block size; traps for a size other than 16 or 32.
__device__ __forceinline__ int block_shift(int block_size) {
  if (block_size != 16 && block_size != 32) __trap();
  return block_size == 32 ? 5 : 4;
}

/// The dynamic shared memory this launch was given, in bytes.
__device__ __forceinline__ unsigned dynamic_shared_bytes() {
  unsigned bytes;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
  return bytes;
}

template <class T>
__device__ __forceinline__ void kv_append_paged_body(const T* k, const T* v, T* k_pool, T* v_pool, const int* positions,
                                                     const int* tables, int n_kv_heads, int head_dim, int block_size,
                                                     int n_blocks, int table_width, int batch) {
  lg::early_launch_prologue();  // may be launched early (LaunchConfig::early_launch)
  const int shift = block_shift(block_size);
  const long long capacity = static_cast<long long>(table_width) << shift;
  const long long row = static_cast<long long>(n_kv_heads) * head_dim;
  for (long long e = lg::global_index(); e < batch * row; e += lg::grid_stride()) {
    const long long b = e / row;
    const int p = positions[b];
    if (p < 0 || p >= capacity) __trap();
    const int block = tables[b * table_width + (p >> shift)];
    if (block < 0 || block >= n_blocks) __trap();
    const long long h = (e - b * row) / head_dim;
    const long long d = (e - b * row) % head_dim;
    const long long at =
        ((static_cast<long long>(block) * n_kv_heads + h) * block_size + (p & (block_size - 1))) * head_dim + d;
    k_pool[at] = k[e];
    v_pool[at] = v[e];
  }
}

template <class T>
__device__ __forceinline__ void rope_append_paged_body(const T* qkv, const T* bq, const T* bk, const T* bv, T* q,
                                                       T* k_pool, T* v_pool, const int* positions, const int* tables,
                                                       const int* count, int n_heads, int n_kv_heads, int head_dim,
                                                       int block_size, int n_blocks, int table_width,
                                                       const float* frequencies, int max_rows) {
  lg::early_launch_prologue();  // may be launched early (LaunchConfig::early_launch); reads nothing before
  if (head_dim % 8 != 0 || !lg::is_aligned16(qkv) || !lg::is_aligned16(q) || !lg::is_aligned16(k_pool) ||
      !lg::is_aligned16(v_pool) || (bq != nullptr && !lg::is_aligned16(bq)) ||
      (bk != nullptr && !lg::is_aligned16(bk)) || (bv != nullptr && !lg::is_aligned16(bv))) {
    __trap();
  }
  const int shift = block_shift(block_size);
  const long long capacity = static_cast<long long>(table_width) << shift;
  const int rows = min(max(count[0], 0), max_rows);
  const int q_dim = n_heads * head_dim;
  const int kv_dim = n_kv_heads * head_dim;
  const int row_eighths = (q_dim + 2 * kv_dim) / 8;
  const long long total = static_cast<long long>(rows) * row_eighths;
  for (long long e = lg::global_index(); e < total; e += lg::grid_stride()) {
    const int r = static_cast<int>(e / row_eighths);
    int col = 8 * static_cast<int>(e - static_cast<long long>(r) * row_eighths);  // within the stacked row
    const int p = positions[r];
    if (p < 0 || p >= capacity) __trap();
    float a[8];
    lg::load_float8(qkv + e * 8, a);
    const T* bias;
    T* to;
    bool rotate = true;
    if (col < q_dim) {
      to = q + static_cast<long long>(r) * q_dim + col;
      bias = bq;
    } else {
      const bool is_k = col < q_dim + kv_dim;
      col -= is_k ? q_dim : q_dim + kv_dim;
      bias = is_k ? bk : bv;
      rotate = is_k;
      const int block = tables[static_cast<long long>(r) * table_width + (p >> shift)];
      if (block < 0 || block >= n_blocks) __trap();
      const int h = col / head_dim;
      const long long at =
          ((static_cast<long long>(block) * n_kv_heads + h) * block_size + (p & (block_size - 1))) * head_dim +
          col % head_dim;
      to = (is_k ? k_pool : v_pool) + at;
    }
    if (bias != nullptr) {
      float b[8];
      lg::load_float8(bias + col, b);
#pragma unroll
      for (int j = 0; j < 8; ++j) a[j] += b[j];
    }
    if (rotate) {
      const float position = static_cast<float>(p);
      const int pair0 = (col % head_dim) / 2;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        float s;
        float c;
        sincosf(position * frequencies[pair0 + j], &s, &c);
        const float x0 = a[2 * j];
        const float x1 = a[2 * j + 1];
        a[2 * j] = x0 * c - x1 * s;
        a[2 * j + 1] = x0 * s + x1 * c;
      }
    }
    lg::store8(to, lg::pack8<T>(a));
  }
}

/// Where one (row, head) block reads: its query, its kv head's keys and values in block 0 of the pool (at this
/// thread's chunk; block i is `block_stride` elements further), its table and position. Traps on a position or shape
/// the kernels cannot serve.
template <class T>
struct PagedHead {
  const T* q;              ///< this head's query
  const T* k_head;         ///< this kv head's keys in block 0, at this thread's chunk
  const T* v_head;         ///< values likewise
  const int* table;        ///< the row's block table
  long long block_stride;  ///< elements per block of the pool: n_kv_heads * block_size * head_dim
  int shift;               ///< log2(block_size)
  int p;                   ///< the row's position: positions f..p are attended
  long long out_at;        ///< this head's offset in out
};

template <class T>
__device__ __forceinline__ PagedHead<T> paged_head(const T* q, const T* k_pool, const T* v_pool, const T* out,
                                                   const int* positions, const int* tables, int n_heads, int n_kv_heads,
                                                   int head_dim, int block_size, int table_width, int head, int row) {
  const int shift = block_shift(block_size);
  const int p = positions[row];
  if (p < 0 || static_cast<long long>(p) >= (static_cast<long long>(table_width) << shift) || head_dim % 8 != 0 ||
      head_dim <= 0 || head_dim > kMaxHeadDim || n_kv_heads <= 0 || n_heads % n_kv_heads != 0 || !lg::is_aligned16(q) ||
      !lg::is_aligned16(k_pool) || !lg::is_aligned16(v_pool) || !lg::is_aligned16(out)) {
    __trap();
  }
  // This thread's 16-byte chunk of a position, as attention.cu maps them.
  const int chunks = head_dim / 8;
  int group = 1;
  while (group < chunks) group <<= 1;
  const int chunk = min(static_cast<int>(threadIdx.x % 32) % group, chunks - 1);
  const int kv_head = head / (n_heads / n_kv_heads);
  const long long head_base = static_cast<long long>(kv_head) * block_size * head_dim + 8 * chunk;
  const long long out_at = (static_cast<long long>(row) * n_heads + head) * head_dim;
  return {q + out_at,
          k_pool + head_base,
          v_pool + head_base,
          tables + static_cast<long long>(row) * table_width,
          static_cast<long long>(n_kv_heads) * block_size * head_dim,
          shift,
          p,
          out_at};
}

/// The positions of row `row` that no row of this launch appends: those below the lowest position p_c of a row c
/// whose table holds at p_c's index the block the row's table holds there (see the file comment). Reads positions
/// and tables only, before the wait.
__device__ __forceinline__ int settled_positions(const int* positions, const int* tables, int rows, int table_width,
                                                 int row, int p, int shift) {
  const int* mine = tables + static_cast<long long>(row) * table_width;
  int settled = p;
  for (int c = 0; c < rows; ++c) {
    const int pc = positions[c];
    if (pc < 0 || pc >= settled) continue;  // only lower positions lower it (and pc < p keeps the index in range)
    const int entry = pc >> shift;
    if (tables[static_cast<long long>(c) * table_width + entry] == mine[entry]) settled = pc;
  }
  return settled;
}

/// The block's share of one head's attention, positions [begin, end) (possibly none), through the table: attend_range
/// of attention.cu (the same sums; its scores' lane sums by butterfly where attend_range halves) with each position's
/// address looked up in `blocks` (the row's block ids from entry begin / block_size on, staged here into shared memory,
/// each checked to lie in [0, n_blocks)). Leaves in `o` sum_j e^(s_j - m) v_j and returns m (-inf for no position) and
/// l = sum_j e^(s_j - m), every thread the same. Positions below `settled` are loaded (first keys) or prefetched into
/// L2 (the rest) before the wait.
template <int kMaxWarps, class T>
__device__ __forceinline__ void attend_paged(const PagedHead<T>& h, int head_dim, int n_blocks, float scale, int begin,
                                             int end, int settled, float* scores, int* blocks, float* o, float& m,
                                             float& l) {
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
  const int mask = (1 << h.shift) - 1;

  // The range's block ids, checked, into shared memory (the table is settled: read before the wait).
  const int first_entry = begin >> h.shift;
  const int entries = begin < end ? (last >> h.shift) - first_entry + 1 : 0;
  for (int i = threadIdx.x; i < entries; i += blockDim.x) {
    const int id = h.table[first_entry + i];
    if (id < 0 || id >= n_blocks) __trap();
    blocks[i] = id;
  }
  __syncthreads();
  const auto at = [&](int j) {  // the offset of position j (begin <= j < end) from block 0's
    return static_cast<long long>(blocks[(j >> h.shift) - first_entry]) * h.block_stride +
           static_cast<long long>(j & mask) * head_dim;
  };

  // 0. Before the wait: the first step's keys at settled positions into registers, every later settled key and
  // value line into L2 (one lane per 128-byte line).
  lg::Pack8<T> early[kPositionsInFlight] = {};
  if (begin < end) {
#pragma unroll
    for (int u = 0; u < kPositionsInFlight; ++u) {
      const int j = min(begin + u * per_load + my_slot, last);
      if (j < settled) early[u] = lg::load8(h.k_head + at(j));
    }
  }
  if ((8 * sub * static_cast<int>(sizeof(T))) % 128 == 0) {
    const int stop = min(settled, end);
    for (int j = begin + my_slot; j < stop; j += per_load) {
      if (j >= begin + per_load * kPositionsInFlight) lg::prefetch_l2(h.k_head + at(j));
      lg::prefetch_l2(h.v_head + at(j));
    }
  }
  lg::wait_for_prior_grids();

  float qf[8];
  lg::load_float8(h.q + 8 * (has_chunk ? sub : 0), qf);
#pragma unroll
  for (int i = 0; i < 8; ++i) qf[i] *= scale;

  // 1. Scores. Loads past the range re-read its last position (no branch around a load) and are not stored.
  const auto score = [&](int j0, const lg::Pack8<T>(&kv)[kPositionsInFlight]) {
#pragma unroll
    for (int u = 0; u < kPositionsInFlight; ++u) {
      float kf[8];
      lg::unpack8(kv[u], kf);
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) dot = fmaf(qf[i], kf[i], dot);
      dot = has_chunk ? dot : 0.0f;
      for (int offset = group / 2; offset > 0; offset >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
      const int j = j0 + u * per_load + my_slot;
      if (sub == 0 && j < end) scores[j - begin] = dot;
    }
  };
  if (begin < end) {
#pragma unroll
    for (int u = 0; u < kPositionsInFlight; ++u) {  // the first step's keys that were not settled
      const int j = min(begin + u * per_load + my_slot, last);
      if (j >= settled) early[u] = lg::load8(h.k_head + at(j));
    }
    score(begin, early);
  }
  for (int j0 = begin + per_load * kPositionsInFlight; j0 < end; j0 += per_load * kPositionsInFlight) {
    lg::Pack8<T> kv[kPositionsInFlight];  // uniform over the block
#pragma unroll
    for (int u = 0; u < kPositionsInFlight; ++u) {
      const int j = min(j0 + u * per_load + my_slot, last);
      kv[u] = lg::load8(h.k_head + at(j));
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
      vv[u] = lg::load8(h.v_head + at(j));
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
__device__ __forceinline__ void attention_paged_body(const T* q, const T* k_pool, const T* v_pool, T* out,
                                                     const int* positions, const int* tables, int n_heads,
                                                     int n_kv_heads, int head_dim, int block_size, int n_blocks,
                                                     int table_width, float scale, int window) {
  lg::allow_dependent_launch();      // may be launched early: attend_paged waits once the settled cache is in flight
  extern __shared__ float shared[];  // [table_width * block_size] scores, then [table_width] block ids
  __shared__ float o[kMaxHeadDim];
  if (blockIdx.x >= n_heads) return;
  const PagedHead<T> h =
      paged_head(q, k_pool, v_pool, out, positions, tables, n_heads, n_kv_heads, head_dim, block_size, table_width,
                 static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y));
  const int capacity = table_width << h.shift;
  if (dynamic_shared_bytes() < static_cast<unsigned>(capacity + table_width) * 4U) __trap();
  float m;
  float l;
  attend_paged<kAttentionWarps>(h, head_dim, n_blocks, scale, window_start(h.p, window), h.p + 1,
                                settled_positions(positions, tables, static_cast<int>(gridDim.y), table_width,
                                                  static_cast<int>(blockIdx.y), h.p, h.shift),
                                shared, reinterpret_cast<int*>(shared + capacity), o, m, l);
  const float inv_sum = 1.0f / l;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) out[h.out_at + d] = lg::from_float<T>(o[d] * inv_sum);
}

/// attention_paged_split: see the file comment. The combination is attention_split's, over the blocks that attend
/// any position (the others' partials would be empty, and the combination skips empty partials).
template <class T>
__device__ __forceinline__ void attention_paged_split_body(const T* q, const T* k_pool, const T* v_pool, T* out,
                                                           float* partials, unsigned* counters, const int* positions,
                                                           const int* tables, int n_heads, int n_kv_heads, int head_dim,
                                                           int block_size, int n_blocks, int table_width, float scale,
                                                           int window) {
  lg::allow_dependent_launch();      // may be launched early: attend_paged waits once the settled cache is in flight
  extern __shared__ float shared[];  // [max(len, splits * (head_dim + 2))] scores or partials, then block ids
  __shared__ float o[kMaxHeadDim];
  __shared__ bool last_block;
  if (blockIdx.x >= n_heads) return;
  const PagedHead<T> h =
      paged_head(q, k_pool, v_pool, out, positions, tables, n_heads, n_kv_heads, head_dim, block_size, table_width,
                 static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y));
  const int splits = gridDim.z;
  const int capacity = table_width << h.shift;
  const int len = (capacity + splits - 1) / splits;
  const int used = min(splits, h.p / len + 1);  // the blocks whose range starts at or before p
  if (static_cast<int>(blockIdx.z) >= used) return;
  const int floats = max(len, splits * (head_dim + 2));
  if (dynamic_shared_bytes() < static_cast<unsigned>(floats + (len >> h.shift) + 2) * 4U) __trap();
  const int first = window_start(h.p, window);  // the window's first position: blocks before it attend none
  const int begin = min(max(static_cast<int>(blockIdx.z) * len, first), h.p + 1);
  const int end = min(max((static_cast<int>(blockIdx.z) + 1) * len, begin), h.p + 1);
  float m;
  float l;
  attend_paged<kSplitWarps>(h, head_dim, n_blocks, scale, begin, end,
                            settled_positions(positions, tables, static_cast<int>(gridDim.y), table_width,
                                              static_cast<int>(blockIdx.y), h.p, h.shift),
                            shared, reinterpret_cast<int*>(shared + floats), o, m, l);

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
    last_block = atomicAdd(counters + pair, 1u) == static_cast<unsigned>(used - 1);
  }
  __syncthreads();
  if (!last_block) return;
  __threadfence();  // the other blocks' partials, counted before ours, are visible from here
  // The used partials into shared memory in one coalesced pass (loads in flight together, from L2), then combined.
  float* staged = shared;  // used * stride floats: the launch gives at least splits * stride
  const float* all = partials + pair * splits * stride;
  constexpr int kInFlight = 8;  // loads per thread issued before any is stored: one L2 round trip, not eight
  for (int i0 = threadIdx.x; i0 < used * stride; i0 += kInFlight * blockDim.x) {
    float v[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int i = i0 + u * blockDim.x;
      v[u] = i < used * stride ? __ldcg(all + i) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int i = i0 + u * blockDim.x;
      if (i < used * stride) staged[i] = v[u];
    }
  }
  __syncthreads();
  const float none = -__int_as_float(0x7f800000);
  float top = none;
  for (int z = 0; z < used; ++z) top = fmaxf(top, staged[z * stride]);
  float denominator = 0.0f;
  for (int z = 0; z < used; ++z) {
    const float mz = staged[z * stride];
    if (mz != none) denominator += expf(mz - top) * staged[z * stride + 1];
  }
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float numerator = 0.0f;
    for (int z = 0; z < used; ++z) {
      const float mz = staged[z * stride];
      if (mz != none) numerator += expf(mz - top) * staged[z * stride + 2 + d];
    }
    out[h.out_at + d] = lg::from_float<T>(numerator / denominator);
  }
  if (threadIdx.x == 0) counters[pair] = 0;  // the next launch counts from zero
}

}  // namespace

// The entry points: kv_append_paged, kv_append_paged_bf16, rope_append_paged, ..., attention_paged_split_bf16.
/* lazygraph:variants
axis T = lg::half_t | lg::bf16_t _bf16

kv_append_paged[T] = kv_append_paged_body(const T* k, const T* v, T* k_pool, T* v_pool, const int* positions,
                                          const int* tables, int n_kv_heads, int head_dim, int block_size,
                                          int n_blocks, int table_width, int batch)
rope_append_paged[T] = rope_append_paged_body(const T* qkv, const T* bq, const T* bk, const T* bv, T* q, T* k_pool,
                                              T* v_pool, const int* positions, const int* tables, const int* count,
                                              int n_heads, int n_kv_heads, int head_dim, int block_size, int n_blocks,
                                              int table_width, const float* frequencies, int max_rows)
attention_paged[T] __launch_bounds__(1024) =
    attention_paged_body(const T* q, const T* k_pool, const T* v_pool, T* out, const int* positions,
                         const int* tables, int n_heads, int n_kv_heads, int head_dim, int block_size, int n_blocks,
                         int table_width, float scale, int window)
attention_paged_split[T] = attention_paged_split_body(const T* q, const T* k_pool, const T* v_pool, T* out,
                                                      float* partials, unsigned* counters, const int* positions,
                                                      const int* tables, int n_heads, int n_kv_heads, int head_dim,
                                                      int block_size, int n_blocks, int table_width, float scale,
                                                      int window)
*/
