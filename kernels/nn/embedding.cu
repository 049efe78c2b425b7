// Token embedding lookup for a batch: out[b][i] = table[tokens[b] * d + i] for b < batch, i < d; `embedding` for
// fp16 tables, `embedding_bf16` for bf16 (a copy: the values are not converted). `embedding_rows(table, tokens, out,
// d, batch, first, count)`: the table holds vocabulary rows [first, first + count) only (a tensor-parallel rank's
// share), and a token outside them gives zeros.
//
// The tokens are read from device memory, so a captured graph replays with whatever tokens were copied there
// (or written by argmax) last. They are not checked against the table's row count, which the kernel cannot know.
//
// Launch: 1-D over batch * d, any grid and block (grid-stride), e.g. grid_for(batch * d, 256).
#include "lazygraph/element.cuh"
#include "lazygraph/kernel_common.cuh"
#include "lazygraph/tile.cuh"

namespace {

template <class T>
__device__ __forceinline__ void embedding_body(const T* table, const int* tokens, T* out, int d, int batch) {
  lg::early_launch_prologue();  // may be launched early (LaunchConfig::early_launch)
  const long long n = static_cast<long long>(batch) * d;
  for (long long e = lg::global_index(); e < n; e += lg::grid_stride()) {
    const long long b = e / d;
    out[e] = table[static_cast<long long>(tokens[b]) * d + (e - b * d)];
  }
}

/// embedding_rows: a table holding rows [first, first + count) of the vocabulary (a tensor-parallel rank's); a token
/// outside them gives a row of zeros, so that the ranks' rows summed are the whole table's row.
template <class T>
__device__ __forceinline__ void embedding_rows_body(const T* table, const int* tokens, T* out, int d, int batch,
                                                    int first, int count) {
  lg::early_launch_prologue();
  const long long n = static_cast<long long>(batch) * d;
  for (long long e = lg::global_index(); e < n; e += lg::grid_stride()) {
    const long long b = e / d;
    const int row = tokens[b] - first;
    out[e] = row >= 0 && row < count ? table[static_cast<long long>(row) * d + (e - b * d)] : lg::from_float<T>(0.0F);
  }
}

}  // namespace

extern "C" __global__ void embedding(const lg::half_t* table, const int* tokens, lg::half_t* out, int d, int batch) {
  embedding_body(table, tokens, out, d, batch);
}

extern "C" __global__ void embedding_bf16(const lg::bf16_t* table, const int* tokens, lg::bf16_t* out, int d,
                                          int batch) {
  embedding_body(table, tokens, out, d, batch);
}

extern "C" __global__ void embedding_rows(const lg::half_t* table, const int* tokens, lg::half_t* out, int d, int batch,
                                          int first, int count) {
  embedding_rows_body(table, tokens, out, d, batch, first, count);
}

extern "C" __global__ void embedding_rows_bf16(const lg::bf16_t* table, const int* tokens, lg::bf16_t* out, int d,
                                               int batch, int first, int count) {
  embedding_rows_body(table, tokens, out, d, batch, first, count);
}

// Tile functions (kernels/include/lazygraph/tile.cuh) for persistent programs: one tile per row b < batch (launch a
// call of `batch` tiles), copying its d elements 16 bytes at a time, so d must be a multiple of 8 and the table and
// out 16-byte aligned (a trap otherwise). The token is read after the wait, like everything the tile touches.
namespace {

template <class T>
__device__ __forceinline__ void embedding_tile_body(const lg::Tile& tile, const T* table, const int* tokens, T* out,
                                                    int d, int batch) {
  tile.wait();
  if (d % 8 != 0 || !lg::is_aligned16(table) || !lg::is_aligned16(out)) __trap();
  const int b = static_cast<int>(tile.index());
  if (b >= batch) return;
  const uint4* from = reinterpret_cast<const uint4*>(table + static_cast<long long>(tokens[b]) * d);
  uint4* to = reinterpret_cast<uint4*>(out + static_cast<long long>(b) * d);
  for (int i = static_cast<int>(threadIdx.x); i < d / 8; i += static_cast<int>(tile.threads())) to[i] = from[i];
}

}  // namespace

extern "C" __device__ void embedding_tile(lg::Tile tile, const lg::half_t* table, const int* tokens, lg::half_t* out,
                                          int d, int batch) {
  embedding_tile_body(tile, table, tokens, out, d, batch);
}

extern "C" __device__ void embedding_tile_bf16(lg::Tile tile, const lg::bf16_t* table, const int* tokens,
                                               lg::bf16_t* out, int d, int batch) {
  embedding_tile_body(tile, table, tokens, out, d, batch);
}
