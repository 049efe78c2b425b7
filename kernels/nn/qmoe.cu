// moe.cu's expert kernels over quantized experts (fp16 `NAME`, bf16 `NAME_bf16`; the format's suffix last, as
// qgemv.cu's: moe_qgate_up_int8, moe_qdown_bf16_fp8, ...): the same plan, the same results' layout and the same end,
// each chosen expert's product dequantized in registers by qgemv_core.cuh's tile loop (int8 per channel, int4 in
// groups with or without zero points, fp8 e4m3 in groups of 128), reading only the chosen experts' bytes.
//
//   moe_qgate_up(W1, W3, h, plan, act, experts, width, d, top_k, batch)
//       W1, W3: the experts' gate_proj and up_proj as ONE quantized matrix each of experts * width rows and d columns
//       (quantized.hpp's layout), expert e's rows e * width .. e * width + width - 1, so that with width a multiple
//       of 16 each expert is whole tiles of its own (the stacked matrix is the experts' own matrices' bytes one after
//       another). For each distinct expert u of the plan (e) and row b that chose it by pair j: act[j][i] =
//       silu(W1_e[i] . h[b]) * (W3_e[i] . h[b]), rounded once to T. grid.y goes over the distinct experts as
//       moe_gate_up's (size it min(batch * top_k, experts)), the block shape and grid.x as qgemv.cu's kernels for
//       `width` rows of d columns (nn::BasicQuantizedKernels::moe_config).
//   moe_qdown(W2, act, plan, weights, partial, counters, x, experts, width, d, top_k, batch)
//       W2: the experts' down_proj as one quantized matrix of experts * d rows and `width` columns. x[b][r] += the sum
//       over s of weights[b][s] * (W2_e[r] . act[b * top_k + s]), e = ids[b][s], as moe_down: each pair's product
//       in fp32 in partial[j] ([batch * top_k][d]), the last block of each grid column adding the column's rows into
//       x in slot order (moe_core.cuh's add_expert_sums; counters zero before and after, gridDim.x entries).
//
// Each product is qgemv.cu's for the expert's rows (tensor cores, the weights exact in registers, the scales on the
// fp32 sums), so a vector's results do not depend on which other rows share its experts' reads; as the _mma dense
// variants, they depend on the block shape only.
//
// Requirements (a trap otherwise): the kernel's format and element type (the scales in T), W1 and W3 of one group
// and symmetry, d (gate/up) and width (down) whole steps and groups of the format (qgemv.cu's requirements for the
// columns), width and d multiples of 16 (each expert whole tiles), h and act 16-byte aligned, experts, top_k, batch and
// the plan as moe.cu's (batch 1 to 8), moe_qdown's grid.x at most d / 16. Launch: blocks of (32, K, R) as qgemv.cu's,
// any grid.x. Early launch: each kernel lets the next launch early at once; the weights' rows depend on the plan, so it
// waits for the kernel before it before its first load (no loads in flight across that wait, as moe.cu's kernels).
#include "lazygraph/nn/moe_core.cuh"
#include "lazygraph/nn/qgemv_core.cuh"

namespace {

using namespace lg::nn;
using namespace lg::nn::moe;

/// Expert e's rows of a stacked matrix of `rows` rows per expert (a multiple of 16) and `cols` columns: the same
/// format, its parts from the expert's first tile on.
template <int F>
__device__ __forceinline__ QuantizedMatrix expert_matrix(QuantizedMatrix w, long long e, int rows, int cols) {
  const long long tiles = e * (rows / kTileRows);
  const long long scales = tiles * kTileRows * quantized_groups<F>(w, cols);  // scales (and zero points) before
  w.values += tiles * quantized_tile_bytes<F>(cols);
  w.scales = static_cast<const unsigned short*>(w.scales) + scales;
  if (w.zeros != nullptr) w.zeros += scales;
  return w;
}

template <int F>
__device__ __forceinline__ bool stacked_supported(const QuantizedMatrix& w, int rows, int cols) {
  return quantized_supported<F>(w, cols) && rows > 0 && rows % kTileRows == 0;
}

template <int F, class T>
__device__ __forceinline__ void moe_qgate_up_body(QuantizedMatrix W1, QuantizedMatrix W3, const T* h, const int* plan,
                                                  T* act, int experts, int width, int d, int top_k, int batch) {
  __shared__ int pair_of[kMaxBatch];
  start_quantized();
  if (!counts_supported(experts, top_k, batch) || !stacked_supported<F>(W1, width, d) ||
      !stacked_supported<F>(W3, width, d) || W1.group != W3.group || !lg::is_aligned16(h) || !lg::is_aligned16(act)) {
    __trap();
  }
  lg::wait_for_prior_grids();  // the plan, h and act are the kernels' before
  const int n = planned_experts(plan, experts, top_k, batch);
  for (int u = static_cast<int>(blockIdx.y); u < n; u += static_cast<int>(gridDim.y)) {  // uniform over the block
    const long long e = planned_expert(plan, u, experts, top_k, batch, pair_of);
    const QuantizedTiles<2, T> w{{expert_matrix<F>(W1, e, width, d), expert_matrix<F>(W3, e, width, d)},
                                 quantized_tile_bytes<F>(d),
                                 quantized_groups<F>(W1, d)};
    qgemv_tiles<F>(w, PlainX<T>{h, d}, width, d, batch, 0.0f, [&](int row, int b, const float* v) {
      const int j = pair_of[b];
      if (j >= 0) act[static_cast<long long>(j) * width + row] = lg::from_float<T>(silu(v[0]) * v[1]);
    });
    __syncthreads();  // pair_of is read before the next expert's
  }
}

template <int F, class T>
__device__ __forceinline__ void moe_qdown_body(QuantizedMatrix W2, const T* act, const int* plan, const float* weights,
                                               float* partial, unsigned* counters, T* x, int experts, int width, int d,
                                               int top_k, int batch) {
  __shared__ int pair_of[kMaxBatch];
  start_quantized();
  if (!counts_supported(experts, top_k, batch) || !stacked_supported<F>(W2, d, width) ||
      static_cast<int>(gridDim.x) > d / kTileRows || !lg::is_aligned16(act)) {
    __trap();
  }
  lg::wait_for_prior_grids();  // the plan, act, partial and x are the kernels' before
  const int n = planned_experts(plan, experts, top_k, batch);
  for (int u = static_cast<int>(blockIdx.y); u < n; u += static_cast<int>(gridDim.y)) {  // uniform over the block
    const long long e = planned_expert(plan, u, experts, top_k, batch, pair_of);
    const QuantizedTiles<1, T> w{{expert_matrix<F>(W2, e, d, width)}, quantized_tile_bytes<F>(width), width / W2.group};
    qgemv_tiles<F>(w, PairX<T>{act, pair_of, width}, d, width, batch, 0.0f, [&](int row, int b, const float* v) {
      const int j = pair_of[b];
      if (j >= 0) partial[static_cast<long long>(j) * d + row] = v[0];
    });
    __syncthreads();  // pair_of is read before the next expert's
  }
  // A grid column's blocks hold blockDim.z tiles from blockIdx.x * blockDim.z on, then every gridDim.x * blockDim.z.
  add_expert_sums(weights, partial, counters, x, d, top_k, batch, kTileRows * static_cast<int>(blockDim.z));
}

}  // namespace

// The entry points, one per element type and format (as qgemv.cu's: 32 warps a block at most, 64 registers a thread).
/* lazygraph:variants
axis T = lg::half_t | lg::bf16_t _bf16
axis F = kInt8 _int8 | kInt4 _int4 | kInt4Zero _int4z | kFp8 _fp8

moe_qgate_up[T][F] __launch_bounds__(1024, 1) = moe_qgate_up_body<F>(QuantizedMatrix W1, QuantizedMatrix W3,
    const T* h, const int* plan, T* act, int experts, int width, int d, int top_k, int batch)
moe_qdown[T][F] __launch_bounds__(1024, 1) = moe_qdown_body<F>(QuantizedMatrix W2, const T* act, const int* plan,
    const float* weights, float* partial, unsigned* counters, T* x, int experts, int width, int d, int top_k,
    int batch)
*/
