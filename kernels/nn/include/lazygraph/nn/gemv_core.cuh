// The core of the matrix-vector kernels (kernels/nn/gemv.cu, kernels/nn/qkv.cu): the row loop that streams
// weights at memory speed, the x variants it multiplies, and the early-launch prologue. gemv.cu's comment explains
// the launch shape, the loads and the early launch. Include as "lazygraph/nn/gemv_core.cuh".
#pragma once

#include "lazygraph/element.cuh"
#include "lazygraph/kernel_common.cuh"

namespace lg::nn {

/// M matrices of `cols` columns each: row r of matrix m starts at w[m] + r * cols.
template <int M, class T>
struct Matrices {
  using Element = T;
  static constexpr int count = M;  ///< matrices read per row
  const T* w[M];
  int cols;
  __device__ __forceinline__ const T* row(int m, int r) const { return w[m] + static_cast<long long>(r) * cols; }
};

/// Independent 16-byte weight loads in flight per lane and matrix, per step of the column loop.
constexpr int loads_per_matrix(int matrices) { return 8 / matrices; }

/// x as the kernel multiplies it: `load` fetches vector b's chunk (kept packed while in flight, 4 registers),
/// `expand` turns it into the 8 factors; `sum_squares` says whether the kernel also sums x^2 (for RMSNorm).
template <class T>
struct PlainX {
  static constexpr bool sum_squares = false;
  struct Raw {
    lg::Pack8<T> x;
  };
  const T* x;
  long long stride;  // elements between vectors: cols
  __device__ __forceinline__ Raw load(int b, int chunk) const { return {lg::load8(x + b * stride + 8LL * chunk)}; }
  __device__ __forceinline__ static void expand(const Raw& r, float (&f)[8], float& sq) {
    lg::unpack8(r.x, f);
    sq = 0.0f;
  }
};

/// x * g elementwise, and the sum of x^2 over the chunk: the row's dot product is scaled by 1/rms(x) afterwards,
/// rms(x) coming from the same loads (no separate pass over x).
template <class T>
struct GainedX {
  static constexpr bool sum_squares = true;
  struct Raw {
    lg::Pack8<T> x;
    lg::Pack8<T> g;
  };
  const T* x;
  const T* g;
  long long stride;
  __device__ __forceinline__ Raw load(int b, int chunk) const {
    return {lg::load8(x + b * stride + 8LL * chunk), lg::load8(g + 8LL * chunk)};
  }
  __device__ __forceinline__ static void expand(const Raw& r, float (&f)[8], float& sq) {
    float gain[8];
    lg::unpack8(r.x, f);
    lg::unpack8(r.g, gain);
    sq = f[0] * f[0];
#pragma unroll
    for (int i = 1; i < 8; ++i) sq = fmaf(f[i], f[i], sq);
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] *= gain[i];
  }
};

__device__ __forceinline__ float silu(float a) { return a / (1.0f + expf(-a)); }

__device__ __forceinline__ bool shapes_supported(int cols, int batch, const void* a, const void* b, const void* c) {
  return cols % 8 == 0 && batch >= 1 && batch <= 8 && lg::is_aligned16(a) && lg::is_aligned16(b) && lg::is_aligned16(c);
}

/// Weight bytes of a whole kernel up to which an early-launched kernel prefetches all of its block's rows into L2
/// (not just the first step): small enough to sit in L2 beside the kernel before it (H100/H200 L2: 50 MB). Whole
/// rows of larger kernels, 64 KB and more per block, crowded L2 and cost 14% of the bandwidth at 4096 x 11008.
constexpr long long kWholePrefetchBytes = 24LL << 20;

/// The start of every kernel here. Launched early (LaunchConfig::early_launch), the kernel arrives while the
/// kernel before it is finishing: it asks for its weights to be brought into L2 (weights are never written by
/// earlier work) -- all of its block's rows when the kernel's weights fit kWholePrefetchBytes, else what the first
/// pass of gemv_rows' column loop loads -- and lets the next kernel launch early in turn. gemv_rows then loads the
/// first step's weights into registers and only then waits for the earlier work (wait_for_prior_grids), whose
/// results (x, the output) it may touch from there on.
template <class W>
__device__ __forceinline__ void prefetch_weights(const W& w, int rows, int cols) {
  using T = typename W::Element;
  constexpr int M = W::count;
  const bool whole = static_cast<long long>(rows) * cols * M * static_cast<long long>(sizeof(T)) <= kWholePrefetchBytes;
  constexpr int chunks_per_line = 8;  // 16-byte chunks per 128-byte line
  const int first_step_chunks = min(cols / 8, 32 * static_cast<int>(blockDim.y) * loads_per_matrix(M));
  const int row_lines = ((whole ? cols / 8 : first_step_chunks) + chunks_per_line - 1) / chunks_per_line;
  const int threads = blockDim.x * blockDim.y * blockDim.z;
  const int tid = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  // Whole: every row this block will process (gemv_rows walks the rows grid-stride); else its first rows' first step.
  for (int row0 = blockIdx.x * blockDim.z; row0 < rows; row0 += gridDim.x * blockDim.z) {
    const int block_rows = min(static_cast<int>(blockDim.z), rows - row0);
    for (int i = tid; i < block_rows * row_lines; i += threads) {
      const int row = row0 + i / row_lines;
      const int line = i % row_lines;
#pragma unroll
      for (int m = 0; m < M; ++m) lg::prefetch_l2(w.row(m, row) + 8LL * chunks_per_line * line);
    }
    if (!whole) break;
  }
  lg::allow_dependent_launch();
}

/// No work after each pass over the rows (gemv_rows' default).
struct NoEpilogue {
  __device__ __forceinline__ void operator()(int /*first_row*/) const {}
};
template <class E>
struct has_epilogue {
  static constexpr bool value = true;
};
template <>
struct has_epilogue<NoEpilogue> {
  static constexpr bool value = false;
};

template <int B, class W, class X, class Finish, class Epilogue = NoEpilogue>
__device__ __forceinline__ void gemv_rows(const W& w, const X& x, int rows, int cols, int batch, float eps,
                                          Finish finish, Epilogue epilogue = {}) {
  using T = typename W::Element;
  constexpr int M = W::count;
  constexpr int kLoads = loads_per_matrix(M);
  constexpr int kSums = X::sum_squares ? M + 1 : M;  // dot products, then the sum of x^2
  __shared__ float group_partial[32][kSums][B];      // [group * K + warp][matrix][vector], used when K > 1

  const int lane = threadIdx.x;
  const int warp_in_group = threadIdx.y;  // 0..K-1
  const int group = threadIdx.z;          // 0..R-1
  const int warps_per_group = blockDim.y;
  const int groups = blockDim.z;
  const int chunks = cols / 8;                  // 16-byte chunks per row
  const int stride = 32 * warps_per_group;      // chunks one step of the group covers per load
  const int first = warp_in_group * 32 + lane;  // this thread's first chunk in the row
  bool waited = false;

  for (int row0 = blockIdx.x * groups; row0 < rows; row0 += gridDim.x * groups) {  // uniform over the block
    const int row = row0 + group;
    float acc[kSums][B];
#pragma unroll
    for (int m = 0; m < kSums; ++m) {
#pragma unroll
      for (int b = 0; b < B; ++b) acc[m][b] = 0.0f;
    }

    if (row < rows) {
      const T* w_row[M];
#pragma unroll
      for (int m = 0; m < M; ++m) w_row[m] = w.row(m, row);

      for (int base = first; base < chunks; base += stride * kLoads) {
        // Every weight load of the step first, then the arithmetic, so that all loads are in flight together.
        // Loads past the row's end re-read its last chunk (no branch around a load, which would serialise them)
        // and are then replaced by zeros; the per-chunk partial sums are independent chains. The first step's
        // loads are issued before the wait for earlier work: weights do not depend on it.
        lg::Pack8<T> wv[M][kLoads];
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
          const int chunk = min(base + u * stride, chunks - 1);
#pragma unroll
          for (int m = 0; m < M; ++m) wv[m][u] = lg::load8_streaming(w_row[m] + 8LL * chunk);
        }
        if (!waited) {
          lg::wait_for_prior_grids();
          waited = true;
        }
        // With one vector its x chunks are loaded with the weights; with several, each vector's chunk is loaded
        // next to its use (x stays in L1).
        typename X::Raw xv[kLoads];
        if (B == 1) {
#pragma unroll
          for (int u = 0; u < kLoads; ++u) xv[u] = x.load(0, min(base + u * stride, chunks - 1));
        }
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
          const bool inside = base + u * stride < chunks;
          const int chunk = min(base + u * stride, chunks - 1);
          float wf[M][8];
#pragma unroll
          for (int m = 0; m < M; ++m) lg::unpack8(wv[m][u], wf[m]);
#pragma unroll
          for (int b = 0; b < B; ++b) {
            float xf[8];
            float sq;
            X::expand(B == 1 ? xv[u] : x.load(min(b, batch - 1), chunk), xf, sq);
#pragma unroll
            for (int m = 0; m < M; ++m) {
              float dot = wf[m][0] * xf[0];
#pragma unroll
              for (int i = 1; i < 8; ++i) dot = fmaf(wf[m][i], xf[i], dot);
              acc[m][b] += inside ? dot : 0.0f;
            }
            if (X::sum_squares) acc[kSums - 1][b] += inside ? sq : 0.0f;
          }
        }
      }
    }

#pragma unroll
    for (int m = 0; m < kSums; ++m) {
#pragma unroll
      for (int b = 0; b < B; ++b) acc[m][b] = lg::warp_sum(acc[m][b]);
    }
    if (warps_per_group > 1) {  // uniform over the block
      if (lane == 0) {
#pragma unroll
        for (int m = 0; m < kSums; ++m) {
#pragma unroll
          for (int b = 0; b < B; ++b) group_partial[group * warps_per_group + warp_in_group][m][b] = acc[m][b];
        }
      }
      __syncthreads();
      if (warp_in_group == 0 && lane == 0) {
        for (int k = 1; k < warps_per_group; ++k) {
#pragma unroll
          for (int m = 0; m < kSums; ++m) {
#pragma unroll
            for (int b = 0; b < B; ++b) acc[m][b] += group_partial[group * warps_per_group + k][m][b];
          }
        }
      }
      __syncthreads();  // the partials are read before the next row overwrites them
    }
    if (row < rows && warp_in_group == 0 && lane == 0) {
      float out[M][B];
#pragma unroll
      for (int b = 0; b < B; ++b) {
        const float scale = X::sum_squares ? 1.0f / sqrtf(acc[kSums - 1][b] / static_cast<float>(cols) + eps) : 1.0f;
#pragma unroll
        for (int m = 0; m < M; ++m) out[m][b] = acc[m][b] * scale;
      }
      finish(row, out);
    }
    if constexpr (has_epilogue<Epilogue>::value) {  // every thread, after every group's finish of this pass
      __syncthreads();
      epilogue(row0);
      __syncthreads();  // before the next pass's finish overwrites what the epilogue read
    }
  }
}

}  // namespace lg::nn
