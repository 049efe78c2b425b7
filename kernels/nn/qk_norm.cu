// The attention input side of a block with q/k norms (Qwen3's q_norm and k_norm, or OLMoE's over the whole
// projection): after the stacked q/k/v projection, each q head and each k head is normalised, then rotated; v is
// passed on. For each row r and head:
//   y = x + bias                                 (bias the stacked [q_dim + 2 kv_dim], null for none), rounded to T
//   q and k heads: y = T(y / sqrt(mean(y^2) + eps)) * gain,  rounded to T (as transformers' Qwen3RMSNorm and
//                  OlmoeRMSNorm round: the normed value to T before the gain multiplies it), where
//                  whole 0: the mean is over the head, gain [head_dim] (q_gain or k_gain) the same for every head;
//                  whole 1: the mean is over the row's whole q [q_dim] or whole k [kv_dim] (every head's block sums
//                           all of it), gain [q_dim] or [kv_dim], the head's part of it;
//                  then each pair (2i, 2i+1) rotated by angle = position * frequencies[i] in fp32 and rounded once
//                  (kernels/nn/rope.cu's rule)
//   v heads:       y as it is
// The rows of q and k (and their gains) are in the decoder's interleaved RoPE order (nn::decoder_tensors): a norm's
// mean does not depend on the order of its elements.
//
//   qk_norm_rope_append(qkv, bias, q_gain, k_gain, q, k_cache, v_cache, positions, slots, n_heads, n_kv_heads,
//                       head_dim, max_ctx, n_slots, frequencies, eps, whole, batch)
//     the decode step's: qkv [batch][q_dim + 2 kv_dim] (what norm_project of the stacked weight wrote), q out
//     [batch][q_dim], k and v appended to the caches [n_slots][n_kv_heads][max_ctx][head_dim] at (slots[r],
//     positions[r]), as kernels/nn/attention.cu's kv_append lays them out.
//   prefill_qk_norm_rope(qkv, bias, q_gain, k_gain, q, k, v, chunk, positions, n_heads, n_kv_heads, head_dim,
//                        frequencies, eps, whole, max_rows)
//     a prefill chunk's (kernels/nn/prefill.cu's chunk = [start, rows, slot]): row r < rows at position start + r (or
//     positions[r] where `positions` is not null: several sequences' rows packed in one chunk) into
//     q [max_rows][q_dim], k and v [max_rows][kv_dim]; flash attention appends k and v to the cache.
//   qk_norm_rope_append_paged(qkv, bias, q_gain, k_gain, q, k_pool, v_pool, positions, tables, count, n_heads,
//                             n_kv_heads, head_dim, block_size, n_blocks, table_width, frequencies, eps, whole,
//                             max_rows)
//     a paged cache's (nn::PagedAttention::qk_norm_rope_append: the paged decode step and the wide step): rows
//     r < count[0] (clamped to [0, max_rows]; the rest, a bucket's padding, neither read nor write) of qkv
//     [max_rows][q_dim + 2 kv_dim] at position positions[r], q out [max_rows][q_dim], k and v into the pools
//     [n_blocks][n_kv_heads][block_size][head_dim] at that position through row r's table (tables
//     [max_rows][table_width]), as kernels/nn/paged_attention.cu's kv_append_paged lays them out. block_size 16 or
//     32; a position outside the table's capacity or a block id outside the pool traps.
//
// Launch: grid (n_heads + 2 n_kv_heads, batch or max_rows), one block of 32 * ceil(head_dim / 64) threads per (head,
// row): a thread per pair. head_dim even and at most 256, positions in [0, max_ctx) and slots in [0, n_slots) (traps
// otherwise). Fp16 (`NAME`) and bf16 (`NAME_bf16`). May be launched early: it waits for the kernel before it first.
#include "lazygraph/block_reduce.cuh"
#include "lazygraph/element.cuh"
#include "lazygraph/kernel_common.cuh"

namespace {

/// Element `at` of stacked row `row` with its bias (when there is one), rounded to T as a biased Linear rounds it.
template <class T>
__device__ __forceinline__ float biased(const T* row, const T* bias, int at) {
  const float x = lg::to_float(row[at]);
  return bias == nullptr ? x : lg::to_float(lg::from_float<T>(x + lg::to_float(bias[at])));
}

/// Head blockIdx.x of stacked row `row` (q heads, then k heads, then v heads) normed (over the head, or with `whole`
/// over the row's whole q or k), rotated at `position` and written to `dest(part, head)` (part 0 q, 1 k, 2 v),
/// head_dim elements from there.
template <class T, class Dest>
__device__ __forceinline__ void qk_norm_rope_head(const T* row, const T* bias, const T* q_gain, const T* k_gain,
                                                  int n_heads, int n_kv_heads, int head_dim, const float* frequencies,
                                                  float eps, int whole, float position, Dest dest) {
  const int q_dim = n_heads * head_dim;
  const int kv_dim = n_kv_heads * head_dim;
  const int h = static_cast<int>(blockIdx.x);
  const int part = h < n_heads ? 0 : (h < n_heads + n_kv_heads ? 1 : 2);
  const int head = part == 0 ? h : (part == 1 ? h - n_heads : h - n_heads - n_kv_heads);
  const int col = (part == 0 ? 0 : (part == 1 ? q_dim : q_dim + kv_dim)) + head * head_dim;
  const int i = static_cast<int>(threadIdx.x);  // the pair
  const bool mine = 2 * i < head_dim;
  float x0 = 0.0f;
  float x1 = 0.0f;
  if (mine) {  // the projection's output with its bias
    x0 = biased(row, bias, col + 2 * i);
    x1 = biased(row, bias, col + 2 * i + 1);
  }
  T* out = dest(part, head);
  if (part == 2) {  // uniform over the block: no barrier follows for v heads
    if (mine) {
      out[2 * i] = lg::from_float<T>(x0);
      out[2 * i + 1] = lg::from_float<T>(x1);
    }
    return;
  }
  // The sum of squares the mean divides: this head's pairs, or (whole) every element of the row's q or k, each thread
  // striding over it (every block of the row's q or k heads sums the same elements, in the same order).
  const int width = whole != 0 ? (part == 0 ? q_dim : kv_dim) : head_dim;
  float squares = x0 * x0 + x1 * x1;
  if (whole != 0) {
    const int first = part == 0 ? 0 : q_dim;
    squares = 0.0f;
    for (int j = static_cast<int>(threadIdx.x); j < width; j += static_cast<int>(blockDim.x)) {
      const float x = biased(row, bias, first + j);
      squares += x * x;
    }
  }
  const float inv_rms = 1.0f / sqrtf(lg::block_sum(squares) / static_cast<float>(width) + eps);
  if (!mine) return;
  // The gain: a head's, shared by every head, or (whole) this head's part of the whole q's or k's.
  const T* gain = (part == 0 ? q_gain : k_gain) + (whole != 0 ? head * head_dim : 0);
  const float y0 =
      lg::to_float(lg::from_float<T>(lg::to_float(lg::from_float<T>(x0 * inv_rms)) * lg::to_float(gain[2 * i])));
  const float y1 =
      lg::to_float(lg::from_float<T>(lg::to_float(lg::from_float<T>(x1 * inv_rms)) * lg::to_float(gain[2 * i + 1])));
  float s;
  float c;
  sincosf(position * frequencies[i], &s, &c);
  out[2 * i] = lg::from_float<T>(y0 * c - y1 * s);
  out[2 * i + 1] = lg::from_float<T>(y0 * s + y1 * c);
}

/// Whether the launch fits the kernels' rules (see the file comment).
__device__ __forceinline__ bool launch_fits(int n_heads, int n_kv_heads, int head_dim) {
  return head_dim > 0 && head_dim % 2 == 0 && head_dim <= 256 && 2 * static_cast<int>(blockDim.x) >= head_dim &&
         blockDim.x % 32 == 0 && static_cast<int>(gridDim.x) == n_heads + 2 * n_kv_heads;
}

template <class T>
__device__ __forceinline__ void qk_norm_rope_append_body(const T* qkv, const T* bias, const T* q_gain, const T* k_gain,
                                                         T* q, T* k_cache, T* v_cache, const int* positions,
                                                         const int* slots, int n_heads, int n_kv_heads, int head_dim,
                                                         int max_ctx, int n_slots, const float* frequencies, float eps,
                                                         int whole, int batch) {
  lg::early_launch_prologue();
  const int r = static_cast<int>(blockIdx.y);
  if (!launch_fits(n_heads, n_kv_heads, head_dim) || r >= batch) __trap();
  const int position = positions[r];
  const int slot = slots[r];
  if (position < 0 || position >= max_ctx || slot < 0 || slot >= n_slots) __trap();
  const int q_dim = n_heads * head_dim;
  const int kv_dim = n_kv_heads * head_dim;
  const T* row = qkv + static_cast<long long>(r) * (q_dim + 2 * kv_dim);
  qk_norm_rope_head(row, bias, q_gain, k_gain, n_heads, n_kv_heads, head_dim, frequencies, eps, whole,
                    static_cast<float>(position), [&](int part, int head) -> T* {
                      if (part == 0) return q + static_cast<long long>(r) * q_dim + head * head_dim;
                      T* cache = part == 1 ? k_cache : v_cache;
                      return cache +
                             ((static_cast<long long>(slot) * n_kv_heads + head) * max_ctx + position) * head_dim;
                    });
}

template <class T>
__device__ __forceinline__ void prefill_qk_norm_rope_body(const T* qkv, const T* bias, const T* q_gain, const T* k_gain,
                                                          T* q, T* k, T* v, const int* chunk, const int* positions,
                                                          int n_heads, int n_kv_heads, int head_dim,
                                                          const float* frequencies, float eps, int whole,
                                                          int max_rows) {
  lg::early_launch_prologue();
  if (!launch_fits(n_heads, n_kv_heads, head_dim)) __trap();
  const int r = static_cast<int>(blockIdx.y);
  if (r >= min(max(chunk[1], 0), max_rows)) return;  // a padding row: the whole block leaves
  const int q_dim = n_heads * head_dim;
  const int kv_dim = n_kv_heads * head_dim;
  const T* row = qkv + static_cast<long long>(r) * (q_dim + 2 * kv_dim);
  qk_norm_rope_head(row, bias, q_gain, k_gain, n_heads, n_kv_heads, head_dim, frequencies, eps, whole,
                    static_cast<float>(positions != nullptr ? positions[r] : chunk[0] + r),
                    [&](int part, int head) -> T* {
                      if (part == 0) return q + static_cast<long long>(r) * q_dim + head * head_dim;
                      return (part == 1 ? k : v) + static_cast<long long>(r) * kv_dim + head * head_dim;
                    });
}

template <class T>
__device__ __forceinline__ void qk_norm_rope_append_paged_body(
    const T* qkv, const T* bias, const T* q_gain, const T* k_gain, T* q, T* k_pool, T* v_pool, const int* positions,
    const int* tables, const int* count, int n_heads, int n_kv_heads, int head_dim, int block_size, int n_blocks,
    int table_width, const float* frequencies, float eps, int whole, int max_rows) {
  lg::early_launch_prologue();
  if (!launch_fits(n_heads, n_kv_heads, head_dim) || (block_size != 16 && block_size != 32)) __trap();
  const int r = static_cast<int>(blockIdx.y);
  if (r >= min(max(count[0], 0), max_rows)) return;  // a padding row: the whole block leaves
  const int shift = block_size == 16 ? 4 : 5;
  const int position = positions[r];
  if (position < 0 || position >= (table_width << shift)) __trap();
  const int block = tables[static_cast<long long>(r) * table_width + (position >> shift)];
  if (block < 0 || block >= n_blocks) __trap();
  const int q_dim = n_heads * head_dim;
  const int kv_dim = n_kv_heads * head_dim;
  const T* row = qkv + static_cast<long long>(r) * (q_dim + 2 * kv_dim);
  qk_norm_rope_head(row, bias, q_gain, k_gain, n_heads, n_kv_heads, head_dim, frequencies, eps, whole,
                    static_cast<float>(position), [&](int part, int head) -> T* {
                      if (part == 0) return q + static_cast<long long>(r) * q_dim + head * head_dim;
                      T* pool = part == 1 ? k_pool : v_pool;
                      return pool + ((static_cast<long long>(block) * n_kv_heads + head) * block_size +
                                     (position & (block_size - 1))) *
                                        head_dim;
                    });
}

}  // namespace

/* lazygraph:variants
axis T = lg::half_t | lg::bf16_t _bf16

qk_norm_rope_append[T] = qk_norm_rope_append_body<T>(const T* qkv, const T* bias, const T* q_gain, const T* k_gain,
    T* q, T* k_cache, T* v_cache, const int* positions, const int* slots, int n_heads, int n_kv_heads, int head_dim,
    int max_ctx, int n_slots, const float* frequencies, float eps, int whole, int batch)
prefill_qk_norm_rope[T] = prefill_qk_norm_rope_body<T>(const T* qkv, const T* bias, const T* q_gain,
    const T* k_gain, T* q, T* k, T* v, const int* chunk, const int* positions, int n_heads, int n_kv_heads,
    int head_dim, const float* frequencies, float eps, int whole, int max_rows)
qk_norm_rope_append_paged[T] = qk_norm_rope_append_paged_body<T>(const T* qkv, const T* bias, const T* q_gain,
    const T* k_gain, T* q, T* k_pool, T* v_pool, const int* positions, const int* tables, const int* count,
    int n_heads, int n_kv_heads, int head_dim, int block_size, int n_blocks, int table_width,
    const float* frequencies, float eps, int whole, int max_rows)
*/
