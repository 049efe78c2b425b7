// Matrix-vector products over fp16 or bf16 row-major weights, fp32 accumulation: out[b][r] = sum_c W[r][c] * x[b][c]
// for each of `batch` vectors (1 to 8). Decode is bound by reading the weights once, so these kernels stream W at HBM
// speed and multiply every weight chunk they load with all the batch's vectors: a step of 8 sequences reads the
// weights once, not 8 times.
//
// Kernels (all pointers fp16 unless int; W is rows x cols, x is [batch][cols], outputs are [batch][rows]; the
// kernels named NAME_bf16 take bf16 pointers instead, for gemv, gemv_add, rms_norm_gemv and rms_norm_gemv_swiglu):
//   gemv(W, x, out, rows, cols, batch)                         out = W x
//   gemv_add(W, x, out, rows, cols, batch)                     out += W x        (residual add fused, one rounding)
//   gemv_dual(W1, W3, x, out1, out3, rows, cols, batch)        out1 = W1 x, out3 = W3 x    (two weights, one x)
//   gemv_swiglu(W1, W3, x, out, rows, cols, batch)             out = silu(W1 x) * (W3 x)   (SwiGLU's first half)
//   rms_norm_gemv(W, x, g, out, rows, cols, eps, batch)        out = W (x / rms(x) * g)
//   rms_norm_gemv_swiglu(W1, W3, x, g, out, rows, cols, eps, batch)   out = silu(W1 h) * (W3 h), h = x / rms(x) * g
//   rms_norm_gemv_geglu(W1, W3, x, g, out, rows, cols, eps, batch)    out = gelu_tanh(W1 h) * (W3 h), the same h
//   rms_norm_store_gemv(W, x, g, h, out, rows, cols, eps)      h = T(x / rms(x) * g), out = W h    (one vector)
// where rms(x) = sqrt(mean(x^2) + eps), per vector. rms_norm_store_gemv is kernels/nn/rms_norm.cu's rms_norm and gemv
// in one launch, with their bits: every block norms x as rms_norm does with 256 threads (h rounded to T), into shared
// memory, block 0 also into h for later kernels (a mixture of experts' router and expert kernels read the same h),
// then runs gemv's one-vector row loop over it; launch: fp32_gemv_config's blocks (256 threads, K as gemv's for the
// same shape, which fixes the row sums' bits) with cols * sizeof(T) bytes of dynamic shared memory. Before its wait
// each warp loads its row into registers where the row is one step of the loop (one warp a row, cols at most 2048:
// a mixture of experts' router at d 2048); other shapes prefetch their weights into L2 and load them after the norm. On
// the fp32 path (below) each vector's result is bit-for-bit what a batch of 1 gives for it (the same loads, in the same
// order, feed the same fp32 chains), so a prompt processed 8 tokens at a time and one token at a time agree exactly.
//
// Every kernel but rms_norm_store_gemv (one fp32 one-vector variant) has a tensor-core variant, NAME_mma
// (NAME_bf16_mma), for 1 to 8 vectors: mma.sync m16n8k16 with
// the batch as the mma's M and 8 weight rows as its N, so 8 vectors cost what one does (H100, SwiGLU MLP chains:
// batch 8 at 1.05-1.12x batch 1, against 1.9-2.5x on the fp32 variants). Its results differ from the fp32 path's
// within rounding (the tensor cores sum 16 products their own way; h = x * g is rounded to the element type), but
// not between batch sizes: a vector gets the same bits whatever else its batch holds. gemv_core.cuh
// (gemv_rows_mma) has the layout; launch: any block of 1 to 8 warps, tiles of 8 rows taken by the blocks in turn
// (Kernels::tensor_core_gemv_config: grid ceil(rows / 8), or one wave by nn::tensor_core_gemv_blocks; block (32, 4 or
// 8, 1) by nn::tensor_core_gemv_warps); any grid works.
//
// Every kernel (but rms_norm_store_gemv) also comes in four fp32 variants compiled for a batch of up to 1, 2, 4 and 8
// vectors: NAME, NAME_b2, NAME_b4, NAME_b8 (NAME_bf16, NAME_bf16_b2, ... for bf16; nn::BatchedKernel picks the smallest
// that holds the batch, or NAME_mma for batches of 2 to 8 when asked for tensor cores). Separate kernels, so each gets
// the registers its batch needs: one kernel holding every batch size ran a batch of one 18-40 % slower (H100), its
// register allocation and spills sized for eight vectors. A variant runs any batch up to its size; the loads of vectors
// past `batch` re-read the last one and their results are dropped. The fused variants keep h in fp32 (they do not round
// it to fp16, so they are slightly more accurate than rms_norm followed by gemv) and apply 1/rms(x) to the fp32 dot
// product.
//
// Requirements (a kernel traps on a violation, which the next synchronisation reports as a launch failure):
// cols is a multiple of 8, batch is 1 to 8, and W, W1, W3, x, g are 16-byte aligned (so is every row), because
// every load is a 16-byte vector of 8 elements. Outputs have no alignment requirement (rms_norm_store_gemv's h
// excepted: 16-byte aligned). `out` must not alias W, x or g.
//
// Launch (fp32 variants): block (32, K, R) with K * R <= 8 (4 for the one-vector rms_norm_gemv). The kernels declare
// __launch_bounds__ of 256 threads (rms_norm_gemv's one-vector variant: 128) and 2, 3 or 6 blocks a multiprocessor
// (the table below): left to itself, ptxas 13 gave them 32 registers, too few to
// keep a thread's loads in flight; the bound lets it use up to 128 (80). A group of K
// warps computes one row at a time (warp k takes the row's 16-byte chunks k*32+lane, stepping by 32*K), R groups per
// block. Rows go to groups grid-stride, so any grid works; grid.x = ceil(rows / R) gives each group one row (the
// library caps the one-vector kernels' grids at 2 blocks a multiprocessor: fp32_gemv_config). The one-vector
// rms_norm_gemv is the exception: blocks of at most 128 threads (K * R <= 4), 6 a multiprocessor. No dynamic
// shared memory (rms_norm_store_gemv: cols * sizeof(T) bytes, and K * R = 8). Suggested (measured by bench_gemv on an
// H200): K = 1, R = 8 for rows of up to 4096 columns, K = 2, R = 4 for longer rows (half those R for the one-vector
// rms_norm_gemv); grid ceil(rows / R).
// nn::BasicKernels::gemv_config (include/lazygraph/nn/kernels.hpp) picks K and R per shape from a later, finer sweep.
//
// Why no split-K across blocks: each lane issues 8 independent 16-byte weight loads (4 per matrix in the two-
// matrix kernels) before it uses any, so a warp has 4 KB in flight and a group of K warps covers 4K KB of a row
// in one memory round trip; a 1536-column row (3 KB) is a single round trip for one warp. Small shapes are thus
// already bound by one memory latency plus the launch, which split-K cannot shorten, while it would cost a
// second pass or atomics and make results depend on block order. Spreading a row over K warps of one block
// (reduced through shared memory, deterministic) is the split-K this file offers.
//
// Early launch (LaunchConfig::early_launch): every kernel here may be launched early. It then prefetches its weights
// into L2 while the kernel before it finishes (its block's first-pass rows, whole when the kernel's weights are at
// most 24 MiB, 16 MiB on tensor cores, else nothing past the first step), loads the first step's weights into
// registers, and only then waits for that kernel before touching x, g or the output. In a chain of decode-step
// kernels this hides most of each launch's latency.
//
// RMSNorm (rms_norm_gemv*): the sum of x^2 is accumulated from the same x chunks as the dot products (no second
// pass over x, no block-wide reduction before the weights are used), and 1/rms scales the fp32 dot products.
//
// x (and g) are read with ordinary cached loads: they are small and every row reads them, so they stay in L1,
// while the weights bypass L1 (they are read once).
#include "lazygraph/nn/gemv_core.cuh"
#include "lazygraph/nn/rms_norm.cuh"

namespace {

using namespace lg::nn;

template <class T>
__device__ __forceinline__ T& at(T* out, int rows, int row, int b) {
  return out[static_cast<long long>(b) * rows + row];
}

template <int B, class T, class Place = lg::GridPlace>
__device__ __forceinline__ void gemv_body(const T* W, const T* x, T* out, int rows, int cols, int batch,
                                          Place place = {}) {
  if (!shapes_supported(cols, batch, W, x, x) || batch > max_batch(B)) __trap();
  const Matrices<1, T> w{{W}, cols};
  rows_of<B>(
      w, PlainX<T>{x, cols}, rows, cols, batch, 0.0f,
      [&](int row, int b, const float* v) { at(out, rows, row, b) = lg::from_float<T>(v[0]); }, NoPreload{}, place);
}

template <int B, class T, class Place = lg::GridPlace>
__device__ __forceinline__ void gemv_add_body(const T* W, const T* x, T* out, int rows, int cols, int batch,
                                              Place place = {}) {
  if (!shapes_supported(cols, batch, W, x, x) || batch > max_batch(B)) __trap();
  const Matrices<1, T> w{{W}, cols};
  // The residual of the first (row, vector) this thread adds to, read right after the wait: its latency overlaps the
  // dot products instead of following them (the same value, so the same bits). One value, so that it stays in a
  // register; not for the fp32 variants of 2 to 8 vectors, whose registers are full (it made them spill).
  float residual = 0.0f;
  int residual_row = -1;
  int residual_vector = -1;
  const auto finish = [&](int row, int b, const float* v) {
    T& o = at(out, rows, row, b);
    const bool early = row == residual_row && b == residual_vector;
    o = lg::from_float<T>((early ? residual : lg::to_float(o)) + v[0]);
  };
  const auto preload = [&](int row, int b) {
    if (residual_row >= 0) return;
    residual = lg::to_float(at(out, rows, row, b));
    residual_row = row;
    residual_vector = b;
  };
  if constexpr (B == 1 || B == kTensorCores) {
    rows_of<B>(w, PlainX<T>{x, cols}, rows, cols, batch, 0.0f, finish, preload, place);
  } else {
    rows_of<B>(w, PlainX<T>{x, cols}, rows, cols, batch, 0.0f, finish);
  }
}

template <int B, class T>
__device__ __forceinline__ void gemv_dual_body(const T* W1, const T* W3, const T* x, T* out1, T* out3, int rows,
                                               int cols, int batch) {
  if (!shapes_supported(cols, batch, W1, W3, x) || batch > max_batch(B)) __trap();
  const Matrices<2, T> w{{W1, W3}, cols};
  rows_of<B>(w, PlainX<T>{x, cols}, rows, cols, batch, 0.0f, [&](int row, int b, const float* v) {
    at(out1, rows, row, b) = lg::from_float<T>(v[0]);
    at(out3, rows, row, b) = lg::from_float<T>(v[1]);
  });
}

template <int B, class T>
__device__ __forceinline__ void gemv_swiglu_body(const T* W1, const T* W3, const T* x, T* out, int rows, int cols,
                                                 int batch) {
  if (!shapes_supported(cols, batch, W1, W3, x) || batch > max_batch(B)) __trap();
  const Matrices<2, T> w{{W1, W3}, cols};
  rows_of<B>(w, PlainX<T>{x, cols}, rows, cols, batch, 0.0f,
             [&](int row, int b, const float* v) { at(out, rows, row, b) = lg::from_float<T>(silu(v[0]) * v[1]); });
}

template <int B, class T, class Place = lg::GridPlace>
__device__ __forceinline__ void rms_norm_gemv_body(const T* W, const T* x, const T* g, T* out, int rows, int cols,
                                                   float eps, int batch, Place place = {}) {
  if (!shapes_supported(cols, batch, W, x, g) || batch > max_batch(B)) __trap();
  const Matrices<1, T> w{{W}, cols};
  rows_of<B>(
      w, GainedX<T>{x, g, cols}, rows, cols, batch, eps,
      [&](int row, int b, const float* v) { at(out, rows, row, b) = lg::from_float<T>(v[0]); }, NoPreload{}, place);
}

template <int B, bool Gelu, class T, class Place = lg::GridPlace>
__device__ __forceinline__ void rms_norm_gemv_swiglu_body(const T* W1, const T* W3, const T* x, const T* g, T* out,
                                                          int rows, int cols, float eps, int batch, Place place = {}) {
  if (!shapes_supported(cols, batch, W1, W3, x) || !lg::is_aligned16(g) || batch > max_batch(B)) __trap();
  const Matrices<2, T> w{{W1, W3}, cols};
  rows_of<B>(
      w, GainedX<T>{x, g, cols}, rows, cols, batch, eps,
      [&](int row, int b, const float* v) { at(out, rows, row, b) = lg::from_float<T>(gate<Gelu>(v[0]) * v[1]); },
      NoPreload{}, place);
}

/// rms_norm_store_gemv's threads per block: rms_norm's (the sum of squares' bits depend on the thread count).
constexpr unsigned kNormStoreThreads = 256;

template <class T>
__device__ __forceinline__ void rms_norm_store_gemv_body(const T* W, const T* x, const T* g, T* h, T* out, int rows,
                                                         int cols, float eps) {
  extern __shared__ __align__(16) unsigned char normed_bytes[];
  T* const normed = reinterpret_cast<T*>(normed_bytes);
  unsigned shared_bytes = 0;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(shared_bytes));
  if (!shapes_supported(cols, 1, W, x, g) || !lg::is_aligned16(h) ||
      static_cast<long long>(cols) * static_cast<long long>(sizeof(T)) > shared_bytes ||
      blockDim.x * blockDim.y * blockDim.z != kNormStoreThreads) {
    __trap();
  }
  const Matrices<1, T> w{{W}, cols};
  // Where a warp's whole row is one step of gemv_rows' loads (a warp a row, at most 32 * 8 chunks) and the grid takes
  // every row in one pass, each warp loads its row into registers before the wait and runs that step's chain itself
  // (the same loads and order, so the same bits); else the weights are prefetched into L2 and gemv_rows runs.
  constexpr int kSteps = loads_per_matrix(1);
  const int chunks = cols / 8;
  const bool in_registers = blockDim.y == 1 && chunks <= 32 * kSteps &&
                            static_cast<long long>(gridDim.x) * blockDim.z >= static_cast<long long>(rows);
  const int row = static_cast<int>(blockIdx.x * blockDim.z + threadIdx.z);
  const int lane = static_cast<int>(threadIdx.x);
  lg::Pack8<T> wv[kSteps];
  if (in_registers) {
    if (row < rows) {
#pragma unroll
      for (int u = 0; u < kSteps; ++u)
        wv[u] = lg::load8_streaming(w.row(0, row) + 8LL * min(lane + 32 * u, chunks - 1));
    }
    lg::allow_dependent_launch();
  } else {
    // The first pass's rows, first step included (the loads follow the norm); and lets the next kernel launch.
    prefetch_weights(w, rows, cols, false);
  }
  lg::wait_for_prior_grids();
  // rms_norm's h, into shared memory (every block) and h (block 0's copy, for the kernels after this one).
  store_normed(x, g, normed, cols, inverse_rms(x, cols, eps));
  __syncthreads();
  if (blockIdx.x == 0) {
    for (int c = linear_thread(); c < chunks; c += kNormStoreThreads) {
      *reinterpret_cast<uint4*>(h + 8LL * c) = *reinterpret_cast<const uint4*>(normed + 8LL * c);
    }
  }
  if (!in_registers) {
    gemv_rows<1>(w, PlainX<T>{normed, cols}, rows, cols, 1, 0.0f,
                 [&](int r, const float(&acc)[1][1]) { out[r] = lg::from_float<T>(acc[0][0]); });
    return;
  }
  if (row >= rows) return;  // uniform over the warp
  // gemv_rows' chain for one step: each chunk's 8 products as an fma chain, added in order, then the warp's sum.
  float acc = 0.0f;
#pragma unroll
  for (int u = 0; u < kSteps; ++u) {
    const int at = lane + 32 * u;
    float wf[8];
    float xf[8];
    lg::unpack8(wv[u], wf);
    lg::unpack8(lg::load8(normed + 8LL * min(at, chunks - 1)), xf);
    float dot = wf[0] * xf[0];
#pragma unroll
    for (int i = 1; i < 8; ++i) dot = fmaf(wf[i], xf[i], dot);
    acc += at < chunks ? dot : 0.0f;
  }
  acc = lg::warp_sum(acc);
  if (lane == 0) out[row] = lg::from_float<T>(acc * 1.0f);
}

}  // namespace

// The entry points: src/kernel_variants.py writes out one extern "C" kernel per combination of the axes a kernel names
// when the kernel set is embedded, named by the values' suffixes in order (gemv, gemv_b2, gemv_b4, gemv_b8, gemv_mma,
// gemv_bf16, gemv_bf16_b2, ...); NVRTC and the host's signature reader see those. A new element format is one more
// value of T. __launch_bounds__: the one-vector variants 2 blocks of 256 threads a multiprocessor (93-122 registers),
// launched at most 2 a multiprocessor (nn::kOneVectorGemvBlocks; BasicKernels::fp32_gemv_config says why: no block of
// the next projection fits beside them), but rms_norm_gemv's 6 of 128 threads (80 registers; what that measured:
// nn::kOneVectorNormGemvBlocks); the batch-2 variants 3 (up to 80 registers; rms_norm_gemv_b2 2, 128: it spills 92
// bytes at 3); the batch-4 and batch-8 variants hold 4 and 8 accumulators per row and matrix, so they get 2 blocks
// (up to 128 registers) to keep them out of local memory.
/* lazygraph:variants
axis T = lg::half_t | lg::bf16_t _bf16
axis B = 1 (256, 2) | 2 _b2 (256, 3) | 4 _b4 (256, 2) | 8 _b8 (256, 2) | kTensorCores _mma (256, 2)

gemv[T][B] = gemv_body<B>(const T* W, const T* x, T* out, int rows, int cols, int batch)
gemv_add[T][B] = gemv_add_body<B>(const T* W, const T* x, T* out, int rows, int cols, int batch)
gemv_dual[T: lg::half_t][B] =
    gemv_dual_body<B>(const T* W1, const T* W3, const T* x, T* out1, T* out3, int rows, int cols, int batch)
gemv_swiglu[T: lg::half_t][B] =
    gemv_swiglu_body<B>(const T* W1, const T* W3, const T* x, T* out, int rows, int cols, int batch)
rms_norm_gemv[T][B: 1] __launch_bounds__(128, 6) =
    rms_norm_gemv_body<B>(const T* W, const T* x, const T* g, T* out, int rows, int cols, float eps, int batch)
rms_norm_gemv[T][B: 2, 4, 8, kTensorCores] __launch_bounds__(256, 2) =
    rms_norm_gemv_body<B>(const T* W, const T* x, const T* g, T* out, int rows, int cols, float eps, int batch)
rms_norm_store_gemv[T] __launch_bounds__(256, 2) = rms_norm_store_gemv_body<T>(const T* W, const T* x, const T* g,
    T* h, T* out, int rows, int cols, float eps)
rms_norm_gemv_swiglu[T][B] = rms_norm_gemv_swiglu_body<B, false>(const T* W1, const T* W3, const T* x, const T* g,
    T* out, int rows, int cols, float eps, int batch)
rms_norm_gemv_geglu[T][B] = rms_norm_gemv_swiglu_body<B, true>(const T* W1, const T* W3, const T* x, const T* g,
    T* out, int rows, int cols, float eps, int batch)
*/

// Tile functions (kernels/include/lazygraph/tile.cuh) of the tensor-core variants, fp16, for persistent programs
// (include/lazygraph/kernels/persistent_program.hpp): the kernels' own code, a program tile taking the place of a
// block. A call takes ceil(rows / 8) tiles (one tile of 8 rows each) on blocks of 1 to 8 warps. Each has a
// NAME_prefetch companion, which asks L2 for the tile's weights (whole rows when the call's weights are at most
// kWholePrefetchBytes, else the first steps' columns), first steps included: the tile runs later.
extern "C" __device__ void gemv_mma_tile(lg::Tile tile, const lg::half_t* W, const lg::half_t* x, lg::half_t* out,
                                         int rows, int cols, int batch) {
  gemv_body<kTensorCores>(W, x, out, rows, cols, batch, lg::TilePlace{tile});
}
extern "C" __device__ void gemv_add_mma_tile(lg::Tile tile, const lg::half_t* W, const lg::half_t* x, lg::half_t* out,
                                             int rows, int cols, int batch) {
  gemv_add_body<kTensorCores>(W, x, out, rows, cols, batch, lg::TilePlace{tile});
}
extern "C" __device__ void rms_norm_gemv_mma_tile(lg::Tile tile, const lg::half_t* W, const lg::half_t* x,
                                                  const lg::half_t* g, lg::half_t* out, int rows, int cols, float eps,
                                                  int batch) {
  rms_norm_gemv_body<kTensorCores>(W, x, g, out, rows, cols, eps, batch, lg::TilePlace{tile});
}
extern "C" __device__ void rms_norm_gemv_swiglu_mma_tile(lg::Tile tile, const lg::half_t* W1, const lg::half_t* W3,
                                                         const lg::half_t* x, const lg::half_t* g, lg::half_t* out,
                                                         int rows, int cols, float eps, int batch) {
  rms_norm_gemv_swiglu_body<kTensorCores, false>(W1, W3, x, g, out, rows, cols, eps, batch, lg::TilePlace{tile});
}
extern "C" __device__ void gemv_mma_tile_prefetch(lg::Tile tile, const lg::half_t* W, const lg::half_t* /*x*/,
                                                  lg::half_t* /*out*/, int rows, int cols, int /*batch*/) {
  prefetch_tile_weights(Matrices<1, lg::half_t>{{W}, cols}, rows, cols, lg::TilePlace{tile}, false);
}
extern "C" __device__ void gemv_add_mma_tile_prefetch(lg::Tile tile, const lg::half_t* W, const lg::half_t* /*x*/,
                                                      lg::half_t* /*out*/, int rows, int cols, int /*batch*/) {
  prefetch_tile_weights(Matrices<1, lg::half_t>{{W}, cols}, rows, cols, lg::TilePlace{tile}, false);
}
extern "C" __device__ void rms_norm_gemv_mma_tile_prefetch(lg::Tile tile, const lg::half_t* W, const lg::half_t* /*x*/,
                                                           const lg::half_t* /*g*/, lg::half_t* /*out*/, int rows,
                                                           int cols, float /*eps*/, int /*batch*/) {
  prefetch_tile_weights(Matrices<1, lg::half_t>{{W}, cols}, rows, cols, lg::TilePlace{tile}, false);
}
extern "C" __device__ void rms_norm_gemv_swiglu_mma_tile_prefetch(lg::Tile tile, const lg::half_t* W1,
                                                                  const lg::half_t* W3, const lg::half_t* /*x*/,
                                                                  const lg::half_t* /*g*/, lg::half_t* /*out*/,
                                                                  int rows, int cols, float /*eps*/, int /*batch*/) {
  prefetch_tile_weights(Matrices<2, lg::half_t>{{W1, W3}, cols}, rows, cols, lg::TilePlace{tile}, false);
}

// The same tile functions over bf16 (without prefetch companions: PersistentOptions::prefetch_next skips them).
extern "C" __device__ void gemv_mma_tile_bf16(lg::Tile tile, const lg::bf16_t* W, const lg::bf16_t* x, lg::bf16_t* out,
                                              int rows, int cols, int batch) {
  gemv_body<kTensorCores>(W, x, out, rows, cols, batch, lg::TilePlace{tile});
}
extern "C" __device__ void gemv_add_mma_tile_bf16(lg::Tile tile, const lg::bf16_t* W, const lg::bf16_t* x,
                                                  lg::bf16_t* out, int rows, int cols, int batch) {
  gemv_add_body<kTensorCores>(W, x, out, rows, cols, batch, lg::TilePlace{tile});
}
extern "C" __device__ void rms_norm_gemv_mma_tile_bf16(lg::Tile tile, const lg::bf16_t* W, const lg::bf16_t* x,
                                                       const lg::bf16_t* g, lg::bf16_t* out, int rows, int cols,
                                                       float eps, int batch) {
  rms_norm_gemv_body<kTensorCores>(W, x, g, out, rows, cols, eps, batch, lg::TilePlace{tile});
}
extern "C" __device__ void rms_norm_gemv_swiglu_mma_tile_bf16(lg::Tile tile, const lg::bf16_t* W1, const lg::bf16_t* W3,
                                                              const lg::bf16_t* x, const lg::bf16_t* g, lg::bf16_t* out,
                                                              int rows, int cols, float eps, int batch) {
  rms_norm_gemv_swiglu_body<kTensorCores, false>(W1, W3, x, g, out, rows, cols, eps, batch, lg::TilePlace{tile});
}
