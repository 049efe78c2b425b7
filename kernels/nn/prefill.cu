// The row-wise kernels of a prefill chunk (nn/prefill.hpp): what runs between the GEMMs and flash attention when a
// prompt chunk of up to max_rows rows (a bucket) goes through a decoder layer at once. Each reads the chunk from device
// memory, `chunk` = [start, rows, slot] (nn::PrefillChunkLayout, the header of nn::PrefillIo), so that one captured
// graph per bucket serves every chunk of up to max_rows rows at any start; rows past `rows` (the bucket's padding) are
// neither read nor written. `rows` is clamped to [0, max_rows], so no value in device memory makes them touch memory
// outside their buffers. fp16 (`NAME`) and bf16 (`NAME_bf16`) from one template each; arithmetic in fp32.
//
//   prefill_rope(q, k, v, bq, bk, bv, chunk, n_heads, n_kv_heads, head_dim, frequencies, max_rows)
//     q [max_rows][n_heads * head_dim], k and v [max_rows][n_kv_heads * head_dim], as the q, k and v GEMMs wrote them
//     (no bias). For row r < rows at position p = start + r: the biases are added (bq [n_heads * head_dim], bk and bv
//     [n_kv_heads * head_dim]; all three null for none), then each pair (2i, 2i+1) of every q and k head is rotated by
//     angle = p * frequencies[i] (kernels/nn/rope.cu's rule and table: x0' = x0 cos - x1 sin, x1' = x0 sin + x1 cos),
//     in fp32, rounded once. v is touched only to add its bias. Launch: 1-D, any grid and block (grid-stride), e.g.
//     grid_for(max_rows * (n_heads + 2 * n_kv_heads) * head_dim / 2, 256). head_dim even.
//
//   prefill_silu_mul(gate, up, out, chunk, width, max_rows)
//     out[r][i] = silu(gate[r][i]) * up[r][i], silu(a) = a / (1 + exp(-a)), for r < rows, i < width; every buffer
//     [max_rows][width]. `out` may be `gate` or `up` (each element is read before it is written, by the thread that
//     writes it). width a multiple of 8 and the buffers 16-byte aligned (traps otherwise): 16-byte loads. Launch: 1-D,
//     any grid and block (grid-stride over eighths), e.g. grid_for(max_rows * width / 8, 256).
//
//   prefill_last_row(x, chunk, out, d, max_rows)
//     out[i] = x[rows - 1][i], i < d: the chunk's last row, for the LM head (x [max_rows][d], out [d]; rows clamped to
//     [1, max_rows]). Launch: 1-D, any grid and block, e.g. grid_for(d, 256).
//
// Each may be launched early (LaunchConfig::early_launch): it waits for the kernel before it first, and reads `chunk`
// only after that wait.
#include "lazygraph/element.cuh"
#include "lazygraph/kernel_common.cuh"

namespace {

/// The chunk's real rows, clamped to [0, max_rows].
__device__ __forceinline__ int chunk_rows(const int* chunk, int max_rows) { return min(max(chunk[1], 0), max_rows); }

template <class T>
__device__ __forceinline__ void prefill_rope_body(T* q, T* k, T* v, const T* bq, const T* bk, const T* bv,
                                                  const int* chunk, int n_heads, int n_kv_heads, int head_dim,
                                                  const float* frequencies, int max_rows) {
  lg::early_launch_prologue();
  const int start = chunk[0];
  const int rows = chunk_rows(chunk, max_rows);
  const int half_dim = head_dim / 2;
  const long long q_pairs = static_cast<long long>(n_heads) * half_dim;
  const long long kv_pairs = static_cast<long long>(n_kv_heads) * half_dim;
  // A row's pairs: q's, then k's, then (only with biases) v's.
  const long long row_pairs = q_pairs + kv_pairs + (bv != nullptr ? kv_pairs : 0);
  for (long long e = lg::global_index(); e < rows * row_pairs; e += lg::grid_stride()) {
    const long long r = e / row_pairs;
    long long p = e - r * row_pairs;
    T* row;
    const T* bias;
    bool rotate = true;
    if (p < q_pairs) {
      row = q + r * 2 * q_pairs;
      bias = bq;
    } else if (p < q_pairs + kv_pairs) {
      p -= q_pairs;
      row = k + r * 2 * kv_pairs;
      bias = bk;
    } else {
      p -= q_pairs + kv_pairs;
      row = v + r * 2 * kv_pairs;
      bias = bv;
      rotate = false;
    }
    float x0 = lg::to_float(row[2 * p]);
    float x1 = lg::to_float(row[2 * p + 1]);
    if (bias != nullptr) {
      x0 += lg::to_float(bias[2 * p]);
      x1 += lg::to_float(bias[2 * p + 1]);
    }
    if (rotate) {
      const int i = static_cast<int>(p % half_dim);
      const float angle = static_cast<float>(start + static_cast<int>(r)) * frequencies[i];
      float s;
      float c;
      sincosf(angle, &s, &c);
      const float y0 = x0 * c - x1 * s;
      x1 = x0 * s + x1 * c;
      x0 = y0;
    }
    row[2 * p] = lg::from_float<T>(x0);
    row[2 * p + 1] = lg::from_float<T>(x1);
  }
}

template <class T>
__device__ __forceinline__ void prefill_silu_mul_body(const T* gate, const T* up, T* out, const int* chunk, int width,
                                                      int max_rows) {
  lg::early_launch_prologue();
  if (width % 8 != 0 || !lg::is_aligned16(gate) || !lg::is_aligned16(up) || !lg::is_aligned16(out)) __trap();
  const long long eighths = static_cast<long long>(chunk_rows(chunk, max_rows)) * (width / 8);
  for (long long e = lg::global_index(); e < eighths; e += lg::grid_stride()) {
    float a[8];
    float b[8];
    lg::load_float8(gate + 8 * e, a);
    lg::load_float8(up + 8 * e, b);
#pragma unroll
    for (int j = 0; j < 8; ++j) a[j] = a[j] / (1.0f + expf(-a[j])) * b[j];
    lg::store8(out + 8 * e, lg::pack8<T>(a));
  }
}

template <class T>
__device__ __forceinline__ void prefill_last_row_body(const T* x, const int* chunk, T* out, int d, int max_rows) {
  lg::early_launch_prologue();
  const int last = max(chunk_rows(chunk, max_rows), 1) - 1;
  const T* row = x + static_cast<long long>(last) * d;
  for (long long i = lg::global_index(); i < d; i += lg::grid_stride()) out[i] = row[i];
}

}  // namespace

/* lazygraph:variants
axis T = lg::half_t | lg::bf16_t _bf16

prefill_rope[T] = prefill_rope_body<T>(T* q, T* k, T* v, const T* bq, const T* bk, const T* bv, const int* chunk,
    int n_heads, int n_kv_heads, int head_dim, const float* frequencies, int max_rows)
prefill_silu_mul[T] = prefill_silu_mul_body<T>(const T* gate, const T* up, T* out, const int* chunk, int width,
    int max_rows)
prefill_last_row[T] = prefill_last_row_body<T>(const T* x, const int* chunk, T* out, int d, int max_rows)
*/
