// The index of the largest of n logits, written to out[b] as an int (greedy sampling), for each row b = blockIdx.x of
// logits ([rows][n]): argmax over fp16 logits, argmax_bf16 over bf16. Ties go to the lowest index; NaNs never win;
// if every logit is NaN (or n == 0), out[b] = -1.
//
// Launch: one block of 32 * k threads (k = 1..32) per row: grid = the row count, e.g. block 1024.
//
// argmax_cluster (argmax_cluster_bf16): the same result, each row read by a cluster of blocks (sm_90 and newer;
// LaunchConfig::cluster (c, 1, 1), c = 2..8): block r of row b's cluster takes the logits [r * chunk, (r + 1) *
// chunk), chunk = n / c rounded up to a multiple of 8, and the cluster's first block picks the best of their winners
// from their shared memory. For the long rows of large vocabularies (128k-262k logits), where one block's passes over
// the row are the step's last few microseconds. Launch: grid (c, rows), clusters (c, 1, 1), blocks of 32 * k threads.
#include "lazygraph/cluster.cuh"
#include "lazygraph/nn/argmax.cuh"
#include "lazygraph/tile.cuh"

namespace {

template <class T>
__device__ __forceinline__ void argmax_body(const T* logits, int* out, int n) {
  lg::early_launch_prologue();  // may be launched early (LaunchConfig::early_launch)
  const int best = lg::nn::block_argmax(logits + static_cast<long long>(blockIdx.x) * n, n);
  if (threadIdx.x == 0) out[blockIdx.x] = best;
}

template <class T>
__device__ __forceinline__ void argmax_cluster_body(const T* logits, int* out, int n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ float best_value;
  __shared__ int best_index;
  lg::early_launch_prologue();  // may be launched early (LaunchConfig::early_launch)
  const unsigned blocks = lg::cluster_blocks();
  if (gridDim.x != blocks || n < 0) __trap();
  const unsigned rank = lg::cluster_rank();
  const long long chunk = (static_cast<long long>(n) + 8 * blocks - 1) / (8 * blocks) * 8;
  const long long begin = min(static_cast<long long>(n), rank * chunk);
  const int len = static_cast<int>(min(static_cast<long long>(n) - begin, chunk));
  const T* row = logits + static_cast<long long>(blockIdx.y) * n;
  const int best = lg::nn::block_argmax(row + begin, len);
  if (threadIdx.x == 0) {
    best_index = best < 0 ? -1 : static_cast<int>(begin) + best;
    best_value = best < 0 ? 0.0f : lg::to_float(row[begin + best]);
  }
  lg::cluster_sync();  // every block's winner is in its shared memory
  if (rank == 0 && threadIdx.x == 0) {
    float v = 0.0f;
    int i = -1;
    for (unsigned r = 0; r < blocks; ++r) {  // any order gives the lowest index among ties
      const int ri = lg::load_from_block(&best_index, r);
      const float rv = lg::load_from_block(&best_value, r);
      if (ri >= 0 && lg::nn::beats(rv, ri, v, i)) {
        v = rv;
        i = ri;
      }
    }
    out[blockIdx.y] = i;
  }
  lg::cluster_arrive();  // the first block has read the others' winners before they end
  lg::cluster_wait();
#else
  __trap();
#endif
}

}  // namespace

extern "C" __global__ void argmax(const lg::half_t* logits, int* out, int n) { argmax_body(logits, out, n); }

extern "C" __global__ void argmax_cluster(const lg::half_t* logits, int* out, int n) {
  argmax_cluster_body(logits, out, n);
}

extern "C" __global__ void argmax_cluster_bf16(const lg::bf16_t* logits, int* out, int n) {
  argmax_cluster_body(logits, out, n);
}

extern "C" __global__ void argmax_bf16(const lg::bf16_t* logits, int* out, int n) { argmax_body(logits, out, n); }

// Tile functions (kernels/include/lazygraph/tile.cuh) for persistent programs: the argmax of each row split over
// chunks, so that a row's logits are read by many blocks at once instead of one.
//   argmax_chunk_tile(logits, best_values, best_indices, n, chunk): tile (c, b) of a call of tiles (chunks, rows)
//     writes the argmax of row b's logits [c * chunk, min(n, (c + 1) * chunk)) and its value to best_indices and
//     best_values [rows][chunks] (index -1 when all of them are NaN or the range is empty); chunk a multiple of 8
//     keeps the 16-byte loads.
//   argmax_final_tile(best_values, best_indices, out, chunks): tile b writes out[b], the best of row b's chunks taken
//     in order: the argmax kernel's result (ties to the lowest index, NaN never, -1 if every logit is NaN).
// _bf16 for bf16 logits (argmax_final_tile reads floats: one for both).
namespace {

template <class T>
__device__ __forceinline__ void argmax_chunk_tile_body(const lg::Tile& tile, const T* logits, float* best_values,
                                                       int* best_indices, int n, int chunk) {
  tile.wait();
  const uint3 at = tile.block();
  const int chunks = static_cast<int>(tile.grid().x);
  const long long begin = static_cast<long long>(at.x) * chunk;
  const int len = static_cast<int>(max(0LL, min(static_cast<long long>(n) - begin, static_cast<long long>(chunk))));
  const T* row = logits + static_cast<long long>(at.y) * n;
  const int best = lg::nn::block_argmax(row + begin, len);
  if (threadIdx.x == 0) {
    const int slot = static_cast<int>(at.y) * chunks + static_cast<int>(at.x);
    best_indices[slot] = best < 0 ? -1 : static_cast<int>(begin) + best;
    best_values[slot] = best < 0 ? 0.0f : lg::to_float(row[begin + best]);
  }
}

}  // namespace

extern "C" __device__ void argmax_chunk_tile(lg::Tile tile, const lg::half_t* logits, float* best_values,
                                             int* best_indices, int n, int chunk) {
  argmax_chunk_tile_body(tile, logits, best_values, best_indices, n, chunk);
}

extern "C" __device__ void argmax_chunk_tile_bf16(lg::Tile tile, const lg::bf16_t* logits, float* best_values,
                                                  int* best_indices, int n, int chunk) {
  argmax_chunk_tile_body(tile, logits, best_values, best_indices, n, chunk);
}

extern "C" __device__ void argmax_final_tile(lg::Tile tile, const float* best_values, const int* best_indices, int* out,
                                             int chunks) {
  tile.wait();
  if (threadIdx.x != 0) return;
  const int b = static_cast<int>(tile.index());
  float best = 0.0f;
  int best_index = -1;
  for (int c = 0; c < chunks; ++c) {
    const int i = best_indices[b * chunks + c];
    const float v = best_values[b * chunks + c];
    if (i >= 0 && lg::nn::beats(v, i, best, best_index)) {
      best = v;
      best_index = i;
    }
  }
  out[b] = best_index;
}
