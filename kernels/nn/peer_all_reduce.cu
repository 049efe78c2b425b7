// The all-reduce of a tensor-parallel step's residual stream among GPUs of one process, in place and without NCCL:
// x = the sum over the ranks of each rank's x, through a PeerExchange (driver/peer_exchange.hpp). One kernel, one
// pass: every thread sends its 4-byte words of x, each tagged with its block's epoch in one 8-byte store, into
// every peer's receive slots, then waits for each peer's words at the same places (the tag says they are this
// call's) and adds the ranks' values in rank order, so that every rank computes the same bits. No flag, no fence:
// an 8-byte store arrives whole (NCCL's LL protocol works the same way).
//
// peer_all_reduce(x, words, slot_table, counters, rank, ranks): `words` 4-byte words of x (two fp16 or bf16
// elements each); slot_table: every rank's receive slots; counters: this rank's epoch per block. Block b always
// moves words [b * 512, (b + 1) * 512), so its epoch tags them alone; the parity of the epoch picks one of two
// slot sets, so that a rank a call ahead never overwrites words a peer has not read yet (it cannot get two calls
// ahead: each call waits for every peer's words).
//
// Every rank must run the same sequence of calls, with the same sizes: a rank whose peers never make the call
// waits for ever, as in NCCL. The layout constants are PeerExchange's.
//
// Launch: grid (words + 511) / 512 blocks (64 at most), 128 threads; may be launched early (it waits for the work
// before it before it reads x).
//
// gemv_all_reduce(W, a, x, sum_table, counters, rank, ranks, rows, cols, batch): a row-parallel projection and the
// all-reduce after it in one kernel, x[b] += the sum over the ranks of W_r a_r[b] (W_r: rank r's [rows x cols] slice,
// a_r: its [batch][cols] input), in place: the step's Wo and W2 on a tensor-parallel rank, without a kernel between
// the projection and the next block. It is gemv.cu's gemv (any of its variants: _b2, _b4, _b8, _mma, _bf16...), whose
// results do not go to x: each output's fp32 dot product goes, tagged with the call's epoch in one 8-byte store, into
// every rank's sum slots (this rank's too) as soon as its row is done, so the pushes overlap the rest of the weights.
// The rank's last blocks to finish (a counter of arrivals elects them; one per kSumsPerThread x threads outputs) then
// wait for every rank's values of their part of x and write x = x + value_0 + value_1 + ... in fp32, in rank order,
// rounded once: the same bits on every rank (the ranks hold the same x), and with one rank exactly gemv_add's. A
// summing block waits for the peers' pushes, which their blocks make unconditionally, and for its own rank's last
// blocks, at most parts - 1 of them, which the GPU can always place beside it; so the kernel cannot deadlock. Slots:
// [2 parities][ranks senders][kSumCapacity outputs] of 8 bytes (PeerExchange::sum_capacity); the epoch is one counter
// per rank (counters[kMaxBlocks]), advanced by the last part to finish, and its parity picks the set, for the reason
// given above. Every rank must make the same calls (rows and batch alike). Launch: gemv's shapes, uncapped
// (Kernels::gemv_config_uncapped: bounded for 3 blocks a multiprocessor at one vector), early launch allowed.
//
// qgemv_all_reduce(W, a, x, sum_table, counters, rank, ranks, rows, cols, batch): the same over a quantized W_r
// (qgemv.cu's qgemv, one kernel per element type and format: qgemv_all_reduce_int8, _bf16_int4z, ...), the rank's
// share of a matrix quantized whole. Launch: qgemv's (BasicQuantizedKernels::config).
#include "lazygraph/element.cuh"
#include "lazygraph/kernel_common.cuh"
#include "lazygraph/nn/gemv_core.cuh"
#include "lazygraph/nn/qgemv_core.cuh"

namespace {

using namespace lg::nn;  // the gemv core, and kTensorCores for the variants' table

constexpr int kMaxBlocks = 64;
constexpr int kWordsPerBlock = 512;
constexpr int kWordsPerThread = 4;  // of a block of 128 threads

__device__ __forceinline__ void store_tagged(unsigned long long address, unsigned value, unsigned tag) {
  asm volatile("st.volatile.global.v2.u32 [%0], {%1, %2};" ::"l"(address), "r"(value), "r"(tag) : "memory");
}

__device__ __forceinline__ uint2 load_tagged(unsigned long long address) {
  uint2 v;
  asm volatile("ld.volatile.global.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(address) : "memory");
  return v;
}

template <class T>
__device__ __forceinline__ void peer_all_reduce_body(T* x, int words, const unsigned long long* slot_table,
                                                     unsigned* counters, int rank, int ranks) {
  lg::early_launch_prologue();
  const int b = blockIdx.x;
  // Epochs count the block's calls; 0 is skipped (a slot never written holds tag 0), to 2, which keeps the parities
  // alternating.
  unsigned epoch = counters[b] + 1;  // every thread reads the old value ...
  if (epoch == 0) epoch = 2;
  __syncthreads();
  if (threadIdx.x == 0) counters[b] = epoch;  // ... before one writes the new one
  const unsigned long long senders = static_cast<unsigned long long>(kMaxBlocks) * kWordsPerBlock;
  const unsigned long long set = static_cast<unsigned long long>(epoch & 1U) * ranks;  // the parity's slots
  auto* w = reinterpret_cast<unsigned*>(x);
  unsigned mine[kWordsPerThread];
  int index[kWordsPerThread];
  int count = 0;
  for (int k = 0; k < kWordsPerThread; ++k) {
    const int j = b * kWordsPerBlock + k * blockDim.x + threadIdx.x;
    if (j < words) {
      index[count] = j;
      mine[count] = w[j];
      ++count;
    }
  }
  // Rank r's words land in each peer's slots [parity][r][word].
  for (int q = 0; q < ranks; ++q) {
    if (q == rank) continue;
    const unsigned long long to = slot_table[q] + ((set + rank) * senders) * sizeof(uint2);
    for (int k = 0; k < count; ++k) store_tagged(to + index[k] * sizeof(uint2), mine[k], epoch);
  }
  const unsigned long long from = slot_table[rank] + (set * senders) * sizeof(uint2);
  for (int k = 0; k < count; ++k) {
    float lo = 0.0F;
    float hi = 0.0F;
    for (int q = 0; q < ranks; ++q) {
      unsigned v = mine[k];
      if (q != rank) {
        const unsigned long long at = from + (q * senders + index[k]) * sizeof(uint2);
        uint2 tagged = load_tagged(at);
        while (tagged.y != epoch) tagged = load_tagged(at);
        v = tagged.x;
      }
      const float2 f = lg::unpack2(T{}, v);
      lo += f.x;
      hi += f.y;
    }
    w[index[k]] = lg::pack2(T{}, lo, hi);
  }
}

/// Outputs one gemv_all_reduce call may have (rows times batch): PeerExchange::sum_capacity.
constexpr int kSumCapacity = 32768;
/// gemv_all_reduce's words in the rank's counters, after peer_all_reduce's per-block epochs: its epoch, the blocks
/// that have counted themselves in, the parts added up.
constexpr int kEpochWord = kMaxBlocks;
constexpr int kArrivedWord = kMaxBlocks + 1;
constexpr int kSummedWord = kMaxBlocks + 2;
/// Outputs each thread of a summing block adds up at a time (their loads in flight together), and the most per
/// thread that a part is sized for.
constexpr int kSumsPerThread = 2;

/// The epoch of the call after the one `counters` records, 0 skipped as above.
__device__ __forceinline__ unsigned next_sum_epoch(const unsigned* counters) {
  const unsigned e = *static_cast<const volatile unsigned*>(counters + kEpochWord) + 1;
  return e == 0 ? 2 : e;
}

/// The all-reduce of gemv_all_reduce and qgemv_all_reduce around the rank's product: `project(finish)` computes the
/// rank's rows x batch outputs, calling finish(row, b, v) with each one's fp32 value v[0] as soon as it is done (after
/// its wait for the work before); each goes into every rank's sum slots, and the rank's last blocks add them into x.
template <class T, class Project>
__device__ __forceinline__ void project_all_reduce(T* x, const unsigned long long* sum_table, unsigned* counters,
                                                   int rank, int ranks, int rows, int batch, Project project) {
  const int outputs = rows * batch;
  if (rows < 1 || outputs > kSumCapacity || ranks < 1 || ranks > 8 || rank < 0 || rank >= ranks) __trap();
  const auto sender_slots = [&](unsigned epoch, int sender) {
    return (static_cast<unsigned long long>(epoch & 1U) * ranks + sender) * kSumCapacity;
  };
  unsigned epoch = 0;  // read by each finishing thread after its wait (the product finishes after it)
  project([&](int row, int b, const float* v) {
    if (epoch == 0) epoch = next_sum_epoch(counters);
    const unsigned long long at = (sender_slots(epoch, rank) + static_cast<unsigned long long>(b) * rows + row) * 8;
    for (int q = 0; q < ranks; ++q) store_tagged(sum_table[q] + at, __float_as_uint(v[0]), epoch);
  });
  __shared__ unsigned call_epoch;
  __shared__ int part;         // which part of x this block adds up, or -1
  lg::wait_for_prior_grids();  // a thread of a group without rows has not waited yet
  __syncthreads();             // every output of this block is on its way
  const int threads = blockDim.x * blockDim.y * blockDim.z;
  const int tid = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  const int grid = static_cast<int>(gridDim.x);
  const int parts = min(grid, max(1, (outputs + threads * kSumsPerThread - 1) / (threads * kSumsPerThread)));
  if (tid == 0) {
    call_epoch = next_sum_epoch(counters);  // every block reads it before it counts itself in
    const int arrival = static_cast<int>(atomicAdd(counters + kArrivedWord, 1U));
    part = arrival >= grid - parts ? arrival - (grid - parts) : -1;
  }
  __syncthreads();
  if (part < 0) return;
  const unsigned e = call_epoch;
  const unsigned long long mine = sum_table[rank];
  const int chunk = (outputs + parts - 1) / parts;
  const int first = part * chunk;
  const int end = min(outputs, first + chunk);
  for (int i0 = first + tid; i0 < end; i0 += threads * kSumsPerThread) {
    float sum[kSumsPerThread];
#pragma unroll
    for (int u = 0; u < kSumsPerThread; ++u) {
      const int i = i0 + u * threads;
      sum[u] = i < end ? lg::to_float(x[i]) : 0.0f;
    }
    for (int q = 0; q < ranks; ++q) {
      const unsigned long long from = mine + sender_slots(e, q) * 8;
      uint2 value[kSumsPerThread];
#pragma unroll
      for (int u = 0; u < kSumsPerThread; ++u) {
        const int i = min(i0 + u * threads, end - 1);
        value[u] = load_tagged(from + static_cast<unsigned long long>(i) * 8);
      }
#pragma unroll
      for (int u = 0; u < kSumsPerThread; ++u) {
        const int i = min(i0 + u * threads, end - 1);
        while (value[u].y != e) value[u] = load_tagged(from + static_cast<unsigned long long>(i) * 8);
        sum[u] += __uint_as_float(value[u].x);
      }
    }
#pragma unroll
    for (int u = 0; u < kSumsPerThread; ++u) {
      const int i = i0 + u * threads;
      if (i < end) x[i] = lg::from_float<T>(sum[u]);
    }
  }
  __syncthreads();
  // The last part done: every block has counted itself in (the parts are the last arrivals), so every block has read
  // the epoch, and the next call's may be set.
  if (tid == 0 && atomicAdd(counters + kSummedWord, 1U) == static_cast<unsigned>(parts - 1)) {
    counters[kArrivedWord] = 0;
    counters[kSummedWord] = 0;
    counters[kEpochWord] = e;
  }
}

template <int B, class T>
__device__ __forceinline__ void gemv_all_reduce_body(const T* W, const T* a, T* x, const unsigned long long* sum_table,
                                                     unsigned* counters, int rank, int ranks, int rows, int cols,
                                                     int batch) {
  if (!shapes_supported(cols, batch, W, a, a) || batch > max_batch(B)) __trap();
  const Matrices<1, T> w{{W}, cols};
  project_all_reduce(x, sum_table, counters, rank, ranks, rows, batch, [&](auto finish) {
    rows_of<B>(w, PlainX<T>{a, cols}, rows, cols, batch, 0.0f, finish);
  });
}

template <int F, class T>
__device__ __forceinline__ void qgemv_all_reduce_body(QuantizedMatrix W, const T* a, T* x,
                                                      const unsigned long long* sum_table, unsigned* counters, int rank,
                                                      int ranks, int rows, int cols, int batch) {
  if (!quantized_supported<F>(W, cols) || batch < 1 || batch > 8 || !lg::is_aligned16(a)) __trap();
  const QuantizedTiles<1, T> w{{W}, quantized_tile_bytes<F>(cols), quantized_groups<F>(W, cols)};
  start_quantized();
  project_all_reduce(x, sum_table, counters, rank, ranks, rows, batch, [&](auto finish) {
    qgemv_tiles<F>(w, PlainX<T>{a, cols}, rows, cols, batch, 0.0f, finish);
  });
}

}  // namespace

/* lazygraph:variants
axis T = lg::half_t | lg::bf16_t _bf16
axis B = 1 (256, 3) | 2 _b2 (256, 3) | 4 _b4 (256, 2) | 8 _b8 (256, 2) | kTensorCores _mma (256, 2)
axis F = kInt8 _int8 | kInt4 _int4 | kInt4Zero _int4z | kFp8 _fp8

gemv_all_reduce[T][B] = gemv_all_reduce_body<B>(const T* W, const T* a, T* x, const unsigned long long* sum_table,
    unsigned* counters, int rank, int ranks, int rows, int cols, int batch)
qgemv_all_reduce[T][F] __launch_bounds__(1024, 1) = qgemv_all_reduce_body<F>(QuantizedMatrix W, const T* a, T* x,
    const unsigned long long* sum_table, unsigned* counters, int rank, int ranks, int rows, int cols, int batch)
*/

extern "C" __global__ void peer_all_reduce(lg::half_t* x, int words, const unsigned long long* slot_table,
                                           unsigned* counters, int rank, int ranks) {
  peer_all_reduce_body(x, words, slot_table, counters, rank, ranks);
}

extern "C" __global__ void peer_all_reduce_bf16(lg::bf16_t* x, int words, const unsigned long long* slot_table,
                                                unsigned* counters, int rank, int ranks) {
  peer_all_reduce_body(x, words, slot_table, counters, rank, ranks);
}
