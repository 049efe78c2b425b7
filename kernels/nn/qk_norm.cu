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
// otherwise). Fp16 (`NAME`) and bf16 (`NAME_bf16`). May be launched early (LaunchConfig::early_launch): each reads the
// bias, the gains and the frequencies before it waits for the kernel before it; qk_norm_rope_append also reads the
// positions and slots then and works out the rotation, so those must have been written before the step's chain of
// early-launched kernels began (by a copy, or by a kernel that waits before it lets the next one launch): the kernels
// before it in the chain let their successors launch before their own waits, so that chain's kernels may still be
// running. A decode step's are (the copy of its inputs; generate()'s advance of the position ends the loop body before
// it); qkv_rope_append's and attention's contract. The others read their chunk, count, positions and tables after the
// wait.
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

/// What a thread needs for its pair of one head that no kernel writes (the bias, the gain and the pair's frequency):
/// read before the kernel waits for the projection, so that their latency is off the path from the projection's end
/// to the head's store; turn_at adds the rotation at a position (before the wait too where the kernel may read the
/// position then).
struct HeadPlan {
  int part;            // 0 q, 1 k, 2 v
  int head;            // within its part
  int col;             // of its first element in the stacked row
  int pair;            // this thread's pair of the head: elements 2 pair and 2 pair + 1
  bool mine;           // whether the pair is in the head
  float bias0, bias1;  // the pair's bias (0 without one)
  float gain0, gain1;  // the pair's gain (q and k heads)
  float frequency;     // the pair's (q and k heads)
  float sin, cos;      // of the pair's angle (q and k heads; turn_at)
};

/// The plan of pair `pair` of stacked head `stacked` (q heads, then k heads, then v heads). `whole`: the gains are
/// the whole q's [q_dim] and the whole k's [kv_dim] (DecoderConfig::qk_norm_whole), else one head's [head_dim].
template <class T>
__device__ __forceinline__ HeadPlan plan_head(const T* bias, const T* q_gain, const T* k_gain, int n_heads,
                                              int n_kv_heads, int head_dim, const float* frequencies, int whole,
                                              int stacked, int pair) {
  const int q_dim = n_heads * head_dim;
  const int kv_dim = n_kv_heads * head_dim;
  HeadPlan plan{};
  plan.part = stacked < n_heads ? 0 : (stacked < n_heads + n_kv_heads ? 1 : 2);
  plan.head = plan.part == 0 ? stacked : (plan.part == 1 ? stacked - n_heads : stacked - n_heads - n_kv_heads);
  plan.col = (plan.part == 0 ? 0 : (plan.part == 1 ? q_dim : q_dim + kv_dim)) + plan.head * head_dim;
  plan.pair = pair;
  plan.mine = 2 * pair < head_dim;
  if (!plan.mine) return plan;
  if (bias != nullptr) {
    plan.bias0 = lg::to_float(bias[plan.col + 2 * pair]);
    plan.bias1 = lg::to_float(bias[plan.col + 2 * pair + 1]);
  }
  if (plan.part == 2) return plan;
  // The gain: a head's, shared by every head, or (whole) this head's part of the whole q's or k's.
  const T* gain = (plan.part == 0 ? q_gain : k_gain) + (whole != 0 ? plan.head * head_dim : 0);
  plan.gain0 = lg::to_float(gain[2 * pair]);
  plan.gain1 = lg::to_float(gain[2 * pair + 1]);
  plan.frequency = frequencies[pair];
  return plan;
}

/// The rotation of the plan's pair at `position` (kernels/nn/rope.cu's angle).
__device__ __forceinline__ void turn_at(HeadPlan& plan, float position) {
  if (plan.mine && plan.part != 2) sincosf(position * plan.frequency, &plan.sin, &plan.cos);
}

/// The plan's pair of stacked row `row` with its bias (0 past the head).
template <class T>
__device__ __forceinline__ void load_pair(const T* row, bool has_bias, const HeadPlan& plan, float& x0, float& x1) {
  x0 = 0.0f;
  x1 = 0.0f;
  if (!plan.mine) return;
  x0 = lg::to_float(row[plan.col + 2 * plan.pair]);
  x1 = lg::to_float(row[plan.col + 2 * plan.pair + 1]);
  if (has_bias) {
    x0 = lg::to_float(lg::from_float<T>(x0 + plan.bias0));
    x1 = lg::to_float(lg::from_float<T>(x1 + plan.bias1));
  }
}

/// The plan's pair normed by `inv_rms` (rounded to T, as transformers' Qwen3RMSNorm rounds the normed value before
/// the gain multiplies it, then again), rotated, and stored at out[0] and out[1] (its place in the head). For a v
/// head: the pair as it is.
template <class T>
__device__ __forceinline__ void store_normed_pair(const HeadPlan& plan, float x0, float x1, float inv_rms, T* out) {
  if (plan.part == 2) {
    out[0] = lg::from_float<T>(x0);
    out[1] = lg::from_float<T>(x1);
    return;
  }
  const float y0 = lg::to_float(lg::from_float<T>(lg::to_float(lg::from_float<T>(x0 * inv_rms)) * plan.gain0));
  const float y1 = lg::to_float(lg::from_float<T>(lg::to_float(lg::from_float<T>(x1 * inv_rms)) * plan.gain1));
  out[0] = lg::from_float<T>(y0 * plan.cos - y1 * plan.sin);
  out[1] = lg::from_float<T>(y0 * plan.sin + y1 * plan.cos);
}

/// The plan of this block's head (blockIdx.x) for this thread's pair (threadIdx.x).
template <class T>
__device__ __forceinline__ HeadPlan plan_block_head(const T* bias, const T* q_gain, const T* k_gain, int n_heads,
                                                    int n_kv_heads, int head_dim, const float* frequencies, int whole) {
  return plan_head(bias, q_gain, k_gain, n_heads, n_kv_heads, head_dim, frequencies, whole,
                   static_cast<int>(blockIdx.x), static_cast<int>(threadIdx.x));
}

/// Head blockIdx.x of stacked row `row` (q heads, then k heads, then v heads; `plan` from plan_head) normed (over the
/// head, or with `whole` over the row's whole q or k), rotated and written to `dest(part, head)` (part 0 q, 1 k, 2 v),
/// head_dim elements from there.
template <class T, class Dest>
__device__ __forceinline__ void qk_norm_rope_head(const T* row, const T* bias, const HeadPlan& plan, int n_heads,
                                                  int n_kv_heads, int head_dim, float eps, int whole, Dest dest) {
  const int q_dim = n_heads * head_dim;
  const int kv_dim = n_kv_heads * head_dim;
  const int i = plan.pair;
  float x0;
  float x1;
  load_pair(row, bias != nullptr, plan, x0, x1);  // the projection's output with its bias
  T* out = dest(plan.part, plan.head);
  if (plan.part == 2) {  // uniform over the block: no barrier follows for v heads
    if (plan.mine) store_normed_pair(plan, x0, x1, 1.0f, out + 2 * i);
    return;
  }
  // The sum of squares the mean divides: this head's pairs, or (whole) every element of the row's q or k, each thread
  // striding over it (every block of the row's q or k heads sums the same elements, in the same order).
  const int width = whole != 0 ? (plan.part == 0 ? q_dim : kv_dim) : head_dim;
  float squares = x0 * x0 + x1 * x1;
  if (whole != 0) {
    const int first = plan.part == 0 ? 0 : q_dim;
    squares = 0.0f;
    for (int j = static_cast<int>(threadIdx.x); j < width; j += static_cast<int>(blockDim.x)) {
      const float x = biased(row, bias, first + j);
      squares += x * x;
    }
  }
  const float inv_rms = 1.0f / sqrtf(lg::block_sum(squares) / static_cast<float>(width) + eps);
  if (plan.mine) store_normed_pair(plan, x0, x1, inv_rms, out + 2 * i);
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
  lg::allow_dependent_launch();
  const int r = static_cast<int>(blockIdx.y);
  if (!launch_fits(n_heads, n_kv_heads, head_dim) || r >= batch) __trap();
  // The position and slot, the plan and the rotation before the wait: a decode step writes positions and slots
  // before its first kernel (the launch note).
  const int position = positions[r];
  const int slot = slots[r];
  if (position < 0 || position >= max_ctx || slot < 0 || slot >= n_slots) __trap();
  HeadPlan plan = plan_block_head(bias, q_gain, k_gain, n_heads, n_kv_heads, head_dim, frequencies, whole);
  turn_at(plan, static_cast<float>(position));
  lg::wait_for_prior_grids();
  const int q_dim = n_heads * head_dim;
  const int kv_dim = n_kv_heads * head_dim;
  const T* row = qkv + static_cast<long long>(r) * (q_dim + 2 * kv_dim);
  qk_norm_rope_head(row, bias, plan, n_heads, n_kv_heads, head_dim, eps, whole, [&](int part, int head) -> T* {
    if (part == 0) return q + static_cast<long long>(r) * q_dim + head * head_dim;
    T* cache = part == 1 ? k_cache : v_cache;
    return cache + ((static_cast<long long>(slot) * n_kv_heads + head) * max_ctx + position) * head_dim;
  });
}

template <class T>
__device__ __forceinline__ void prefill_qk_norm_rope_body(const T* qkv, const T* bias, const T* q_gain, const T* k_gain,
                                                          T* q, T* k, T* v, const int* chunk, const int* positions,
                                                          int n_heads, int n_kv_heads, int head_dim,
                                                          const float* frequencies, float eps, int whole,
                                                          int max_rows) {
  lg::allow_dependent_launch();
  if (!launch_fits(n_heads, n_kv_heads, head_dim)) __trap();
  HeadPlan plan = plan_block_head(bias, q_gain, k_gain, n_heads, n_kv_heads, head_dim, frequencies, whole);
  lg::wait_for_prior_grids();  // the chunk and positions too: a prefill loop may advance them on the device
  const int r = static_cast<int>(blockIdx.y);
  if (r >= min(max(chunk[1], 0), max_rows)) return;  // a padding row: the whole block leaves
  turn_at(plan, static_cast<float>(positions != nullptr ? positions[r] : chunk[0] + r));
  const int q_dim = n_heads * head_dim;
  const int kv_dim = n_kv_heads * head_dim;
  const T* row = qkv + static_cast<long long>(r) * (q_dim + 2 * kv_dim);
  qk_norm_rope_head(row, bias, plan, n_heads, n_kv_heads, head_dim, eps, whole, [&](int part, int head) -> T* {
    if (part == 0) return q + static_cast<long long>(r) * q_dim + head * head_dim;
    return (part == 1 ? k : v) + static_cast<long long>(r) * kv_dim + head * head_dim;
  });
}

template <class T>
__device__ __forceinline__ void qk_norm_rope_append_paged_body(
    const T* qkv, const T* bias, const T* q_gain, const T* k_gain, T* q, T* k_pool, T* v_pool, const int* positions,
    const int* tables, const int* count, int n_heads, int n_kv_heads, int head_dim, int block_size, int n_blocks,
    int table_width, const float* frequencies, float eps, int whole, int max_rows) {
  lg::allow_dependent_launch();
  if (!launch_fits(n_heads, n_kv_heads, head_dim) || (block_size != 16 && block_size != 32)) __trap();
  HeadPlan plan = plan_block_head(bias, q_gain, k_gain, n_heads, n_kv_heads, head_dim, frequencies, whole);
  lg::wait_for_prior_grids();  // the count, positions and tables too
  const int r = static_cast<int>(blockIdx.y);
  if (r >= min(max(count[0], 0), max_rows)) return;  // a padding row: the whole block leaves
  const int shift = block_size == 16 ? 4 : 5;
  const int position = positions[r];
  if (position < 0 || position >= (table_width << shift)) __trap();
  const int block = tables[static_cast<long long>(r) * table_width + (position >> shift)];
  if (block < 0 || block >= n_blocks) __trap();
  turn_at(plan, static_cast<float>(position));
  const int q_dim = n_heads * head_dim;
  const int kv_dim = n_kv_heads * head_dim;
  const T* row = qkv + static_cast<long long>(r) * (q_dim + 2 * kv_dim);
  qk_norm_rope_head(row, bias, plan, n_heads, n_kv_heads, head_dim, eps, whole, [&](int part, int head) -> T* {
    if (part == 0) return q + static_cast<long long>(r) * q_dim + head * head_dim;
    T* pool = part == 1 ? k_pool : v_pool;
    return pool + ((static_cast<long long>(block) * n_kv_heads + head) * block_size + (position & (block_size - 1))) *
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
