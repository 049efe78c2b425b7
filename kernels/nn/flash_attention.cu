// Causal attention of a prompt chunk (prefill), flash-attention style: fp16 or bf16 storage (the kernels named
// *_bf16 take bf16), tensor cores (mma.sync m16n8k16, fp32 accumulation), an fp32 online softmax over tiles of keys,
// grouped-query attention (query head h reads kv head h / (n_heads / n_kv_heads)).
//
//   flash_attention_dD(q, k, v, k_cache, v_cache, out, chunk, max_rows, n_heads, n_kv_heads, max_ctx, n_slots,
//                      scale, window), D = head_dim: flash_attention_d64, flash_attention_d128 and their _bf16 twins
//                      (flash_attention_d64_bf16, flash_attention_d128_bf16).
//     `chunk` is three ints in device memory, [start, rows, slot] (nn::PrefillChunkLayout), read when the kernel runs,
//     so that one captured graph serves every chunk of up to max_rows rows: the chunk is `rows` query rows of sequence
//     slot `slot` at positions start .. start + rows - 1. q and out are [max_rows][n_heads][D]; k and v, the chunk's
//     keys and values (RoPE already applied to k), [max_rows][n_kv_heads][D], of which the first `rows` rows are read;
//     k_cache and v_cache [n_slots][n_kv_heads][max_ctx][D], as kernels/nn/attention.cu lays them out. Row r < rows
//     (position p = start + r) of head h, with g = h / (n_heads / n_kv_heads), gets
//       out[r][h] = sum_{f <= j <= p} softmax_j(scale * q[r][h] . K_g[j]) V_g[j],
//     f = 0, or with a window of `window` positions (window > 0: a sliding-window layer, the row's own position
//     included) max(0, p - window + 1): key tiles wholly before every row's window are not read,
//     where K_g[j], V_g[j] are the cache's entries for j < start (written by earlier chunks or decode steps) and the
//     chunk's own k and v for j >= start. The kernel also writes the chunk's k and v into the caches at positions
//     start .. start + rows - 1 of slot `slot`, every kv head, and writes no other cache entry; rows of q, k, v and
//     out from `rows` to max_rows (a bucket's padding) are neither read nor written.
//     flash_attention_rows64_d64 (and _bf16) is flash_attention_d64 in tiles of R = 64 rows (below).
//     Launch: grid (n_heads, ceil(max_rows / R)) with R = 128 query rows per block for D = 64 and 64 for D = 128,
//     block 128 threads, dynamic shared memory (R + 4 * 64) * (D + 8) * sizeof(T) bytes
//     (nn::BasicKernels::flash_attention_config). Requires sm_80 or newer, n_heads a multiple of
//     n_kv_heads, q, k, v, the caches and out 16-byte aligned, k and v not overlapping the caches
//     (nn::prefill_attention checks these on the host), and from the device values 0 <= start, 1 <= rows <= max_rows,
//     start + rows <= max_ctx, 0 <= slot < n_slots (nn::check_prefill_chunk checks them where the host knows them). Any
//     of these broken traps before any block writes anything: a bad value in device memory cannot make it write outside
//     the cache or out. May be launched early (LaunchConfig::early_launch): it waits for the kernel before it first,
//     and reads `chunk` only after that wait.
//
//   flash_attention_paged_dD(q, k, v, k_pool, v_pool, out, chunk, table, max_rows, n_heads, n_kv_heads, max_ctx,
//                            block_size, n_blocks, table_width, scale, window): flash_attention_paged_d64,
//                            flash_attention_paged_d128, flash_attention_paged_rows64_d64 and their _bf16 twins.
//     flash_attention_dD over a paged cache (kernels/nn/paged_attention.cu's layout): k_pool and v_pool are
//     [n_blocks][n_kv_heads][block_size][D], block_size 16 or 32, and the chunk's sequence's position j lives in block
//     table[j / block_size] at offset j % block_size, `table` being table_width ints in device memory (read when the
//     kernel runs, after its wait, as the chunk is: one captured graph serves every table). The chunk's slot is not
//     read. The same arithmetic step for step (one body, only the addresses differ), so it gives flash_attention_dD's
//     bits for the same keys and values. Besides flash_attention_dD's conditions (slot aside) it requires block_size
//     16 or 32, max_ctx <= table_width * block_size, and the table's entries 0 .. (start + rows - 1) / block_size in
//     [0, n_blocks) and distinct (a block the chunk writes is read at no other index); every block checks all of them
//     but distinctness before anything is written, and traps on a bad one.
//
//   flash_attention_paged_varlen_dD(q, k, v, k_pool, v_pool, out, segments, tables, max_rows, max_segments, n_heads,
//                                   n_kv_heads, max_ctx, block_size, n_blocks, table_width, scale, window):
//                                   flash_attention_paged_varlen_d64 (tiles of 128 rows), _d128 (64) and the _bf16
//                                   twins.
//     flash_attention_paged_dD over several sequences' chunks packed in q, k, v and out: `segments` in device memory is
//     [count, start_0, rows_0, start_1, rows_1, ...] (1 <= count <= max_segments), segment i's rows following segment
//     i - 1's from row 0, each attending and written as flash_attention_paged_dD's chunk of those rows at that start,
//     through row i of `tables` ([max_segments][table_width]), with the same arithmetic. Launch: grid (n_heads, the
//     tiles of max_rows rows plus max_segments - 1), each block taking the y-th tile of all segments' (the last
//     first), the others returning; rows past the segments' are not touched. Every block checks every segment and
//     every table entry a segment reads or writes before any block writes, and traps on a bad one (the segments'
//     tables must not share a block a segment writes: the caller's duty, as KvBlockPool's copy-on-write ensures).
//
// The cache write. The chunk's keys and values are read from k and v, never from the cache, so no block reads a cache
// entry that any block writes (paged: as long as the table's entries are distinct): the write needs no ordering
// against the reads, hence no second launch and no grid-wide barrier. Block (tile t, head h) with
// h % (n_heads / n_kv_heads) == 0 copies rows R t .. R t + R - 1 (those below rows) of kv head g from k and v into the
// caches (each row of each kv head exactly once, 16-byte loads and stores).
//
// Mapping. Block (h, y) takes query tile t = gridDim.y - 1 - y of head h (blocks start in x-then-y order, so the
// longest tiles, latest in the prompt, of every head start first and the short ones fill in behind them): R rows, R / 4
// per warp (one or two mma row tiles of 16: with two, each K and V fragment a warp loads from shared memory feeds both,
// halving that traffic per product); a tile wholly past `rows` returns at once. The tile's q rows go into shared memory
// once and then into registers as mma A fragments. Keys and values are visited in tiles of 64 positions, 0 .. the
// tile's last position, double-buffered in shared memory (cp.async, the next tile in flight while this one is used).
// Per key tile each warp computes its (R / 4) x 64 scores on tensor cores (ldmatrix of K), masks positions past each
// row's own in the tiles on the diagonal only, updates each row's running maximum m of the raw scores and sum l (fp32,
// base 2: scale * log2(e) is folded into each exponent's one fma), rescales its output accumulators, turns the
// probabilities (rounded to T) into A fragments straight from the score registers (the C layout of two 16 x 8 tiles is
// the A layout of one 16 x 16 tile) and adds P V on tensor cores (ldmatrix.trans of V). A warp skips a key tile wholly
// past its rows. At the end, out = acc / l, staged through shared memory for 16-byte stores. Rows past the chunk (the
// last tile's) are computed on zeros and never stored. Shared rows are padded to D + 8 elements, so the 8 row addresses
// of an ldmatrix fall on distinct banks.
#include "lazygraph/async_copy.cuh"
#include "lazygraph/element.cuh"
#include "lazygraph/kernel_common.cuh"
#include "lazygraph/mma.cuh"

namespace {

constexpr int kTile = 64;                      // key positions per key tile
constexpr int kWarpsPerBlock = 4;              // each 16 kM query rows
constexpr int kThreads = 32 * kWarpsPerBlock;  // the block
/// Query rows per warp of flash_attention_dD, in mma tiles of 16: two for head_dim 64 (each K and V fragment loaded
/// from shared memory feeds two tiles: half the shared-memory traffic per product), one for 128 (two would need more
/// than 255 registers). flash_attention_rows64_d64 takes one.
constexpr int warp_tiles(int head_dim) { return head_dim <= 64 ? 2 : 1; }

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800  // (before sm_80 the kernels only trap)
constexpr float kLog2e = 1.4426950408889634f;

using lg::commit_async;
using lg::copy16_async;
using lg::shared_address;
using lg::wait_async;

using lg::exp2_approx;
using lg::load_matrices;
using lg::load_matrices_transposed;
using lg::mma;

#endif  // __CUDA_ARCH__ >= 800

/// Where the contiguous kernels' cache, [n_slots][n_kv_heads][max_ctx][D], holds position p of kv head g of the
/// chunk's slot.
template <int D>
struct SlotCache {
  int slot;
  int n_kv_heads;
  int max_ctx;
  /// The element offset of (g, p) in k_cache and v_cache.
  __device__ __forceinline__ long long at(int g, int p) const {
    return ((static_cast<long long>(slot) * n_kv_heads + g) * max_ctx + p) * D;
  }
};

/// Where the paged kernels' pool, [n_blocks][n_kv_heads][block_size][D], holds position p of kv head g: block
/// table[p / block_size] at offset p % block_size (block_size = 2^shift).
template <int D>
struct BlockCache {
  const int* table;
  int n_kv_heads;
  int shift;
  /// The element offset of (g, p) in k_pool and v_pool.
  __device__ __forceinline__ long long at(int g, int p) const {
    const long long block = table[p >> shift];
    return (((block * n_kv_heads + g) << shift) + (p & ((1 << shift) - 1))) * D;
  }
};

/// The kernels' one body, for a chunk of `rows` rows at `start` (read from device memory by the caller, after its
/// wait), the cache's entries found through `cache` (SlotCache or BlockCache: only the addresses differ, never the
/// arithmetic). `valid`: what the caller checked of its own arguments (the same in every block); false, or any of the
/// shared conditions broken, traps before anything is written. The block takes query tile `tile` of the chunk's
/// `tiles` (which must cover max_rows).
template <class T, int D, int kM, class Cache>
__device__ __forceinline__ void flash_attention_core(const T* q, const T* k, const T* v, T* k_cache, T* v_cache, T* out,
                                                     const Cache& cache, int start, int rows, bool valid, int max_rows,
                                                     int n_heads, int n_kv_heads, int max_ctx, float scale, int window,
                                                     int tile, int tiles) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  static_assert(D % 16 == 0 && D <= 256, "head_dim must be a multiple of 16");
  constexpr int kRows = kWarpsPerBlock * 16 * kM;  // query rows per block (kM mma row tiles per warp)
  constexpr int S = D + 8;                         // shared row stride, in elements
  constexpr int kChunks = D / 8;                   // 16-byte chunks per row
  extern __shared__ uint4 flash_shared[];
  T* const sq = reinterpret_cast<T*>(flash_shared);  // [kRows][S] the query tile, later the output staging
  T* const sk0 = sq + kRows * S;                     // stage 0: keys [64][S], values [64][S]; stage 1 after
  const auto keys = [&](int stage) { return sk0 + stage * 2 * kTile * S; };
  const auto values = [&](int stage) { return sk0 + (stage * 2 + 1) * kTile * S; };

  // Every block checks the same values before anything is written, so a bad one traps the launch with nothing
  // written.
  if (!valid || blockDim.x != kThreads || start < 0 || rows < 1 || rows > max_rows ||
      static_cast<long long>(start) + rows > max_ctx || n_kv_heads <= 0 || n_heads % n_kv_heads != 0 ||
      static_cast<long long>(tiles) * kRows < max_rows || !lg::is_aligned16(q) || !lg::is_aligned16(k) ||
      !lg::is_aligned16(v) || !lg::is_aligned16(k_cache) || !lg::is_aligned16(v_cache) || !lg::is_aligned16(out)) {
    __trap();
  }
  const int head = blockIdx.x;
  if (head >= n_heads) return;
  const int row0 = tile * kRows;  // the tile's first chunk row
  if (row0 >= rows) return;       // a grid larger than the chunk
  const int group = n_heads / n_kv_heads;
  const int kv_head = head / group;
  const int tile_rows = min(kRows, rows - row0);
  const int q_first = start + row0;                                // the tile's first position
  const int q_last = q_first + tile_rows - 1;                      // its last: no row of the tile attends a later key
  const long long q_stride = static_cast<long long>(n_heads) * D;  // between rows of q and out
  const long long kv_stride = static_cast<long long>(n_kv_heads) * D;  // between rows of k and v
  const T* const chunk_k = k + kv_head * D;                            // this kv head's chunk rows, kv_stride apart
  const T* const chunk_v = v + kv_head * D;

  // 1. The query tile (rows past the chunk as zeros) and the first key tile, in one group of copies.
  for (int i = threadIdx.x; i < kRows * kChunks; i += kThreads) {
    const int r = i / kChunks;
    const int c = i % kChunks;
    const T* from = q + static_cast<long long>(row0 + min(r, tile_rows - 1)) * q_stride + head * D + 8 * c;
    copy16_async(sq + r * S + 8 * c, from, r < tile_rows);
  }
  // Key tile n into `stage`: positions below start from the cache, the chunk's from k and v, past q_last zeros.
  const auto load_keys = [&](int n, int stage) {
    T* const sk = keys(stage);
    T* const sv = values(stage);
    for (int i = threadIdx.x; i < kTile * kChunks; i += kThreads) {
      const int r = i / kChunks;
      const int c = i % kChunks;
      const int j = n * kTile + r;
      const int at = min(j, q_last);
      const T* from_k;
      const T* from_v;
      if (at < start) {
        const long long entry = cache.at(kv_head, at);
        from_k = k_cache + entry;
        from_v = v_cache + entry;
      } else {
        from_k = chunk_k + static_cast<long long>(at - start) * kv_stride;
        from_v = chunk_v + static_cast<long long>(at - start) * kv_stride;
      }
      copy16_async(sk + r * S + 8 * c, from_k + 8 * c, j <= q_last);
      copy16_async(sv + r * S + 8 * c, from_v + 8 * c, j <= q_last);
    }
  };
  // With a window, the first key tile any row of this tile attends: earlier tiles are never loaded.
  const int n_first = window > 0 ? max(0, q_first - window + 1) / kTile : 0;
  load_keys(n_first, n_first & 1);
  commit_async();

  // 2. The cache write: the first query head of each kv head's group copies the tile's rows of k and v.
  if (head % group == 0) {
    for (int i = threadIdx.x; i < tile_rows * kChunks; i += kThreads) {
      const int r = i / kChunks;
      const int c = i % kChunks;
      const long long from = static_cast<long long>(row0 + r) * kv_stride + 8 * c;
      const long long to = cache.at(kv_head, q_first + r) + 8 * c;
      lg::store8(k_cache + to, lg::load8(chunk_k + from));
      lg::store8(v_cache + to, lg::load8(chunk_v + from));
    }
  }

  // 3. The key tiles. The warp holds rows 16 kM warp .. + 16 kM - 1 of the tile, as kM mma row tiles; lane (g, t)
  // holds rows g and g + 8 of each in the mma layouts.
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int warp_row0 = 16 * kM * warp;                                  // the warp's first row in the tile
  const int warp_first = min(q_first + warp_row0, q_last);               // the smallest last key of its rows
  const int warp_last = min(q_first + warp_row0 + 16 * kM - 1, q_last);  // the largest
  int limit[kM][2];  // the last key row g (and g + 8) of row tile mi attends
  int low[kM][2];    // the first (0, or with a window the row's position - window + 1)
#pragma unroll
  for (int mi = 0; mi < kM; ++mi) {
    limit[mi][0] = min(q_first + warp_row0 + 16 * mi + g, q_last);
    limit[mi][1] = min(q_first + warp_row0 + 16 * mi + g + 8, q_last);
    low[mi][0] = window > 0 ? limit[mi][0] - window + 1 : 0;
    low[mi][1] = window > 0 ? limit[mi][1] - window + 1 : 0;
  }
  const int warp_low = window > 0 ? warp_first - window + 1 : 0;      // the smallest first key of the warp's rows
  const int warp_high_low = window > 0 ? warp_last - window + 1 : 0;  // the largest
  // Scores stay unscaled; the softmax works in base 2 with scale * log2(e) folded into each exponent's one fma.
  const float score_scale = scale * kLog2e;
  const float none = -__int_as_float(0x7f800000);  // -inf

  unsigned qa[kM][D / 16][4];  // the warp's query rows as A fragments, one per 16 dims
  float acc[kM][D / 8][4];     // its output rows, unnormalised, one C tile per 8 dims
  float m[kM][2];              // running maximum of each row's (unscaled) scores: row g, row g + 8
  float l[kM][2];              // this lane's share of each row's running sum (its columns)
#pragma unroll
  for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
    for (int d = 0; d < D / 8; ++d) acc[mi][d][0] = acc[mi][d][1] = acc[mi][d][2] = acc[mi][d][3] = 0.0f;
    m[mi][0] = m[mi][1] = none;
    l[mi][0] = l[mi][1] = 0.0f;
  }

  const int n_tiles = q_last / kTile + 1;
  for (int n = n_first; n < n_tiles; ++n) {  // uniform over the block
    if (n + 1 < n_tiles) {
      load_keys(n + 1, (n + 1) & 1);  // into the stage tile n - 1 used: every warp left it at the last barrier
      commit_async();
      wait_async<1>();  // tile n (and the query tile) arrived; tile n + 1 may still be in flight
    } else {
      wait_async<0>();
    }
    __syncthreads();
    if (n == n_first) {
      // Matrices: rows 0-7 / 8-15 of a row tile, dims 0-7 / 8-15 of the 16: a[0] (0-7, 0-7), a[1] (8-15, 0-7),
      // a[2] (0-7, 8-15), a[3] (8-15, 8-15).
#pragma unroll
      for (int mi = 0; mi < kM; ++mi) {
        const T* row = sq + (warp_row0 + 16 * mi + lane % 8 + (lane / 8) % 2 * 8) * S + lane / 16 * 8;
#pragma unroll
        for (int kc = 0; kc < D / 16; ++kc) load_matrices(qa[mi][kc], row + 16 * kc);
      }
    }
    const int key0 = n * kTile;
    // Uniform over the warp: a tile wholly past its rows, or wholly before their windows, adds nothing.
    if (key0 <= warp_last && key0 + kTile - 1 >= warp_low) {
      const T* const sk = keys(n & 1);
      const T* const sv = values(n & 1);
      // Scores: s[mi][nt] is the C tile of row tile mi and keys key0 + 8 nt .. + 7.
      float s[kM][kTile / 8][4];
#pragma unroll
      for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
        for (int nt = 0; nt < kTile / 8; ++nt) s[mi][nt][0] = s[mi][nt][1] = s[mi][nt][2] = s[mi][nt][3] = 0.0f;
      }
      // B fragments of keys 16 np .. 16 np + 15: matrices (keys 0-7, dims 0-7), (keys 0-7, dims 8-15),
      // (keys 8-15, dims 0-7), (keys 8-15, dims 8-15) = b0, b1 of key tile 2 np, then of 2 np + 1. Each feeds every
      // row tile of the warp.
      const T* const key_row = sk + (lane % 8 + lane / 16 * 8) * S + (lane / 8) % 2 * 8;
#pragma unroll
      for (int kc = 0; kc < D / 16; ++kc) {
#pragma unroll
        for (int np = 0; np < kTile / 16; ++np) {
          unsigned b[4];
          load_matrices(b, key_row + 16 * np * S + 16 * kc);
#pragma unroll
          for (int mi = 0; mi < kM; ++mi) {
            mma(s[mi][2 * np], qa[mi][kc], b[0], b[1], T{});
            mma(s[mi][2 * np + 1], qa[mi][kc], b[2], b[3], T{});
          }
        }
      }
      // Mask keys past each row's position (only in tiles that reach past the warp's first row: the diagonal) and,
      // with a window, before its first key (only in tiles that start before the warp's last row's window).
      if (key0 + kTile - 1 > warp_first || key0 < warp_high_low) {
#pragma unroll
        for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
          for (int nt = 0; nt < kTile / 8; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int j = key0 + 8 * nt + 2 * t + (e & 1);
              if (j > limit[mi][e / 2] || j < low[mi][e / 2]) s[mi][nt][e] = none;
            }
          }
        }
      }
      // Online softmax per row: the new maximum (over the quad of lanes sharing a row), the factor that rescales what
      // was accumulated under the old one, and the probabilities 2^((s - max) scale log2 e).
      float rescale[kM][2];
      bool grew = false;  // whether any row's maximum grew (its accumulators then need rescaling)
#pragma unroll
      for (int mi = 0; mi < kM; ++mi) {
        const float old[2] = {m[mi][0], m[mi][1]};
        float top[2] = {m[mi][0], m[mi][1]};
#pragma unroll
        for (int nt = 0; nt < kTile / 8; ++nt) {
          top[0] = fmaxf(top[0], fmaxf(s[mi][nt][0], s[mi][nt][1]));
          top[1] = fmaxf(top[1], fmaxf(s[mi][nt][2], s[mi][nt][3]));
        }
        float base[2];  // the new maximum, scaled (0 for a row with no key yet: 2^(-inf) = 0, not NaN)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          top[h] = fmaxf(top[h], __shfl_xor_sync(0xffffffffu, top[h], 1));
          top[h] = fmaxf(top[h], __shfl_xor_sync(0xffffffffu, top[h], 2));
          base[h] = top[h] == none ? 0.0f : top[h] * score_scale;
          // Exactly 1 where the maximum stayed (the fma below would give 2^(m's rounding error) instead).
          rescale[mi][h] = top[h] == old[h] ? 1.0f : exp2_approx(fmaf(m[mi][h], score_scale, -base[h]));
          m[mi][h] = top[h];
          l[mi][h] *= rescale[mi][h];
          grew |= top[h] != old[h];
        }
#pragma unroll
        for (int nt = 0; nt < kTile / 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            s[mi][nt][e] = exp2_approx(fmaf(s[mi][nt][e], score_scale, -base[e / 2]));
            l[mi][e / 2] += s[mi][nt][e];
          }
        }
      }
      // Rescale what was accumulated under the old maxima; past the first tiles a row's maximum seldom grows, so a
      // warp whose rows' maxima all stayed skips the multiplications (a factor of exactly 1).
      if (__any_sync(0xffffffffu, grew)) {
#pragma unroll
        for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
          for (int d = 0; d < D / 8; ++d) {
            acc[mi][d][0] *= rescale[mi][0];
            acc[mi][d][1] *= rescale[mi][0];
            acc[mi][d][2] *= rescale[mi][1];
            acc[mi][d][3] *= rescale[mi][1];
          }
        }
      }
      // acc += P V. P's A fragment of keys 16 kc .. + 15 is C tiles 2 kc and 2 kc + 1; V's B fragments of dims
      // 16 dp .. + 15: matrices (keys 0-7, dims 0-7), (keys 8-15, dims 0-7), (keys 0-7, dims 8-15),
      // (keys 8-15, dims 8-15), transposed = b0, b1 of dim tile 2 dp, then of 2 dp + 1. Each feeds every row tile.
      const T* const value_row = sv + (lane % 8 + (lane / 8) % 2 * 8) * S + lane / 16 * 8;
#pragma unroll
      for (int kc = 0; kc < kTile / 16; ++kc) {
        unsigned p[kM][4];
#pragma unroll
        for (int mi = 0; mi < kM; ++mi) {
          p[mi][0] = lg::pack2(T{}, s[mi][2 * kc][0], s[mi][2 * kc][1]);
          p[mi][1] = lg::pack2(T{}, s[mi][2 * kc][2], s[mi][2 * kc][3]);
          p[mi][2] = lg::pack2(T{}, s[mi][2 * kc + 1][0], s[mi][2 * kc + 1][1]);
          p[mi][3] = lg::pack2(T{}, s[mi][2 * kc + 1][2], s[mi][2 * kc + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          unsigned b[4];
          load_matrices_transposed(b, value_row + 16 * kc * S + 16 * dp);
#pragma unroll
          for (int mi = 0; mi < kM; ++mi) {
            mma(acc[mi][2 * dp], p[mi], b[0], b[1], T{});
            mma(acc[mi][2 * dp + 1], p[mi], b[2], b[3], T{});
          }
        }
      }
    }
    __syncthreads();  // every warp is done with this stage before the next iteration refills it
  }

  // 4. out = acc / l, through the warp's own rows of the query tile (only this warp read them) for 16-byte stores.
#pragma unroll
  for (int mi = 0; mi < kM; ++mi) {
    float inv[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float sum = l[mi][h];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      inv[h] = sum > 0.0f ? 1.0f / sum : 0.0f;
    }
    T* const staged = sq + (warp_row0 + 16 * mi) * S;
#pragma unroll
    for (int d = 0; d < D / 8; ++d) {
      *reinterpret_cast<unsigned*>(staged + g * S + 8 * d + 2 * t) =
          lg::pack2(T{}, acc[mi][d][0] * inv[0], acc[mi][d][1] * inv[0]);
      *reinterpret_cast<unsigned*>(staged + (g + 8) * S + 8 * d + 2 * t) =
          lg::pack2(T{}, acc[mi][d][2] * inv[1], acc[mi][d][3] * inv[1]);
    }
  }
  __syncwarp();
  for (int i = lane; i < 16 * kM * kChunks; i += 32) {
    const int r = i / kChunks;
    const int c = i % kChunks;
    const int row = row0 + warp_row0 + r;
    if (row < rows) {
      lg::store8(out + static_cast<long long>(row) * q_stride + head * D + 8 * c,
                 lg::load8(sq + (warp_row0 + r) * S + 8 * c));
    }
  }
#else
  __trap();  // mma.sync on fp16 and bf16, ldmatrix and cp.async need sm_80
#endif
}

/// flash_attention_dD: the chunk's slot of the contiguous cache.
template <class T, int D, int kM>
__device__ __forceinline__ void flash_attention_body(const T* q, const T* k, const T* v, T* k_cache, T* v_cache, T* out,
                                                     const int* chunk, int max_rows, int n_heads, int n_kv_heads,
                                                     int max_ctx, int n_slots, float scale, int window) {
  lg::early_launch_prologue();  // may be launched early: everything it reads may be the previous kernel's output
  // The chunk, from device memory (after the wait: the work before may have written it).
  const int slot = chunk[2];
  // The longest tiles first (blocks start in x-then-y order).
  flash_attention_core<T, D, kM>(q, k, v, k_cache, v_cache, out, SlotCache<D>{slot, n_kv_heads, max_ctx}, chunk[0],
                                 chunk[1], slot >= 0 && slot < n_slots, max_rows, n_heads, n_kv_heads, max_ctx, scale,
                                 window, static_cast<int>(gridDim.y - 1 - blockIdx.y), static_cast<int>(gridDim.y));
}

/// flash_attention_paged_dD: the pool through the chunk's block table.
template <class T, int D, int kM>
__device__ __forceinline__ void flash_attention_paged_body(const T* q, const T* k, const T* v, T* k_pool, T* v_pool,
                                                           T* out, const int* chunk, const int* table, int max_rows,
                                                           int n_heads, int n_kv_heads, int max_ctx, int block_size,
                                                           int n_blocks, int table_width, float scale, int window) {
  lg::early_launch_prologue();  // the chunk and the table too are read after the wait
  const int start = chunk[0];
  const int rows = chunk[1];
  const int shift = block_size == 32 ? 5 : 4;
  // The table's entries the chunk reads or writes (0 .. its last position's), checked by every block (all of them,
  // not only its own) before any block writes: a bad entry traps the launch with nothing written.
  bool valid = (block_size == 16 || block_size == 32) && n_blocks > 0 && table_width > 0 &&
               static_cast<long long>(max_ctx) <= (static_cast<long long>(table_width) << shift) && start >= 0 &&
               rows >= 1 && static_cast<long long>(start) + rows <= max_ctx;
  if (valid) {
    const int last = (start + rows - 1) >> shift;
    for (int i = threadIdx.x; i <= last; i += blockDim.x) {
      if (table[i] < 0 || table[i] >= n_blocks) valid = false;
    }
  }
  valid = __syncthreads_and(valid) != 0;
  flash_attention_core<T, D, kM>(q, k, v, k_pool, v_pool, out, BlockCache<D>{table, n_kv_heads, shift}, start, rows,
                                 valid, max_rows, n_heads, n_kv_heads, max_ctx, scale, window,
                                 static_cast<int>(gridDim.y - 1 - blockIdx.y), static_cast<int>(gridDim.y));
}

/// flash_attention_paged_varlen_dD: several sequences' chunks packed in one, each through its own block table.
template <class T, int D, int kM>
__device__ __forceinline__ void flash_attention_paged_varlen_body(const T* q, const T* k, const T* v, T* k_pool,
                                                                  T* v_pool, T* out, const int* segments,
                                                                  const int* tables, int max_rows, int max_segments,
                                                                  int n_heads, int n_kv_heads, int max_ctx,
                                                                  int block_size, int n_blocks, int table_width,
                                                                  float scale, int window) {
  constexpr int kRows = kWarpsPerBlock * 16 * kM;
  lg::early_launch_prologue();  // the segments and the tables too are read after the wait
  const int count = segments[0];
  const int shift = block_size == 32 ? 5 : 4;
  // Every segment and every table entry it reads or writes, checked by every block before any block writes.
  bool valid = (block_size == 16 || block_size == 32) && n_blocks > 0 && table_width > 0 &&
               static_cast<long long>(max_ctx) <= (static_cast<long long>(table_width) << shift) && count >= 1 &&
               count <= max_segments;
  long long total = 0;
  for (int i = 0; valid && i < count; ++i) {
    const int start = segments[1 + 2 * i];
    const int rows = segments[2 + 2 * i];
    total += rows;
    valid = start >= 0 && rows >= 1 && static_cast<long long>(start) + rows <= max_ctx && total <= max_rows;
    if (valid) {
      const int* table = tables + static_cast<long long>(i) * table_width;
      const int last = (start + rows - 1) >> shift;
      for (int e = threadIdx.x; e <= last; e += blockDim.x) {
        if (table[e] < 0 || table[e] >= n_blocks) valid = false;
      }
    }
    valid = __syncthreads_and(valid) != 0;
  }
  valid = __syncthreads_and(valid) != 0;
  if (!valid) __trap();
  // This block's query tile: the y-th of all segments' tiles, the longest (last) first.
  int y = static_cast<int>(gridDim.y - 1 - blockIdx.y);
  int row0 = 0;
  for (int i = 0; i < count; ++i) {
    const int start = segments[1 + 2 * i];
    const int rows = segments[2 + 2 * i];
    const int tiles = (rows + kRows - 1) / kRows;
    if (y < tiles) {
      const long long q_at = static_cast<long long>(row0) * n_heads * D;
      const long long kv_at = static_cast<long long>(row0) * n_kv_heads * D;
      flash_attention_core<T, D, kM>(q + q_at, k + kv_at, v + kv_at, k_pool, v_pool, out + q_at,
                                     BlockCache<D>{tables + static_cast<long long>(i) * table_width, n_kv_heads, shift},
                                     start, rows, true, rows, n_heads, n_kv_heads, max_ctx, scale, window, y, tiles);
      return;
    }
    y -= tiles;
    row0 += rows;
  }
}

}  // namespace

// The entry points: flash_attention_d64, flash_attention_d64_bf16, flash_attention_d128, flash_attention_d128_bf16,
// and flash_attention_rows64_d64 / _bf16 (head_dim 64 in tiles of 64 rows: twice the blocks for short chunks) (the
// element type's suffix last, as nn::BasicKernels names a kernel for T).
/* lazygraph:variants
axis D = 64 _d64 | 128 _d128
axis T = lg::half_t | lg::bf16_t _bf16

flash_attention[D][T] __launch_bounds__(128) =
    flash_attention_body<T, D, warp_tiles(D)>(const T* q, const T* k, const T* v, T* k_cache, T* v_cache, T* out,
        const int* chunk, int max_rows, int n_heads, int n_kv_heads, int max_ctx, int n_slots, float scale,
        int window)
flash_attention_rows64[D: 64][T] __launch_bounds__(128) =
    flash_attention_body<T, D, 1>(const T* q, const T* k, const T* v, T* k_cache, T* v_cache, T* out,
        const int* chunk, int max_rows, int n_heads, int n_kv_heads, int max_ctx, int n_slots, float scale,
        int window)
flash_attention_paged[D][T] __launch_bounds__(128) =
    flash_attention_paged_body<T, D, warp_tiles(D)>(const T* q, const T* k, const T* v, T* k_pool, T* v_pool,
        T* out, const int* chunk, const int* table, int max_rows, int n_heads, int n_kv_heads, int max_ctx,
        int block_size, int n_blocks, int table_width, float scale, int window)
flash_attention_paged_varlen[D][T] __launch_bounds__(128) =
    flash_attention_paged_varlen_body<T, D, warp_tiles(D)>(const T* q, const T* k, const T* v, T* k_pool, T* v_pool,
        T* out, const int* segments, const int* tables, int max_rows, int max_segments, int n_heads, int n_kv_heads,
        int max_ctx, int block_size, int n_blocks, int table_width, float scale, int window)
flash_attention_paged_rows64[D: 64][T] __launch_bounds__(128) =
    flash_attention_paged_body<T, D, 1>(const T* q, const T* k, const T* v, T* k_pool, T* v_pool, T* out,
        const int* chunk, const int* table, int max_rows, int n_heads, int n_kv_heads, int max_ctx, int block_size,
        int n_blocks, int table_width, float scale, int window)
*/
