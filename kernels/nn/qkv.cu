// The attention block's input side in one kernel: for each row b of the batch, with h = x_b / rms(x_b) * g,
//   q_b = rope(Wq h),  k = rope(Wk h) and v = Wv h appended to the KV cache at (slots[b], positions[b])
// -- what rms_norm_gemv three times, rope and kv_append do, in one launch: the three projections are one stream of
// q_rows + 2 * kv_dim weight rows (Wq's, then Wk's, then Wv's), RoPE rotates each pair (2i, 2i+1) of a head in fp32
// before the single rounding, and k and v go straight into the caches. Same RoPE (interleaved pairs, angle =
// position * frequencies[i], the table nn::rope_frequencies computes) and cache layout
// ([slot][kv_head][position][head_dim]) as kernels/nn/rope.cu and kernels/nn/attention.cu.
//
//   qkv_rope_append(Wq, Wk, Wv, bq, bk, bv, x, g, q, k_cache, v_cache, positions, slots, d, q_rows, n_kv_heads,
//                   head_dim, max_ctx, n_slots, frequencies, eps, batch)
// (fp16; qkv_rope_append_bf16 over bf16; _b2, _b4, _b8 variants for batches up to 2, 4, 8 as in gemv.cu, and the
// tensor-core variants qkv_rope_append_mma and qkv_rope_append_bf16_mma for 1 to 8 vectors, gemv.cu's NAME_mma
// path with the same rounding of h to the element type: a block takes 8 rows at a time, launched as
// Kernels::tensor_core_gemv_config.) Wq is
// [q_rows x d], Wk and Wv [n_kv_heads * head_dim x d], x [batch][d], g [d], q [batch][q_rows], frequencies
// [head_dim / 2]. q_rows is n_heads * head_dim for a whole model; a tensor-parallel rank's shard has only its heads'
// rows of each. bq [q_rows], bk and bv [n_kv_heads * head_dim]: biases added to the products before RoPE (Qwen2's),
// all three null for none.
//
// Launched early (LaunchConfig::early_launch), it reads positions and slots before it waits for the kernel before it,
// so those must have been written by earlier work than that kernel, as a decode step's are (by the copy of its inputs);
// x, the caches and q are touched after the wait. From them and the frequencies (constant for the decoder's life) it
// also works out, before the wait, its first rows' RoPE angles (sincosf) and destinations, which do not depend on x.
//
// qkv_rope_append_paged (and _bf16, _b2, ..., _mma) appends through block tables instead (a paged KV cache, the
// layout of kernels/nn/paged_attention.cu): its parameters after positions are (tables, d, q_rows, n_kv_heads,
// head_dim, block_size, blocks, table_width, frequencies, eps, batch), the caches are pools
// [blocks][n_kv_heads][block_size][head_dim], and row b's position p goes to block tables[b * table_width +
// p / block_size] at offset p % block_size. Its table entry is read before the wait, as a slot is.
//
// Requirements (a trap otherwise): as gemv.cu's, plus head_dim even and dividing q_rows, a position in [0, max_ctx) and
// a slot in [0, n_slots) for every row (paged: a position in [0, block_size * table_width) and its block in
// [0, blocks)), and (fp32 variants) an even number of rows per block (blockDim.z), so that both
// rows of a RoPE pair are in one block: launch as nn::Kernels::qkv_config does (batches of 2 to 8, gemv's blocks of
// 256 threads with at most 4 warps a row; one vector, blocks of 128 threads, its launch bound, with at most 2);
// (tensor-core variants) at least 8 threads a vector of the batch (a thread rotates and stores each row of a tile's
// 8 for each vector).
#include "lazygraph/nn/gemv_core.cuh"

namespace {

using namespace lg::nn;

/// The rows of Wq, then Wk, then Wv, as one matrix of q_rows + 2 * kv_dim rows.
template <class T>
struct QkvRows {
  using Element = T;
  static constexpr int count = 1;
  const T* wq;
  const T* wk;
  const T* wv;
  int d;  // the row length
  int q_rows;
  int kv_dim;
  __device__ __forceinline__ const T* row(int, int r) const {
    const T* base = r < q_rows ? wq + static_cast<long long>(r) * d
                               : (r < q_rows + kv_dim ? wk + static_cast<long long>(r - q_rows) * d
                                                      : wv + static_cast<long long>(r - q_rows - kv_dim) * d);
    return base;
  }
};

constexpr int kMaxRowsPerBlock = 8;

/// Where a row's k and v go in a cache of slots ([n_slots][n_kv_heads][max_ctx][head_dim]): its `home` is its slot.
struct SlotCache {
  const int* slots;
  int max_ctx;
  int n_slots;
  __device__ __forceinline__ int home(int b, int /*position*/) const { return slots[b]; }
  __device__ __forceinline__ bool holds(int position, int home) const {
    return position >= 0 && position < max_ctx && home >= 0 && home < n_slots;
  }
  /// The offset of (home, head, position)'s first element.
  __device__ __forceinline__ long long at(int home, int head, int position, int n_kv_heads, int head_dim) const {
    return ((static_cast<long long>(home) * n_kv_heads + head) * max_ctx + position) * head_dim;
  }
};

/// Where a row's k and v go in a paged pool ([blocks][n_kv_heads][block_size][head_dim]): its `home` is the block
/// its table gives its position (-1 for a position outside the table, which holds() refuses).
struct PagedCache {
  const int* tables;
  int block_size;
  int blocks;
  int table_width;
  __device__ __forceinline__ int home(int b, int position) const {
    if (position < 0 || position / block_size >= table_width) return -1;
    return tables[static_cast<long long>(b) * table_width + position / block_size];
  }
  __device__ __forceinline__ bool holds(int position, int home) const {
    return position >= 0 && position / block_size < table_width && home >= 0 && home < blocks;
  }
  __device__ __forceinline__ long long at(int home, int head, int position, int n_kv_heads, int head_dim) const {
    return ((static_cast<long long>(home) * n_kv_heads + head) * block_size + position % block_size) * head_dim;
  }
};

template <int B, class T, class Cache, class Place = lg::GridPlace>
__device__ __forceinline__ void qkv_cache_body(const T* Wq, const T* Wk, const T* Wv, const T* bq, const T* bk,
                                               const T* bv, const T* x, const T* g, T* q, T* k_cache, T* v_cache,
                                               const int* positions, Cache cache, int d, int q_rows, int n_kv_heads,
                                               int head_dim, const float* frequencies, float eps, int batch,
                                               Place place = {}) {
  constexpr bool tensor_cores = B == kTensorCores;
  static_assert(tensor_cores || lg::kIsGridPlace<Place>, "tile functions take the tensor-core path");
  constexpr int kBatch = tensor_cores ? 8 : B;  // the most vectors this variant takes
  const int kv_dim = n_kv_heads * head_dim;
  const int rows = q_rows + 2 * kv_dim;
  if (!shapes_supported(d, batch, Wq, Wk, x) || !lg::is_aligned16(Wv) || !lg::is_aligned16(g) || batch > kBatch ||
      head_dim <= 0 || head_dim % 2 != 0 || q_rows <= 0 || q_rows % head_dim != 0 || n_kv_heads <= 0 ||
      (!tensor_cores && (blockDim.z % 2 != 0 || blockDim.z > kMaxRowsPerBlock)) ||
      (tensor_cores && static_cast<int>(blockDim.x * blockDim.y * blockDim.z) < kMmaRows * batch)) {
    __trap();
  }
  const QkvRows<T> w{Wq, Wk, Wv, d, q_rows, kv_dim};
  // The rows of a pass: the block's groups (fp32 path) or its tile of 8 rows (tensor cores), in which both rows of
  // every RoPE pair lie (head_dim and q_rows are even). Thread tid < per_pass * batch rotates and appends row
  // tid % per_pass of vector tid / per_pass.
  const int per_pass = tensor_cores ? kMmaRows : static_cast<int>(blockDim.z);
  // That vector's position and slot (paged: its block), read before the wait, so that their latency is not added
  // after the dot products: a decode step writes them (and the tables) before its first kernel.
  const int tid = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  int position = 0;
  int slot = 0;
  if (tid < per_pass * batch) {
    position = positions[tid / per_pass];
    slot = cache.home(tid / per_pass, position);
  }
  __shared__ float dots[kMaxRowsPerBlock][kBatch];  // [row in the pass][vector]: the scaled dot products
  // Where this thread's element of a pass goes and how RoPE turns it: they depend on the position and the row only,
  // so for the block's first pass they are worked out before the wait (the angle's powf and sincosf, the cache
  // address), leaving the rotation's products and the store after the dot products.
  struct Target {
    T* at = nullptr;  // null: no element (a thread past the batch, or a row past the end)
    float c = 1.0f;
    float s = 0.0f;
    int turn = 0;  // 0: v unrotated (a value row), 1: the pair's first element, 2: its second
  };
  const auto target_of = [&](int first_row) {
    Target t;
    const int group = tid % per_pass;
    const int b = tid / per_pass;
    const int row = first_row + group;
    if (tid >= per_pass * batch || row >= rows) return t;
    if (row < q_rows + kv_dim) {  // q or k: the pair (2i, 2i+1) this element belongs to
      const int within = (row < q_rows ? row : row - q_rows) % head_dim;
      const int i = within / 2;
      const float angle = static_cast<float>(position) * frequencies[i];
      sincosf(angle, &t.s, &t.c);
      t.turn = within % 2 == 0 ? 1 : 2;
    }
    if (row < q_rows) {
      t.at = q + static_cast<long long>(b) * q_rows + row;
    } else {
      const bool is_k = row < q_rows + kv_dim;
      const int local = is_k ? row - q_rows : row - q_rows - kv_dim;
      const long long at = cache.at(slot, local / head_dim, position, n_kv_heads, head_dim) + local % head_dim;
      t.at = (is_k ? k_cache : v_cache) + at;
    }
    return t;
  };
  // The bias of weight row r (0 without biases); read after the wait like the products it is added to.
  const auto bias_of = [&](int r) {
    if (bq == nullptr) return 0.0f;
    return lg::to_float(r < q_rows ? bq[r] : (r < q_rows + kv_dim ? bk[r - q_rows] : bv[r - q_rows - kv_dim]));
  };
  const int first_pass = place.block() * per_pass;  // both paths walk passes from the block's (tile's) index
  const Target first_target = target_of(first_pass);
  const auto rotate_and_store = [&](int first_row) {
    if (tid >= per_pass * batch) return;
    // The caches belong to earlier work: a kernel's wait returns at once once done; a tile waited in the row loop.
    if constexpr (lg::kIsGridPlace<Place>) lg::wait_for_prior_grids();
    const int group = tid % per_pass;
    const int b = tid / per_pass;
    if (first_row + group >= rows) return;
    if (!cache.holds(position, slot)) __trap();
    const Target t = first_row == first_pass ? first_target : target_of(first_row);
    float v = dots[group][b] + bias_of(first_row + group);
    if (t.turn != 0) {
      const float other = dots[group ^ 1][b] + bias_of(first_row + (group ^ 1));
      v = t.turn == 1 ? v * t.c - other * t.s : other * t.s + v * t.c;
    }
    *t.at = lg::from_float<T>(v);
  };
  if constexpr (tensor_cores) {
    prefetch_tile_weights(w, rows, d, place);
    gemv_rows_mma<mma_steps(1)>(
        w, GainedX<T>{x, g, d}, rows, d, batch, eps,
        [&](int row, int b, const float* v) { dots[row % kMmaRows][b] = v[0]; }, NoPreload{}, rotate_and_store, place);
  } else {
    prefetch_weights(w, rows, d);
    gemv_rows<B>(
        w, GainedX<T>{x, g, d}, rows, d, batch, eps,
        [&](int, const float(&acc)[1][B]) {
#pragma unroll
          for (int b = 0; b < B; ++b) dots[threadIdx.z][b] = acc[0][b];
        },
        rotate_and_store);
  }
}

template <int B, class T, class Place = lg::GridPlace>
__device__ __forceinline__ void qkv_body(const T* Wq, const T* Wk, const T* Wv, const T* bq, const T* bk, const T* bv,
                                         const T* x, const T* g, T* q, T* k_cache, T* v_cache, const int* positions,
                                         const int* slots, int d, int q_rows, int n_kv_heads, int head_dim, int max_ctx,
                                         int n_slots, const float* frequencies, float eps, int batch,
                                         Place place = {}) {
  qkv_cache_body<B>(Wq, Wk, Wv, bq, bk, bv, x, g, q, k_cache, v_cache, positions, SlotCache{slots, max_ctx, n_slots}, d,
                    q_rows, n_kv_heads, head_dim, frequencies, eps, batch, place);
}

template <int B, class T>
__device__ __forceinline__ void qkv_paged_body(const T* Wq, const T* Wk, const T* Wv, const T* bq, const T* bk,
                                               const T* bv, const T* x, const T* g, T* q, T* k_pool, T* v_pool,
                                               const int* positions, const int* tables, int d, int q_rows,
                                               int n_kv_heads, int head_dim, int block_size, int blocks,
                                               int table_width, const float* frequencies, float eps, int batch) {
  if (block_size <= 0 || table_width <= 0) __trap();
  qkv_cache_body<B>(Wq, Wk, Wv, bq, bk, bv, x, g, q, k_pool, v_pool, positions,
                    PagedCache{tables, block_size, blocks, table_width}, d, q_rows, n_kv_heads, head_dim, frequencies,
                    eps, batch);
}

}  // namespace

// The entry points, written out as in gemv.cu (qkv_rope_append, _b2, _b4, _b8, _mma, qkv_rope_append_bf16, ...);
// __launch_bounds__ 2 blocks of 256 threads a multiprocessor (up to 128 registers, no spills); the one-vector kernels
// 5 blocks of 128 threads (95 registers, no spills; kOneVectorQkvBlocks), as many as BasicKernels::qkv_config gives a
// multiprocessor, so that no block of the next kernel fits beside them (as gemv.cu's one-vector kernels), while 20
// warps a multiprocessor take 2640 rows a pass. At 3 blocks of 256 it had spilled 104 bytes.
/* lazygraph:variants
axis T = lg::half_t | lg::bf16_t _bf16
axis B = 1 | 2 _b2 | 4 _b4 | 8 _b8 | kTensorCores _mma

qkv_rope_append[T][B: 1] __launch_bounds__(128, 5) =
    qkv_body<B>(const T* Wq, const T* Wk, const T* Wv, const T* bq, const T* bk, const T* bv, const T* x, const T* g,
                T* q, T* k_cache, T* v_cache, const int* positions, const int* slots, int d, int q_rows, int n_kv_heads,
                int head_dim, int max_ctx, int n_slots, const float* frequencies, float eps, int batch)
qkv_rope_append[T][B: 2, 4, 8, kTensorCores] __launch_bounds__(256, 2) =
    qkv_body<B>(const T* Wq, const T* Wk, const T* Wv, const T* bq, const T* bk, const T* bv, const T* x, const T* g,
                T* q, T* k_cache, T* v_cache, const int* positions, const int* slots, int d, int q_rows, int n_kv_heads,
                int head_dim, int max_ctx, int n_slots, const float* frequencies, float eps, int batch)
qkv_rope_append_paged[T][B: 1] __launch_bounds__(128, 5) =
    qkv_paged_body<B>(const T* Wq, const T* Wk, const T* Wv, const T* bq, const T* bk, const T* bv, const T* x,
                      const T* g, T* q, T* k_pool, T* v_pool, const int* positions, const int* tables, int d,
                      int q_rows, int n_kv_heads, int head_dim, int block_size, int blocks, int table_width,
                      const float* frequencies, float eps, int batch)
qkv_rope_append_paged[T][B: 2, 4, 8, kTensorCores] __launch_bounds__(256, 2) =
    qkv_paged_body<B>(const T* Wq, const T* Wk, const T* Wv, const T* bq, const T* bk, const T* bv, const T* x,
                      const T* g, T* q, T* k_pool, T* v_pool, const int* positions, const int* tables, int d,
                      int q_rows, int n_kv_heads, int head_dim, int block_size, int blocks, int table_width,
                      const float* frequencies, float eps, int batch)
*/

// Tile functions (kernels/include/lazygraph/tile.cuh) of the tensor-core variants for persistent programs:
// qkv_rope_append_mma_tile (fp16) and qkv_rope_append_mma_tile_bf16 take qkv_rope_append's parameters, a call taking
// ceil((q_rows + 2 * n_kv_heads * head_dim) / 8) tiles of 8 rows on blocks of 1 to 8 warps (2 or more for a batch
// above 4), and give the _mma kernels' bits. Before its wait a tile reads the positions, slots and frequencies besides
// its weights: in a program those must be written before the program runs.
extern "C" __device__ void qkv_rope_append_mma_tile(lg::Tile tile, const lg::half_t* Wq, const lg::half_t* Wk,
                                                    const lg::half_t* Wv, const lg::half_t* bq, const lg::half_t* bk,
                                                    const lg::half_t* bv, const lg::half_t* x, const lg::half_t* g,
                                                    lg::half_t* q, lg::half_t* k_cache, lg::half_t* v_cache,
                                                    const int* positions, const int* slots, int d, int q_rows,
                                                    int n_kv_heads, int head_dim, int max_ctx, int n_slots,
                                                    const float* frequencies, float eps, int batch) {
  qkv_body<kTensorCores>(Wq, Wk, Wv, bq, bk, bv, x, g, q, k_cache, v_cache, positions, slots, d, q_rows, n_kv_heads,
                         head_dim, max_ctx, n_slots, frequencies, eps, batch, lg::TilePlace{tile});
}

extern "C" __device__ void qkv_rope_append_mma_tile_bf16(
    lg::Tile tile, const lg::bf16_t* Wq, const lg::bf16_t* Wk, const lg::bf16_t* Wv, const lg::bf16_t* bq,
    const lg::bf16_t* bk, const lg::bf16_t* bv, const lg::bf16_t* x, const lg::bf16_t* g, lg::bf16_t* q,
    lg::bf16_t* k_cache, lg::bf16_t* v_cache, const int* positions, const int* slots, int d, int q_rows, int n_kv_heads,
    int head_dim, int max_ctx, int n_slots, const float* frequencies, float eps, int batch) {
  qkv_body<kTensorCores>(Wq, Wk, Wv, bq, bk, bv, x, g, q, k_cache, v_cache, positions, slots, d, q_rows, n_kv_heads,
                         head_dim, max_ctx, n_slots, frequencies, eps, batch, lg::TilePlace{tile});
}
