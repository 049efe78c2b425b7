// The core of the matrix-vector kernels (kernels/nn/gemv.cu, kernels/nn/qkv.cu): the row loop that streams
// weights at memory speed, the x variants it multiplies, and the early-launch prologue. gemv.cu's comment explains
// the launch shape, the loads and the early launch. Include as "lazygraph/nn/gemv_core.cuh".
#pragma once

#include "lazygraph/element.cuh"
#include "lazygraph/kernel_common.cuh"
#include "lazygraph/tile.cuh"

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

/// The 8 elements p[order[8 * chunk + i]], i = 0..7, packed as load8 packs 8 contiguous ones: a chunk of a vector whose
/// columns a matrix stores reordered (order 16-byte aligned).
template <class T>
__device__ __forceinline__ Pack8<T> load8_gathered(const T* p, const int* order, int chunk) {
  const int4 a = __ldg(reinterpret_cast<const int4*>(order + 8LL * chunk));
  const int4 b = __ldg(reinterpret_cast<const int4*>(order + 8LL * chunk + 4));
  const auto* e = reinterpret_cast<const unsigned short*>(p);
  const auto two = [&](int lo, int hi) { return static_cast<unsigned>(e[lo]) | static_cast<unsigned>(e[hi]) << 16; };
  return {make_uint4(two(a.x, a.y), two(a.z, a.w), two(b.x, b.y), two(b.z, b.w))};
}

/// a * b + c on pairs of T (fp16x2 or bf16x2), rounded once.
__device__ __forceinline__ unsigned fma2(lg::half_t, unsigned a, unsigned b, unsigned c) {
  unsigned d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ __forceinline__ unsigned fma2(lg::bf16_t, unsigned a, unsigned b, unsigned c) {
  unsigned d;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
#else
  d = 0;
  __trap();
#endif
  return d;
}
/// The sum of the squares of a chunk's 8 elements, in fp32, in element order (one rounding per multiply-add).
template <class T>
__device__ __forceinline__ float squares8(const lg::Pack8<T>& x) {
  float f[8];
  lg::unpack8(x, f);
  float sq = f[0] * f[0];
#pragma unroll
  for (int i = 1; i < 8; ++i) sq = fmaf(f[i], f[i], sq);
  return sq;
}

/// x as the kernel multiplies it: `load` fetches vector b's chunk (kept packed while in flight, 4 registers),
/// `expand` turns it into the 8 factors; `sum_squares` says whether the kernel also sums x^2 (for RMSNorm). `gather`
/// fetches the chunk of columns `order` gives instead (a quantized matrix stored with its columns reordered).
template <class T>
struct PlainX {
  static constexpr bool sum_squares = false;
  struct Raw {
    lg::Pack8<T> x;
  };
  const T* x;
  long long stride;  // elements between vectors: cols
  __device__ __forceinline__ Raw load(int b, int chunk) const { return {lg::load8(x + b * stride + 8LL * chunk)}; }
  __device__ __forceinline__ Raw gather(int b, const int* order, int chunk) const {
    return {load8_gathered(x + b * stride, order, chunk)};
  }
  __device__ __forceinline__ static void expand(const Raw& r, float (&f)[8], float& sq) {
    lg::unpack8(r.x, f);
    sq = 0.0f;
  }
  /// The chunk as a tensor-core operand: its 8 elements of T as they are.
  __device__ __forceinline__ static uint4 fragment(const Raw& r) { return r.x.raw; }
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
  __device__ __forceinline__ Raw gather(int b, const int* order, int chunk) const {
    return {load8_gathered(x + b * stride, order, chunk), load8_gathered(g, order, chunk)};
  }
  __device__ __forceinline__ static void expand(const Raw& r, float (&f)[8], float& sq) {
    float gain[8];
    lg::unpack8(r.x, f);
    lg::unpack8(r.g, gain);
    sq = squares8(r.x);
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] *= gain[i];
  }
  /// The chunk as a tensor-core operand: x * g rounded once to T (the fp32 path keeps it in fp32). The product of
  /// two T is exact in fp32, so the pair fma (plus -0, which keeps a product's sign) rounds it as a product in fp32
  /// rounded to T would, in 4 instructions instead of expand's conversions and products. The kernels sum x^2 apart
  /// (squares8).
  __device__ __forceinline__ static uint4 fragment(const Raw& r) {
    const unsigned minus_zero = 0x80008000U;
    return make_uint4(fma2(T{}, r.x.raw.x, r.g.raw.x, minus_zero), fma2(T{}, r.x.raw.y, r.g.raw.y, minus_zero),
                      fma2(T{}, r.x.raw.z, r.g.raw.z, minus_zero), fma2(T{}, r.x.raw.w, r.g.raw.w, minus_zero));
  }
};

__device__ __forceinline__ float silu(float a) { return a / (1.0f + expf(-a)); }

/// GELU in its tanh form (PyTorch's gelu(approximate="tanh"), transformers' gelu_pytorch_tanh):
/// a / 2 (1 + tanh(sqrt(2 / pi) (a + 0.044715 a^3))).
__device__ __forceinline__ float gelu_tanh(float a) {
  return 0.5f * a * (1.0f + tanhf(0.7978845608028654f * (a + 0.044715f * a * a * a)));
}

/// The gate of a gated MLP: silu (SwiGLU) or, with `Gelu`, gelu_tanh (GeGLU).
template <bool Gelu>
__device__ __forceinline__ float gate(float a) {
  if constexpr (Gelu) {
    return gelu_tanh(a);
  } else {
    return silu(a);
  }
}

__device__ __forceinline__ bool shapes_supported(int cols, int batch, const void* a, const void* b, const void* c) {
  return cols % 8 == 0 && batch >= 1 && batch <= 8 && lg::is_aligned16(a) && lg::is_aligned16(b) && lg::is_aligned16(c);
}

/// Weight bytes of a whole kernel up to which an early-launched kernel prefetches the whole rows of its block's first
/// pass into L2 (less what its first step loads into registers at once): small enough to sit in L2 beside the kernel
/// before it (H100/H200 L2: 50 MB). Whole rows of larger kernels, 64 KB and more per block, crowded L2 and cost 14% of
/// the bandwidth at 4096 x 11008. prefetch_tile_weights takes it for a persistent program's tiles (all of a tile's
/// rows).
constexpr long long kWholePrefetchBytes = 24LL << 20;
/// kWholePrefetchBytes for the tensor-core path's kernels (prefetch_tile_weights with a GridPlace: a block's tile of
/// rows): at 24 MiB, TinyLlama's down projection (22 MiB) cost its 8-row step 1 % (H200, 2026-12-01: 1047-1049 ->
/// 1036-1037 us at 16 MiB; at 8 MiB 1038-1039, and Qwen3-30B-A3B's 8-row step 2671-2675 -> 2688-2691;
/// docs/decode_performance.md).
constexpr long long kWholeTilePrefetchBytes = 16LL << 20;

/// The start of every kernel here. Launched early (LaunchConfig::early_launch), the kernel arrives while the
/// kernel before it is finishing: it asks for the rest of its block's first-pass rows to be brought into L2 when the
/// kernel's weights fit kWholePrefetchBytes (weights are never written by earlier work), and lets the next kernel
/// launch early in turn. The rows of later passes (a one-vector grid is capped at kOneVectorGemvBlocks a
/// multiprocessor, Q/K/V's at kOneVectorQkvBlocks, so a block may take several) are not asked for: asked of L2 at the
/// start, they queue ahead of the loads of the first pass and of the kernel before (H200, 2026-12-01: TinyLlama shape's
/// one-row step 829 -> 792 us, docs/decode_performance.md). gemv_rows then loads the first step's weights into
/// registers and only then waits for the earlier work (wait_for_prior_grids), whose results (x, the output) it may
/// touch from there on. The lines of that first step are not asked of L2 here as well: a request for them just before
/// the loads only doubles what the memory serves (rows of up to 2048 columns are one step, so for most kernels of a
/// decode step, and the LM head, that was every byte; H200, 2026-11-30: Llama-3.2-1B shape's step 891 -> 835 us without
/// them, docs/decode_performance.md). The quantized kernels found the same (start_quantized, qgemv_core.cuh).
/// `skip_loaded` false: the first step's lines too, for a caller that does not load them right after (they stay in L2
/// until it does).
template <class W>
__device__ __forceinline__ void prefetch_weights(const W& w, int rows, int cols, bool skip_loaded = true) {
  using T = typename W::Element;
  constexpr int M = W::count;
  const bool whole = static_cast<long long>(rows) * cols * M * static_cast<long long>(sizeof(T)) <= kWholePrefetchBytes;
  constexpr int chunks_per_line = 8;  // 16-byte chunks per 128-byte line
  const int first_step_chunks = min(cols / 8, 32 * static_cast<int>(blockDim.y) * loads_per_matrix(M));
  const int row_lines = ((whole ? cols / 8 : first_step_chunks) + chunks_per_line - 1) / chunks_per_line;
  // The lines of the first pass's first step, which gemv_rows loads into registers right after this: not asked for
  // twice (all of a row's lines where the row is one step, its last one partial or not).
  const int loaded_lines = !skip_loaded                    ? 0
                           : first_step_chunks == cols / 8 ? (first_step_chunks + chunks_per_line - 1) / chunks_per_line
                                                           : first_step_chunks / chunks_per_line;
  const int threads = blockDim.x * blockDim.y * blockDim.z;
  const int tid = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  // The rows of the block's first pass (gemv_rows walks the rows grid-stride): whole, else nothing past the first step
  // (so nothing at all when skip_loaded).
  const int row0 = static_cast<int>(blockIdx.x * blockDim.z);
  const int block_rows = min(static_cast<int>(blockDim.z), rows - row0);
  const int lines = row_lines - loaded_lines;
  for (int i = tid; i < block_rows * lines; i += threads) {
    const int row = row0 + i / lines;
    const int line = loaded_lines + i % lines;
#pragma unroll
    for (int m = 0; m < M; ++m) lg::prefetch_l2(w.row(m, row) + 8LL * chunks_per_line * line);
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

/// No loads right after the wait (gemv_rows' and gemv_rows_mma's default).
struct NoPreload {
  __device__ __forceinline__ void operator()(int /*row*/, int /*vector*/) const {}
};

/// The fp32 row loop: finish(row, acc) once per row, from lane 0 of the row's first warp. preload(row, b), for
/// b < batch, from that thread right after its wait for earlier work, for its first row: what finish will read of
/// the output can be loaded there, its memory latency hidden behind the dot products instead of following them.
template <int B, class W, class X, class Finish, class Epilogue = NoEpilogue, class Preload = NoPreload>
__device__ __forceinline__ void gemv_rows(const W& w, const X& x, int rows, int cols, int batch, float eps,
                                          Finish finish, Epilogue epilogue = {}, Preload preload = {}) {
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
          if (warp_in_group == 0 && lane == 0) {
            for (int b = 0; b < batch; ++b) preload(row, b);
          }
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

// ---- The tensor-core path (the kernels' _mma variants, batches of 1 to 8) ----
//
// One mma.sync.m16n8k16 multiplies 16 columns of 8 weight rows with 8 vectors (its M is the batch, 8 of its 16
// rows used; its N is the weight rows), so a batch of 8 costs the tensor cores what a batch of 1 does and the step
// stays bound by reading the weights. A block takes 8 rows at a time (a tile; tiles go to blocks grid-stride),
// and its warps share out the tile's columns in steps of 32: in a step, lane (g = lane / 4, t = lane % 4) loads
// the 16 bytes at columns 8t .. 8t + 7 of row g of the tile and of vector g (the last vector again past the
// batch). Those 8 columns feed two mmas, elements 0-3 the first and 4-7 the second: weights and x have their k
// positions permuted alike, which a dot product does not see. So each lane loads 16 bytes of weights per 16 bytes
// of x, as the fp32 path does for one vector, and a tile has the fp32 path's 8 rows per block. Partial tiles of
// the warps are added through shared memory in warp order, so results do not depend on timing; a vector's result
// does not depend on the other vectors of the batch either (each is its own mma row), but it is not the fp32
// path's bit pattern: the tensor cores sum each group of 16 products their own way.

/// Weight rows per tile of the tensor-core path (an mma's N).
constexpr int kMmaRows = 8;
/// The batch parameter B of the gemv-family bodies (gemv.cu, qkv.cu) that selects the tensor-core path (their _mma
/// entry points and tile functions) instead of the fp32 path for up to B vectors.
constexpr int kTensorCores = 0;
/// 32-column steps each warp of the tensor-core path keeps in flight for kernels of `matrices` weights: 8
/// 16-byte weight loads per lane, as the fp32 path.
constexpr int mma_steps(int matrices) { return 8 / matrices; }

/// c += a * b for one m16n8k16 tile: a is 16 x 16 of T (row-major fragment), b 16 x 8 (column-major), c fp32.
__device__ __forceinline__ void mma_16816(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1,
                                          lg::half_t /*type*/) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();
#endif
}
__device__ __forceinline__ void mma_16816(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1,
                                          lg::bf16_t /*type*/) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();
#endif
}

/// prefetch_weights for the tensor-core path: the rows of this block's tiles when the kernel's weights fit
/// kWholeTilePrefetchBytes (a persistent program's tiles, measured with it, kWholePrefetchBytes), less the first
/// tile's first steps (which gemv_rows_mma loads at once), then lets the next kernel launch early.
/// `skip_loaded` false: the first tile's first steps too (the persistent backend's NAME_prefetch companions ask for a
/// tile that runs later).
template <class W, class Place = lg::GridPlace>
__device__ __forceinline__ void prefetch_tile_weights(const W& w, int rows, int cols, Place place = {},
                                                      bool skip_loaded = true) {
  using T = typename W::Element;
  constexpr int M = W::count;
  const int threads = blockDim.x * blockDim.y * blockDim.z;
  const int tid = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  const long long whole_bytes = lg::kIsGridPlace<Place> ? kWholeTilePrefetchBytes : kWholePrefetchBytes;
  const bool whole = static_cast<long long>(rows) * cols * M * static_cast<long long>(sizeof(T)) <= whole_bytes;
  constexpr int chunks_per_line = 8;
  const int first_chunks = min(cols / 8, (threads / 32) * mma_steps(M) * 4);
  const int row_lines = ((whole ? cols / 8 : first_chunks) + chunks_per_line - 1) / chunks_per_line;
  // The first tile's first steps, which gemv_rows_mma loads right after this (a whole short row, its partial line too).
  const int loaded_lines = !skip_loaded               ? 0
                           : first_chunks == cols / 8 ? (first_chunks + chunks_per_line - 1) / chunks_per_line
                                                      : first_chunks / chunks_per_line;
  const int tiles = (rows + kMmaRows - 1) / kMmaRows;
  for (int tile = place.block(); tile < tiles; tile += place.blocks()) {
    const int tile_rows = min(kMmaRows, rows - tile * kMmaRows);
    const int skip = tile == static_cast<int>(place.block()) ? loaded_lines : 0;
    const int lines = row_lines - skip;
    for (int i = tid; i < tile_rows * lines; i += threads) {
      const int row = tile * kMmaRows + i / lines;
#pragma unroll
      for (int m = 0; m < M; ++m) lg::prefetch_l2(w.row(m, row) + 8LL * chunks_per_line * (skip + i % lines));
    }
    if (!whole) break;
  }
  place.allow_next();
}

/// The tensor-core row loop: finish(row, b, v) once per row and vector b < batch, v[m] the result of weight m,
/// each call from its own thread. Any block of 1 to 8 warps and any grid work; `place` says which tiles of 8 rows
/// are this block's and how it waits (a kernel's grid, or a persistent program's tile, lg::TilePlace): every thread
/// calls place.wait() exactly once, after its first step's weight loads. preload(row, b) as in gemv_rows, from
/// the thread that finishes (row, b) of its block's first tile, right after its wait. epilogue(first_row), as in
/// gemv_rows: every thread, after every finish of the tile.
/// U: 32-column steps in flight per warp (mma_steps).
/// Rolling: each step's registers take the next pass's weights (this tile's, else the block's next tile's first
/// pass) as soon as the step's products are issued, so that a warp's loads do not stop at a pass's or a tile's end;
/// without it, a pass loads its weights at its start. Same bits either way. rows_of rolls on a kernel's grid: on an
/// H200 the 8-row decode step of the Qwen3-30B-A3B shape is 1.7 % faster with it, the dense 1B shapes' 0.4-0.6 %;
/// rolling in qkv_rope_append_mma made them 3 % slower (more registers, fewer blocks resident), in the expert
/// kernels no faster, and rolling only within a tile slower too.
template <int U, bool Rolling = false, class W, class X, class Finish, class Preload = NoPreload,
          class Epilogue = NoEpilogue, class Place = lg::GridPlace>
__device__ __forceinline__ void gemv_rows_mma(const W& w, const X& x, int rows, int cols, int batch, float eps,
                                              Finish finish, Preload preload = {}, Epilogue epilogue = {},
                                              Place place = {}) {
  using T = typename W::Element;
  constexpr int M = W::count;
  // Two buffers of partials where no epilogue reads them: tile i's are read (by the finishing threads) while tile
  // i + 1's are written to the other buffer, so one barrier a tile orders them (8-row dense steps 0.6-2.2 % faster
  // on an H200 than with a second barrier). A persistent program's tiles keep one buffer and both barriers.
  constexpr bool kTwoBuffers = lg::kIsGridPlace<Place> && !has_epilogue<Epilogue>::value;
  constexpr int kBuffers = kTwoBuffers ? 2 : 1;
  __shared__ float tile_part[kBuffers][8][M][kMmaRows][8];  // [buffer][warp][matrix][row][vector]
  __shared__ float square_part[kBuffers][8][8];             // [buffer][warp][vector]

  const int tid = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  const int warps = (blockDim.x * blockDim.y * blockDim.z) / 32;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int vector = min(g, batch - 1);
  const int chunks = cols / 8;
  const int steps = (chunks + 3) / 4;
  const int tiles = (rows + kMmaRows - 1) / kMmaRows;
  bool waited = false;
  const auto wait = [&](int tile) {  // once; then the preload of the (row, vector) this thread finishes first
    place.wait();
    waited = true;
    const int out_row = tile * kMmaRows + tid / 8;
    if (tid < kMmaRows * 8 && tid % 8 < batch && out_row < rows) preload(out_row, tid % 8);
  };
  // A pass's weights: U steps of 32 columns from step s0 on, for the row of tile `tile` this lane reads. A warp's
  // step is 64 bytes of each of its tile's 8 rows, and the block's warps take a row's steps in turn; each load asks
  // L2 for the aligned 256 bytes around it, four warps' steps (H200, 8-row steps on tensor cores, alternated in one
  // run: TinyLlama shape 954.9-956.1 -> 934.9-935.0 us, Llama-3.2-1B 954.2-955.7 -> 930.4-931.8, Qwen3-30B-A3B 12
  // layers 2559.6-2560.0 -> 2513.0-2535.1; the same bits).
  lg::Pack8<T> wv[M][U];
  const auto load_step = [&](int tile, int s0, int u) {
    const int row = min(tile * kMmaRows + g, rows - 1);
    const int chunk = min((s0 + u * warps) * 4 + t, chunks - 1);
#pragma unroll
    for (int m = 0; m < M; ++m) wv[m][u] = lg::load8_streaming<256>(w.row(m, row) + 8LL * chunk);
  };
  if (Rolling && place.block() < tiles) {
#pragma unroll
    for (int u = 0; u < U; ++u) load_step(place.block(), warp, u);
  }

  int buffer = 0;
  for (int tile = place.block(); tile < tiles; tile += place.blocks()) {  // uniform over the block
    float c[M][4];
#pragma unroll
    for (int m = 0; m < M; ++m) c[m][0] = c[m][1] = c[m][2] = c[m][3] = 0.0f;
    float sq = 0.0f;

    // Every warp runs the first pass, a warp without steps on the row's last chunk (its products are zeros, as
    // below), so that every warp calls wait() at this one place: in a persistent program it holds a __syncthreads,
    // which the whole block must reach at the same barrier (synccheck: "divergent threads in block" when warps
    // without steps waited after the loop).
    for (int s0 = warp; s0 < steps || s0 == warp; s0 += warps * U) {  // uniform over the warp, as mma.sync requires
      // Rolling: this pass's weights were loaded during the pass before (or before the loop).
      const bool last_pass = s0 + warps * U >= steps;
      const int next_tile = last_pass ? tile + place.blocks() : tile;
      const int next_s0 = last_pass ? warp : s0 + warps * U;
      if (!Rolling) {
#pragma unroll
        for (int u = 0; u < U; ++u) load_step(tile, s0, u);
      }
      if (!waited) wait(tile);  // the first step's weights are in flight before the wait, as in gemv_rows
      typename X::Raw xr[U];
#pragma unroll
      for (int u = 0; u < U; ++u) xr[u] = x.load(vector, min((s0 + u * warps) * 4 + t, chunks - 1));
#pragma unroll
      for (int u = 0; u < U; ++u) {
        // A chunk past the row's end (the last step of a row whose length is not a multiple of 32, or a step past
        // the last) was loaded again from the last chunk; both operands become zeros, so it adds nothing.
        const bool inside = (s0 + u * warps) * 4 + t < chunks;
        if (!inside) xr[u].x.raw = make_uint4(0, 0, 0, 0);  // x * g and x^2 zeros too
        const uint4 a = X::fragment(xr[u]);
        if constexpr (X::sum_squares) sq += squares8(xr[u].x);
        const unsigned first[4] = {a.x, 0U, a.y, 0U};  // rows 8-15 of the mma's M: no vectors
        const unsigned second[4] = {a.z, 0U, a.w, 0U};
#pragma unroll
        for (int m = 0; m < M; ++m) {
          const uint4 b = inside ? wv[m][u].raw : make_uint4(0, 0, 0, 0);
          mma_16816(c[m], first, b.x, b.y, T{});
          mma_16816(c[m], second, b.z, b.w, T{});
        }
        if (Rolling && next_tile < tiles) load_step(next_tile, next_s0, u);
      }
    }

    // c[m][0], c[m][1]: vector g, rows 2t and 2t + 1 of the tile (c[m][2], c[m][3] belong to the unused vectors
    // 8-15). The sum of squares of vector g: add the 4 lanes.
    sq += __shfl_xor_sync(0xffffffffu, sq, 1);
    sq += __shfl_xor_sync(0xffffffffu, sq, 2);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      tile_part[buffer][warp][m][2 * t][g] = c[m][0];
      tile_part[buffer][warp][m][2 * t + 1][g] = c[m][1];
    }
    if (t == 0) square_part[buffer][warp][g] = sq;
    __syncthreads();
    // The warps' partials added (in warp order) and scaled, and stored: a (row, vector) per thread.
    for (int i = tid; i < kMmaRows * 8; i += 32 * warps) {
      const int r = i / 8;
      const int b = i % 8;
      const int out_row = tile * kMmaRows + r;
      if (b >= batch || out_row >= rows) continue;
      // Sums from the first warp's (as qgemv_tiles_loop's squares): from 0, the compiler computed the result of no
      // warps before the tile loop in every thread. The same bits: neither a sum of squares nor an mma's sum started
      // from +0 is ever -0, so 0 + s is s.
      float scale = 1.0f;
      if (X::sum_squares) {
        float squares = square_part[buffer][0][b];
        for (int k = 1; k < warps; ++k) squares += square_part[buffer][k][b];
        scale = 1.0f / sqrtf(squares / static_cast<float>(cols) + eps);
      }
      float v[M];
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float sum = tile_part[buffer][0][m][r][b];
        for (int k = 1; k < warps; ++k) sum += tile_part[buffer][k][m][r][b];
        v[m] = sum * scale;
      }
      finish(out_row, b, v);
    }
    if constexpr (has_epilogue<Epilogue>::value) {
      __syncthreads();
      epilogue(tile * kMmaRows);
    }
    if constexpr (kTwoBuffers) {
      // The next tile writes the other buffer; the one after it this one again, past the next tile's barrier,
      // which every thread reaches only after its reads of this tile.
      buffer ^= 1;
    } else {
      __syncthreads();  // the partials (and what the epilogue read) are read before the next tile overwrites them
    }
  }
}

/// The most vectors a body compiled for B takes.
constexpr int max_batch(int b) { return b == kTensorCores ? 8 : b; }

// ---- One body for both paths ----

/// Prefetch and row loop of the fp32 path for up to B vectors, or of the tensor-core path for B = kTensorCores.
/// finish(row, b, v) stores vector b's results of `row`, v[m] for weight m; preload(row, b) runs in the thread that
/// will finish (row, b), right after its wait (gemv_rows).
template <int B, class W, class X, class Finish, class Preload = NoPreload, class Place = lg::GridPlace>
__device__ __forceinline__ void rows_of(const W& w, const X& x, int rows, int cols, int batch, float eps, Finish finish,
                                        Preload preload = {}, Place place = {}) {
  if constexpr (B == kTensorCores) {
    prefetch_tile_weights(w, rows, cols, place);
    gemv_rows_mma<mma_steps(W::count), lg::kIsGridPlace<Place>>(w, x, rows, cols, batch, eps, finish, preload,
                                                                NoEpilogue{}, place);
  } else {
    static_assert(lg::kIsGridPlace<Place>, "tile functions take the tensor-core path");
    prefetch_weights(w, rows, cols);
    gemv_rows<B>(
        w, x, rows, cols, batch, eps,
        [&](int row, const float(&acc)[W::count][B]) {
          for (int b = 0; b < batch; ++b) {
            float v[W::count];
#pragma unroll
            for (int m = 0; m < W::count; ++m) v[m] = acc[m][b];
            finish(row, b, v);
          }
        },
        NoEpilogue{}, preload);
  }
}

}  // namespace lg::nn
