// The row-wise kernels of a prefill chunk (nn/prefill.hpp): what runs between the GEMMs and flash attention when a
// prompt chunk of up to max_rows rows (a bucket) goes through a decoder layer at once. Each reads the chunk from device
// memory, `chunk` = [start, rows, slot] (nn::PrefillChunkLayout, the header of nn::PrefillIo), so that one captured
// graph per bucket serves every chunk of up to max_rows rows at any start; rows past `rows` (the bucket's padding) are
// neither read nor written. `rows` is clamped to [0, max_rows], so no value in device memory makes them touch memory
// outside their buffers. fp16 (`NAME`) and bf16 (`NAME_bf16`) from one template each; arithmetic in fp32.
//
//   prefill_rms_norm(x, gain, out, chunk, d, eps, max_rows)
//     out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * gain for r < rows (x and out [max_rows][d], gain [d]), as
//     kernels/nn/rms_norm.cu computes it for one vector (the sum of squares in another order). `out` may be `x`. d a
//     multiple of 8 and the buffers 16-byte aligned (traps otherwise): 16-byte loads and stores. Launch: 1-D grid of
//     blocks over the rows (block b takes rows b, b + gridDim.x, ...), e.g. max_rows blocks of 256 threads; the block
//     a multiple of 32 threads.
//
//   prefill_qkv_rope(qkv, bq, bk, bv, q, k, v, chunk, positions, n_heads, n_kv_heads, head_dim, frequencies, max_rows)
//     qkv [max_rows][q_dim + 2 kv_dim] as the stacked q/k/v GEMM wrote it (no bias; q_dim = n_heads * head_dim,
//     kv_dim = n_kv_heads * head_dim); q [max_rows][q_dim], k and v [max_rows][kv_dim] receive its three parts. For row
//     r < rows at position p = start + r (or positions[r] where `positions` is not null: rows of several sequences
//     packed in one chunk, nn::PackedPrefillIo): the biases are added (bq [q_dim], bk and bv [kv_dim]; all three null
//     for none), then each pair (2i, 2i+1) of every q and k head is rotated by angle = p * frequencies[i]
//     (kernels/nn/rope.cu's rule and table: x0' = x0 cos - x1 sin, x1' = x0 sin + x1 cos), in fp32, rounded once; v is
//     copied (plus its bias). head_dim a multiple of 8 and every buffer 16-byte aligned (traps otherwise): each thread
//     moves 8 elements (4 pairs) with 16-byte loads and stores. Launch: 1-D, any grid and block (grid-stride over
//     eighths of rows), e.g. grid_for(max_rows * (q_dim + 2 kv_dim) / 8, 256).
//
//   prefill_silu_mul(gate, up, out, chunk, width, stride, max_rows)
//     out[r][i] = silu(gate[r][i]) * up[r][i], silu(a) = a / (1 + exp(-a)), for r < rows, i < width; `out` is
//     [max_rows][width], gate's and up's rows are `stride` elements apart (width for buffers of their own; 2 width for
//     the rows of one product over W1 and W3 stacked, gate = its first width columns, up = the rest). `out` may be
//     `gate` or `up` when stride is width (each element is read before it is written, by the thread that writes it).
//     width and stride multiples of 8, stride >= width, out apart from gate and up when stride is not width, the
//     buffers 16-byte aligned (traps otherwise): 16-byte loads.
//     Launch: 1-D, any grid and block (grid-stride over eighths), e.g. grid_for(max_rows * width / 8, 256).
//
//   prefill_gelu_mul(gate, up, out, chunk, width, stride, max_rows)
//     prefill_silu_mul with gelu_tanh (a / 2 (1 + tanh(sqrt(2 / pi) (a + 0.044715 a^3)))) for silu: GeGLU's.
//
//   prefill_rms_norm_add(in, gain, x, chunk, d, eps, max_rows)
//     x[r] += rmsnorm(in[r]) * gain for r < rows, the normed row rounded to T before the add (a post-norm, Gemma 3's:
//     the residual stream takes the block's output normed); launched as prefill_rms_norm.
//
//   prefill_last_row(x, chunk, out, d, max_rows)
//     out[i] = x[rows - 1][i], i < d: the chunk's last row, for the LM head (x [max_rows][d], out [d]; rows clamped to
//     [1, max_rows]). Launch: 1-D, any grid and block, e.g. grid_for(d, 256).
//
// Each may be launched early (LaunchConfig::early_launch): it waits for the kernel before it first, and reads `chunk`
// only after that wait.
#include "lazygraph/block_reduce.cuh"
#include "lazygraph/element.cuh"
#include "lazygraph/kernel_common.cuh"

namespace {

/// The chunk's real rows, clamped to [0, max_rows].
__device__ __forceinline__ int chunk_rows(const int* chunk, int max_rows) { return min(max(chunk[1], 0), max_rows); }

template <class T>
__device__ __forceinline__ void prefill_rms_norm_body(const T* x, const T* gain, T* out, const int* chunk, int d,
                                                      float eps, int max_rows) {
  lg::early_launch_prologue();
  if (d % 8 != 0 || !lg::is_aligned16(x) || !lg::is_aligned16(gain) || !lg::is_aligned16(out)) __trap();
  const int rows = chunk_rows(chunk, max_rows);
  const int eighths = d / 8;
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {  // uniform over the block: block_sum's barriers are safe
    const T* row = x + static_cast<long long>(r) * d;
    T* to = out + static_cast<long long>(r) * d;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < eighths; i += blockDim.x) {
      float a[8];
      lg::load_float8(row + 8 * i, a);
#pragma unroll
      for (int j = 0; j < 8; ++j) ss += a[j] * a[j];
    }
    const float inv_rms = 1.0f / sqrtf(lg::block_sum(ss) / static_cast<float>(d) + eps);
    for (int i = threadIdx.x; i < eighths; i += blockDim.x) {  // the row again, from L1 (this thread read it)
      float a[8];
      float g[8];
      lg::load_float8(row + 8 * i, a);
      lg::load_float8(gain + 8 * i, g);
#pragma unroll
      for (int j = 0; j < 8; ++j) a[j] = a[j] * inv_rms * g[j];
      lg::store8(to + 8 * i, lg::pack8<T>(a));
    }
  }
}

template <class T>
__device__ __forceinline__ void prefill_qkv_rope_body(const T* qkv, const T* bq, const T* bk, const T* bv, T* q, T* k,
                                                      T* v, const int* chunk, const int* positions, int n_heads,
                                                      int n_kv_heads, int head_dim, const float* frequencies,
                                                      int max_rows) {
  lg::early_launch_prologue();
  if (head_dim % 8 != 0 || !lg::is_aligned16(qkv) || !lg::is_aligned16(q) || !lg::is_aligned16(k) ||
      !lg::is_aligned16(v) || (bq != nullptr && !lg::is_aligned16(bq)) || (bk != nullptr && !lg::is_aligned16(bk)) ||
      (bv != nullptr && !lg::is_aligned16(bv))) {
    __trap();
  }
  const int start = chunk[0];
  const int rows = chunk_rows(chunk, max_rows);
  const int q_dim = n_heads * head_dim;
  const int kv_dim = n_kv_heads * head_dim;
  const int row_eighths = (q_dim + 2 * kv_dim) / 8;
  const long long total = static_cast<long long>(rows) * row_eighths;
  for (long long e = lg::global_index(); e < total; e += lg::grid_stride()) {
    const int r = static_cast<int>(e / row_eighths);
    int col = 8 * static_cast<int>(e - static_cast<long long>(r) * row_eighths);  // within the stacked row
    float a[8];
    lg::load_float8(qkv + e * 8, a);
    T* to;
    const T* bias;
    bool rotate = true;
    if (col < q_dim) {
      to = q + static_cast<long long>(r) * q_dim + col;
      bias = bq;
    } else if (col < q_dim + kv_dim) {
      col -= q_dim;
      to = k + static_cast<long long>(r) * kv_dim + col;
      bias = bk;
    } else {
      col -= q_dim + kv_dim;
      to = v + static_cast<long long>(r) * kv_dim + col;
      bias = bv;
      rotate = false;
    }
    if (bias != nullptr) {
      float b[8];
      lg::load_float8(bias + col, b);
#pragma unroll
      for (int j = 0; j < 8; ++j) a[j] += b[j];
    }
    if (rotate) {
      const float position = static_cast<float>(positions != nullptr ? positions[r] : start + r);
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

template <bool Gelu, class T>
__device__ __forceinline__ void prefill_silu_mul_body(const T* gate, const T* up, T* out, const int* chunk, int width,
                                                      int stride, int max_rows) {
  lg::early_launch_prologue();
  if (width % 8 != 0 || stride % 8 != 0 || stride < width || !lg::is_aligned16(gate) || !lg::is_aligned16(up) ||
      !lg::is_aligned16(out) || (stride != width && (out == gate || out == up))) {
    __trap();
  }
  const int row_eighths = width / 8;
  const long long eighths = static_cast<long long>(chunk_rows(chunk, max_rows)) * row_eighths;
  for (long long e = lg::global_index(); e < eighths; e += lg::grid_stride()) {
    const long long from = stride == width ? 8 * e : (e / row_eighths) * stride + 8 * (e % row_eighths);
    float a[8];
    float b[8];
    lg::load_float8(gate + from, a);
    lg::load_float8(up + from, b);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      a[j] = (Gelu ? 0.5f * a[j] * (1.0f + tanhf(0.7978845608028654f * (a[j] + 0.044715f * a[j] * a[j] * a[j])))
                   : a[j] / (1.0f + expf(-a[j]))) *
             b[j];
    }
    lg::store8(out + 8 * e, lg::pack8<T>(a));
  }
}

template <class T>
__device__ __forceinline__ void prefill_rms_norm_add_body(const T* in, const T* gain, T* x, const int* chunk, int d,
                                                          float eps, int max_rows) {
  lg::early_launch_prologue();
  if (d % 8 != 0 || !lg::is_aligned16(in) || !lg::is_aligned16(gain) || !lg::is_aligned16(x)) __trap();
  const int rows = chunk_rows(chunk, max_rows);
  const int eighths = d / 8;
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {  // uniform over the block: block_sum's barriers are safe
    const T* row = in + static_cast<long long>(r) * d;
    T* to = x + static_cast<long long>(r) * d;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < eighths; i += blockDim.x) {
      float a[8];
      lg::load_float8(row + 8 * i, a);
#pragma unroll
      for (int j = 0; j < 8; ++j) ss += a[j] * a[j];
    }
    const float inv_rms = 1.0f / sqrtf(lg::block_sum(ss) / static_cast<float>(d) + eps);
    for (int i = threadIdx.x; i < eighths; i += blockDim.x) {
      float a[8];
      float g[8];
      float y[8];
      lg::load_float8(row + 8 * i, a);
      lg::load_float8(gain + 8 * i, g);
      lg::load_float8(to + 8 * i, y);
#pragma unroll
      for (int j = 0; j < 8; ++j) y[j] += lg::to_float(lg::from_float<T>(a[j] * inv_rms * g[j]));
      lg::store8(to + 8 * i, lg::pack8<T>(y));
    }
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

prefill_rms_norm[T] = prefill_rms_norm_body<T>(const T* x, const T* gain, T* out, const int* chunk, int d, float eps,
    int max_rows)
prefill_qkv_rope[T] = prefill_qkv_rope_body<T>(const T* qkv, const T* bq, const T* bk, const T* bv, T* q, T* k, T* v,
    const int* chunk, const int* positions, int n_heads, int n_kv_heads, int head_dim, const float* frequencies,
    int max_rows)
prefill_silu_mul[T] = prefill_silu_mul_body<false, T>(const T* gate, const T* up, T* out, const int* chunk,
    int width, int stride, int max_rows)
prefill_gelu_mul[T] = prefill_silu_mul_body<true, T>(const T* gate, const T* up, T* out, const int* chunk,
    int width, int stride, int max_rows)
prefill_rms_norm_add[T] = prefill_rms_norm_add_body<T>(const T* in, const T* gain, T* x, const int* chunk, int d,
    float eps, int max_rows)
prefill_last_row[T] = prefill_last_row_body<T>(const T* x, const int* chunk, T* out, int d, int max_rows)
*/
