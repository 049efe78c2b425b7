// gemv.cu's kernels over weight-only quantized matrices (int8 per channel, int4 in groups; quantized.hpp's layout),
// for 1 to 8 fp16 or bf16 vectors, on tensor cores (qgemv_core.cuh explains the dequantizing):
//   qgemv(W, x, out, rows, cols, batch)                          out = W x
//   qgemv_add(W, x, out, rows, cols, batch)                      out += W x
//   rms_norm_qgemv(W, x, g, out, rows, cols, eps, batch)         out = W (x / rms(x) * g)
//   rms_norm_qgemv_qkv(W, x, g, bias, q, k, v, q_rows, kv_rows, cols, eps, batch)
//                                                                 [q | k | v] = W (x / rms(x) * g) + bias
//   rms_norm_qgemv_swiglu(W1, W3, x, g, out, rows, cols, eps, batch)   out = silu(W1 h) * (W3 h), h = x / rms(x) * g
// W is a QuantizedMatrix (by value) of rows x cols, x [batch][cols], out [batch][rows]. For qkv, W is the q, k and v
// projections' rows in one matrix (q_rows + 2 kv_rows), q [batch][q_rows], k and v [batch][kv_rows], bias the three
// biases in the same order or null. Each kernel comes per element
// type (NAME, NAME_bf16: x, g, out and the scales in it) and format (NAME_int8, NAME_int4 symmetric, NAME_int4z with
// zero points: qgemv_int8, qgemv_bf16_int4z, ...); the host picks the format from W (nn::QuantizedKernel). One rounding
// per output, as gemv.cu's tensor-core variants: x * g is rounded to the element type before the mma (the weights are
// exact integers there); the scales multiply the fp32 sums.
//
// Requirements (a trap otherwise): the kernel's format and element type, cols a multiple of 64 (int4) or 32 (int8),
// the group 32, 64 or 128 (int4, dividing cols) or cols (int8), W1 and W3 of one group and symmetry, values, x and g
// 16-byte aligned, batch 1 to 8. Launch: blocks of (32, K, R), K warps per tile of 16 rows and R tiles at a time,
// K * R <= 32, any grid (qgemv_core.cuh); nn::BasicQuantizedKernels::config picks the fast shape. Early launch as
// gemv.cu's kernels.
#include "lazygraph/nn/qgemv_core.cuh"

namespace {

using namespace lg::nn;

template <int F, class T>
__device__ __forceinline__ QuantizedTiles<1, T> tiles_of(const QuantizedMatrix& W, int cols) {
  return {{W}, quantized_tile_bytes<F>(cols), cols / W.group};
}

template <int F, class T>
__device__ __forceinline__ bool supported(const QuantizedMatrix& W, int cols, int batch, const T* x, const T* g) {
  return quantized_supported<F>(W, cols) && batch >= 1 && batch <= 8 && lg::is_aligned16(x) && lg::is_aligned16(g);
}

template <class T>
__device__ __forceinline__ T& at(T* out, int rows, int row, int b) {
  return out[static_cast<long long>(b) * rows + row];
}

template <int F, class T>
__device__ __forceinline__ void qgemv_body(QuantizedMatrix W, const T* x, T* out, int rows, int cols, int batch) {
  if (!supported<F>(W, cols, batch, x, x)) __trap();
  const QuantizedTiles<1, T> w = tiles_of<F, T>(W, cols);
  prefetch_quantized<4>(w, rows);
  qgemv_tiles<F>(w, PlainX<T>{x, cols}, rows, cols, batch, 0.0f,
                 [&](int row, int b, const float* v) { at(out, rows, row, b) = lg::from_float<T>(v[0]); });
}

template <int F, class T>
__device__ __forceinline__ void qgemv_add_body(QuantizedMatrix W, const T* x, T* out, int rows, int cols, int batch) {
  if (!supported<F>(W, cols, batch, x, x)) __trap();
  const QuantizedTiles<1, T> w = tiles_of<F, T>(W, cols);
  // The residual this thread adds to first, read right after the wait (as gemv.cu's gemv_add).
  float residual = 0.0f;
  int residual_row = -1;
  int residual_vector = -1;
  prefetch_quantized<4>(w, rows);
  qgemv_tiles<F>(
      w, PlainX<T>{x, cols}, rows, cols, batch, 0.0f,
      [&](int row, int b, const float* v) {
        T& o = at(out, rows, row, b);
        const bool early = row == residual_row && b == residual_vector;
        o = lg::from_float<T>((early ? residual : lg::to_float(o)) + v[0]);
      },
      [&](int row, int b) {
        if (residual_row >= 0) return;
        residual = lg::to_float(at(out, rows, row, b));
        residual_row = row;
        residual_vector = b;
      });
}

template <int F, class T>
__device__ __forceinline__ void rms_norm_qgemv_body(QuantizedMatrix W, const T* x, const T* g, T* out, int rows,
                                                    int cols, float eps, int batch) {
  if (!supported<F>(W, cols, batch, x, g)) __trap();
  const QuantizedTiles<1, T> w = tiles_of<F, T>(W, cols);
  prefetch_quantized<4>(w, rows);
  qgemv_tiles<F>(w, GainedX<T>{x, g, cols}, rows, cols, batch, eps,
                 [&](int row, int b, const float* v) { at(out, rows, row, b) = lg::from_float<T>(v[0]); });
}

template <int F, class T>
__device__ __forceinline__ void rms_norm_qgemv_qkv_body(QuantizedMatrix W, const T* x, const T* g, const T* bias, T* q,
                                                        T* k, T* v, int q_rows, int kv_rows, int cols, float eps,
                                                        int batch) {
  if (!supported<F>(W, cols, batch, x, g) || q_rows < 1 || kv_rows < 1) __trap();
  const int rows = q_rows + 2 * kv_rows;
  const QuantizedTiles<1, T> w = tiles_of<F, T>(W, cols);
  prefetch_quantized<4>(w, rows);
  qgemv_tiles<F>(w, GainedX<T>{x, g, cols}, rows, cols, batch, eps, [&](int row, int b, const float* r) {
    const float value = r[0] + (bias == nullptr ? 0.0f : lg::to_float(bias[row]));
    if (row < q_rows) {
      at(q, q_rows, row, b) = lg::from_float<T>(value);
    } else if (row < q_rows + kv_rows) {
      at(k, kv_rows, row - q_rows, b) = lg::from_float<T>(value);
    } else {
      at(v, kv_rows, row - q_rows - kv_rows, b) = lg::from_float<T>(value);
    }
  });
}

template <int F, class T>
__device__ __forceinline__ void rms_norm_qgemv_swiglu_body(QuantizedMatrix W1, QuantizedMatrix W3, const T* x,
                                                           const T* g, T* out, int rows, int cols, float eps,
                                                           int batch) {
  if (!supported<F>(W1, cols, batch, x, g) || !quantized_supported<F>(W3, cols) || W1.group != W3.group) {
    __trap();
  }
  const QuantizedTiles<2, T> w{{W1, W3}, quantized_tile_bytes<F>(cols), cols / W1.group};
  prefetch_quantized<2>(w, rows);
  qgemv_tiles<F>(w, GainedX<T>{x, g, cols}, rows, cols, batch, eps,
                 [&](int row, int b, const float* v) { at(out, rows, row, b) = lg::from_float<T>(silu(v[0]) * v[1]); });
}

}  // namespace

// The entry points, one per element type and format (qgemv_int8, qgemv_int4, qgemv_bf16_int8, ...), 32 warps a block
// at most, 64 registers a thread (one block of 32 warps or two of 16 per multiprocessor).
/* lazygraph:variants
axis T = lg::half_t | lg::bf16_t _bf16
axis F = kInt8 _int8 | kInt4 _int4 | kInt4Zero _int4z

qgemv[T][F] __launch_bounds__(1024, 1) =
    qgemv_body<F>(QuantizedMatrix W, const T* x, T* out, int rows, int cols, int batch)
qgemv_add[T][F] __launch_bounds__(1024, 1) =
    qgemv_add_body<F>(QuantizedMatrix W, const T* x, T* out, int rows, int cols, int batch)
rms_norm_qgemv[T][F] __launch_bounds__(1024, 1) =
    rms_norm_qgemv_body<F>(QuantizedMatrix W, const T* x, const T* g, T* out, int rows, int cols, float eps, int batch)
rms_norm_qgemv_qkv[T][F] __launch_bounds__(1024, 1) = rms_norm_qgemv_qkv_body<F>(QuantizedMatrix W, const T* x,
    const T* g, const T* bias, T* q, T* k, T* v, int q_rows, int kv_rows, int cols, float eps, int batch)
rms_norm_qgemv_swiglu[T][F] __launch_bounds__(1024, 1) = rms_norm_qgemv_swiglu_body<F>(QuantizedMatrix W1,
    QuantizedMatrix W3, const T* x, const T* g, T* out, int rows, int cols, float eps, int batch)
*/
