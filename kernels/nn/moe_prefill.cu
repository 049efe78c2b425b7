// A mixture of experts' layer of a prefill chunk (nn/prefill_moe.hpp): what runs after the chunk's rows are normed
// into h ([max_rows][d], prefill_rms_norm) and the router's logits computed by a GEMM ([max_rows][experts], T), when
// a prompt chunk of up to max_rows rows goes through a layer at once. The rows are grouped by the expert they chose,
// so that each expert's weights are read once per tile of up to kTileRows of its rows, on tensor cores (mma.sync
// m16n8k16, fp32 accumulation); the choice never leaves the device. `count` points at the real rows (a prefill chunk's
// rows, nn::PrefillChunkLayout::rows, or a decode step's): only the first count[0] rows (clamped to [0, max_rows]) are
// routed; the padding rows get no expert and keep their bits. The decode step of 2 to 8 rows on tensor cores runs the
// group, the grouped products in their decode shape (moe_decode_*) and combine after its own moe_route
// (nn/decoder_step.hpp). fp16 (`NAME`) and bf16
// (`NAME_bf16`); arithmetic in fp32.
//
//   moe_prefill_route(logits, count, ids, weights, experts, top_k, normalize, max_rows)
//     Each row's routing as moe_route's (moe.cu: softmax, top k, renormalized where `normalize`, weights rounded to
//     T), into ids and weights [max_rows][top_k]: pair j = r * top_k + s is row r's slot s. Launch: blocks of
//     kRouteWarps warps, any grid (warp w of block b takes rows b * kRouteWarps + w, then every gridDim.x *
//     kRouteWarps).
//   moe_prefill_group(ids, count, order, slot_of, tiles, experts, top_k, max_rows, max_tiles)
//     The pairs grouped by expert: positions base[e] .. base[e] + count[e] - 1 hold expert e's pairs (experts in
//     ascending order): order[position] = pair, slot_of[pair] = position; and the tiles of the grouped products, each
//     up to kTileRows positions of one expert: tiles[0] = their count, tile t at tiles[1 + 4 t] = {expert, first
//     position, positions} (tiles[1 + 4 t + 3] unused). At most max_tiles (traps beyond; rows * top_k / kTileRows +
//     min(experts, rows * top_k), the first rounded down, always fit: nn::moe_prefill_tiles). The order of an expert's
//     pairs among its positions is the order the block's atomics give, which varies, but no result depends on it: each
//     product row is its own row's sum whatever rows share its tile. Launch: a grid of one block, a multiple of 32
//     threads (1024 for speed).
//   moe_prefill_gate_up(h, w1, w3, order, tiles, act, width, d, top_k, max_tiles)
//     For each position p of tile t (its expert e, its pair j = order[p], its row r = j / top_k):
//     act[p][i] = silu(w1[e][i] . h[r]) * (w3[e][i] . h[r]), rounded once to T (as moe_gate_up); w1, w3
//     [experts][width][d]; act [max_rows * top_k][width]. Launch (PrefillShape): grid (ceil(width / 64), max_tiles),
//     blocks of 128 threads, 3 stages of 64 input rows and 64 rows of each matrix, kTileK + 8 elements apart, in
//     dynamic shared memory (82944 bytes: nn::BasicKernels::moe_prefill_gate_up_config); a block whose tile is past
//     tiles[0] returns at once.
//   moe_prefill_down(act, w2, tiles, partial, d, width, max_tiles)
//     partial[p][i] = w2[e][i] . act[p] in fp32 for each position p of tile t; w2 [experts][d][width]; partial
//     [max_rows * top_k][d]. Launch: as moe_prefill_gate_up's over d, with one matrix a stage (55296 bytes).
//   moe_decode_gate_up, moe_decode_down: moe_prefill_gate_up and moe_prefill_down, with the same arguments and bits,
//     for tiles of at most 16 positions (a decode step's 2 to 8 rows): grid (ceil(cols / 64), max_tiles), blocks of 128
//     threads, 3 stages of 16 input rows and 64 rows of each matrix (62208 bytes for gate/up, 34560 for down:
//     nn::BasicKernels::moe_decode_gate_up_config, _down_config). A tile of more positions traps.
//   moe_prefill_combine(partial, slot_of, weights, x, count, d, top_k, max_rows)
//     x[r][i] += sum over s of weights[j] * partial[slot_of[j]][i], j = r * top_k + s, summed in fp32 in slot order
//     and rounded once (as moe_down adds a step's rows) for r < count[0]. Launch: 1-D, any grid and block (grid-stride
//     over eighths of rows), e.g. grid_for(max_rows * d / 8, 256).
//
// Requirements (a kernel traps on a violation): the grouped products' launches as given above (a grid of at least
// max_tiles rows of blocks covering every output column, at least the dynamic shared memory named); d and width
// multiples of 8; h, w1, w2, w3, act and x 16-byte aligned;
// experts 1 to kMaxExperts, top_k 1 to kMaxTopK and at most experts; ids as moe_prefill_route writes them, tiles and
// order as moe_prefill_group does for the same rows; the grouped products on sm_80 or newer (they trap before).
// Each kernel may be launched early: it waits for the kernel before it first (the grouped products' weight rows
// depend on the tiles, so nothing is prefetched before that wait).
#include "lazygraph/element.cuh"
#include "lazygraph/kernel_common.cuh"
#include "lazygraph/mma.cuh"
#include "lazygraph/nn/gemv_core.cuh"
#include "lazygraph/nn/moe_core.cuh"

namespace {

using namespace lg::nn::moe;

constexpr int kRouteWarps = 8;       // rows routed at once by a block of moe_prefill_route
constexpr int kTileRows = 64;        // positions of one expert per tile (nn::kMoePrefillTileRows)
constexpr int kTileK = 64;           // the reduction's step: one shared-memory stage (nn::kMoePrefillTileK)
constexpr int kStride = kTileK + 8;  // shared row stride in elements: 144 bytes, so ldmatrix's 8 rows hit 32 banks
constexpr int kCombineSlots = 8;     // slots of a row whose loads moe_prefill_combine has in flight at once

/// A grouped product's block: kRows positions of a tile by kCols output columns, kWarps warps (kWarpsM x kWarpsN over
/// the block, each kWarpRows x kWarpCols), kStages shared-memory stages (kStages - 1 in flight while one is read).
/// kL2: the bytes around each weight copy that L2 is asked to fetch with it (cp.async's L2::256B; 0: the copy's own).
template <int Rows, int Cols, int Warps, int Stages, int L2 = 0>
struct GroupedShape {
  static constexpr int kL2 = L2;
  static constexpr int kRows = Rows;
  static constexpr int kCols = Cols;
  static constexpr int kStages = Stages;
  static constexpr int kThreads = 32 * Warps;
  static constexpr int kWarpRows = Rows < 32 ? Rows : 32;
  static constexpr int kWarpsM = Rows / kWarpRows;
  static constexpr int kWarpsN = Warps / kWarpsM;
  static constexpr int kWarpCols = Cols / kWarpsN;
  static constexpr int kMi = kWarpRows / 16;  // m16 tiles of a warp
  static constexpr int kNt = kWarpCols / 8;   // n8 tiles of a warp, loaded in pairs
  static_assert(kWarpRows % 16 == 0 && kWarpsM * kWarpRows == Rows && kWarpsM * kWarpsN == Warps &&
                    kWarpsN * kWarpCols == Cols && kNt % 2 == 0 && Stages >= 2,
                "a grouped product's block is whole m16n8 tiles, two n8 tiles at a time");
};
/// A prompt chunk's tiles (moe_prefill_gate_up, moe_prefill_down): 64 x 64, four warps of 32 x 32, 3 stages
/// (nn::kMoePrefillTileCols, kMoePrefillThreads, kMoePrefillStages).
using PrefillShape = GroupedShape<kTileRows, 64, 4, 3>;
/// A decode step's tiles of at most 16 positions (moe_decode_gate_up, moe_decode_down; a step's row chooses an expert
/// once, so a tile of its 2 to 8 rows has at most 8): 16 x 64, four warps of 16 x 16, 3 stages (nn::kMoeDecodeTileRows,
/// kMoeDecodeTileCols, kMoeDecodeThreads, kMoeDecodeStages). The prefill shape's 64-row input tiles are mostly empty
/// there; dropping them saves a block a quarter of its shared memory (three eighths for down), and a multiprocessor
/// holds more blocks (3 of gate/up instead of 2, 6 of down instead of 4), which is what streams the experts faster:
/// more stages in fewer blocks were slower (docs/performance.md has the sweep). A step's weight copies take a row's
/// 128 bytes; L2 fetches the 256 around them, so the next step's half of a row's pair is in L2 when it is asked for
/// (Qwen3-30B-A3B's 8-row step 0.6-3 % faster in three runs; steps of 32 or 128 columns, and asking L2 for later steps
/// by bulk prefetch, were slower: docs/performance.md).
using DecodeShape = GroupedShape<16, 64, 4, 3, 256>;

/// The real rows, clamped to [0, max_rows].
__device__ __forceinline__ int real_rows(const int* count, int max_rows) { return min(max(count[0], 0), max_rows); }

template <class T>
__device__ __forceinline__ void moe_prefill_route_body(const T* logits, const int* count, int* ids, float* weights,
                                                       int experts, int top_k, int normalize, int max_rows) {
  __shared__ float p[kRouteWarps][kMaxExperts];
  __shared__ int chosen[kRouteWarps][kMaxTopK];
  __shared__ float chosen_p[kRouteWarps][kMaxTopK];
  lg::early_launch_prologue();
  if (!counts_supported(experts, top_k, 1) || blockDim.x != 32 * kRouteWarps || blockDim.y != 1 || blockDim.z != 1) {
    __trap();
  }
  const int rows = real_rows(count, max_rows);
  const int warp = static_cast<int>(threadIdx.x) / 32;
  for (int r = static_cast<int>(blockIdx.x) * kRouteWarps + warp; r < rows;
       r += static_cast<int>(gridDim.x) * kRouteWarps) {  // uniform over the warp
    const long long j = static_cast<long long>(r) * top_k;
    route_row(logits + static_cast<long long>(r) * experts, p[warp], chosen[warp], chosen_p[warp], ids + j, weights + j,
              experts, top_k, normalize);
  }
}

__device__ __forceinline__ void moe_prefill_group_body(const int* ids, const int* count, int* order, int* slot_of,
                                                       int* tiles, int experts, int top_k, int max_rows,
                                                       int max_tiles) {
  __shared__ int per_expert[kMaxExperts];
  __shared__ int base[kMaxExperts];
  __shared__ int tile_base[kMaxExperts];
  lg::early_launch_prologue();
  if (!counts_supported(experts, top_k, 1) || gridDim.x * gridDim.y * gridDim.z != 1 || blockDim.x % 32 != 0 ||
      blockDim.y != 1 || blockDim.z != 1) {
    __trap();
  }
  const int tid = static_cast<int>(threadIdx.x);
  const int threads = static_cast<int>(blockDim.x);
  const int pairs = real_rows(count, max_rows) * top_k;
  for (int e = tid; e < experts; e += threads) per_expert[e] = 0;
  __syncthreads();
  for (int j = tid; j < pairs; j += threads) {
    const int e = ids[j];
    if (e < 0 || e >= experts) __trap();
    atomicAdd(&per_expert[e], 1);
  }
  __syncthreads();
  if (tid < 32) {  // exclusive prefix sums of the counts and of the tiles, 32 experts at a time
    int positions = 0;
    int tile_count = 0;
    for (int e0 = 0; e0 < experts; e0 += 32) {
      const int e = e0 + tid;
      const int c = e < experts ? per_expert[e] : 0;
      const int t = (c + kTileRows - 1) / kTileRows;
      int c_sum = c;
      int t_sum = t;
#pragma unroll
      for (int offset = 1; offset < 32; offset <<= 1) {
        const int c_up = __shfl_up_sync(0xffffffffu, c_sum, offset);
        const int t_up = __shfl_up_sync(0xffffffffu, t_sum, offset);
        if (tid >= offset) {
          c_sum += c_up;
          t_sum += t_up;
        }
      }
      if (e < experts) {
        base[e] = positions + c_sum - c;
        tile_base[e] = tile_count + t_sum - t;
      }
      positions += __shfl_sync(0xffffffffu, c_sum, 31);
      tile_count += __shfl_sync(0xffffffffu, t_sum, 31);
    }
    if (tile_count > max_tiles) __trap();
    if (tid == 0) tiles[0] = tile_count;
  }
  __syncthreads();
  for (int e = tid; e < experts; e += threads) {
    for (int first = 0, t = tile_base[e]; first < per_expert[e]; first += kTileRows, ++t) {
      int* tile = tiles + 1 + 4 * t;
      tile[0] = e;
      tile[1] = base[e] + first;
      tile[2] = min(kTileRows, per_expert[e] - first);
      tile[3] = 0;
    }
  }
  __syncthreads();  // the counts are read; they count the pairs placed from here
  for (int e = tid; e < experts; e += threads) per_expert[e] = 0;
  __syncthreads();
  for (int j = tid; j < pairs; j += threads) {
    const int e = ids[j];
    const int position = base[e] + atomicAdd(&per_expert[e], 1);
    order[position] = j;
    slot_of[j] = position;
  }
}

/// The grouped products' one body: for the block's tile (an expert e, its positions first .. first + rows - 1) and
/// its S::kCols output columns from n0, out[p][n] = the product of the position's input row with row n of each of
/// the expert's kMats matrices [n_cols][k_dim]. kGateUp: the input row is h's row of the position's pair (order),
/// two matrices (w1, w3), out = act in T, silu(gate) * up; else the input row is act's row p, one matrix (w1 = w2),
/// out = partial in fp32.
template <class S, bool kGateUp, class T>
__device__ __forceinline__ void grouped_product(const T* in, const T* w1, const T* w3, const int* order,
                                                const int* tiles, void* out, int n_cols, int k_dim, int top_k,
                                                int max_tiles) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int kMats = kGateUp ? 2 : 1;
  constexpr int kRows = S::kRows;
  constexpr int kCols = S::kCols;
  constexpr int kStages = S::kStages;
  constexpr int kThreads = S::kThreads;
  constexpr int kStage = (kRows + kMats * kCols) * kStride;  // elements of a stage
  // Dynamic shared memory (nn::BasicKernels' configs of these kernels): stage s holds its kRows input rows, then each
  // matrix's kCols rows.
  extern __shared__ uint4 moe_prefill_shared[];
  T* const stages = reinterpret_cast<T*>(moe_prefill_shared);
  const auto sa = [&](int stage) { return stages + stage * kStage; };
  const auto sb = [&](int stage, int m) { return stages + stage * kStage + (kRows + m * kCols) * kStride; };
  __shared__ const T* a_rows[kRows];
  lg::early_launch_prologue();
  if (blockDim.x != kThreads || blockDim.y != 1 || blockDim.z != 1 || n_cols <= 0 || n_cols % 8 != 0 || k_dim <= 0 ||
      k_dim % 8 != 0 || top_k < 1 || top_k > kMaxTopK || !lg::is_aligned16(in) || !lg::is_aligned16(w1) ||
      (kGateUp && !lg::is_aligned16(w3)) || !lg::is_aligned16(out)) {
    __trap();
  }
  // The launch must cover every tile (grid.y) and every column (grid.x) and give the stages their shared memory: a
  // smaller grid would leave outputs unwritten, and less memory would overrun it.
  unsigned shared_bytes = 0;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(shared_bytes));
  if (static_cast<int>(gridDim.y) < max_tiles || static_cast<long long>(gridDim.x) * kCols < n_cols || gridDim.z != 1 ||
      shared_bytes < static_cast<unsigned>(kStages * kStage * sizeof(T))) {
    __trap();
  }
  const int tile_count = tiles[0];
  if (tile_count < 0 || tile_count > max_tiles) __trap();
  const int tile = static_cast<int>(blockIdx.y);
  const int n0 = static_cast<int>(blockIdx.x) * kCols;
  if (tile >= tile_count || n0 >= n_cols) return;
  const int e = tiles[1 + 4 * tile];
  const int first = tiles[1 + 4 * tile + 1];
  const int rows = tiles[1 + 4 * tile + 2];
  if (e < 0 || rows < 1 || rows > kRows || first < 0) __trap();
  const int tid = static_cast<int>(threadIdx.x);
  for (int r = tid; r < kRows; r += kThreads) {
    const T* row = nullptr;
    if (r < rows) {
      const long long at = kGateUp ? order[first + r] / top_k : first + r;
      row = in + at * k_dim;
    }
    a_rows[r] = row;
  }
  __syncthreads();
  const long long matrix = static_cast<long long>(n_cols) * k_dim;
  const T* const b[2] = {w1 + e * matrix, kGateUp ? w3 + e * matrix : w1};

  // Stage s of k-step kt: kRows input rows and kCols rows of each matrix, kTileK columns from kt * kTileK, in 16-byte
  // pieces (kPieces a row); what is past the rows, the columns or the reduction is zero-filled.
  const auto load = [&](int stage, int kt) {
    const int k0 = kt * kTileK;
    constexpr int kPieces = kTileK / 8;
#pragma unroll
    for (int i = tid; i < kRows * kPieces; i += kThreads) {
      const int r = i / kPieces;
      const int k = k0 + 8 * (i % kPieces);
      const T* row = a_rows[r];
      const bool fill = row != nullptr && k < k_dim;
      lg::copy16_async(sa(stage) + r * kStride + 8 * (i % kPieces), fill ? row + k : in, fill);
    }
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
#pragma unroll
      for (int i = tid; i < kCols * kPieces; i += kThreads) {
        const int n = i / kPieces;
        const int k = k0 + 8 * (i % kPieces);
        const bool fill = n0 + n < n_cols && k < k_dim;
        lg::copy16_async<S::kL2>(sb(stage, m) + n * kStride + 8 * (i % kPieces),
                                 fill ? b[m] + static_cast<long long>(n0 + n) * k_dim + k : b[m], fill);
      }
    }
    lg::commit_async();
  };

  const int lane = tid % 32;
  const int warp = tid / 32;
  const int warp_row = warp / S::kWarpsN * S::kWarpRows;  // the warp's rows and columns of the tile
  const int warp_col = warp % S::kWarpsN * S::kWarpCols;
  const bool busy = warp_row < rows;  // uniform over the warp: a warp wholly past the rows computes nothing
  float acc[kMats][S::kMi][S::kNt][4] = {};
  const int k_steps = (k_dim + kTileK - 1) / kTileK;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_steps) {
      load(s, s);
    } else {
      lg::commit_async();
    }
  }
  for (int kt = 0; kt < k_steps; ++kt) {
    lg::wait_async<kStages - 2>();
    __syncthreads();  // step kt is in shared memory for all; the stage refilled below was last read at kt - 1
    if (kt + kStages - 1 < k_steps) {
      load((kt + kStages - 1) % kStages, kt + kStages - 1);
    } else {
      lg::commit_async();
    }
    if (!busy) continue;
    const T* const a_tile = sa(kt % kStages);
#pragma unroll
    for (int kk = 0; kk < kTileK; kk += 16) {
      // A: rows 0-7 / 8-15 of a row tile, columns 0-7 / 8-15 of the 16 (mma.cuh's fragment order).
      unsigned a[S::kMi][4];
#pragma unroll
      for (int mi = 0; mi < S::kMi; ++mi) {
        lg::load_matrices(a[mi], a_tile + (warp_row + 16 * mi + lane % 16) * kStride + kk + lane / 16 * 8);
      }
#pragma unroll
      for (int m = 0; m < kMats; ++m) {
        const T* const b_tile = sb(kt % kStages, m);
#pragma unroll
        for (int np = 0; np < S::kNt / 2; ++np) {
          // B: (columns 0-7, k 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15) of 16 columns: b0, b1 of two n8 tiles.
          unsigned w[4];
          lg::load_matrices(
              w, b_tile + (warp_col + 16 * np + lane % 8 + lane / 16 * 8) * kStride + kk + (lane / 8) % 2 * 8);
#pragma unroll
          for (int mi = 0; mi < S::kMi; ++mi) {
            lg::mma(acc[m][mi][2 * np], a[mi], w[0], w[1], T{});
            lg::mma(acc[m][mi][2 * np + 1], a[mi], w[2], w[3], T{});
          }
        }
      }
    }
  }
  lg::wait_async<0>();
  if (!busy) return;
    // C: lane (g, t) = (lane / 4, lane % 4) holds rows g and g + 8, columns 2t and 2t + 1 of each m16n8 tile.
#pragma unroll
  for (int mi = 0; mi < S::kMi; ++mi) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = warp_row + 16 * mi + lane / 4 + 8 * half;
      if (r >= rows) continue;
      const long long row = static_cast<long long>(first + r) * n_cols;
#pragma unroll
      for (int nt = 0; nt < S::kNt; ++nt) {
        const int n = n0 + warp_col + 8 * nt + 2 * (lane % 4);
        if (n >= n_cols) continue;
        const float v0 = acc[0][mi][nt][2 * half];
        const float v1 = acc[0][mi][nt][2 * half + 1];
        if constexpr (kGateUp) {
          const float u0 = acc[kMats - 1][mi][nt][2 * half];
          const float u1 = acc[kMats - 1][mi][nt][2 * half + 1];
          *reinterpret_cast<unsigned*>(static_cast<T*>(out) + row + n) =
              lg::pack2(T{}, lg::nn::silu(v0) * u0, lg::nn::silu(v1) * u1);
        } else {
          *reinterpret_cast<float2*>(static_cast<float*>(out) + row + n) = make_float2(v0, v1);
        }
      }
    }
  }
#else
  __trap();
#endif
}

template <class S, class T>
__device__ __forceinline__ void grouped_gate_up_body(const T* h, const T* w1, const T* w3, const int* order,
                                                     const int* tiles, T* act, int width, int d, int top_k,
                                                     int max_tiles) {
  grouped_product<S, true>(h, w1, w3, order, tiles, act, width, d, top_k, max_tiles);
}

template <class S, class T>
__device__ __forceinline__ void grouped_down_body(const T* act, const T* w2, const int* tiles, float* partial, int d,
                                                  int width, int max_tiles) {
  grouped_product<S, false>(act, w2, static_cast<const T*>(nullptr), nullptr, tiles, partial, d, width, 1, max_tiles);
}

template <class T>
__device__ __forceinline__ void moe_prefill_combine_body(const float* partial, const int* slot_of, const float* weights,
                                                         T* x, const int* count, int d, int top_k, int max_rows) {
  lg::early_launch_prologue();
  if (d <= 0 || d % 8 != 0 || top_k < 1 || top_k > kMaxTopK || !lg::is_aligned16(x) || !lg::is_aligned16(partial)) {
    __trap();
  }
  const int eighths = d / 8;
  const long long total = static_cast<long long>(real_rows(count, max_rows)) * eighths;
  for (long long i = lg::global_index(); i < total; i += lg::grid_stride()) {
    const long long r = i / eighths;
    const int c = static_cast<int>(i % eighths) * 8;
    T* to = x + r * d + c;
    float y[8];
    lg::load_float8(to, y);
    float sum[8] = {};
    // kCombineSlots slots' loads in flight at once (a slot past top_k loads the last slot again and adds nothing):
    // their weights and positions, then their partials, so that a row of top k takes 2 * ceil(k / kCombineSlots)
    // round trips to L2, not 2 k. The sum is still in slot order.
    for (int s0 = 0; s0 < top_k; s0 += kCombineSlots) {
      float w[kCombineSlots];
      int slot[kCombineSlots];
#pragma unroll
      for (int u = 0; u < kCombineSlots; ++u) {
        const long long j = r * top_k + min(s0 + u, top_k - 1);
        w[u] = weights[j];
        slot[u] = slot_of[j];
      }
      float4 lo[kCombineSlots];
      float4 hi[kCombineSlots];
#pragma unroll
      for (int u = 0; u < kCombineSlots; ++u) {
        const float* from = partial + static_cast<long long>(slot[u]) * d + c;
        lo[u] = *reinterpret_cast<const float4*>(from);
        hi[u] = *reinterpret_cast<const float4*>(from + 4);
      }
#pragma unroll
      for (int u = 0; u < kCombineSlots; ++u) {
        if (s0 + u >= top_k) break;
        const float v[8] = {lo[u].x, lo[u].y, lo[u].z, lo[u].w, hi[u].x, hi[u].y, hi[u].z, hi[u].w};
#pragma unroll
        for (int k = 0; k < 8; ++k) sum[k] += w[u] * v[k];
      }
    }
#pragma unroll
    for (int k = 0; k < 8; ++k) y[k] += sum[k];
    lg::store8(to, lg::pack8<T>(y));
  }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(1024)
    moe_prefill_group(const int* ids, const int* count, int* order, int* slot_of, int* tiles, int experts, int top_k,
                      int max_rows, int max_tiles) {
  moe_prefill_group_body(ids, count, order, slot_of, tiles, experts, top_k, max_rows, max_tiles);
}

/* lazygraph:variants
axis T = lg::half_t | lg::bf16_t _bf16

moe_prefill_route[T] __launch_bounds__(256) = moe_prefill_route_body<T>(const T* logits, const int* count, int* ids,
    float* weights, int experts, int top_k, int normalize, int max_rows)
moe_prefill_gate_up[T] __launch_bounds__(128) = grouped_gate_up_body<PrefillShape>(const T* h, const T* w1,
    const T* w3, const int* order, const int* tiles, T* act, int width, int d, int top_k, int max_tiles)
moe_prefill_down[T] __launch_bounds__(128) = grouped_down_body<PrefillShape>(const T* act, const T* w2,
    const int* tiles, float* partial, int d, int width, int max_tiles)
moe_decode_gate_up[T] __launch_bounds__(128) = grouped_gate_up_body<DecodeShape>(const T* h, const T* w1, const T* w3,
    const int* order, const int* tiles, T* act, int width, int d, int top_k, int max_tiles)
moe_decode_down[T] __launch_bounds__(128) = grouped_down_body<DecodeShape>(const T* act, const T* w2, const int* tiles,
    float* partial, int d, int width, int max_tiles)
moe_prefill_combine[T] = moe_prefill_combine_body<T>(const float* partial, const int* slot_of, const float* weights,
    T* x, const int* count, int d, int top_k, int max_rows)
*/
